package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// ErrSignalTimeout is the kind of *SignalTimeoutError.
var ErrSignalTimeout = errors.New("signal wait timed out")

// ErrInvalidSignal is a signal SignalTx refuses before writing anything: a
// bad name or idempotency key, a payload that does not encode.
var ErrInvalidSignal = errors.New("invalid signal")

// SignalTimeoutError is an AwaitSignal whose timeout passed before a
// signal of its name arrived. It is recorded like a step: a later attempt
// of the run gets it again.
type SignalTimeoutError struct {
	WorkflowID string
	Task       string
	Signal     string
	Timeout    time.Duration
}

func (e *SignalTimeoutError) Error() string {
	return fmt.Sprintf("task %q of workflow %s waited %s for signal %q, which did not come", e.Task, e.WorkflowID, e.Timeout, e.Signal)
}

// Unwrap returns ErrSignalTimeout.
func (e *SignalTimeoutError) Unwrap() error { return ErrSignalTimeout }

// SignalOpts are a signal's options.
type SignalOpts struct {
	// IdempotencyKey makes the send safe to repeat: a second signal with
	// the same key to the same workflow is ignored (SignalResult.Duplicate).
	// At most NameMaxLen characters.
	//
	// Defaults to none: every send is a new signal.
	IdempotencyKey string
}

// SignalResult is what SignalTx did.
type SignalResult struct {
	WorkflowID string `json:"workflow_id"`
	// SignalID is the stored signal's id; 0 for a duplicate.
	SignalID int64 `json:"signal_id,omitempty"`
	// Duplicate is true when a signal with the idempotency key was stored
	// before; nothing was written.
	Duplicate bool `json:"duplicate,omitempty"`
	// Woken counts the waiting tasks' jobs the signal made available.
	Woken int `json:"woken"`
}

