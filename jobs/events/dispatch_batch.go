package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/queue"
)

// DispatchBatchKind is the River job kind of a batched dispatch: several
// events without an aggregate for one consumer (ConsumerConfig.DispatchBatch).
const DispatchBatchKind = "tributary.event.dispatch_batch"

// DispatchBatchArgs are a batched dispatch job's arguments: the events, in
// emit order, whole (as in DispatchArgs).
type DispatchBatchArgs struct {
	Consumer string              `json:"consumer"`
	Events   []queue.OutboxEvent `json:"events"`
}

// Kind implements river.JobArgs.
func (DispatchBatchArgs) Kind() string { return DispatchBatchKind }

// batchWorker works batched dispatch jobs for its Dispatcher.
type batchWorker struct {
	river.WorkerDefaults[DispatchBatchArgs]
	d *Dispatcher
}

func (w *batchWorker) Work(ctx context.Context, job *river.Job[DispatchBatchArgs]) error {
	return w.d.workBatch(ctx, job)
}

// NextRetry follows the consumer's retry delays, as for its dispatch jobs
// (a batch job fails as a whole only when its outcome cannot be recorded).
func (w *batchWorker) NextRetry(job *river.Job[DispatchBatchArgs]) time.Time {
	return w.d.nextRetry(job.Args.Consumer, job.Attempt)
}

// batchRemainder is a dispatch job that a batch leaves behind: an event that
// failed (as a single dispatch job that has made its attempt), or the events
// a shutdown kept from running (as a new batch).
type batchRemainder struct {
	state       rivertype.JobState
	attempt     int
	maxAttempts int
	scheduledAt time.Time
	args        river.JobArgs
	err         string // the attempt's error as River records it; "" for none
}

// workBatch delivers the job's events one after another, exactly as a
// dispatch job each would. When every event succeeded, the job completes as
// usual. Otherwise one transaction records what is left:
//   - each failed event becomes a dispatch job of its own that has made its
//     attempt: retryable after the consumer's delay, discarded after the
//     last attempt, or cancelled for a validation failure. From then on it
//     is retried, listed and replayed as if it had never been batched;
//   - once the batch has run for DispatchBatchSplitAfter, the events not yet
//     delivered become dispatch jobs of their own, for any free worker;
//   - a shutdown that interrupts the batch moves the events not yet
//     delivered to a new batch job, so a restart does not deliver the
//     finished ones again.
func (d *Dispatcher) workBatch(ctx context.Context, job *river.Job[DispatchBatchArgs]) error {
	c := d.consumers[job.Args.Consumer]
	if c == nil {
		return d.notRunHere(ctx, job.Args.Consumer, job.JobRow)
	}
	events := job.Args.Events
	maxAttempts := c.maxAttempts()
	start := time.Now()
	split := c.cfg.DispatchBatchSplitAfter
	var rems []batchRemainder
	for i := range events {
		if ctx.Err() != nil {
			rems = append(rems, restOfBatch(job, events[i:]))
			break
		}
		if i > 0 && split > 0 && time.Since(start) >= split {
			// Slow handlers: let free workers take the rest, one each.
			rems = append(rems, splitBatch(c, events[i:])...)
			d.logger.DebugContext(ctx, "split a batched dispatch", "consumer", c.Name(), "job_id", job.ID, "handled", i, "split_off", len(events)-i)
			break
		}
		ev := &events[i]
		r := d.deliver(ctx, c, ev, job.ID, job.Attempt, maxAttempts, 0)
		if r.err == nil {
			continue
		}
		if ctx.Err() != nil && r.validation == nil && !isCancel(r.err) {
			// Interrupted by the shutdown: this event runs again with the
			// rest, as a dispatch job cancelled by a hard stop is snoozed
			// without spending its attempt.
			rems = append(rems, restOfBatch(job, events[i:]))
			break
		}
		now := time.Now().UTC()
		rem := batchRemainder{
			state: rivertype.JobStateRetryable, attempt: job.Attempt, maxAttempts: maxAttempts,
			scheduledAt: now.Add(c.retryDelay(job.Attempt)),
			args:        DispatchArgs{Consumer: c.Name(), Event: *ev},
			err:         attemptError(job.Attempt, r.err),
		}
		switch {
		case r.validation != nil || isCancel(r.err):
			rem.state, rem.scheduledAt = rivertype.JobStateCancelled, now
		case r.terminal:
			rem.state, rem.scheduledAt = rivertype.JobStateDiscarded, now
		}
		rems = append(rems, rem)
	}
	if len(rems) == 0 {
		return nil
	}
	if err := d.finishBatch(ctx, job, rems); err != nil {
		// Nothing of it was written; River retries the whole batch (the
		// events that succeeded run again: at-least-once).
		return fmt.Errorf("error recording the outcome of batched dispatch %d: %w", job.ID, err)
	}
	for _, rem := range rems {
		if rem.state == rivertype.JobStateAvailable {
			d.wakeRiver(ctx, c.cfg.Queue)
			break
		}
	}
	return nil
}

