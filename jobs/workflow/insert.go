package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/queue"
)

// customPlan runs a statement unnamed, planned for its parameters and the
// tables' sizes at that moment (see internal/riverjob and the events
// package: plans cached while tributary's tables were small kept their shape
// after they grew).
var customPlan = pgx.QueryExecModeExec

// Client inserts, reads and operates workflows on a tributary schema. It
// works on any queue.Client, including a queue.Runtime's, and is safe for
// concurrent use.
type Client struct {
	qc     *queue.Client
	schema string
	logger *slog.Logger
	sql    statements
	rc     *river.Client[pgx.Tx] // set for a client made inside a task (child workflows); else qc's
	hub    *awaitHub             // Await's listener; nil on a client made inside a task
}

func (c *Client) riverClient() *river.Client[pgx.Tx] {
	if c.rc != nil {
		return c.rc
	}
	return c.qc.River()
}

// NewClient returns a workflow client on qc's pool and schema.
func NewClient(qc *queue.Client) *Client {
	logger := qc.Logger().With("component", "workflow")
	return &Client{qc: qc, schema: qc.Schema(), logger: logger, sql: qualify(qc.Schema()),
		hub: newAwaitHub(qc.Pool(), qc.Schema(), logger, func(s string) string { return queue.Qualify(qc.Schema(), s) })}
}

// InsertResult is what InsertTx did.
type InsertResult struct {
	// ID is the workflow's id (a UUIDv7).
	ID string `json:"id"`
	// Key is the caller's key (Opts.ID), if any.
	Key string `json:"key,omitempty"`
	// Existing is true when a workflow with Key existed and, as
	// ConflictReturnExisting asks, was returned instead; nothing was
	// inserted and Jobs is nil.
	Existing bool `json:"existing,omitempty"`
	// Status of the workflow: running after an insert, the existing one's
	// otherwise.
	Status Status `json:"status"`
	// Jobs maps each task to its job's id.
	Jobs map[string]int64 `json:"jobs,omitempty"`
	// Queued is true when the workflow waits for a slot of its
	// ConcurrencyKey.
	Queued bool `json:"queued,omitempty"`
}

