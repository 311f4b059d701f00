package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// CancelResult is what Cancel did.
type CancelResult struct {
	ID string `json:"id"`
	// Cancelled counts the tasks that were pending or active.
	Cancelled int `json:"cancelled"`
	// Interrupted counts the running jobs among them, whose contexts
	// River cancels (through its JobCancel); a task that still completes
	// is recorded as completed.
	Interrupted int `json:"interrupted"`
	// Children counts the running child workflows (at any depth) it
	// cancelled with it.
	Children int `json:"children,omitempty"`
}

// Cancel cancels a running workflow: every pending and active task becomes
// cancelled at once and the workflow's status cancelled. Jobs that have not
// started never will; running ones are cancelled through River (their work
// context is cancelled; a task that ignores it and completes is recorded as
// completed, with its output). A finished workflow is ErrFinished, an
// unknown one a *NotFoundError.
func (c *Client) Cancel(ctx context.Context, ref string) (*CancelResult, error) {
	var res *CancelResult
	var queues []string
	err := pgx.BeginFunc(ctx, c.qc.Pool(), func(tx pgx.Tx) error {
		id, err := c.resolve(ctx, tx, ref)
		if err != nil {
			return err
		}
		res, queues, err = c.cancelTx(ctx, tx, id, true)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := riverjob.Wake(ctx, c.qc.Pool(), c.schema, queues); err != nil {
		c.logger.WarnContext(ctx, "error waking River after a cancel", "error", err)
	}
	c.logger.InfoContext(ctx, "workflow cancelled", "workflow_id", res.ID, "tasks", res.Cancelled, "interrupted", res.Interrupted, "children", res.Children)
	return res, nil
}

// cancelTx cancels workflow id and its running children (theirs too), and
// tells its parent, if any; it returns the queues of jobs it released (a
// parent's waiting task, workflows admitted to freed concurrency slots).
// top is false for a child: a child that already finished is no error.
func (c *Client) cancelTx(ctx context.Context, tx pgx.Tx, id string, top bool) (*CancelResult, []string, error) {
	statuses, err := lockWorkflows(ctx, tx, &c.sql, []string{id})
	if err != nil {
		return nil, nil, err
	}
	if st := statuses[id]; st != StatusRunning {
		if !top {
			return &CancelResult{ID: id}, nil, nil
		}
		return nil, nil, fmt.Errorf("cannot cancel workflow %s: it is %s: %w", id, st, ErrFinished)
	}
	now := time.Now().UTC()
	rows, err := tx.Query(ctx, c.sql.cancelTasks, customPlan, id, now)
	if err != nil {
		return nil, nil, fmt.Errorf("error cancelling the tasks of workflow %s: %w", id, err)
	}
	jobIDs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, nil, fmt.Errorf("error cancelling the tasks of workflow %s: %w", id, err)
	}
	res := &CancelResult{ID: id, Cancelled: len(jobIDs)}
	unstarted, err := riverjob.CancelUnstarted(ctx, tx, c.schema, jobIDs, now)
	if err != nil {
		return nil, nil, err
	}
	for _, jobID := range jobIDs {
		if slices.Contains(unstarted, jobID) {
			continue
		}
		// Running (or finished a moment ago): River's own cancel asks
		// the producer working it to cancel its context.
		job, err := c.riverClient().JobCancelTx(ctx, tx, jobID)
		if err != nil && !errors.Is(err, rivertype.ErrNotFound) {
			return nil, nil, fmt.Errorf("error cancelling job %d: %w", jobID, err)
		}
		if job != nil && job.State == rivertype.JobStateRunning {
			res.Interrupted++
		}
	}
	if err := c.recount(ctx, tx, id, StatusCancelled, now); err != nil {
		return nil, nil, err
	}
	var parent, key string
	var queued bool
	if err := tx.QueryRow(ctx, c.sql.cancelledLinks, customPlan, id).Scan(&parent, &key, &queued); err != nil {
		return nil, nil, fmt.Errorf("error reading workflow %s: %w", id, err)
	}
	var queues []string
	if parent != "" {
		q, err := notifyParents(ctx, tx, &c.sql, c.schema, []childEnd{{id: id, parent: parent, status: StatusCancelled}}, now)
		if err != nil {
			return nil, nil, err
		}
		queues = append(queues, q...)
	}
	if key != "" && !queued {
		q, err := releaseSlots(ctx, tx, &c.sql, c.schema, []string{key}, now)
		if err != nil {
			return nil, nil, err
		}
		queues = append(queues, q...)
	}
	rows, err = tx.Query(ctx, c.sql.runningChildren, customPlan, id)
	if err != nil {
		return nil, nil, fmt.Errorf("error finding the children of workflow %s: %w", id, err)
	}
	children, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, fmt.Errorf("error finding the children of workflow %s: %w", id, err)
	}
	for _, child := range children {
		cr, q, err := c.cancelTx(ctx, tx, child, false)
		if err != nil {
			return nil, nil, fmt.Errorf("error cancelling child workflow %s: %w", child, err)
		}
		res.Children += 1 + cr.Children
		queues = append(queues, q...)
	}
	return res, queues, nil
}

