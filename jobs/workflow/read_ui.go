package workflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// Read helpers for operator surfaces (the dashboard's pages and metrics):
// counts whose cost is bounded whatever the number of stored workflows.

// countStatusSQL counts the workflows of one status, stopping at the cap:
// an ordered scan of tributary_workflow_status_idx (migration 0011), or of
// the running index, that reads at most $2 entries. It runs with bitmap
// scans off (orderedScan): without statistics the planner took a bitmap
// scan, which reads every entry of the status before the LIMIT applies
// (199,000 completed workflows of a test table: 935 ms; ordered, 13 ms for
// the cap of 10,000).
const countStatusSQL = `SELECT count(*) FROM (SELECT id FROM /*schema*/tributary_workflow WHERE status = $1 ORDER BY id DESC LIMIT $2) c`

// estimateStatusSQL is what the planner estimates for a status past the cap.
const estimateStatusSQL = `SELECT 1 FROM /*schema*/tributary_workflow WHERE status = $1`

// orderedScan runs fn with bitmap scans off, in a savepoint of db (or a
// transaction on a pool) that is rolled back, so the SET LOCAL ends with
// it and a caller's transaction keeps its settings. fn only reads.
func orderedScan(ctx context.Context, db queue.DBTX, fn func(tx pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL enable_bitmapscan = off"); err != nil {
		return err
	}
	return fn(tx)
}

// StatusCounts counts the stored workflows per status on db (a pool or a
// read transaction): exact up to countCap each, the planner's estimate
// (queue.Count.Approximate) above it.
func (c *Client) StatusCounts(ctx context.Context, db queue.DBTX, countCap int) (map[Status]queue.Count, error) {
	if countCap < 1 {
		return nil, fmt.Errorf("invalid count cap %d: want at least 1", countCap)
	}
	out := make(map[Status]queue.Count, len(Statuses()))
	err := orderedScan(ctx, db, func(tx pgx.Tx) error {
		for _, st := range Statuses() {
			var n int64
			if err := tx.QueryRow(ctx, queue.Qualify(c.schema, countStatusSQL), customPlan, string(st), countCap).Scan(&n); err != nil {
				return fmt.Errorf("error counting %s workflows: %w", st, err)
			}
			cnt := queue.Count{N: n}
			if n >= int64(countCap) {
				est, err := queue.EstimateRows(ctx, tx, queue.Qualify(c.schema, estimateStatusSQL), string(st))
				if err != nil {
					return err
				}
				cnt = queue.Count{N: max(n, est), Approximate: true}
			}
			out[st] = cnt
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("error counting workflows: %w", err)
	}
	return out, nil
}

// runningTaskCountsSQL sums the task counts kept on the rows of at most $1
// running workflows, newest first (an ordered scan of the partial index of
// running workflows): no task row is read.
const runningTaskCountsSQL = `
SELECT count(*), coalesce(sum(tasks_pending), 0), coalesce(sum(tasks_active), 0), coalesce(sum(tasks_completed), 0),
       coalesce(sum(tasks_failed), 0), coalesce(sum(tasks_cancelled), 0), coalesce(sum(tasks_skipped), 0)
FROM (SELECT tasks_pending, tasks_active, tasks_completed, tasks_failed, tasks_cancelled, tasks_skipped
      FROM /*schema*/tributary_workflow WHERE status = 'running' ORDER BY id DESC LIMIT $1) w`

// RunningTaskCounts sums the tasks per state of the running workflows, read
// from the newest countCap running workflows' rows; capped is true when
// there were that many (the sums then leave the older ones out).
func (c *Client) RunningTaskCounts(ctx context.Context, db queue.DBTX, countCap int) (counts Counts, capped bool, err error) {
	if countCap < 1 {
		return counts, false, fmt.Errorf("invalid count cap %d: want at least 1", countCap)
	}
	var n int
	err = orderedScan(ctx, db, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, queue.Qualify(c.schema, runningTaskCountsSQL), customPlan, countCap).Scan(&n,
			&counts.Pending, &counts.Active, &counts.Completed, &counts.Failed, &counts.Cancelled, &counts.Skipped)
	})
	if err != nil {
		return Counts{}, false, fmt.Errorf("error summing the tasks of running workflows: %w", err)
	}
	return counts, n >= countCap, nil
}

// TaskPageMax bounds GetTaskPage's limit.
const TaskPageMax = 1000

// taskPageSQL is selectTasksSQL (which ends in ORDER BY position) cut to
// the page of $2 tasks after the first $3: the planner sorts the
// workflow's task rows found by the primary key (a top-N sort of their
// positions), and only the page's rows are sent and decoded.
const taskPageSQL = selectTasksSQL + ` LIMIT $2 OFFSET $3`