// Insert inserts the workflow in a transaction of its own.
func (c *Client) Insert(ctx context.Context, wf *Workflow) (*InsertResult, error) {
	var res *InsertResult
	err := pgx.BeginFunc(ctx, c.qc.Pool(), func(tx pgx.Tx) error {
		var err error
		res, err = c.InsertTx(ctx, tx, wf)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// InsertTx validates the workflow and inserts it in the caller's
// transaction: the workflow's row, one row per task and one River job per
// task (pending while it has dependencies). If tx rolls back, none of it
// exists; once tx commits, the tasks without dependencies are available to
// workers. A definition that does not validate is a *ValidationError and a
// taken key a *ConflictError (with ConflictFail); in both cases nothing was
// written, and tx remains usable (the insert runs in a savepoint).
func (c *Client) InsertTx(ctx context.Context, tx pgx.Tx, wf *Workflow) (*InsertResult, error) {
	if _, err := wf.validate(); err != nil {
		return nil, err
	}
	var res *InsertResult
	// A savepoint: a failed insert leaves the caller's transaction as it
	// was, so the caller may go on (and commit its own rows) after a
	// conflict.
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		var err error
		res, err = c.insert(ctx, sp, wf)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func (c *Client) insert(ctx context.Context, tx pgx.Tx, wf *Workflow) (*InsertResult, error) {
	return c.insertWith(ctx, tx, wf, nil)
}

// insertWith inserts wf; with fork set (Fork), the tasks fork copies are
// inserted finished, with their records, and without jobs, and the others
// wait only for their dependencies that run again.
func (c *Client) insertWith(ctx context.Context, tx pgx.Tx, wf *Workflow, fork *forkPlan) (*InsertResult, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("error making a workflow id: %w", err)
	}
	now := time.Now().UTC()
	// waitsFor is how many of a task's dependencies it waits for: all, or
	// in a fork those that run again.
	waitsFor := func(t *taskDef) int {
		n := 0
		for _, d := range t.deps {
			if !fork.copies(d) {
				n++
			}
		}
		return n
	}
	roots := 0
	for _, t := range wf.tasks {
		if !fork.copies(t.name) && waitsFor(t) == 0 {
			roots++
		}
	}
	var key *string
	if wf.opts.ID != "" {
		key = &wf.opts.ID
	}
	var input *string
	if wf.input != nil {
		s := string(wf.input)
		input = &s
	}
	queued := false
	if k := wf.opts.ConcurrencyKey; k != "" {
		admitted, err := reserveSlot(ctx, tx, &c.sql, k, max(wf.opts.ConcurrencyLimit, 1))
		if err != nil {
			return nil, err
		}
		queued = !admitted
	}
	active := roots
	if queued {
		// Its first tasks wait for the admission, as a dependency.
		active = 0
	}
	var inserted bool
	if err := tx.QueryRow(ctx, c.sql.insertWorkflow, customPlan, id, key, wf.name, input, len(wf.tasks), len(wf.tasks)-active, active, now).Scan(&inserted); err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("error inserting workflow %q: %w", wf.name, err)
		}
		// The slot reserved above is rolled back with the savepoint.
		return c.onConflict(ctx, tx, wf)
	}
	if len(wf.opts.Attributes) > 0 {
		if err := setAttributes(ctx, tx, queue.Qualify(c.schema, insertAttributesSQL), id.String(), wf.opts.Attributes); err != nil {
			return nil, err
		}
	}
	if wf.opts.ConcurrencyKey != "" {
		if _, err := tx.Exec(ctx, c.sql.setQueued, customPlan, id, wf.opts.ConcurrencyKey, max(wf.opts.ConcurrencyLimit, 1), queued); err != nil {
			return nil, fmt.Errorf("error inserting workflow %q: %w", wf.name, err)
		}
	}

	params := make([]river.InsertManyParams, 0, len(wf.tasks))
	for _, t := range wf.tasks {
		if fork.copies(t.name) {
			continue
		}
		opts := river.InsertOpts{}
		if t.opts.InsertOpts != nil {
			opts = *t.opts.InsertOpts
		}
		if err := identify(&opts, t.args, id.String(), t.name, t.metadata); err != nil {
			return nil, err
		}
		opts.Pending = waitsFor(t) > 0 || queued || (fork != nil && t.opts.RunIf != nil)
		params = append(params, river.InsertManyParams{Args: t.args, InsertOpts: &opts})
	}
	jobResults, err := c.riverClient().InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("error inserting the jobs of workflow %q: %w", wf.name, err)
	}
	if len(jobResults) != len(params) {
		return nil, fmt.Errorf("inserting the jobs of workflow %q: River returned %d jobs for %d tasks", wf.name, len(jobResults), len(params))
	}
	results := make([]*rivertype.JobInsertResult, len(wf.tasks))
	for i, next := 0, 0; i < len(wf.tasks); i++ {
		if !fork.copies(wf.tasks[i].name) {
			results[i], next = jobResults[next], next+1
		}
	}

	dependents := make(map[string][]string, len(wf.tasks))
	for _, t := range wf.tasks {
		for _, d := range t.deps {
			dependents[d] = append(dependents[d], t.name)
		}
	}
	rows := make([]taskRow, len(wf.tasks))
	jobs := make(map[string]int64, len(wf.tasks))
	for i, t := range wf.tasks {
		if rec := fork.copied(t.name); rec != nil {
			rows[i] = taskRow{
				Name: t.name, Position: t.position, Kind: rec.Kind, Args: rec.Args, Queue: rec.Queue,
				Priority: rec.Priority, MaxAttempts: rec.MaxAttempts, Tags: nonNil(rec.Tags), Metadata: t.metadata,
				Deps: nonNil(t.deps), Dependents: nonNil(dependents[t.name]), OnDepFailure: t.opts.OnDepFailure,
				RunIf: t.opts.RunIf, State: rec.State, JobID: rec.JobID,
			}
			continue
		}
		job := results[i].Job
		if results[i].UniqueSkippedAsDuplicate {
			// The args' own InsertOpts() asked for uniqueness.
			return nil, &ValidationError{Workflow: wf.name, Task: t.name, Kind: ErrInvalidTask,
				Detail: fmt.Sprintf("is a unique job (its args' InsertOpts) and a job like it exists (%d): a task needs a job of its own", job.ID)}
		}
		jobs[t.name] = job.ID
		state := TaskActive
		var readyAt *time.Time
		pendingDeps := waitsFor(t)
		switch {
		case pendingDeps > 0 || (fork != nil && t.opts.RunIf != nil):
			// In a fork, a condition whose tasks were all copied is
			// decided once the rows are in (forkPlan.finish).
			state = TaskPending
		case queued:
			state, pendingDeps = TaskPending, 1
		default:
			readyAt = &now
		}
		rows[i] = taskRow{
			Name: t.name, Position: t.position, Kind: job.Kind, Args: job.EncodedArgs, Queue: job.Queue,
			Priority: job.Priority, MaxAttempts: job.MaxAttempts, Tags: ownTags(job.Tags), Metadata: t.metadata,
			Deps: nonNil(t.deps), Dependents: nonNil(dependents[t.name]), PendingDeps: pendingDeps,
			OnDepFailure: t.opts.OnDepFailure, RunIf: t.opts.RunIf, State: state, JobID: job.ID, ReadyAt: readyAt,
		}
	}
	doc, err := json.Marshal(rows)
	if err != nil {
		return nil, fmt.Errorf("error encoding the tasks of workflow %q: %w", wf.name, err)
	}
	if _, err := tx.Exec(ctx, c.sql.insertTasks, customPlan, id, string(doc), now); err != nil {
		return nil, fmt.Errorf("error inserting the tasks of workflow %q: %w", wf.name, err)
	}
	if fork != nil {
		if err := c.finishFork(ctx, tx, id.String(), wf, fork, now); err != nil {
			return nil, err
		}
	}
	return &InsertResult{ID: id.String(), Key: wf.opts.ID, Status: StatusRunning, Jobs: jobs, Queued: queued}, nil
}

