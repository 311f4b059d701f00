package riverjob

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// promoteSQL releases pending jobs: a pending job's scheduled_at is its
// insert time (or the caller's ScheduledAt), so a job whose time has come
// becomes available at once, with scheduled_at = now so it queues behind
// what was already waiting; one scheduled for later becomes scheduled and
// River's scheduler makes it available then. The time is the database's:
// River's fetch compares scheduled_at with the database's now(), so a
// scheduled_at from a client clock a little ahead of it would hide the job
// until the database caught up.
//
// It reaches the jobs through their primary key alone (byIDs).
const promoteSQL = `
UPDATE /*schema*/river_job
SET ` + promoteStateSet + `
WHERE id = ANY($1::bigint[]) AND (state = 'pending') IS TRUE
RETURNING queue`

// promoteStateSet is promoteSQL's SET list.
const promoteStateSet = `state = CASE WHEN scheduled_at > now() THEN 'scheduled'::/*schema*/river_job_state ELSE 'available'::/*schema*/river_job_state END,
    scheduled_at = greatest(scheduled_at, now())`

// PromoteUpdate is promoteSQL as the body of a data-modifying CTE of a
// caller's statement (the workflow's completion): it releases the pending
// jobs whose ids the expression ids (a bigint[]) gives, and returns their
// id and queue. An array rather than a join keeps the jobs reached through
// the primary key: joined to a CTE without estimates, the planner may scan
// the table.
func PromoteUpdate(ids string) string {
	return `UPDATE /*schema*/river_job j
    SET ` + promoteStateSet + `
    WHERE j.id = ANY(` + ids + `) AND (j.state = 'pending') IS TRUE
    RETURNING j.id, j.queue`
}

// byIDs: the statements that change jobs given by id (promote, complete,
// finalize) write their state condition as (state = 'x') IS TRUE, which
// no index can serve, so the jobs are reached through the primary key
// alone. Written plainly, the condition let the planner go through River's
// state-first fetching index, and on a table without statistics (a new
// schema, or one autovacuum has not analysed since it grew) the planner
// puts every state at a few rows: to release 67 jobs it bitmap-read all
// 16,000 pending ones, and to complete 200 it hashed all 1,399 running
// ones (measured in bench workflows' 4,000 diamonds).`

// Promote makes the given pending jobs available (or scheduled, when their
// scheduled_at is still ahead) and returns the distinct queues of the jobs
// it promoted. Jobs that are not pending are left alone.
func Promote(ctx context.Context, db DBTX, schema string, ids []int64) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, q(schema, promoteSQL), customPlan, ids)
	if err != nil {
		return nil, fmt.Errorf("error promoting %d pending jobs: %w", len(ids), err)
	}
	queues, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("error promoting %d pending jobs: %w", len(ids), err)
	}
	slices.Sort(queues)
	return slices.Compact(queues), nil
}

// cancelUnstartedSQL is River's JobCancel for a job that is not running
// (state cancelled, finalized_at, metadata.cancel_attempted_at), for many
// jobs in one statement. Running jobs are not touched: River's JobCancelTx
// asks their producer to cancel them.
const cancelUnstartedSQL = `
UPDATE /*schema*/river_job
SET state = 'cancelled', finalized_at = $2,
    metadata = jsonb_set(metadata, '{cancel_attempted_at}'::text[], $3::jsonb, true)
WHERE id = ANY($1::bigint[]) AND state IN ('pending', 'available', 'scheduled', 'retryable')
RETURNING id`

// CancelUnstarted cancels the given jobs that have not started (pending,
// available, scheduled, retryable) and returns the ids it cancelled. A
// running or finalized job is not among them.
func CancelUnstarted(ctx context.Context, db DBTX, schema string, ids []int64, now time.Time) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	at, err := json.Marshal(now)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, q(schema, cancelUnstartedSQL), customPlan, ids, now, string(at))
	if err != nil {
		return nil, fmt.Errorf("error cancelling %d jobs: %w", len(ids), err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("error cancelling %d jobs: %w", len(ids), err)
	}
	return out, nil
}

