package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// AttemptError is one failed attempt of a task, kept on the task's row so it
// outlives River's job retention.
type AttemptError struct {
	// Run is the task's run the attempt belonged to (1, then one more per
	// Retry that re-ran the task).
	Run     int       `json:"run"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
	Trace   string    `json:"trace,omitempty"`
}

// outcome is how a task's job ended, to be recorded on its row.
type outcome struct {
	WorkflowID string          `json:"workflow_id"`
	Task       string          `json:"name"`
	JobID      int64           `json:"job_id"`
	State      TaskState       `json:"new_state"` // completed, failed or cancelled
	Output     json.RawMessage `json:"output"`
	Attempt    int             `json:"attempt"`
	StartedAt  *time.Time      `json:"started_at"`
	Errors     []AttemptError  `json:"errors"`
}

// resolution is a finished task whose dependents must hear of it.
type resolution struct {
	workflowID string
	dependents []string
	satisfied  bool
}

// counts are per-state task count changes of one workflow.
type counts struct {
	pending, active, completed, failed, cancelled, skipped int
}

func (c *counts) add(s TaskState, n int) {
	switch s {
	case TaskPending:
		c.pending += n
	case TaskActive:
		c.active += n
	case TaskCompleted:
		c.completed += n
	case TaskFailed:
		c.failed += n
	case TaskCancelled:
		c.cancelled += n
	case TaskSkipped:
		c.skipped += n
	}
}

// move records a task going from one state to another.
func (c *counts) move(from, to TaskState) {
	c.add(from, -1)
	c.add(to, 1)
}

// advance is one transaction's worth of workflow changes: it collects the
// count changes and the jobs to release or cancel while tasks change, and
// writes them at the end (flush), so each kind of change is one statement
// however many tasks and workflows the transaction touches.
type advance struct {
	tx     pgx.Tx
	sql    *statements
	schema string
	now    time.Time

	deltas   map[string]*counts
	promote  []int64  // pending jobs of tasks that became active
	queues   []string // queues of jobs released already (completeReleaseSQL)
	cancel   []int64  // pending jobs of tasks that were cancelled or skipped
	finished map[string]Status
	// ended and keys are the child workflows that finished and the
	// concurrency keys of the workflows that finished, for flush: from
	// completeReleaseSQL's count update and from flush's own.
	ended []childEnd
	keys  []string
	// probeCounts: the transaction runs with completionTx's settings, so
	// the count update may reach each workflow by a primary-key probe per
	// row of its arrays (applyCountsProbeSQL).
	probeCounts bool
	// lock are workflows the caller has not locked yet: completeRelease
	// locks them (lockWorkflowsSQL) in its round trip, before its
	// statement.
	lock []string
}

func newAdvance(tx pgx.Tx, sql *statements, schema string, now time.Time) *advance {
	return &advance{tx: tx, sql: sql, schema: schema, now: now, deltas: map[string]*counts{}, finished: map[string]Status{}}
}

func (a *advance) delta(wf string) *counts {
	d := a.deltas[wf]
	if d == nil {
		d = &counts{}
		a.deltas[wf] = d
	}
	return d
}

// lockWorkflows takes the row locks of the workflows, in id order, and
// returns their statuses. Every change to a workflow's tasks happens under
// this lock, so concurrent completions, cancels and retries of one workflow
// are serialised, each statement after it sees the previous holders'
// commits, and no two transactions wait for each other's task rows in a
// cycle. The lock is FOR NO KEY UPDATE: it serialises the lockers as FOR
// UPDATE would, but leaves alone the key-share locks that inserts of rows
// referring to the workflow take (a child workflow's end signalling its
// parent, a SignalTx), so those never wait for a completion of it.
func lockWorkflows(ctx context.Context, tx pgx.Tx, sql *statements, ids []string) (map[string]Status, error) {
	ids = lockOrder(ids)
	rows, err := tx.Query(ctx, sql.lockWorkflows, customPlan, ids)
	if err != nil {
		return nil, fmt.Errorf("error locking workflows: %w", err)
	}
	out := make(map[string]Status, len(ids))
	for rows.Next() {
		var id string
		var st Status
		if err := rows.Scan(&id, &st); err != nil {
			rows.Close()
			return nil, fmt.Errorf("error locking workflows: %w", err)
		}
		out[id] = st
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error locking workflows: %w", err)
	}
	return out, nil
}

// lockOrder is ids sorted, each once: the order in which lockWorkflowsSQL
// locks them.
func lockOrder(ids []string) []string {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return slices.Compact(ids)
}

const lockWorkflowsSQL = `
SELECT w.id::text, w.status FROM /*schema*/tributary_workflow w WHERE w.id = ANY($1::uuid[]) ORDER BY w.id FOR NO KEY UPDATE`

// finish records outcomes on their tasks (each only while the task is
// active with that job; a completion also while the task was cancelled by
// an operator after its job started, since the work did happen) and tells
// their dependents. It returns the outcomes that were recorded. The common
// case, outcomes of active tasks, is one statement that records them and
// updates their dependents (finishReleaseSQL).
func (a *advance) finish(ctx context.Context, outs []outcome) ([]outcome, error) {
	_, done, err := a.completeFinish(ctx, nil, outs)
	return done, err
}

// completeFinish is finish for outcomes whose successful attempts' jobs
// River's completer completes after the commit (attempts; nil: finish
// itself): one statement (completeReleaseSQL instead of finishReleaseSQL)
// checks that those jobs are still running at the attempt, records the
// outcomes of those and of the other outcomes (failures whose jobs the
// caller finalized), tells their dependents and releases the dependents'
// jobs. Then it records the completions of tasks an operator cancelled
// while they ran and settles the dependents. It returns the ids of the
// jobs still running at their attempt and the outcomes it recorded; a
// success whose job is not is stale and not recorded.
func (a *advance) completeFinish(ctx context.Context, attempts []riverjob.Attempt, outs []outcome) ([]int64, []outcome, error) {
	if a.lock != nil && (len(outs) == 0 || attempts == nil) {
		// No completeRelease round trip to lock in.
		if _, err := lockWorkflows(ctx, a.tx, a.sql, a.lock); err != nil {
			return nil, nil, err
		}
		a.lock = nil
	}
	if len(outs) == 0 {
		return nil, nil, nil
	}
	type key struct{ wf, task string }
	recorded := map[key]bool{}
	var completed []int64
	var deps []decided
	run := func(outs []outcome, from TaskState, attempts []riverjob.Attempt) error {
		args, err := outcomeArgs(outs, from, a.now)
		if err != nil {
			return err
		}
		var rows pgx.Rows
		end := func() error { return nil }
		switch {
		case attempts != nil:
			rows, end, err = a.completeRelease(ctx, args, attempts)
		case from == TaskActive:
			rows, err = a.tx.Query(ctx, a.sql.finishRelease, append([]any{customPlan}, args...)...)
		default:
			rows, err = a.tx.Query(ctx, a.sql.finishTasks, append([]any{customPlan}, args...)...)
		}
		if err != nil {
			return fmt.Errorf("error recording task outcomes: %w", err)
		}
		for rows.Next() {
			var kind string
			var d decided
			var raw []byte // a task's run_if
			if err := rows.Scan(&kind, &d.wf, &d.name, &d.state, &d.pendingDeps, &raw, &d.dependents, &d.jobID); err != nil {
				rows.Close()
				_ = end()
				return fmt.Errorf("error recording task outcomes: %w", err)
			}
			if raw != nil {
				d.runIf = new(Condition)
				if err := json.Unmarshal(raw, d.runIf); err != nil {
					rows.Close()
					_ = end()
					return fmt.Errorf("error recording task outcomes: task %q's condition: %w", d.name, err)
				}
			}
			switch kind {
			case rowFinished:
				recorded[key{d.wf, d.name}] = true
				if attempts == nil {
					a.delta(d.wf).move(from, d.state)
				}
				if attempts != nil && d.state == TaskCompleted {
					// completeReleaseSQL records a success only when its job
					// is running at the attempt.
					completed = append(completed, d.jobID)
				}
			case rowDependent:
				d.released = attempts != nil
				d.counted = attempts != nil
				deps = append(deps, d)
			case rowCompleted:
				completed = append(completed, d.jobID)
			case rowPromoted:
				a.queues = append(a.queues, d.name)
			case rowWorkflowEnded:
				a.workflowEnded(d.wf, Status(d.state), d.name, d.dependents[0])
			}
		}
		if err := rows.Err(); err != nil {
			_ = end()
			return fmt.Errorf("error recording task outcomes: %w", err)
		}
		return end()
	}
	if err := run(outs, TaskActive, attempts); err != nil {
		return nil, nil, err
	}
	live := func(o outcome) bool { return true }
	if attempts != nil {
		ok := make(map[int64]bool, len(completed))
		for _, id := range completed {
			ok[id] = true
		}
		live = func(o outcome) bool { return o.State != TaskCompleted || ok[o.JobID] }
	}
	// Completions of tasks an operator cancelled while they ran (rare: a
	// second statement only then). Their dependents were told when the
	// task was cancelled.
	var late []outcome
	for _, o := range outs {
		if o.State == TaskCompleted && !recorded[key{o.WorkflowID, o.Task}] && live(o) {
			late = append(late, o)
		}
	}
	if len(late) > 0 {
		if err := run(late, TaskCancelled, nil); err != nil {
			return nil, nil, err
		}
	}
	var done []outcome
	for _, o := range outs {
		if recorded[key{o.WorkflowID, o.Task}] {
			done = append(done, o)
		}
	}
	next, err := a.settle(ctx, deps)
	if err != nil {
		return nil, nil, err
	}
	return completed, done, a.resolve(ctx, next)
}

// completeRelease sends completeReleaseSQL for the outcomes (outcomeArgs)
// and the successes' attempts in one round trip with the lock of a.lock
// and the planner setting that gives it its generic plan from its first
// run: planning it cost more than running it (1.6 ms of the database's
// CPU in a batch of 140 roots of diamonds), and Postgres plans a prepared
// statement afresh for its first five runs on each connection, so that the
// first batches after a connection opened (most of those of a short burst)
// paid it. completionTx's settings keep that plan on primary keys whatever
// the tables' sizes (record 0001). It returns the statement's rows and a
// function that reads the rest of the round trip, to call once they are
// read (also after an error).
func (a *advance) completeRelease(ctx context.Context, args []any, attempts []riverjob.Attempt) (pgx.Rows, func() error, error) {
	ids, nums := riverjob.AttemptArrays(attempts)
	b := &pgx.Batch{}
	b.Queue(genericPlanOnSQL)
	if a.lock != nil {
		b.Queue(a.sql.lockWorkflows, lockOrder(a.lock))
		a.lock = nil
	}
	b.Queue(a.sql.completeRelease, append(args, ids, nums)...)
	b.Queue(genericPlanOffSQL)
	br := a.tx.SendBatch(ctx, b)
	for range len(b.QueuedQueries) - 2 { // the setting, the lock
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, nil, err
	}
	return rows, func() error {
		rows.Close()
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return err
		}
		return br.Close()
	}, nil
}

// genericPlanOnSQL and genericPlanOffSQL bracket completeReleaseSQL: the
// other statements of the completion transaction keep their custom plans.
const (
	genericPlanOnSQL  = `SET LOCAL plan_cache_mode = force_generic_plan`
	genericPlanOffSQL = `SET LOCAL plan_cache_mode TO DEFAULT`
)

// The kinds of row finishReleaseSQL and completeReleaseSQL return.
const (
	rowFinished  = "f" // a task whose outcome was recorded
	rowDependent = "d" // a dependent the statement updated
	rowCompleted = "j" // a job the statement completed without recording its task (job_id)
	rowPromoted  = "p" // a queue of jobs the statement released (as the name)
	// rowWorkflowEnded is a workflow the statement's count update finished:
	// its id, its status as the state, its parent's id (or "") as the
	// name, its concurrency key (or "") as the one dependent.
	rowWorkflowEnded = "w"
)

// outcomeArgs are the outcomes as the parameters of finishSetSQL: $1 and
// $3 to $10 are arrays of their columns, at the same positions, $2 the
// time. Each outcome comes with the state its task must be in: a column of
// the input rather than a constant so that it is a join condition (as a
// constant it let the planner reach the tasks through the partial index of
// active tasks, which a young table's missing statistics put at a few rows,
// and the statement read every active task: 10,425 rows to record 200
// outcomes of a 4,000-diamond run, half its time). Arrays, sent in binary,
// rather than one JSON document: Postgres spent 0.56 ms of CPU parsing and
// splitting the document of 140 outcomes (jsonb_to_recordset), 0.04 ms
// unnesting the arrays. An empty output or error list is NULL.
func outcomeArgs(outs []outcome, from TaskState, now time.Time) ([]any, error) {
	n := len(outs)
	wfs, names, states, froms := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	jobs, attempts := make([]int64, n), make([]int32, n)
	outputs, errs := make([]json.RawMessage, n), make([]json.RawMessage, n)
	started := make([]*time.Time, n)
	for i, o := range outs {
		wfs[i], names[i], jobs[i], states[i], froms[i] = o.WorkflowID, o.Task, o.JobID, string(o.State), string(from)
		attempts[i], started[i] = int32(o.Attempt), o.StartedAt
		if len(o.Output) > 0 && string(o.Output) != "null" {
			outputs[i] = o.Output
		}
		if len(o.Errors) > 0 {
			b, err := json.Marshal(o.Errors)
			if err != nil {
				return nil, fmt.Errorf("error encoding the errors of task %q: %w", o.Task, err)
			}
			errs[i] = b
		}
	}
	return []any{wfs, now, names, jobs, states, outputs, attempts, started, errs, froms}, nil
}

// finishSetSQL records an outcome u on its task t. The attempt errors get
// the task's run number here, where it is known. The old state comes with
// the outcome rather than read in a join: the join cost a primary-key probe
// per task in the hottest statement.
const finishSetSQL = `
SET state = u.new_state,
    output = CASE WHEN u.new_state = 'completed' THEN u.output END,
    attempts = t.attempts + u.attempt,
    errors = CASE WHEN u.errors IS NULL THEN t.errors
        ELSE t.errors || (SELECT jsonb_agg(e || jsonb_build_object('run', t.run)) FROM jsonb_array_elements(u.errors) e) END,
    started_at = u.started_at,
    finished_at = $2,
    updated_at = $2
FROM unnest($1::uuid[], $3::text[], $4::bigint[], $5::text[], $6::jsonb[], $7::integer[], $8::timestamptz[], $9::jsonb[], $10::text[])
    AS u(workflow_id, name, job_id, new_state, output, attempt, started_at, errors, from_state)
WHERE t.workflow_id = u.workflow_id AND t.name = u.name AND t.job_id = u.job_id AND t.state = u.from_state`

// finishTasksSQL records outcomes (outcomeArgs) without telling dependents,
// in the shape of finishReleaseSQL's rows.
const finishTasksSQL = `
UPDATE /*schema*/tributary_workflow_task t` + finishSetSQL + `
RETURNING 'f', t.workflow_id::text, t.name, t.state, t.pending_deps, t.run_if, t.dependents, t.job_id`

// finishReleaseSQL records outcomes (outcomeArgs) and tells the finished
// tasks' dependents in the same statement: n of their dependencies
// finished, nf of them failed or cancelled, and decides each (decideSQL).
// It returns the finished tasks (kind rowFinished) and the dependents it
// changed (rowDependent). One statement rather than two saves a round trip
// per completion batch, which on a busy machine costs more than either
// statement's work. The two updates never meet on a row: the first changes
// tasks in u.from_state (active), the second pending ones, and both read
// the snapshot from before the statement.
const finishReleaseSQL = `
WITH fin AS (
    UPDATE /*schema*/tributary_workflow_task t` + finishSetSQL + `
    RETURNING t.workflow_id, t.name, t.state, t.pending_deps, t.run_if, t.dependents, t.job_id
), ` + tellDependentsSQL + `
SELECT 'f', workflow_id::text, name, state, pending_deps, run_if, dependents, job_id FROM fin
UNION ALL
SELECT 'd', workflow_id::text, name, state, pending_deps, run_if, dependents, job_id FROM dec`

// tellDependentsSQL are the CTEs deps and dec of finishReleaseSQL and
// completeReleaseSQL: the dependents of the tasks in fin hear of them.
const tellDependentsSQL = `deps AS (
    SELECT f.workflow_id, d.name, count(*)::integer AS n,
           (count(*) FILTER (WHERE f.state NOT IN ('completed', 'skipped')))::integer AS nf
    FROM fin f CROSS JOIN LATERAL unnest(f.dependents) AS d(name)
    GROUP BY f.workflow_id, d.name
), dec AS (
    UPDATE /*schema*/tributary_workflow_task t` + decrementSetSQL + `
    FROM deps u
    WHERE t.workflow_id = u.workflow_id AND t.name = u.name AND t.state = 'pending'
    RETURNING t.workflow_id, t.name, t.state, t.pending_deps, t.run_if, t.dependents, t.job_id
)`

// completeReleaseSQL is a completion batch's work in one statement: it
// finds the jobs of the successful attempts still running at the attempt
// ($11 ids, $12 attempts; riverjob.RunningAttempts, a read), records the
// outcomes (outcomeArgs) of those successes and of the failures (the
// caller finalized their jobs), tells the dependents
// (tellDependentsSQL), releases the jobs of those that became active
// (riverjob.PromoteUpdate, Promote's statement) and adds the moves of the
// tasks it recorded and decided to their workflows' counts (countsSet; the
// caller's advance leaves those moves out of its deltas). Beside
// finishReleaseSQL's rows it returns the running jobs whose tasks it did
// not record (rowCompleted: the completions of tasks an operator cancelled
// while they ran; a recorded success's job is its rowFinished row's), the distinct queues of the jobs it released (rowPromoted) and
// the workflows its count update finished (rowWorkflowEnded). Its
// rowFinished rows carry only what the caller reads of them (workflow,
// name, state, job). Four statements in one: each cost a round trip, its
// planning and its executor's start per batch, and the count update a
// chain's hop. A success's job is left running for River's completer
// (record 0023): completing it here put its update, which touches every
// index of river_job, inside the batch's transaction, on the path from a
// task's completion to its dependents' start. The ids of the jobs to release come as an array
// (ANY(ARRAY(...))), which the planner reaches through the primary key.
var completeReleaseSQL = `
WITH done AS (
    ` + riverjob.RunningAttempts("$11", "$12") + `
), fin AS (
    UPDATE /*schema*/tributary_workflow_task t` + finishSetSQL + `
      AND (u.new_state <> 'completed' OR u.job_id IN (SELECT id FROM done))
    RETURNING t.workflow_id, t.name, t.state, t.pending_deps, t.run_if, t.dependents, t.job_id
), ` + tellDependentsSQL + `, prom AS (
    ` + riverjob.PromoteUpdate("ARRAY(SELECT job_id FROM dec WHERE state = 'active')") + `
), moves AS (
    SELECT workflow_id, 'active' AS st, -1 AS n FROM fin
    UNION ALL SELECT workflow_id, state, 1 FROM fin
    UNION ALL SELECT workflow_id, 'pending', -1 FROM dec WHERE state <> 'pending'
    UNION ALL SELECT workflow_id, state, 1 FROM dec WHERE state <> 'pending'
), cnt AS (
    SELECT workflow_id AS id,
           coalesce(sum(n) FILTER (WHERE st = 'pending'), 0)::integer AS dp,
           coalesce(sum(n) FILTER (WHERE st = 'active'), 0)::integer AS da,
           coalesce(sum(n) FILTER (WHERE st = 'completed'), 0)::integer AS dco,
           coalesce(sum(n) FILTER (WHERE st = 'failed'), 0)::integer AS df,
           coalesce(sum(n) FILTER (WHERE st = 'cancelled'), 0)::integer AS dc,
           coalesce(sum(n) FILTER (WHERE st = 'skipped'), 0)::integer AS ds
    FROM moves GROUP BY workflow_id
), wfu AS (
    UPDATE /*schema*/tributary_workflow w ` + countsSet("$2") + `
    FROM cnt u
    WHERE w.id = u.id
    RETURNING w.id, w.status, w.finished_at, w.parent_workflow_id, w.concurrency_key
)
SELECT 'f', workflow_id::text, name, state, 0, NULL::jsonb, NULL::text[], job_id FROM fin
UNION ALL
SELECT 'd', workflow_id::text, name, state, pending_deps, run_if, dependents, job_id FROM dec
UNION ALL
SELECT 'j', '', '', '', 0, NULL::jsonb, NULL::text[], id FROM done WHERE id NOT IN (SELECT job_id FROM fin)
UNION ALL
SELECT DISTINCT 'p', '', queue, '', 0, NULL::jsonb, NULL::text[], 0::bigint FROM prom
UNION ALL
SELECT 'w', id::text, coalesce(parent_workflow_id::text, ''), status, 0, NULL::jsonb, ARRAY[coalesce(concurrency_key, '')], 0::bigint
FROM wfu WHERE finished_at = $2`

// resolve tells dependents that tasks finished, until nothing more
// changes: a dependent whose last dependency finished becomes active (or
// skipped, or cancelled, as its policy says), and a cancelled or skipped
// task is a finished task in turn. One pass per level of the graph that
// changes; a success changes one level.
func (a *advance) resolve(ctx context.Context, res []resolution) error {
	for len(res) > 0 {
		type key struct{ wf, task string }
		agg := map[key]*[2]int{}
		var order []key
		for _, r := range res {
			for _, d := range r.dependents {
				k := key{r.workflowID, d}
				n := agg[k]
				if n == nil {
					n = &[2]int{}
					agg[k] = n
					order = append(order, k)
				}
				n[0]++
				if !r.satisfied {
					n[1]++
				}
			}
		}
		wfs, names, ns, nfs := make([]string, len(order)), make([]string, len(order)), make([]int32, len(order)), make([]int32, len(order))
		for i, k := range order {
			wfs[i], names[i], ns[i], nfs[i] = k.wf, k.task, int32(agg[k][0]), int32(agg[k][1])
		}
		next, err := a.decide(ctx, a.sql.decrementDeps, wfs, names, ns, nfs)
		if err != nil {
			return err
		}
		res = next
	}
	return nil
}

// decideUndecided makes the decision for pending tasks that have nothing
// left to wait for (after a Retry reset them, or found by the repair
// sweep), then tells their dependents.
func (a *advance) decideUndecided(ctx context.Context, wf string, names []string) error {
	if len(names) == 0 {
		return nil
	}
	wfs, zeros := make([]string, len(names)), make([]int32, len(names))
	for i := range names {
		wfs[i] = wf
	}
	next, err := a.decide(ctx, a.sql.decrementDeps, wfs, names, zeros, zeros)
	if err != nil {
		return err
	}
	return a.resolve(ctx, next)
}

// decided is a pending task after a dependency update: its state and
// what its decision needs.
type decided struct {
	wf, name    string
	state       TaskState
	pendingDeps int
	runIf       *Condition
	dependents  []string
	jobID       int64
	released    bool // its job was released with its decision (completeReleaseSQL)
	counted     bool // its move is in the workflow's counts already (completeReleaseSQL)
}

// decide runs the dependency update and returns the tasks it finished
// (cancelled or skipped), as settle does.
func (a *advance) decide(ctx context.Context, sql string, wfs, names []string, ns, nfs []int32) ([]resolution, error) {
	rows, err := a.tx.Query(ctx, sql, customPlan, wfs, a.now, names, ns, nfs)
	if err != nil {
		return nil, fmt.Errorf("error updating dependent tasks: %w", err)
	}
	var ds []decided
	for rows.Next() {
		var d decided
		if err := rows.Scan(&d.wf, &d.name, &d.state, &d.pendingDeps, &d.runIf, &d.dependents, &d.jobID); err != nil {
			rows.Close()
			return nil, fmt.Errorf("error updating dependent tasks: %w", err)
		}
		ds = append(ds, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error updating dependent tasks: %w", err)
	}
	return a.settle(ctx, ds)
}

// settle accounts for updated dependents and returns those that finished
// (cancelled or skipped). Tasks with a RunIf condition that have nothing
// left to wait for are decided here, in Go, from their dependencies'
// states.
func (a *advance) settle(ctx context.Context, ds []decided) ([]resolution, error) {
	var next []resolution
	type cond struct {
		wf, task string
		c        *Condition
	}
	var conds []cond
	for _, d := range ds {
		if r, ok := a.changed(d.wf, d.state, d.dependents, d.jobID, d.released, d.counted); ok {
			next = append(next, r)
		}
		if d.state == TaskPending && d.pendingDeps == 0 && d.runIf != nil {
			conds = append(conds, cond{d.wf, d.name, d.runIf})
		}
	}
	if len(conds) == 0 {
		return next, nil
	}

	// The tasks a condition reads are its dependencies, all finished now.
	var qwf, qname []string
	for _, c := range conds {
		for _, n := range c.c.names() {
			qwf, qname = append(qwf, c.wf), append(qname, n)
		}
	}
	states := map[[2]string]TaskState{}
	rows, err := a.tx.Query(ctx, a.sql.taskStates, customPlan, qwf, qname)
	if err != nil {
		return nil, fmt.Errorf("error reading the tasks of RunIf conditions: %w", err)
	}
	for rows.Next() {
		var wf, name string
		var st TaskState
		if err := rows.Scan(&wf, &name, &st); err != nil {
			rows.Close()
			return nil, err
		}
		states[[2]string{wf, name}] = st
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error reading the tasks of RunIf conditions: %w", err)
	}
	swf, sname, sstate := make([]string, len(conds)), make([]string, len(conds)), make([]string, len(conds))
	for i, c := range conds {
		run := c.c.eval(func(t string) TaskState { return states[[2]string{c.wf, t}] })
		swf[i], sname[i], sstate[i] = c.wf, c.task, string(TaskSkipped)
		if run {
			sstate[i] = string(TaskActive)
		}
	}
	rows, err = a.tx.Query(ctx, a.sql.setDecided, customPlan, swf, sname, sstate, a.now)
	if err != nil {
		return nil, fmt.Errorf("error deciding RunIf tasks: %w", err)
	}
	for rows.Next() {
		var wf string
		var state TaskState
		var dependents []string
		var jobID int64
		if err := rows.Scan(&wf, &state, &dependents, &jobID); err != nil {
			rows.Close()
			return nil, err
		}
		if r, ok := a.changed(wf, state, dependents, jobID, false, false); ok {
			next = append(next, r)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error deciding RunIf tasks: %w", err)
	}
	return next, nil
}

// changed accounts for a pending task that left pending (or not) and
// returns its resolution when it finished. released: its job was
// released already, if it became active; counted: its move is in its
// workflow's counts already (both completeReleaseSQL).
func (a *advance) changed(wf string, state TaskState, dependents []string, jobID int64, released, counted bool) (resolution, bool) {
	switch state {
	case TaskActive:
		if !counted {
			a.delta(wf).move(TaskPending, TaskActive)
		}
		if !released {
			a.promote = append(a.promote, jobID)
		}
	case TaskCancelled, TaskSkipped:
		if !counted {
			a.delta(wf).move(TaskPending, state)
		}
		a.cancel = append(a.cancel, jobID)
		if len(dependents) > 0 {
			return resolution{workflowID: wf, dependents: dependents, satisfied: state == TaskSkipped}, true
		}
	}
	return resolution{}, false
}

// decideSQL is a pending task's state after n of its dependencies finished,
// nf of them failed or cancelled (t's columns are the values before the
// update): cancelled at once when a dependency failed and its policy is
// cancel; once nothing is left to wait for, active (all satisfied, or
// policy run) or skipped (policy skip). A task with a RunIf condition stays
// pending for the caller to decide.
const decideSQL = `CASE
            WHEN t.run_if IS NOT NULL THEN 'pending'
            WHEN t.failed_deps + u.nf > 0 AND t.on_dep_failure = 'cancel' THEN 'cancelled'
            WHEN t.pending_deps - u.n > 0 THEN 'pending'
            WHEN t.failed_deps + u.nf = 0 OR t.on_dep_failure = 'run' THEN 'active'
            ELSE 'skipped'
        END`

// decrementSetSQL tells a pending task t that u.n of its dependencies
// finished, u.nf of them failed or cancelled, and decides it (decideSQL),
// at time $2. The decision is written out three times rather than computed
// once in a join of the table with itself: the join cost a primary-key
// probe per task.
const decrementSetSQL = `
SET pending_deps = t.pending_deps - u.n, failed_deps = t.failed_deps + u.nf, state = ` + decideSQL + `,
    updated_at = $2,
    ready_at = CASE WHEN ` + decideSQL + ` = 'active' THEN $2 ELSE t.ready_at END,
    finished_at = CASE WHEN ` + decideSQL + ` IN ('cancelled', 'skipped') THEN $2 ELSE t.finished_at END`

// decrementDepsSQL tells pending tasks that n of their dependencies
// finished, nf of them failed or cancelled, and decides each
// (decrementSetSQL). With n = 0 it only decides.
const decrementDepsSQL = `
UPDATE /*schema*/tributary_workflow_task t` + decrementSetSQL + `
FROM unnest($1::uuid[], $3::text[], $4::integer[], $5::integer[]) AS u(workflow_id, name, n, nf)
WHERE t.workflow_id = u.workflow_id AND t.name = u.name AND t.state = 'pending'
RETURNING t.workflow_id::text, t.name, t.state, t.pending_deps, t.run_if, t.dependents, t.job_id`

const taskStatesSQL = `
SELECT t.workflow_id::text, t.name, t.state
FROM unnest($1::uuid[], $2::text[]) AS u(workflow_id, name)
JOIN /*schema*/tributary_workflow_task t ON t.workflow_id = u.workflow_id AND t.name = u.name`

const setDecidedSQL = `
UPDATE /*schema*/tributary_workflow_task t
SET state = u.state, updated_at = $4,
    ready_at = CASE WHEN u.state = 'active' THEN $4 ELSE t.ready_at END,
    finished_at = CASE WHEN u.state = 'skipped' THEN $4 ELSE t.finished_at END
FROM unnest($1::uuid[], $2::text[], $3::text[]) AS u(workflow_id, name, state)
WHERE t.workflow_id = u.workflow_id AND t.name = u.name AND t.state = 'pending'
RETURNING t.workflow_id::text, t.state, t.dependents, t.job_id`

// flush writes what the transaction collected: releases and cancels the
// jobs, and applies the count changes to the workflows (finishing those
// with nothing pending or active left). It returns the queues of the
// released jobs, to wake after the commit.
func (a *advance) flush(ctx context.Context) ([]string, error) {
	queues, err := riverjob.Promote(ctx, a.tx, a.schema, a.promote)
	if err != nil {
		return nil, err
	}
	if len(a.queues) > 0 {
		queues = append(queues, a.queues...)
		slices.Sort(queues)
		queues = slices.Compact(queues)
	}
	if _, err := riverjob.CancelUnstarted(ctx, a.tx, a.schema, a.cancel, a.now); err != nil {
		return nil, err
	}
	if len(a.deltas) > 0 {
		if err := a.applyCounts(ctx); err != nil {
			return nil, err
		}
	}
	if len(a.ended) == 0 && len(a.keys) == 0 {
		return queues, nil
	}
	q, err := notifyParents(ctx, a.tx, a.sql, a.schema, a.ended, a.now)
	if err != nil {
		return nil, err
	}
	admitted, err := releaseSlots(ctx, a.tx, a.sql, a.schema, a.keys, a.now)
	if err != nil {
		return nil, err
	}
	return append(append(queues, q...), admitted...), nil
}

// workflowEnded notes a workflow that a count update finished, for flush:
// its parent (if any) hears of it, and its concurrency slot (if any) is
// freed.
func (a *advance) workflowEnded(id string, st Status, parent, key string) {
	a.finished[id] = st
	if parent != "" {
		a.ended = append(a.ended, childEnd{id: id, parent: parent, status: st})
	}
	if key != "" {
		a.keys = append(a.keys, key)
	}
}

// applyCounts applies the collected count changes (applyCountsSQL).
func (a *advance) applyCounts(ctx context.Context) error {
	n := len(a.deltas)
	ids := make([]string, 0, n)
	var dp, da, dco, df, dc, ds []int32
	for id, d := range a.deltas {
		ids = append(ids, id)
		dp, da, dco = append(dp, int32(d.pending)), append(da, int32(d.active)), append(dco, int32(d.completed))
		df, dc, ds = append(df, int32(d.failed)), append(dc, int32(d.cancelled)), append(ds, int32(d.skipped))
	}
	counts := a.sql.applyCounts
	if a.probeCounts {
		counts = a.sql.applyCountsProbe
	}
	rows, err := a.tx.Query(ctx, counts, customPlan, ids, dp, da, dco, df, dc, ds, a.now)
	if err != nil {
		return fmt.Errorf("error updating workflow counts: %w", err)
	}
	for rows.Next() {
		var id, parent, key string
		var st Status
		var finished bool
		if err := rows.Scan(&id, &st, &finished, &parent, &key); err != nil {
			rows.Close()
			return fmt.Errorf("error updating workflow counts: %w", err)
		}
		if finished {
			a.workflowEnded(id, st, parent, key)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("error updating workflow counts: %w", err)
	}
	return nil
}

// applyCountsSQL adds count changes and finishes a running workflow that has
// no pending or active task left: failed if a task failed, else cancelled if
// one was cancelled, else completed. The ids also restrict the workflows
// directly (w.id = ANY), which reaches them through the primary key: joined
// to the arrays alone, a 4,000-workflow table without statistics was
// scanned whole to update 26.
var applyCountsSQL = `
UPDATE /*schema*/tributary_workflow w
` + countsSet("$8") + `
FROM unnest($1::uuid[], $2::integer[], $3::integer[], $4::integer[], $5::integer[], $6::integer[], $7::integer[])
    AS u(id, dp, da, dco, df, dc, ds)
` + applyCountsWhere + `
RETURNING w.id::text, w.status, coalesce(w.finished_at = $8, false), coalesce(w.parent_workflow_id::text, ''),
    coalesce(w.concurrency_key, '')`

// countsSet is applyCountsSQL's SET list, with now the time: it adds the
// changes of u (dp, da, dco, df, dc, ds) to workflow w and finishes w when
// nothing is pending or active any more.
func countsSet(now string) string {
	return `SET tasks_pending = w.tasks_pending + u.dp, tasks_active = w.tasks_active + u.da,
    tasks_completed = w.tasks_completed + u.dco, tasks_failed = w.tasks_failed + u.df,
    tasks_cancelled = w.tasks_cancelled + u.dc, tasks_skipped = w.tasks_skipped + u.ds,
    status = CASE
        WHEN w.status <> 'running' OR w.tasks_pending + u.dp > 0 OR w.tasks_active + u.da > 0 THEN w.status
        WHEN w.tasks_failed + u.df > 0 THEN 'failed'
        WHEN w.tasks_cancelled + u.dc > 0 THEN 'cancelled'
        ELSE 'completed'
    END,
    finished_at = CASE
        WHEN w.status = 'running' AND w.tasks_pending + u.dp = 0 AND w.tasks_active + u.da = 0 THEN ` + now + `
        ELSE w.finished_at
    END,
    updated_at = ` + now
}

// applyCountsWhere is applyCountsSQL's join with its arrays, for
// transactions with the planner's defaults (cancel, retry, repair, an
// admission).
const applyCountsWhere = `WHERE w.id = u.id AND w.id = ANY($1::uuid[])`

// applyCountsProbeSQL is applyCountsSQL for the completion transaction
// (completionTx: sequential scans, hash joins and merge joins off): joined
// to its arrays alone, each row of them probes the primary key. With the
// extra w.id = ANY the plan there was a bitmap scan of the workflows,
// materialized and compared with every row of the arrays (a nested loop
// with a join filter: 19,900 comparisons for 200 workflows), 2.0 to 4.3 ms
// against 1.1 to 2.7 ms for 200 probes (EXPLAIN ANALYZE on 4,000
// workflows, six runs each).
var applyCountsProbeSQL = strings.Replace(applyCountsSQL, applyCountsWhere, `WHERE w.id = u.id`, 1)
