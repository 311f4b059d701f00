package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/queue"
)

// Counts are a workflow's tasks per state.
type Counts struct {
	Pending   int `json:"pending"`
	Active    int `json:"active"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	Skipped   int `json:"skipped"`
}

// Summary is a workflow as listings show it, read from its row alone.
type Summary struct {
	ID         string     `json:"id"`
	Key        string     `json:"key,omitempty"`
	Name       string     `json:"name"`
	Status     Status     `json:"status"`
	TaskCount  int        `json:"task_count"`
	Counts     Counts     `json:"counts"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// Details is a workflow with its input and every task.
type Details struct {
	Summary
	// Input is the JSON a registered builder was started with (Start), if
	// any.
	Input json.RawMessage `json:"input,omitempty"`
	// Attributes are the workflow's attributes (Opts.Attributes,
	// SetAttributes).
	Attributes map[string]string `json:"attributes,omitempty"`
	// Origin is, for a workflow Fork started, the workflow and task it
	// started from.
	Origin *Origin    `json:"origin,omitempty"`
	Tasks  []TaskInfo `json:"tasks"`
}

// TaskInfo is one task: its definition, where it stands and what it did.
// The record is tributary's; River's job adds live detail (JobState, the
// current attempt) while it exists.
type TaskInfo struct {
	Name         string           `json:"name"`
	Kind         string           `json:"kind"`
	Args         json.RawMessage  `json:"args"`
	Queue        string           `json:"queue"`
	Priority     int              `json:"priority"`
	MaxAttempts  int              `json:"max_attempts"`
	Tags         []string         `json:"tags"`
	Deps         []string         `json:"deps"`
	Dependents   []string         `json:"dependents"`
	OnDepFailure DepFailurePolicy `json:"on_dep_failure"`
	RunIf        *Condition       `json:"run_if,omitempty"`
	State        TaskState        `json:"state"`
	// WaitingOn lists, for a pending task, the dependencies that have not
	// finished yet.
	WaitingOn []string `json:"waiting_on,omitempty"`
	// JobID is the task's current job (a Retry gives it a new one).
	JobID int64 `json:"job_id"`
	// JobState is River's state of that job; empty once River's cleaner
	// deleted it.
	JobState rivertype.JobState `json:"job_state,omitempty"`
	// Run counts the task's runs: 1, plus one per Retry that re-ran it.
	Run int `json:"run"`
	// Attempts counts attempts over all runs, the current one included.
	Attempts int `json:"attempts"`
	// Errors are the failed attempts over all runs, oldest first.
	Errors     []AttemptError  `json:"errors,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	ReadyAt    *time.Time      `json:"ready_at,omitempty"`
	StartedAt  *time.Time      `json:"started_at,omitempty"` // the last attempt's start
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
	// WaitingFor is, for an active task whose run waits (Sleep,
	// AwaitSignal, RunChild), what it waits for.
	WaitingFor *Wait `json:"waiting_for,omitempty"`
	// Steps counts the steps its current run recorded.
	Steps int `json:"steps,omitempty"`
}

// Wait is what a task waits for.
type Wait struct {
	// Kind is "sleep" or "signal" (a child workflow is waited for as the
	// signal "child:" and its id).
	Kind string `json:"kind"`
	// Name is the sleep's name or the signal's.
	Name string `json:"name"`
	// Until is the sleep's end or the wait's deadline; nil for a wait
	// without timeout.
	Until *time.Time `json:"until,omitempty"`
}

const summaryColumns = `id::text, coalesce(key, ''), name, status, task_count, tasks_pending, tasks_active, tasks_completed,
    tasks_failed, tasks_cancelled, tasks_skipped, created_at, updated_at, finished_at`

func scanSummary(row pgx.Row, s *Summary, extra ...any) error {
	c := &s.Counts
	return row.Scan(append([]any{&s.ID, &s.Key, &s.Name, &s.Status, &s.TaskCount, &c.Pending, &c.Active, &c.Completed,
		&c.Failed, &c.Cancelled, &c.Skipped, &s.CreatedAt, &s.UpdatedAt, &s.FinishedAt}, extra...)...)
}

const selectWorkflowSQL = `SELECT ` + summaryColumns + `, input, ` + selectAttributesSQL + `, forked_from::text, forked_from_task
FROM /*schema*/tributary_workflow w WHERE id = $1::uuid`

const selectIDByKeySQL = `SELECT id::text FROM /*schema*/tributary_workflow WHERE key = $1`

// resolve returns the id of the workflow ref names: its id, else its key.
func (c *Client) resolve(ctx context.Context, db queue.DBTX, ref string) (string, error) {
	if _, err := uuid.Parse(ref); err == nil {
		var n int
		if err := db.QueryRow(ctx, queue.Qualify(c.schema, `SELECT count(*) FROM /*schema*/tributary_workflow WHERE id = $1::uuid`), customPlan, ref).Scan(&n); err != nil {
			return "", fmt.Errorf("error looking up workflow %s: %w", ref, err)
		}
		if n == 1 {
			return strings.ToLower(ref), nil
		}
	}
	var id string
	err := db.QueryRow(ctx, queue.Qualify(c.schema, selectIDByKeySQL), customPlan, ref).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", &NotFoundError{Ref: ref}
	}
	if err != nil {
		return "", fmt.Errorf("error looking up workflow %q: %w", ref, err)
	}
	return id, nil
}

// Summary returns the workflow ref names (its id, else its caller key) from
// its row alone, without its tasks, or a *NotFoundError.
func (c *Client) Summary(ctx context.Context, ref string) (*Summary, error) {
	id, err := c.resolve(ctx, c.qc.Pool(), ref)
	if err != nil {
		return nil, err
	}
	var s Summary
	var input, attrs []byte
	var from, fromTask *string
	if err := scanSummary(c.qc.Pool().QueryRow(ctx, c.sql.selectWorkflow, customPlan, id), &s, &input, &attrs, &from, &fromTask); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, &NotFoundError{Ref: ref}
		}
		return nil, fmt.Errorf("error reading workflow %s: %w", id, err)
	}
	return &s, nil
}

// Get returns the workflow ref names (its id, else its caller key) with
// every task, or a *NotFoundError (errors.Is ErrNotFound).
func (c *Client) Get(ctx context.Context, ref string) (*Details, error) {
	return c.readDetails(ctx, ref, c.readTasks)
}

const selectTasksSQL = `
SELECT name, kind, args, queue, priority, max_attempts, tags, metadata, deps, dependents, on_dep_failure, run_if, state,
       pending_deps, job_id, run, attempts, errors, output, created_at, updated_at, ready_at, started_at, finished_at
FROM /*schema*/tributary_workflow_task WHERE workflow_id = $1::uuid ORDER BY position`

// taskRecord is a task row with what Retry needs beyond TaskInfo.
type taskRecord struct {
	TaskInfo
	metadata    json.RawMessage
	pendingDeps int
}

func (c *Client) readTaskRecords(ctx context.Context, db queue.DBTX, id string) ([]taskRecord, error) {
	return c.queryTaskRecords(ctx, db, id, c.sql.selectTasks, id)
}

// queryTaskRecords reads the task rows of workflow id that sql (selectTasksSQL's
// columns) selects with args.
func (c *Client) queryTaskRecords(ctx context.Context, db queue.DBTX, id, sql string, args ...any) ([]taskRecord, error) {
	rows, err := db.Query(ctx, sql, append([]any{customPlan}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("error reading the tasks of workflow %s: %w", id, err)
	}
	defer rows.Close()
	var out []taskRecord
	for rows.Next() {
		var r taskRecord
		t := &r.TaskInfo
		var errs []byte
		if err := rows.Scan(&t.Name, &t.Kind, &t.Args, &t.Queue, &t.Priority, &t.MaxAttempts, &t.Tags, &r.metadata, &t.Deps, &t.Dependents,
			&t.OnDepFailure, &t.RunIf, &t.State, &r.pendingDeps, &t.JobID, &t.Run, &t.Attempts, &errs, &t.Output,
			&t.CreatedAt, &t.UpdatedAt, &t.ReadyAt, &t.StartedAt, &t.FinishedAt); err != nil {
			return nil, fmt.Errorf("error reading the tasks of workflow %s: %w", id, err)
		}
		if err := json.Unmarshal(errs, &t.Errors); err != nil {
			return nil, fmt.Errorf("error decoding the errors of task %q: %w", t.Name, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error reading the tasks of workflow %s: %w", id, err)
	}
	return out, nil
}

func (c *Client) readTasks(ctx context.Context, db queue.DBTX, id string) ([]TaskInfo, error) {
	recs, err := c.readTaskRecords(ctx, db, id)
	if err != nil {
		return nil, err
	}
	state := make(map[string]TaskState, len(recs))
	for _, r := range recs {
		state[r.Name] = r.State
	}
	return withWaitingOn(recs, state), nil
}

// addJobs adds River's live detail from the tasks' jobs that still exist,
// read with River's JobList.
func (c *Client) addJobs(ctx context.Context, tx pgx.Tx, tasks []TaskInfo) error {
	byJob := make(map[int64]*TaskInfo, len(tasks))
	ids := make([]int64, 0, len(tasks))
	for i := range tasks {
		byJob[tasks[i].JobID] = &tasks[i]
		ids = append(ids, tasks[i].JobID)
	}
	const page = 10_000 // River's JobList maximum
	for len(ids) > 0 {
		n := min(len(ids), page)
		res, err := c.qc.River().JobListTx(ctx, tx, river.NewJobListParams().IDs(ids[:n]...).First(n))
		if err != nil {
			return fmt.Errorf("error reading the jobs of workflow tasks: %w", err)
		}
		for _, job := range res.Jobs {
			t := byJob[job.ID]
			if t == nil {
				continue
			}
			t.JobState = job.State
			if t.State == TaskActive {
				// Not recorded on the task yet: the current run's attempts.
				t.Attempts += job.Attempt
				for _, e := range job.Errors {
					t.Errors = append(t.Errors, AttemptError{Run: t.Run, Attempt: e.Attempt, At: e.At, Error: e.Error, Trace: e.Trace})
				}
				t.StartedAt = job.AttemptedAt
			}
		}
		ids = ids[n:]
	}
	return nil
}

// ListParams filter and page a listing.
type ListParams struct {
	// Statuses keeps workflows in any of these statuses.
	//
	// Defaults to all.
	Statuses []Status
	// Name keeps workflows of this name.
	//
	// Defaults to all.
	Name string
	// Attributes keeps workflows that have every one of these attributes
	// (key and value equal).
	//
	// Defaults to none: all workflows.
	Attributes map[string]string
	// After continues a listing after this workflow id (ListResult.Next).
	//
	// Defaults to the newest workflow.
	After string
	// Limit is the page size, at most 1000.
	//
	// Defaults to 50.
	Limit int
}

// ListResult is one page of workflows, newest first.
type ListResult struct {
	Workflows []Summary `json:"workflows"`
	// Next is the cursor of the next page (ListParams.After); empty on the
	// last page.
	Next string `json:"next,omitempty"`
}

// ListLimitDefault and ListLimitMax bound a listing's page.
const (
	ListLimitDefault = 50
	ListLimitMax     = 1000
)

// listWorkflowsSQL is completed by List with the filters that are set. Ids
// are UUIDv7, so id order is creation order and the primary key (or the
// name or running index) pages through it without OFFSET.
//
// The ordering names the table's column (w.id): the output column id is its
// text, and ordering by that sorted the whole match instead of walking the
// index (248 ms against well under 1 ms for a page of 200,000 workflows).
const listWorkflowsSQL = `SELECT ` + summaryColumns + ` FROM /*schema*/tributary_workflow w WHERE true`

// List returns a page of workflows, newest first, from their rows alone
// (counts included; no task row is read).
func (c *Client) List(ctx context.Context, p ListParams) (*ListResult, error) {
	limit := p.Limit
	if limit == 0 {
		limit = ListLimitDefault
	}
	if limit < 1 || limit > ListLimitMax {
		return nil, fmt.Errorf("invalid limit %d: want 1 to %d", limit, ListLimitMax)
	}
	sql, args, err := c.listQuery(p)
	if err != nil {
		return nil, err
	}
	args = append(args, limit+1)
	sql += " LIMIT $" + strconv.Itoa(len(args))
	rows, err := c.qc.Pool().Query(ctx, sql, append([]any{customPlan}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("error listing workflows: %w", err)
	}
	defer rows.Close()
	res := &ListResult{Workflows: []Summary{}}
	for rows.Next() {
		var s Summary
		if err := scanSummary(rows, &s); err != nil {
			return nil, fmt.Errorf("error listing workflows: %w", err)
		}
		res.Workflows = append(res.Workflows, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error listing workflows: %w", err)
	}
	if len(res.Workflows) > limit {
		res.Workflows = res.Workflows[:limit]
		res.Next = res.Workflows[limit-1].ID
	}
	return res, nil
}

// listQuery is the listing of p's filters, newest first, without a limit.
func (c *Client) listQuery(p ListParams) (string, []any, error) {
	var sb strings.Builder
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	base := c.sql.listWorkflows
	if len(p.Attributes) > 0 {
		if err := checkAttributes(p.Attributes); err != nil {
			return "", nil, err
		}
		base = strings.Replace(base, " w WHERE true", " w"+attributeJoins(c.schema, p.Attributes, arg)+" WHERE true", 1)
	}
	sb.WriteString(base)
	if len(p.Statuses) > 0 {
		// Literals, so the planner can match the partial index of running
		// workflows.
		quoted := make([]string, len(p.Statuses))
		for i, s := range p.Statuses {
			if _, err := ParseStatus(string(s)); err != nil {
				return "", nil, err
			}
			quoted[i] = "'" + string(s) + "'"
		}
		sb.WriteString(" AND status IN (" + strings.Join(quoted, ", ") + ")")
	}
	if p.Name != "" {
		sb.WriteString(" AND name = " + arg(p.Name))
	}
	if p.After != "" {
		if _, err := uuid.Parse(p.After); err != nil {
			return "", nil, fmt.Errorf("invalid cursor %q: want a workflow id", p.After)
		}
		sb.WriteString(" AND w.id < " + arg(p.After) + "::uuid")
	}
	sb.WriteString(" ORDER BY w.id DESC")
	return sb.String(), args, nil
}

// addWaits adds the steps and the open wait of each task's current run.
func (c *Client) addWaits(ctx context.Context, db queue.DBTX, tasks []TaskInfo) error {
	byJob := make(map[int64]*TaskInfo, len(tasks))
	ids := make([]int64, 0, len(tasks))
	for i := range tasks {
		byJob[tasks[i].JobID] = &tasks[i]
		ids = append(ids, tasks[i].JobID)
	}
	rows, err := db.Query(ctx, c.sql.taskSteps, customPlan, ids)
	if err != nil {
		return fmt.Errorf("error reading the steps of workflow tasks: %w", err)
	}
	var job int64
	var name, kind string
	var done bool
	var until *time.Time
	_, err = pgx.ForEachRow(rows, []any{&job, &name, &kind, &done, &until}, func() error {
		t := byJob[job]
		if t == nil {
			return nil
		}
		t.Steps++
		if !done && t.State == TaskActive && (kind == "sleep" || kind == "signal") {
			w := &Wait{Kind: kind, Name: strings.TrimPrefix(name, signalStepPrefix), Until: until}
			t.WaitingFor = w
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("error reading the steps of workflow tasks: %w", err)
	}
	return nil
}

const taskStepsSQL = `
SELECT job_id, name, kind, done, wake_at FROM /*schema*/tributary_workflow_step WHERE job_id = ANY($1::bigint[])`