// Final is the end of one running attempt that failed for good: the job
// becomes discarded (attempts used up) or cancelled (the worker returned
// river.JobCancel, or the job was cancelled remotely), with the attempt's
// error appended as River's executor appends it.
type Final struct {
	ID      int64
	Attempt int
	State   rivertype.JobState // JobStateDiscarded or JobStateCancelled
	Error   rivertype.AttemptError
}

// finalizeRunningSQL is what River's completer writes for
// JobSetStateDiscarded / JobSetStateCancelled (state, finalized_at, the
// attempt error appended to errors), guarded by state = 'running' and the
// attempt, so an attempt that was rescued and handed on meanwhile changes
// nothing. River's completer, called after the worker returns, then finds
// the job no longer running and leaves it (it only merges metadata updates).
// It reaches the jobs through their primary key alone (byIDs).
const finalizeRunningSQL = `
UPDATE /*schema*/river_job j
SET state = u.state::/*schema*/river_job_state, finalized_at = $5, errors = array_append(j.errors, u.err)
FROM unnest($1::bigint[], $2::int[], $3::text[], $4::jsonb[]) AS u(id, attempt, state, err)
WHERE j.id = u.id AND j.id = ANY($1::bigint[]) AND (j.state = 'running') IS TRUE AND j.attempt = u.attempt
RETURNING j.id`

