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

// promoteSQL releases pending jobs: each becomes available at once, with
// scheduled_at = now() so it queues behind what was already waiting, unless
// it was inserted to run later (a ScheduledAt past its insert) and that
// time is still ahead; then it becomes scheduled and River's scheduler
// makes it available then. The time is the database's: River's fetch
// compares scheduled_at with the database's now().
//
// A job inserted without a ScheduledAt carries River's insert time in
// scheduled_at, from the inserting process's clock, and River writes its
// created_at from the same reading (riverpgxv5's insert, and a test's
// stubbed time alike), so scheduled_at = created_at. That time may be
// later than now(), the start of the transaction that releases the job:
// always for a job inserted in that transaction (a task Expand staged for
// its completion), and for any job when the process's clock runs ahead of
// the database's. Compared with now() alone it made such a job scheduled,
// left to River's leader-only scheduler for up to its interval.
//
// It reaches the jobs through their primary key alone (byIDs).
const promoteSQL = `
UPDATE /*schema*/river_job
SET ` + promoteStateSet + `
WHERE id = ANY($1::bigint[]) AND (state = 'pending') IS TRUE
RETURNING queue`

// promoteStateSet is promoteSQL's SET list; promoteDeferred says whether
// a job waits for its ScheduledAt.
const (
	promoteStateSet = `state = CASE WHEN ` + promoteDeferred + ` THEN 'scheduled'::/*schema*/river_job_state ELSE 'available'::/*schema*/river_job_state END,
    scheduled_at = CASE WHEN ` + promoteDeferred + ` THEN scheduled_at ELSE now() END`
	promoteDeferred = `scheduled_at > now() AND scheduled_at > created_at`
)

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

// TaskKey is a workflow task's primary key: its workflow and its name.
type TaskKey struct {
	WorkflowID string
	Task       string
}

// TaskPage is what one page of ScanWorkflowTasks found.
type TaskPage struct {
	Settled   []Settled // active tasks whose job is finalized, gone, or pending and not waiting for a limit
	Undecided []TaskKey // pending tasks with no dependency left to wait for
	Read      int       // the task rows the page read, at most its limit
	Last      TaskKey   // the last task read, when Read > 0
}

// scanWorkflowTasksSQL reads a page of the tasks of some workflows ($1,
// ascending) in primary-key order, from after task $3 of the first ($2),
// and returns the quiet ones (unchanged since $5) that are active, with
// their jobs' states, or pending with nothing to wait for, and the page's
// last task and length so that the caller can continue after it. It lives
// here because it reads river_job; the task table is jobs/workflow's
// (migration 0010). The page is taken first (MATERIALIZED) from the
// primary key: an array on its first column keeps the index's order, so
// the scan stops after $4 rows, and a pass costs at most $4 task rows and
// a primary-key probe of river_job per quiet active task among them (the
// job's id is NULL for the others, which the probe answers without
// reading: written as a join filter, every row of the page was probed).
// Without an index on state or updated_at (migration 0018: none may cover
// a column a task's updates change, or they are not HOT) the filters run
// on the page's rows. Run it with bitmap and sequential scans off: the
// planner otherwise reads the table whole once the page is a few per cent
// of it (docs/ARCHITECTURE.md, workflows, "Repair sweep").
const scanWorkflowTasksSQL = `
WITH page AS MATERIALIZED (
    SELECT workflow_id, name, state, pending_deps, job_id, updated_at FROM /*schema*/tributary_workflow_task
    WHERE workflow_id = ANY($1::uuid[]) AND (workflow_id, name) > ($2::uuid, $3)
    ORDER BY workflow_id, name
    LIMIT $4
)
SELECT p.workflow_id::text, p.name, p.state, p.pending_deps, p.updated_at < $5, p.job_id,
       coalesce(j.state::text, ''), coalesce(j.attempt, 0), j.attempted_at, coalesce(j.errors, '{}'),
       coalesce(j.metadata ? 'cancel_attempted_at', false), coalesce(j.metadata ? '` + LimitMetaName + `', false), (SELECT count(*) FROM page)
FROM page p
LEFT JOIN /*schema*/river_job j ON j.id = CASE WHEN p.state = 'active' AND p.updated_at < $5 THEN p.job_id END
WHERE (p.updated_at < $5 AND (p.state = 'active' OR (p.state = 'pending' AND p.pending_deps = 0)))
   OR (p.workflow_id, p.name) = (SELECT workflow_id, name FROM page ORDER BY workflow_id DESC, name DESC LIMIT 1)
ORDER BY p.workflow_id, p.name`

// ScanWorkflowTasks reads up to limit tasks of the given workflows (ids in
// ascending order) in primary-key order, starting after task after of the
// first workflow ("": from its first task). Of the tasks unchanged since
// before quietBefore it returns the active ones whose job is finalized,
// missing, or pending other than for its limit's admission (migration
// 0028), and the pending ones with no dependency left to wait for; and how
// many tasks it read and the last, so that a caller continues after it
// when the page was full.
func ScanWorkflowTasks(ctx context.Context, db DBTX, schema string, quietBefore time.Time, workflowIDs []string, after string, limit int) (TaskPage, error) {
	var page TaskPage
	if len(workflowIDs) == 0 {
		return page, nil
	}
	rows, err := db.Query(ctx, q(schema, scanWorkflowTasksSQL), customPlan, workflowIDs, workflowIDs[0], after, limit, quietBefore)
	if err != nil {
		return page, fmt.Errorf("error scanning workflow tasks: %w", err)
	}
	if err := scanTaskPage(rows, &page); err != nil {
		return TaskPage{}, fmt.Errorf("error scanning workflow tasks: %w", err)
	}
	return page, nil
}

func scanTaskPage(rows pgx.Rows, page *TaskPage) error {
	defer rows.Close()
	for rows.Next() {
		var s Settled
		var state, jobState string
		var pendingDeps int
		var quiet, limited bool
		var errs []string
		if err := rows.Scan(&s.WorkflowID, &s.Task, &state, &pendingDeps, &quiet, &s.JobID, &jobState, &s.Attempt, &s.AttemptedAt,
			&errs, &s.CancelAttempted, &limited, &page.Read); err != nil {
			return err
		}
		// The page's last task comes last, whether it qualifies or not.
		page.Last = TaskKey{WorkflowID: s.WorkflowID, Task: s.Task}
		switch {
		case !quiet:
			continue
		case state == "pending" && pendingDeps == 0:
			page.Undecided = append(page.Undecided, page.Last)
			continue
		case state != "active":
			continue
		}
		s.JobState = rivertype.JobState(jobState)
		switch s.JobState {
		case rivertype.JobStatePending:
			if limited {
				// Released, and waiting for its limit's admission.
				continue
			}
		case rivertype.JobStateCompleted, rivertype.JobStateDiscarded, rivertype.JobStateCancelled, "":
		default:
			continue
		}
		for _, b := range errs {
			var ae rivertype.AttemptError
			if err := json.Unmarshal([]byte(b), &ae); err != nil {
				return fmt.Errorf("error decoding an error of job %d: %w", s.JobID, err)
			}
			s.Errors = append(s.Errors, ae)
		}
		page.Settled = append(page.Settled, s)
	}
	return rows.Err()
}
