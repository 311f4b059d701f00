// Package riverjob is the one owner of tributary's access to River's tables.
// Every SQL statement of tributary that reads or writes river_job lives here,
// next to a test that runs it against River's migrations at the pinned
// version (River v0.51.2), so a River upgrade that changes its tables breaks
// one package's tests, not production. Where River has a public API for a
// change (JobCompleteTx, JobCancelTx, InsertManyTx, JobList), callers use
// that instead; the statements here are the set-based ones River lacks.
//
// Each statement writes what River itself writes for the same transition
// (see the comments), so River's own services (completer, rescuer, cleaner,
// producers) treat the rows as if River had changed them.
package riverjob

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/queue"
)

// customPlan runs a statement unnamed, so Postgres plans it for its
// parameters and the tables' sizes at that moment. river_job grows from
// empty; a generic plan cached while it was small keeps its shape after it
// grew (see docs/ARCHITECTURE.md, events "Plans").
var customPlan = pgx.QueryExecModeExec

// promoteSQL releases pending jobs: a pending job's scheduled_at is its
// insert time (or the caller's ScheduledAt), so a job whose time has come
// becomes available at once, with scheduled_at = now so it queues behind
// what was already waiting; one scheduled for later becomes scheduled and
// River's scheduler makes it available then. The time is the database's:
// River's fetch compares scheduled_at with the database's now(), so a
// scheduled_at from a client clock a little ahead of it would hide the job
// until the database caught up.
const promoteSQL = `
UPDATE /*schema*/river_job
SET state = CASE WHEN scheduled_at > now() THEN 'scheduled'::/*schema*/river_job_state ELSE 'available'::/*schema*/river_job_state END,
    scheduled_at = greatest(scheduled_at, now())
WHERE id = ANY($1::bigint[]) AND state = 'pending'
RETURNING queue`

// Promote makes the given pending jobs available (or scheduled, when their
// scheduled_at is still ahead) and returns the distinct queues of the jobs
// it promoted. Jobs that are not pending are left alone.
func Promote(ctx context.Context, db queue.DBTX, schema string, ids []int64) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, queue.Qualify(schema, promoteSQL), customPlan, ids)
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
func CancelUnstarted(ctx context.Context, db queue.DBTX, schema string, ids []int64, now time.Time) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	at, err := json.Marshal(now)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, queue.Qualify(schema, cancelUnstartedSQL), customPlan, ids, now, string(at))
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
const finalizeRunningSQL = `
UPDATE /*schema*/river_job j
SET state = u.state::/*schema*/river_job_state, finalized_at = $5, errors = array_append(j.errors, u.err)
FROM unnest($1::bigint[], $2::int[], $3::text[], $4::jsonb[]) AS u(id, attempt, state, err)
WHERE j.id = u.id AND j.state = 'running' AND j.attempt = u.attempt
RETURNING j.id`

// FinalizeRunning ends the given running attempts and returns the ids of
// the jobs it changed; a job that is no longer running at that attempt is
// left out.
func FinalizeRunning(ctx context.Context, db queue.DBTX, schema string, finals []Final, now time.Time) ([]int64, error) {
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
	rows, err := db.Query(ctx, queue.Qualify(schema, finalizeRunningSQL), customPlan, ids, attempts, states, errs, now)
	if err != nil {
		return nil, fmt.Errorf("error finalizing %d jobs: %w", len(finals), err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("error finalizing %d jobs: %w", len(finals), err)
	}
	return out, nil
}

// Attempt is one running attempt of a job.
type Attempt struct {
	ID      int64
	Attempt int
}

// completeRunningSQL is what River's completer writes for
// JobSetStateCompleted (state completed, finalized_at), for many jobs in one
// statement, guarded like finalizeRunningSQL. The attempt's metadata
// updates (river.RecordOutput and the like) are not lost: River's completer,
// called after the worker returns, merges them into the row even when it is
// no longer running.
const completeRunningSQL = `
UPDATE /*schema*/river_job j
SET state = 'completed', finalized_at = $3
FROM unnest($1::bigint[], $2::int[]) AS u(id, attempt)
WHERE j.id = u.id AND j.state = 'running' AND j.attempt = u.attempt
RETURNING j.id`

// CompleteRunning completes the given running attempts in one statement and
// returns the ids of the jobs it completed; a job no longer running at that
// attempt is left out. One JobCompleteTx per job costs a statement each
// (and River's general state-change statement at that): measured 2 ms a
// job on the loaded development VM, which held a batch of 200 completions
// for 400 ms.
func CompleteRunning(ctx context.Context, db queue.DBTX, schema string, attempts []Attempt, now time.Time) ([]int64, error) {
	if len(attempts) == 0 {
		return nil, nil
	}
	ids, nums := make([]int64, len(attempts)), make([]int32, len(attempts))
	for i, a := range attempts {
		ids[i], nums[i] = a.ID, int32(a.Attempt)
	}
	rows, err := db.Query(ctx, queue.Qualify(schema, completeRunningSQL), customPlan, ids, nums, now)
	if err != nil {
		return nil, fmt.Errorf("error completing %d jobs: %w", len(attempts), err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("error completing %d jobs: %w", len(attempts), err)
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

// CompleteTx completes a running job in tx with River's JobCompleteTx, from
// the job row a middleware sees. ctx must be the job's work context (River
// finds its client and the attempt's metadata updates there). It returns the
// row after the call: a job no longer running at this attempt (rescued and
// handed on, or finalized by someone else) comes back unchanged, so callers
// compare its state and attempt with what they expected.
func CompleteTx(ctx context.Context, tx pgx.Tx, job *rivertype.JobRow) (*rivertype.JobRow, error) {
	j := &river.Job[rawArgs]{JobRow: job, Args: rawArgs{kind: job.Kind, args: job.EncodedArgs}}
	done, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, j)
	if err != nil {
		return nil, err
	}
	return done.JobRow, nil
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
func ScanActiveTasks(ctx context.Context, db Beginner, schema string, quietBefore time.Time, after *ScanCursor, limit int) ([]Settled, *ScanCursor, error) {
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
		rows, err := tx.Query(ctx, queue.Qualify(schema, scanActiveTasksSQL), customPlan, quietBefore, c.UpdatedAt, c.WorkflowID, c.Task, limit)
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

// Beginner starts transactions: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx
// (a savepoint).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
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

// Wake tells the producers of the given queues, in every process, that jobs
// became available, on River's insert notification channel (what River's
// own insert sends), so they fetch now rather than at their next poll. Send
// it after the commit that made the jobs available: a NOTIFY inside a
// writing transaction serialises commits (docs/ARCHITECTURE.md, events).
func Wake(ctx context.Context, db queue.DBTX, schema string, queues []string) error {
	if len(queues) == 0 {
		return nil
	}
	payloads := make([]string, len(queues))
	for i, q := range queues {
		b, err := json.Marshal(map[string]string{"queue": q})
		if err != nil {
			return err
		}
		payloads[i] = string(b)
	}
	if _, err := db.Exec(ctx, "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", schema+".river_insert", payloads); err != nil {
		return fmt.Errorf("error waking River's producers: %w", err)
	}
	return nil
}