// FinalizeRunning ends the given running attempts and returns the ids of
// the jobs it changed; a job that is no longer running at that attempt is
// left out.
func FinalizeRunning(ctx context.Context, db DBTX, schema string, finals []Final, now time.Time) ([]int64, error) {
	if len(finals) == 0 {
		return nil, nil
	}
	ids, attempts, states, errs := make([]int64, len(finals)), make([]int32, len(finals)), make([]string, len(finals)), make([]string, len(finals))
	for i, f := range finals {
		if f.State != rivertype.JobStateDiscarded && f.State != rivertype.JobStateCancelled {
			return nil, fmt.Errorf("invalid final state %q for job %d: want discarded or cancelled", f.State, f.ID)
		}
		b, err := json.Marshal(f.Error)
		if err != nil {
			return nil, err
		}
		ids[i], attempts[i], states[i], errs[i] = f.ID, int32(f.Attempt), string(f.State), string(b)
	}
	rows, err := db.Query(ctx, q(schema, finalizeRunningSQL), customPlan, ids, attempts, states, errs, now)
	if err != nil {
		return nil, fmt.Errorf("error finalizing %d jobs: %w", len(finals), err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("error finalizing %d jobs: %w", len(finals), err)
	}
	return out, nil
}

// rawArgs carries a job's kind and encoded args through River's typed APIs
// when the Go type is not at hand (a job row from a middleware, args read
// back from a table).
type rawArgs struct {
	kind string
	args json.RawMessage
}

func (a rawArgs) Kind() string                  { return a.kind }
func (a rawArgs) MarshalJSON() ([]byte, error)  { return a.args, nil }
func (a *rawArgs) UnmarshalJSON(b []byte) error { a.args = append(a.args[:0], b...); return nil }

// RawArgs returns job args of the given kind whose JSON is args as given, for
// River's insert APIs.
func RawArgs(kind string, args json.RawMessage) river.JobArgs {
	return rawArgs{kind: kind, args: args}
}

// Settled is an active workflow task whose job is no longer where an active
// task's job should be: finalized without the workflow having seen it, back
// in pending, or gone.
type Settled struct {
	WorkflowID      string
	Task            string
	JobID           int64
	JobState        rivertype.JobState // "" when the job no longer exists
	Attempt         int
	AttemptedAt     *time.Time
	Errors          []rivertype.AttemptError
	CancelAttempted bool // the job's metadata has cancel_attempted_at (a JobCancel)
}

// ScanCursor is where a scan of active tasks stopped.
type ScanCursor struct {
	UpdatedAt  time.Time
	WorkflowID string
	Task       string
}

// scanActiveTasksSQL reads a page of active workflow tasks, in (updated_at,
// workflow, name) order after the cursor, with their jobs' states. It lives
// here because it reads river_job; the task table is jobs/workflow's
// (migration 0010). The page is taken first (MATERIALIZED) from the partial
// index of active tasks, so a pass costs one index range and one
// primary-key probe of river_job per task of the page, however many tasks
// are active; filtering on the job's state inside the scan made a pass read
// every active task to find a few settled ones (1.4 s for 80,000 active
// tasks). Without statistics (autovacuum off) Postgres estimates a few
// hundred active tasks and reads all of them in a bitmap scan to sort them
// (450 ms for 80,000); the scan runs with bitmap scans off, which leaves it
// the ordered index scan that stops after the page (9 ms).
const scanActiveTasksSQL = `
WITH page AS MATERIALIZED (
    SELECT workflow_id, name, job_id, updated_at FROM /*schema*/tributary_workflow_task
    WHERE state = 'active' AND updated_at < $1 AND (updated_at, workflow_id, name) > ($2, $3::uuid, $4)
    ORDER BY updated_at, workflow_id, name
    LIMIT $5
)
SELECT p.workflow_id::text, p.name, p.job_id, p.updated_at, coalesce(j.state::text, ''), coalesce(j.attempt, 0), j.attempted_at,
       coalesce(j.errors, '{}'), coalesce(j.metadata ? 'cancel_attempted_at', false)
FROM page p
LEFT JOIN /*schema*/river_job j ON j.id = p.job_id
ORDER BY p.updated_at, p.workflow_id, p.name`

// ScanActiveTasks reads up to limit active workflow tasks unchanged since
// before quietBefore, after the cursor (nil: from the start), and returns
// those whose job is finalized, pending or missing, and the cursor to
// continue from (nil once the scan reached the end).
func ScanActiveTasks(ctx context.Context, db DBTX, schema string, quietBefore time.Time, after *ScanCursor, limit int) ([]Settled, *ScanCursor, error) {
	c := ScanCursor{WorkflowID: "00000000-0000-0000-0000-000000000000"}
	if after != nil {
		c = *after
	}
	var out []Settled
	n := 0
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL enable_bitmapscan = off"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, q(schema, scanActiveTasksSQL), customPlan, quietBefore, c.UpdatedAt, c.WorkflowID, c.Task, limit)
		if err != nil {
			return err
		}
		out, n, err = scanSettled(rows, &c)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("error scanning active workflow tasks: %w", err)
	}
	if n < limit {
		return out, nil, nil
	}
	return out, &c, nil
}

func scanSettled(rows pgx.Rows, c *ScanCursor) ([]Settled, int, error) {
	defer rows.Close()
	var out []Settled
	n := 0
	for rows.Next() {
		var s Settled
		var state string
		var errs []string
		if err := rows.Scan(&s.WorkflowID, &s.Task, &s.JobID, &c.UpdatedAt, &state, &s.Attempt, &s.AttemptedAt, &errs, &s.CancelAttempted); err != nil {
			return nil, 0, err
		}
		n++
		c.WorkflowID, c.Task = s.WorkflowID, s.Task
		s.JobState = rivertype.JobState(state)
		switch s.JobState {
		case rivertype.JobStateCompleted, rivertype.JobStateDiscarded, rivertype.JobStateCancelled, rivertype.JobStatePending, "":
		default:
			continue
		}
		for _, b := range errs {
			var ae rivertype.AttemptError
			if err := json.Unmarshal([]byte(b), &ae); err != nil {
				return nil, 0, fmt.Errorf("error decoding an error of job %d: %w", s.JobID, err)
			}
			s.Errors = append(s.Errors, ae)
		}
		out = append(out, s)
	}
	return out, n, rows.Err()
}
