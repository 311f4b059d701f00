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

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/outbox"
)

// DispatchBatchKind is the River job kind of a batched dispatch: several
// events without an aggregate for one consumer (ConsumerConfig.DispatchBatch).
const DispatchBatchKind = riverjob.DispatchBatchKind

// dispatchBatchArgs are a batched dispatch job's arguments: the events, in
// emit order, whole (as in dispatchArgs).
type dispatchBatchArgs struct {
	Consumer string         `json:"consumer"`
	Events   []outbox.Event `json:"events"`
}

// Kind implements river.JobArgs.
func (dispatchBatchArgs) Kind() string { return DispatchBatchKind }

// batchRemainder is a dispatch job that a batch leaves behind: an event that
// failed (as a single dispatch job that has made its attempt), or the events
// a shutdown kept from running (as a new batch).
type batchRemainder struct {
	state       rivertype.JobState
	attempt     int
	maxAttempts int
	scheduledAt time.Time
	args        river.JobArgs
	err         *rivertype.AttemptError // the attempt's error; nil for none
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
func (d *Dispatcher) workBatch(ctx context.Context, job *river.Job[dispatchBatchArgs]) error {
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
			args:        dispatchArgs{Consumer: c.Name(), Event: *ev},
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
	if err := d.finishBatch(ctx, c, job, rems); err != nil {
		// Nothing of it was written; River retries the whole batch (the
		// events that succeeded run again: at-least-once).
		return recordFailed(fmt.Errorf("error recording the outcome of batched dispatch %d: %w", job.ID, err))
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
func restOfBatch(job *river.Job[dispatchBatchArgs], rest []outbox.Event) batchRemainder {
	return batchRemainder{
		state: rivertype.JobStateAvailable, maxAttempts: job.MaxAttempts, scheduledAt: time.Now().UTC(),
		args: dispatchBatchArgs{Consumer: job.Args.Consumer, Events: rest},
	}
}

// splitBatch makes each of events a dispatch job of its own, available at
// once and not yet attempted.
func splitBatch(c *Consumer, events []outbox.Event) []batchRemainder {
	now := time.Now().UTC()
	rems := make([]batchRemainder, len(events))
	for i, ev := range events {
		rems[i] = batchRemainder{
			state: rivertype.JobStateAvailable, maxAttempts: c.maxAttempts(), scheduledAt: now,
			args: dispatchArgs{Consumer: c.Name(), Event: ev},
		}
	}
	return rems
}

// attemptError is err as River records a failed attempt (a panic's stack as
// its trace).
func attemptError(attempt int, err error) *rivertype.AttemptError {
	ae := &rivertype.AttemptError{At: time.Now().UTC(), Attempt: attempt, Error: err.Error()}
	var pe *PanicError
	if errors.As(err, &pe) {
		ae.Trace = pe.Stack
	}
	return ae
}

// finishBatch inserts the remainders and completes the batch job in one
// transaction. A capped consumer's remainders carry its limit: those to
// run at once wait for admission.
func (d *Dispatcher) finishBatch(ctx context.Context, c *Consumer, job *river.Job[dispatchBatchArgs], rems []batchRemainder) error {
	jobs := make([]riverjob.AttemptedJob, len(rems))
	for i, rem := range rems {
		b, err := json.Marshal(rem.args)
		if err != nil {
			return fmt.Errorf("error encoding a dispatch job: %w", err)
		}
		jobs[i] = riverjob.AttemptedJob{Kind: rem.args.Kind(), Args: b, State: rem.state, Attempt: rem.attempt,
			MaxAttempts: rem.maxAttempts, ScheduledAt: rem.scheduledAt, Error: rem.err, Limit: c.limitName()}
	}
	// The job's context without its cancellation: River finds its client
	// there, and a shutdown must not keep the outcome from being recorded.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if err := riverjob.InsertAttempted(ctx, tx, d.cfg.Schema, job.Queue, jobs, time.Now().UTC()); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("error completing job %d: %w", job.ID, err)
		}
		return nil
	})
}