// cancelledLinksSQL reads what a cancel tells others: the parent, and the
// concurrency key whose slot it frees (none while it was queued, which it
// is no longer).
const cancelledLinksSQL = `
WITH old AS (SELECT id, queued FROM /*schema*/tributary_workflow WHERE id = $1::uuid),
upd AS (UPDATE /*schema*/tributary_workflow w SET queued = false FROM old WHERE w.id = old.id RETURNING w.parent_workflow_id, w.concurrency_key)
SELECT coalesce(upd.parent_workflow_id::text, ''), coalesce(upd.concurrency_key, ''), old.queued FROM upd, old`

const cancelTasksSQL = `
UPDATE /*schema*/tributary_workflow_task SET state = 'cancelled', finished_at = $2, updated_at = $2
WHERE workflow_id = $1::uuid AND state IN ('pending', 'active')
RETURNING job_id`

// recount sets a workflow's counts from its task rows (operator actions
// change many tasks at once and read them anyway) and its status.
func (c *Client) recount(ctx context.Context, tx pgx.Tx, id string, status Status, now time.Time) error {
	if _, err := tx.Exec(ctx, c.sql.recount, customPlan, id, string(status), now); err != nil {
		return fmt.Errorf("error counting the tasks of workflow %s: %w", id, err)
	}
	return nil
}

const recountSQL = `
UPDATE /*schema*/tributary_workflow w
SET tasks_pending = n.pending, tasks_active = n.active, tasks_completed = n.completed, tasks_failed = n.failed,
    tasks_cancelled = n.cancelled, tasks_skipped = n.skipped, status = $2::text, updated_at = $3::timestamptz,
    finished_at = CASE WHEN $2::text = 'running' THEN NULL ELSE $3::timestamptz END
FROM (
    SELECT count(*) FILTER (WHERE state = 'pending') AS pending, count(*) FILTER (WHERE state = 'active') AS active,
           count(*) FILTER (WHERE state = 'completed') AS completed, count(*) FILTER (WHERE state = 'failed') AS failed,
           count(*) FILTER (WHERE state = 'cancelled') AS cancelled, count(*) FILTER (WHERE state = 'skipped') AS skipped
    FROM /*schema*/tributary_workflow_task WHERE workflow_id = $1::uuid
) n
WHERE w.id = $1::uuid`

// RetryMode says which tasks Retry runs again.
type RetryMode string

const (
	// RetryFailed runs again every task that failed or was cancelled
	// (including those cancelled because a dependency failed); completed
	// and skipped tasks keep their results.
	RetryFailed RetryMode = "failed"
	// RetryFailedAndDownstream runs again what RetryFailed does plus every
	// task after those, whatever its state (a task that ran anyway, a
	// compensation, a skipped task): they run again after the retried
	// tasks.
	RetryFailedAndDownstream RetryMode = "failed-and-downstream"
	// RetryAll runs the whole workflow again, from its first tasks.
	RetryAll RetryMode = "all"
)