// Signal is SignalTx in a transaction of its own.
func (c *Client) Signal(ctx context.Context, ref, name string, payload any, opts *SignalOpts) (*SignalResult, error) {
	var res *SignalResult
	var queues []string
	err := pgx.BeginFunc(ctx, c.qc.Pool(), func(tx pgx.Tx) error {
		var err error
		res, queues, err = c.signal(ctx, tx, ref, name, payload, opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	c.wake(ctx, queues)
	return res, nil
}

// SignalTx sends the signal name with payload (encoded as JSON, at most
// SignalPayloadMaxBytes) to the workflow ref (its id or caller key) in the
// caller's transaction: it stores the signal and, in the same transaction,
// makes the job of a task waiting for it (AwaitSignal) available, so the
// task resumes once tx commits, and not at all if it rolls back. A signal
// sent before a task waits is kept until an AwaitSignal of its name
// consumes it (one signal per wait, oldest first). An unknown workflow is a
// *NotFoundError, a finished one ErrFinished; nothing is written then, and
// tx stays usable (the send runs in a savepoint). River's producers hear of
// the woken job through a notification sent in tx, as River's own insert
// does; Signal sends it after its commit instead.
func (c *Client) SignalTx(ctx context.Context, tx pgx.Tx, ref, name string, payload any, opts *SignalOpts) (*SignalResult, error) {
	var res *SignalResult
	var queues []string
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		var err error
		res, queues, err = c.signal(ctx, sp, ref, name, payload, opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := riverjob.Wake(ctx, tx, c.schema, queues); err != nil {
		return nil, err
	}
	return res, nil
}

func (c *Client) signal(ctx context.Context, tx pgx.Tx, ref, name string, payload any, opts *SignalOpts) (*SignalResult, []string, error) {
	if err := checkName("signal name", name); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalidSignal, err)
	}
	var key string
	if opts != nil {
		key = opts.IdempotencyKey
	}
	if key != "" {
		if err := checkName("idempotency key", key); err != nil {
			return nil, nil, fmt.Errorf("%w: %v", ErrInvalidSignal, err)
		}
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: error encoding the payload of signal %q: %v", ErrInvalidSignal, name, err)
	}
	if len(b) > SignalPayloadMaxBytes {
		return nil, nil, &LimitError{What: "signal payload", Name: name, Value: len(b), Max: SignalPayloadMaxBytes}
	}
	// The id or key and the status in one statement: this is on the
	// signal -> resume path.
	var idArg *string
	if _, err := uuid.Parse(ref); err == nil {
		idArg = &ref
	}
	var id string
	var st Status
	err = tx.QueryRow(ctx, c.sql.workflowStatus, customPlan, idArg, ref).Scan(&id, &st)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, &NotFoundError{Ref: ref}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("error looking up workflow %q: %w", ref, err)
	}
	if st != StatusRunning {
		return nil, nil, fmt.Errorf("cannot signal workflow %s: it is %s: %w", id, st, ErrFinished)
	}
	return sendSignal(ctx, tx, &c.sql, c.schema, id, name, b, key, time.Now().UTC())
}

// sendSignal stores a signal and wakes the tasks waiting for it, under the
// signal's lock (lockSignal).
func sendSignal(ctx context.Context, tx pgx.Tx, sql *statements, schema, wf, name string, payload []byte, key string, now time.Time) (*SignalResult, []string, error) {
	if err := lockSignal(ctx, tx, sql, wf, name); err != nil {
		return nil, nil, err
	}
	var keyArg *string
	if key != "" {
		keyArg = &key
	}
	res := &SignalResult{WorkflowID: wf}
	err := tx.QueryRow(ctx, sql.insertSignal, customPlan, wf, name, string(payload), keyArg, now).Scan(&res.SignalID)
	if errors.Is(err, pgx.ErrNoRows) {
		res.Duplicate = true
		return res, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("error storing signal %q of workflow %s: %w", name, wf, err)
	}
	rows, err := tx.Query(ctx, sql.waitingJobs, customPlan, wf, signalStepPrefix+name)
	if err != nil {
		return nil, nil, fmt.Errorf("error finding the tasks waiting for signal %q: %w", name, err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, nil, fmt.Errorf("error finding the tasks waiting for signal %q: %w", name, err)
	}
	// A waiting job whose snooze River has not written yet is still
	// running and is not woken here; River reports the snooze to the
	// coordinator of its process, which wakes it then (onSnoozed).
	woken, queues, err := riverjob.WakeSnoozed(ctx, tx, schema, jobs)
	if err != nil {
		return nil, nil, err
	}
	res.Woken = len(woken)
	return res, queues, nil
}

// lockSignal takes the transaction's lock on one signal name of one
// workflow. A send and a wait of the same signal hold it in turn, so a wait
// that found no signal has recorded that it waits before a send looks for
// waiting tasks, and a send that found a task still running (its snooze not
// written) has committed its signal before the coordinator, told of the
// snooze, looks for one.
func lockSignal(ctx context.Context, tx pgx.Tx, sql *statements, wf, name string) error {
	if _, err := tx.Exec(ctx, sql.lockSignal, customPlan, "tributary.workflow.signal:"+wf+"/"+name); err != nil {
		return fmt.Errorf("error locking signal %q of workflow %s: %w", name, wf, err)
	}
	return nil
}

// AwaitSignal returns the payload of the signal name sent to the running
// task's workflow, decoded into a T. A signal sent earlier (and not yet
// consumed by another wait) is returned at once; otherwise AwaitSignal
// records that the task waits and returns a *WaitError, which Work returns:
// River snoozes the job (no worker slot is held), SignalTx wakes it, and
// the next attempt's AwaitSignal returns the signal. With a timeout above
// zero, the wait ends after it (counted from the first call, across
// attempts) with a *SignalTimeoutError (errors.Is ErrSignalTimeout); zero
// waits without end. What the wait returned is recorded under the step
// name "signal:" + name, so a later attempt of the run gets the same
// signal, and a task waits for a name at most once per run.
//
//	approval, err := workflow.AwaitSignal[Approval](ctx, "approve", 48*time.Hour)
//	if err != nil {
//		return err // a *WaitError while waiting
//	}
func AwaitSignal[T any](ctx context.Context, name string, timeout time.Duration) (T, error) {
	var v T
	raw, err := awaitSignal(ctx, name, timeout)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("error decoding signal %q into %T: %w", name, v, err)
	}
	return v, nil
}

func awaitSignal(ctx context.Context, name string, timeout time.Duration) (json.RawMessage, error) {
	tc, err := taskFrom(ctx)
	if err != nil {
		return nil, fmt.Errorf("workflow.AwaitSignal: %w", err)
	}
	if err := checkName("signal name", name); err != nil {
		return nil, err
	}
	if timeout < 0 {
		return nil, fmt.Errorf("workflow.AwaitSignal %q: invalid timeout %s: want 0 (none) or more", name, timeout)
	}
	step := signalStepPrefix + name
	tc.mu.Lock()
	rec, err := tc.useStep(ctx, step)
	tc.mu.Unlock()
	if err != nil {
		return nil, err
	}
	timedOut := func() error {
		return &SignalTimeoutError{WorkflowID: tc.ref.WorkflowID, Task: tc.ref.Task, Signal: name, Timeout: timeout}
	}
	if rec != nil && rec.done {
		if rec.timedOut {
			return nil, timedOut()
		}
		return rec.output, nil
	}
	sql := &tc.c.sql
	var got json.RawMessage
	var until time.Time
	var expired bool
	err = pgx.BeginFunc(ctx, tc.c.pool, func(tx pgx.Tx) error {
		now := time.Now().UTC()
		if err := lockSignal(ctx, tx, sql, tc.ref.WorkflowID, name); err != nil {
			return err
		}
		var sigID int64
		err := tx.QueryRow(ctx, sql.consumeSignal, customPlan, tc.ref.WorkflowID, name, tc.ref.JobID, tc.ref.Task, now).Scan(&sigID, &got)
		if err == nil {
			// The consumption is a step's record: committed without
			// waiting for the WAL flush, as Step's (a crash of Postgres
			// that lost it leaves the signal unconsumed and the wait not
			// done, so the wait takes the same signal again).
			if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, sql.recordSignal, customPlan, tc.ref.JobID, step, tc.ref.WorkflowID, tc.ref.Task, string(got), now)
			if err != nil {
				return fmt.Errorf("error recording signal %q for task %q: %w", name, tc.ref.Task, err)
			}
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("error reading signal %q of workflow %s: %w", name, tc.ref.WorkflowID, err)
		}
		var deadline *time.Time
		if rec == nil {
			if timeout > 0 {
				d := now.Add(timeout)
				deadline = &d
			}
			var inserted bool
			err := tx.QueryRow(ctx, sql.insertStep, customPlan, tc.ref.JobID, step, tc.ref.WorkflowID, tc.ref.Task,
				"signal", nil, deadline, false, now).Scan(&inserted)
			if errors.Is(err, pgx.ErrNoRows) {
				// A concurrent attempt of the job recorded the wait first;
				// its deadline counts.
				if err := tx.QueryRow(ctx, sql.selectStepRecord, customPlan, tc.ref.JobID, step).Scan(new(string), new(json.RawMessage), &deadline, new(bool), new(bool)); err != nil {
					return err
				}
			} else if err != nil {
				return fmt.Errorf("error recording that task %q waits for signal %q: %w", tc.ref.Task, name, err)
			}
		} else {
			deadline = rec.wakeAt
		}
		if deadline != nil && !now.Before(*deadline) {
			expired = true
			if _, err := tx.Exec(ctx, sql.finishStep, customPlan, tc.ref.JobID, step, nil, true, now); err != nil {
				return fmt.Errorf("error recording the timeout of signal %q: %w", name, err)
			}
			return nil
		}
		until = now.Add(WaitRecheck)
		if deadline != nil {
			until = *deadline
		}
		return nil
	})
	if err != nil {
		return nil, ownRecord(err) // no code of the task's ran in it
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	switch {
	case got != nil:
		tc.remember(step, &stepRecord{kind: "signal", output: got, done: true})
		return got, nil
	case expired:
		tc.remember(step, &stepRecord{kind: "signal", done: true, timedOut: true})
		return nil, timedOut()
	default:
		if rec == nil {
			tc.remember(step, &stepRecord{kind: "signal", wakeAt: &until})
		}
		return nil, waitUntil(tc, step, until)
	}
}

// onSnoozed runs when River reports that it wrote the snooze of one of
// this process's jobs: for a task waiting for a signal that was sent while
// the job was still running (SignalTx could not wake it then), it wakes
// the job now; for a snooze that ends soon, it arms a timer.
func (c *Coordinator) onSnoozed(ctx context.Context, job *rivertype.JobRow) {
	if _, ok := taskMetaOf(job); !ok {
		return
	}
	woken, err := c.wakeIfSignalled(ctx, []int64{job.ID})
	if err != nil {
		if ctx.Err() == nil {
			c.logger.WarnContext(ctx, "error checking a snoozed task for signals; the repair sweep will", "job_id", job.ID, "error", err)
		}
		return
	}
	if woken == 0 {
		c.timers.arm(job.ID, job.ScheduledAt)
	}
}

// wakeIfSignalled wakes those of the given snoozed jobs that wait for a
// signal that has been sent, and returns how many it woke.
func (c *Coordinator) wakeIfSignalled(ctx context.Context, jobs []int64) (int, error) {
	rows, err := c.pool.Query(ctx, c.sql.jobWaits, customPlan, jobs)
	if err != nil {
		return 0, fmt.Errorf("error reading the waits of %d jobs: %w", len(jobs), err)
	}
	type wait struct {
		job      int64
		wf, name string
	}
	var waits []wait
	var w wait
	if _, err := pgx.ForEachRow(rows, []any{&w.job, &w.wf, &w.name}, func() error { waits = append(waits, w); return nil }); err != nil {
		return 0, fmt.Errorf("error reading the waits of %d jobs: %w", len(jobs), err)
	}
	total := 0
	for _, w := range waits {
		var queues []string
		err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
			if err := lockSignal(ctx, tx, &c.sql, w.wf, w.name); err != nil {
				return err
			}
			var sent bool
			if err := tx.QueryRow(ctx, c.sql.signalSent, customPlan, w.wf, w.name).Scan(&sent); err != nil {
				return err
			}
			if !sent {
				return nil
			}
			woken, q, err := riverjob.WakeSnoozed(ctx, tx, c.cfg.Schema, []int64{w.job})
			total += len(woken)
			queues = q
			return err
		})
		if err != nil {
			return total, err
		}
		if err := riverjob.Wake(ctx, c.pool, c.cfg.Schema, queues); err != nil {
			c.logger.WarnContext(ctx, "error waking River for a signalled task", "error", err)
		}
	}
	return total, nil
}