// restOfBatch is the remainder holding the events a shutdown kept from
// running.
func restOfBatch(job *river.Job[DispatchBatchArgs], rest []queue.OutboxEvent) batchRemainder {
	return batchRemainder{
		state: rivertype.JobStateAvailable, maxAttempts: job.MaxAttempts, scheduledAt: time.Now().UTC(),
		args: DispatchBatchArgs{Consumer: job.Args.Consumer, Events: rest},
	}
}

// splitBatch makes each of events a dispatch job of its own, available at
// once and not yet attempted.
func splitBatch(c *Consumer, events []queue.OutboxEvent) []batchRemainder {
	now := time.Now().UTC()
	rems := make([]batchRemainder, len(events))
	for i, ev := range events {
		rems[i] = batchRemainder{
			state: rivertype.JobStateAvailable, maxAttempts: c.maxAttempts(), scheduledAt: now,
			args: DispatchArgs{Consumer: c.Name(), Event: ev},
		}
	}
	return rems
}

// attemptError renders err as River records a failed attempt.
func attemptError(attempt int, err error) string {
	ae := rivertype.AttemptError{At: time.Now().UTC(), Attempt: attempt, Error: err.Error()}
	var pe *PanicError
	if errors.As(err, &pe) {
		ae.Trace = pe.Stack
	}
	b, _ := json.Marshal(ae)
	return string(b)
}

// finishBatch inserts the remainders and completes the batch job in one
// transaction.
func (d *Dispatcher) finishBatch(ctx context.Context, job *river.Job[DispatchBatchArgs], rems []batchRemainder) error {
	n := len(rems)
	states, kinds, args, errs := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempts, maxAttempts := make([]int32, n), make([]int32, n)
	scheduled := make([]time.Time, n)
	for i, rem := range rems {
		b, err := json.Marshal(rem.args)
		if err != nil {
			return fmt.Errorf("error encoding a dispatch job: %w", err)
		}
		states[i], args[i], errs[i] = string(rem.state), string(b), rem.err
		kinds[i] = rem.args.Kind()
		attempts[i], maxAttempts[i], scheduled[i] = int32(rem.attempt), int32(rem.maxAttempts), rem.scheduledAt
	}
	// The job's context without its cancellation: River finds its client
	// there, and a shutdown must not keep the outcome from being recorded.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, d.insertRemaindersSQL, time.Now().UTC(), job.Queue, states, attempts, maxAttempts, scheduled, args, errs, kinds); err != nil {
			return fmt.Errorf("error inserting dispatch jobs: %w", err)
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("error completing job %d: %w", job.ID, err)
		}
		return nil
	})
}

// insertRemaindersSQL inserts dispatch jobs in the states River itself
// would leave them in after the recorded attempt (River's job scheduler
// makes a retryable job available when its time comes).
const insertRemaindersSQL = `
INSERT INTO /*schema*/river_job (state, attempt, max_attempts, attempted_at, created_at, finalized_at, scheduled_at,
                                 priority, args, errors, kind, metadata, queue, tags)
SELECT u.state::/*schema*/river_job_state, u.attempt, u.max_attempts,
       CASE WHEN u.attempt > 0 THEN $1::timestamptz END,
       $1::timestamptz,
       CASE WHEN u.state IN ('cancelled', 'discarded') THEN $1::timestamptz END,
       u.scheduled_at, 1, u.args::jsonb,
       CASE WHEN u.err = '' THEN NULL ELSE ARRAY[u.err::jsonb] END,
       u.kind, '{}'::jsonb, $2, '{}'::varchar[]
FROM unnest($3::text[], $4::int[], $5::int[], $6::timestamptz[], $7::text[], $8::text[], $9::text[])
     AS u(state, attempt, max_attempts, scheduled_at, args, err, kind)`