// onConflict handles a taken key: the insert waited for the transaction
// holding the key (ON CONFLICT), so the existing row is committed and this
// statement's fresh snapshot sees it.
func (c *Client) onConflict(ctx context.Context, tx pgx.Tx, wf *Workflow) (*InsertResult, error) {
	var ce ConflictError
	if err := tx.QueryRow(ctx, c.sql.selectByKey, customPlan, wf.opts.ID).Scan(&ce.ExistingID, &ce.Name, &ce.Status, &ce.CreatedAt); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			// Deleted by retention between the two statements.
			return nil, fmt.Errorf("workflow key %q was taken and is free again: insert again", wf.opts.ID)
		}
		return nil, fmt.Errorf("error reading the workflow with key %q: %w", wf.opts.ID, err)
	}
	ce.Key = wf.opts.ID
	if wf.opts.OnConflict == ConflictReturnExisting {
		return &InsertResult{ID: ce.ExistingID, Key: ce.Key, Existing: true, Status: ce.Status}, nil
	}
	return nil, &ce
}

// taskRow is a task row as the insert statement reads it
// (jsonb_to_recordset: one parameter for any number of tasks, with arrays
// of any length per task, which parallel unnest arrays cannot carry).
type taskRow struct {
	Name         string           `json:"name"`
	Position     int              `json:"position"`
	Kind         string           `json:"kind"`
	Args         json.RawMessage  `json:"args"`
	Queue        string           `json:"queue"`
	Priority     int              `json:"priority"`
	MaxAttempts  int              `json:"max_attempts"`
	Tags         []string         `json:"tags"`
	Metadata     json.RawMessage  `json:"metadata"`
	Deps         []string         `json:"deps"`
	Dependents   []string         `json:"dependents"`
	PendingDeps  int              `json:"pending_deps"`
	OnDepFailure DepFailurePolicy `json:"on_dep_failure"`
	RunIf        *Condition       `json:"run_if"`
	State        TaskState        `json:"state"`
	JobID        int64            `json:"job_id"`
	ReadyAt      *time.Time       `json:"ready_at"`
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// insertWorkflowSQL inserts the workflow row; with a key taken it returns
// no row (ON CONFLICT DO NOTHING waits for a transaction holding the key,
// then sees its outcome).
const insertWorkflowSQL = `
INSERT INTO /*schema*/tributary_workflow
    (id, key, name, status, input, task_count, tasks_pending, tasks_active, tasks_completed, tasks_failed,
     tasks_cancelled, tasks_skipped, created_at, updated_at)
VALUES ($1, $2, $3, 'running', $4::jsonb, $5, $6, $7, 0, 0, 0, 0, $8, $8)
ON CONFLICT (key) DO NOTHING
RETURNING true`

const selectByKeySQL = `
SELECT id::text, name, status, created_at FROM /*schema*/tributary_workflow WHERE key = $1`

const insertTasksSQL = `
INSERT INTO /*schema*/tributary_workflow_task
    (workflow_id, name, position, kind, args, queue, priority, max_attempts, tags, metadata, deps, dependents,
     pending_deps, failed_deps, on_dep_failure, run_if, state, job_id, run, attempts, errors, created_at, updated_at, ready_at)
SELECT $1, r.name, r.position, r.kind, r.args, r.queue, r.priority, r.max_attempts, r.tags, r.metadata, r.deps, r.dependents,
       r.pending_deps, 0, r.on_dep_failure, r.run_if, r.state, r.job_id, 1, 0, '[]', $3, $3, r.ready_at
FROM jsonb_to_recordset($2::jsonb) AS r(name text, position integer, kind text, args jsonb, queue text, priority smallint,
    max_attempts integer, tags text[], metadata jsonb, deps text[], dependents text[], pending_deps integer,
    on_dep_failure text, run_if jsonb, state text, job_id bigint, ready_at timestamptz)`