// watchSnoozes handles River's snooze events of the runtime's client until
// ctx ends.
func (c *Coordinator) watchSnoozes(ctx context.Context, events <-chan *river.Event) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if ev.Job != nil {
				c.onSnoozed(ctx, ev.Job)
			}
		}
	}
}

// repairWaits wakes snoozed tasks waiting for a signal that was sent (the
// process that ran them died before River's snooze event reached its
// coordinator). It returns how many it woke.
func (c *Coordinator) repairWaits(ctx context.Context, quietBefore time.Time) (int, error) {
	rows, err := c.pool.Query(ctx, c.sql.signalledWaits, customPlan, quietBefore, repairBatch)
	if err != nil {
		return 0, fmt.Errorf("error looking for signalled waits: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(jobs) == 0 {
		return 0, err
	}
	n, err := c.wakeIfSignalled(ctx, jobs)
	if n > 0 {
		c.logger.WarnContext(ctx, "woke workflow tasks waiting for a signal that had come", "jobs", n)
	}
	return n, err
}

// workflowStatusSQL finds a workflow by id ($1, when the ref is a UUID)
// or key, the id first.
const workflowStatusSQL = `
(SELECT id::text, status FROM /*schema*/tributary_workflow WHERE id = $1::uuid)
UNION ALL
(SELECT id::text, status FROM /*schema*/tributary_workflow WHERE key = $2)
LIMIT 1`

const lockSignalSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`

const insertSignalSQL = `
INSERT INTO /*schema*/tributary_workflow_signal (workflow_id, name, payload, idempotency_key, created_at)
VALUES ($1::uuid, $2, $3::jsonb, $4, $5)
ON CONFLICT (workflow_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING id`

const waitingJobsSQL = `
SELECT job_id FROM /*schema*/tributary_workflow_step
WHERE workflow_id = $1::uuid AND name = $2 AND kind = 'signal' AND NOT done`

// consumeSignalSQL takes the oldest unconsumed signal of a name for a job.
const consumeSignalSQL = `
UPDATE /*schema*/tributary_workflow_signal
SET consumed_job_id = $3, consumed_task = $4, consumed_at = $5
WHERE id = (
    SELECT id FROM /*schema*/tributary_workflow_signal
    WHERE workflow_id = $1::uuid AND name = $2 AND consumed_at IS NULL
    ORDER BY id LIMIT 1
)
RETURNING id, payload`

const recordSignalSQL = `
INSERT INTO /*schema*/tributary_workflow_step (job_id, name, workflow_id, task, kind, output, done, created_at, done_at)
VALUES ($1, $2, $3::uuid, $4, 'signal', $5::jsonb, true, $6, $6)
ON CONFLICT (job_id, name) DO UPDATE SET output = excluded.output, done = true, done_at = excluded.done_at`

const jobWaitsSQL = `
SELECT job_id, workflow_id::text, substr(name, length('` + signalStepPrefix + `') + 1)
FROM /*schema*/tributary_workflow_step
WHERE job_id = ANY($1::bigint[]) AND kind = 'signal' AND NOT done`

const signalSentSQL = `
SELECT EXISTS (SELECT 1 FROM /*schema*/tributary_workflow_signal WHERE workflow_id = $1::uuid AND name = $2 AND consumed_at IS NULL)`

// signalledWaitsSQL finds waits, recorded before quietBefore, for which a
// signal is stored unconsumed.
const signalledWaitsSQL = `
SELECT s.job_id FROM /*schema*/tributary_workflow_step s
WHERE s.kind = 'signal' AND NOT s.done AND s.created_at < $1
  AND EXISTS (SELECT 1 FROM /*schema*/tributary_workflow_signal g
              WHERE g.workflow_id = s.workflow_id AND g.name = substr(s.name, length('` + signalStepPrefix + `') + 1) AND g.consumed_at IS NULL)
LIMIT $2`