// RetryModes lists the retry modes.
func RetryModes() []RetryMode { return []RetryMode{RetryFailed, RetryFailedAndDownstream, RetryAll} }

// ParseRetryMode returns the mode named s, or an error naming s and the
// valid ones.
func ParseRetryMode(s string) (RetryMode, error) {
	for _, m := range RetryModes() {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("invalid retry mode %q: want one of %v", s, RetryModes())
}

// RetryResult is what Retry did.
type RetryResult struct {
	ID   string    `json:"id"`
	Mode RetryMode `json:"mode"`
	// Tasks are the tasks that run again, each with a new job.
	Tasks []string         `json:"tasks"`
	Jobs  map[string]int64 `json:"jobs"`
}

// Retry runs tasks of a workflow again, as mode says, each with a new job
// (its earlier jobs stay as they are, or as River's cleaner left them) and
// its output cleared; its earlier attempts stay in its record. A retried
// task waits for its dependencies that did not complete, as on the first
// run; the workflow is running again. Retry refuses (ErrTaskActive) when a
// task it would re-run is still active, and returns ErrNothingToRetry when
// the mode selects no task.
func (c *Client) Retry(ctx context.Context, ref string, mode RetryMode) (*RetryResult, error) {
	if _, err := ParseRetryMode(string(mode)); err != nil {
		return nil, err
	}
	var res *RetryResult
	var queues []string
	err := pgx.BeginFunc(ctx, c.qc.Pool(), func(tx pgx.Tx) error {
		id, err := c.resolve(ctx, tx, ref)
		if err != nil {
			return err
		}
		if _, err := lockWorkflows(ctx, tx, &c.sql, []string{id}); err != nil {
			return err
		}
		recs, err := c.readTaskRecords(ctx, tx, id)
		if err != nil {
			return err
		}
		retry, err := retrySet(recs, mode)
		if err != nil {
			return fmt.Errorf("cannot retry workflow %s: %w", id, err)
		}
		res, queues, err = c.retry(ctx, tx, id, recs, retry)
		if res != nil {
			res.Mode = mode
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := riverjob.Wake(ctx, c.qc.Pool(), c.schema, queues); err != nil {
		c.logger.WarnContext(ctx, "error waking River for retried tasks", "error", err)
	}
	c.logger.InfoContext(ctx, "workflow retried", "workflow_id", res.ID, "mode", mode, "tasks", len(res.Tasks))
	return res, nil
}

// retrySet returns the tasks mode runs again.
func retrySet(recs []taskRecord, mode RetryMode) (map[string]bool, error) {
	byName := make(map[string]*taskRecord, len(recs))
	for i := range recs {
		byName[recs[i].Name] = &recs[i]
	}
	set := map[string]bool{}
	switch mode {
	case RetryAll:
		for _, r := range recs {
			set[r.Name] = true
		}
	case RetryFailed, RetryFailedAndDownstream:
		var queue []string
		for _, r := range recs {
			if r.State == TaskFailed || r.State == TaskCancelled {
				set[r.Name] = true
				queue = append(queue, r.Name)
			}
		}
		for mode == RetryFailedAndDownstream && len(queue) > 0 {
			t := byName[queue[0]]
			queue = queue[1:]
			for _, d := range t.Dependents {
				if !set[d] {
					set[d] = true
					queue = append(queue, d)
				}
			}
		}
	}
	// A pending task counts its finished dependencies; one of them running
	// again must be waited for again, so the task is reset with it.
	for _, r := range recs {
		if r.State != TaskPending || set[r.Name] {
			continue
		}
		for _, d := range r.Deps {
			if set[d] {
				set[r.Name] = true
				break
			}
		}
	}
	if len(set) == 0 {
		return nil, ErrNothingToRetry
	}
	for _, r := range recs {
		if set[r.Name] && r.State == TaskActive {
			return nil, fmt.Errorf("task %q is active (job %d): %w", r.Name, r.JobID, ErrTaskActive)
		}
	}
	return set, nil
}

// retryRow is a task's reset, as retryTasksSQL reads it.
type retryRow struct {
	Name        string     `json:"name"`
	JobID       int64      `json:"job_id"`
	State       TaskState  `json:"state"`
	PendingDeps int        `json:"pending_deps"`
	ReadyAt     *time.Time `json:"ready_at"`
}

func (c *Client) retry(ctx context.Context, tx pgx.Tx, id string, recs []taskRecord, set map[string]bool) (*RetryResult, []string, error) {
	now := time.Now().UTC()
	state := make(map[string]TaskState, len(recs))
	for _, r := range recs {
		state[r.Name] = r.State
	}
	var (
		names      []string
		params     []river.InsertManyParams
		resets     []retryRow
		oldPending []int64
		undecided  []string
	)
	for _, r := range recs {
		if !set[r.Name] {
			continue
		}
		// Wait for every dependency that runs again or has not finished;
		// the others completed or were skipped (a failed or cancelled one
		// is in the set).
		waiting := 0
		for _, d := range r.Deps {
			if set[d] || !state[d].finished() {
				waiting++
			}
		}
		row := retryRow{Name: r.Name, PendingDeps: waiting, State: TaskPending}
		if waiting == 0 && r.RunIf == nil {
			row.State, row.ReadyAt = TaskActive, &now
		} else if waiting == 0 {
			undecided = append(undecided, r.Name)
		}
		args := riverjob.RawArgs(r.Kind, r.Args)
		opts := &river.InsertOpts{Queue: r.Queue, Priority: r.Priority, MaxAttempts: r.MaxAttempts, Tags: nonNil(r.Tags),
			Pending: row.State == TaskPending}
		if err := identify(opts, args, id, r.Name, r.metadata); err != nil {
			return nil, nil, err
		}
		params = append(params, river.InsertManyParams{Args: args, InsertOpts: opts})
		names = append(names, r.Name)
		resets = append(resets, row)
		if r.State == TaskPending {
			oldPending = append(oldPending, r.JobID)
		}
	}
	// The old jobs of pending tasks would never run; cancel them so they
	// do not linger pending.
	if _, err := riverjob.CancelUnstarted(ctx, tx, c.schema, oldPending, now); err != nil {
		return nil, nil, err
	}
	results, err := c.riverClient().InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, nil, fmt.Errorf("error inserting the retried jobs of workflow %s: %w", id, err)
	}
	res := &RetryResult{ID: id, Tasks: names, Jobs: make(map[string]int64, len(names))}
	var queues []string
	for i := range resets {
		resets[i].JobID = results[i].Job.ID
		res.Jobs[names[i]] = results[i].Job.ID
		if resets[i].State == TaskActive {
			queues = append(queues, results[i].Job.Queue)
		}
	}
	doc, err := json.Marshal(resets)
	if err != nil {
		return nil, nil, err
	}
	if _, err := tx.Exec(ctx, c.sql.retryTasks, customPlan, id, string(doc), now); err != nil {
		return nil, nil, fmt.Errorf("error resetting the tasks of workflow %s: %w", id, err)
	}
	if err := c.recount(ctx, tx, id, StatusRunning, now); err != nil {
		return nil, nil, err
	}
	if len(undecided) > 0 {
		// Conditions whose tasks all kept their results: decide now.
		a := newAdvance(tx, &c.sql, c.schema, now)
		if err := a.decideUndecided(ctx, id, undecided); err != nil {
			return nil, nil, err
		}
		q, err := a.flush(ctx)
		if err != nil {
			return nil, nil, err
		}
		queues = append(queues, q...)
	}
	slices.Sort(queues)
	return res, slices.Compact(queues), nil
}

const retryTasksSQL = `
UPDATE /*schema*/tributary_workflow_task t
SET job_id = r.job_id, state = r.state, pending_deps = r.pending_deps, failed_deps = 0, run = t.run + 1,
    output = NULL, ready_at = r.ready_at, started_at = NULL, finished_at = NULL, updated_at = $3
FROM jsonb_to_recordset($2::jsonb) AS r(name text, job_id bigint, state text, pending_deps integer, ready_at timestamptz)
WHERE t.workflow_id = $1::uuid AND t.name = r.name`