// depStatesSQL reads the states of the named tasks of a workflow by its
// primary key.
const depStatesSQL = `SELECT name, state FROM /*schema*/tributary_workflow_task WHERE workflow_id = $1::uuid AND name = ANY($2::text[])`

// GetTaskPage is Get with one page of the tasks: the limit tasks after the
// first offset in position order (Details.Tasks; Summary.TaskCount says how
// many there are). Reading and decoding follow limit, not the workflow's
// width, so an operator page of a 1,000-task fan-out costs what a page of
// a small one does.
func (c *Client) GetTaskPage(ctx context.Context, ref string, offset, limit int) (*Details, error) {
	if offset < 0 {
		return nil, fmt.Errorf("invalid task offset %d: want 0 or more", offset)
	}
	if limit < 1 || limit > TaskPageMax {
		return nil, fmt.Errorf("invalid task page size %d: want 1 to %d", limit, TaskPageMax)
	}
	return c.readDetails(ctx, ref, func(ctx context.Context, tx queue.DBTX, id string) ([]TaskInfo, error) {
		recs, err := c.queryTaskRecords(ctx, tx, id, queue.Qualify(c.schema, taskPageSQL), id, limit, offset)
		if err != nil {
			return nil, err
		}
		return c.addWaitingOn(ctx, tx, id, recs)
	})
}

// readDetails reads the workflow ref names with the tasks readTasks reads
// (Get: every one; GetTaskPage: a page) and their steps and jobs.
func (c *Client) readDetails(ctx context.Context, ref string, readTasks func(ctx context.Context, tx queue.DBTX, id string) ([]TaskInfo, error)) (*Details, error) {
	id, err := c.resolve(ctx, c.qc.Pool(), ref)
	if err != nil {
		return nil, err
	}
	// One snapshot for the workflow row, its tasks and their jobs: read one
	// after another, a completion committing in between shows a task done
	// beside counts that still say active.
	var d Details
	err = pgx.BeginTxFunc(ctx, c.qc.Pool(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var input, attrs []byte
		var from, fromTask *string
		if err := scanSummary(tx.QueryRow(ctx, c.sql.selectWorkflow, customPlan, id), &d.Summary, &input, &attrs, &from, &fromTask); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return &NotFoundError{Ref: ref}
			}
			return fmt.Errorf("error reading workflow %s: %w", id, err)
		}
		d.Input = input
		if d.Attributes, err = decodeAttributes(attrs); err != nil {
			return err
		}
		if from != nil && fromTask != nil {
			d.Origin = &Origin{WorkflowID: *from, Task: *fromTask}
		}
		tasks, err := readTasks(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := c.addWaits(ctx, tx, tasks); err != nil {
			return err
		}
		if err := c.addJobs(ctx, tx, tasks); err != nil {
			return err
		}
		d.Tasks = tasks
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// addWaitingOn is readTasks's WaitingOn for a page of task rows: the
// states of the pending tasks' dependencies are read by name, on the page
// or not.
func (c *Client) addWaitingOn(ctx context.Context, tx queue.DBTX, id string, recs []taskRecord) ([]TaskInfo, error) {
	var deps []string
	for _, r := range recs {
		if r.State == TaskPending {
			deps = append(deps, r.Deps...)
		}
	}
	state := make(map[string]TaskState, len(deps))
	if len(deps) > 0 {
		rows, err := tx.Query(ctx, queue.Qualify(c.schema, depStatesSQL), customPlan, id, deps)
		if err != nil {
			return nil, fmt.Errorf("error reading the dependencies of workflow %s: %w", id, err)
		}
		var name string
		var st TaskState
		if _, err := pgx.ForEachRow(rows, []any{&name, &st}, func() error { state[name] = st; return nil }); err != nil {
			return nil, fmt.Errorf("error reading the dependencies of workflow %s: %w", id, err)
		}
	}
	return withWaitingOn(recs, state), nil
}

// withWaitingOn returns the tasks of recs, each pending one with the
// dependencies that state (by task name) says have not finished.
func withWaitingOn(recs []taskRecord, state map[string]TaskState) []TaskInfo {
	out := make([]TaskInfo, len(recs))
	for i, r := range recs {
		t := r.TaskInfo
		if t.State == TaskPending {
			for _, d := range t.Deps {
				if !state[d].finished() {
					t.WaitingOn = append(t.WaitingOn, d)
				}
			}
		}
		out[i] = t
	}
	return out
}
