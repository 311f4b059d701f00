package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// batchWorker is the River worker of batch jobs.
type batchWorker struct {
	river.WorkerDefaults[batchArgs]
	r *runner
}

func (w *batchWorker) Work(ctx context.Context, job *river.Job[batchArgs]) error {
	return w.r.snoozeLostConnection(ctx, job.JobRow, w.r.workBatch(ctx, job))
}

// riverSchedulerInterval is how often River's scheduler (v0.51.2's
// default, not configurable through queue.RuntimeConfig) makes retryable
// jobs that are due available. River's executor leaves a job whose next
// attempt is due within it available with that scheduled_at instead, so a
// short delay is not stretched to the scheduler's next run; a failed
// message's job is written the same way.
const riverSchedulerInterval = 5 * time.Second

// errBatchGone is a batch row that no longer exists.
var errBatchGone = errors.New("batch row not found")

// remainder is a River job that a batch leaves behind in the transaction
// that completes it: a message that failed (as a message job that has made
// its attempt), or a message split off a slow batch (a message job not yet
// attempted).
type remainder struct {
	state       rivertype.JobState
	attempt     int
	scheduledAt time.Time
	msg         *Message
	err         *rivertype.AttemptError // the attempt's error; nil for none
}

// workBatch runs the inbox's handler for each message of the job's range
// of its batch, in order. When every one succeeded, one statement
// completes the job and deletes the row. Otherwise one transaction records
// what is left, completes the job and deletes the row (or, when a
// shutdown interrupted the batch, hands the rest of the row to a new batch
// job):
//   - each failed message becomes a message job that has made its
//     attempt: retryable after the inbox's delay, discarded after the last
//     attempt or for a Permanent error, cancelled for river.JobCancel. From
//     then on River retries it like any job; the other messages do not run
//     again;
//   - once the batch has run for SplitAfter, the messages not yet handled
//     become message jobs not yet attempted, for any free worker;
//   - a shutdown (the job's context cancelled) moves the messages not yet
//     handled, the interrupted one first, to a new batch job on the same
//     row, so a restart does not run the finished ones again; River's job
//     timeout counts as the running message's failed attempt, and the rest
//     move on the same way.
//
// A crash runs the whole range again (at-least-once).
func (r *runner) workBatch(ctx context.Context, job *river.Job[batchArgs]) error {
	a := job.Args
	ib := r.inboxes[a.Inbox]
	if ib == nil {
		return r.notRunHere(ctx, a.Inbox, job.JobRow)
	}
	msgs, total, err := r.readBatch(ctx, a)
	switch {
	case errors.Is(err, errBatchGone):
		r.logger.ErrorContext(ctx, "inbox batch job without its batch row: cancelled", "inbox", a.Inbox, "batch", a.Batch, "job_id", job.ID)
		return river.JobCancel(fmt.Errorf("inbox %q batch %d is gone (cleaned up as an orphan, or deleted by hand): nothing to run", a.Inbox, a.Batch))
	case errors.Is(err, ErrMalformed):
		r.logger.ErrorContext(ctx, "inbox batch cannot be decoded: cancelled, its row kept", "inbox", a.Inbox, "batch", a.Batch, "job_id", job.ID, "error", err)
		return river.JobCancel(fmt.Errorf("inbox %q batch %d: %w", a.Inbox, a.Batch, err))
	case err != nil:
		return recordFailed(err)
	}
	start := time.Now()
	split := ib.cfg.SplitAfter
	var (
		rems   []remainder
		rest   = -1 // the first message a new batch job runs; -1 for none
		cancel bool // cancelled by an operator while it ran
	)
	for i := range msgs {
		m := &msgs[i]
		if ctx.Err() != nil {
			rest = a.From + i
			break
		}
		if i > 0 && split > 0 && time.Since(start) >= split {
			// Slow handlers: let free workers take the rest, one each.
			now := time.Now().UTC()
			for j := i; j < len(msgs); j++ {
				rems = append(rems, remainder{state: rivertype.JobStateAvailable, scheduledAt: now, msg: &msgs[j]})
			}
			ib.split.Add(int64(len(msgs) - i))
			r.logger.DebugContext(ctx, "split a slow inbox batch", "inbox", a.Inbox, "batch", a.Batch, "job_id", job.ID, "handled", i, "split_off", len(msgs)-i)
			break
		}
		m.Attempt = job.Attempt
		err := ib.handle(ctx, m, false)
		if err == nil {
			ib.handled.Add(1)
			continue
		}
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) && !IsPermanent(err) && !isCancel(err) {
			if errors.Is(context.Cause(ctx), river.ErrJobCancelledRemotely) {
				cancel = true
				break
			}
			// Interrupted by the shutdown: the message runs again with the
			// rest, as a job cancelled by a hard stop is snoozed without
			// spending its attempt.
			rest = a.From + i
			break
		}
		ib.failed.Add(1)
		rems = append(rems, r.failed(ctx, ib, job, m, err))
	}
	switch {
	case cancel:
		// River records the cancel; the row stays for an operator's retry
		// until the orphans' clean-up.
		return fmt.Errorf("inbox batch cancelled while it ran: %w", context.Cause(ctx))
	case rest == a.From && len(rems) == 0:
		// Interrupted before anything was handled: the job as it is runs
		// again (the runtime snoozes a job a hard stop interrupted).
		return fmt.Errorf("inbox batch interrupted before its first message: %w", context.Cause(ctx))
	case rest < 0 && len(rems) == 0:
		if err := r.complete(ctx, job); err != nil {
			// Nothing was recorded; River retries the batch (the messages
			// that succeeded run again: at-least-once).
			return recordFailed(fmt.Errorf("error completing inbox batch %d: %w", a.Batch, err))
		}
	default:
		if err := r.finish(ctx, ib, job, rems, rest, total); err != nil {
			return recordFailed(fmt.Errorf("error recording the outcome of inbox batch %d: %w", a.Batch, err))
		}
	}
	ib.batches.Add(1)
	return nil
}

// failed is the remainder of a message whose attempt failed with err, and
// logs it.
func (r *runner) failed(ctx context.Context, ib *Inbox, job *river.Job[batchArgs], m *Message, err error) remainder {
	now := time.Now().UTC()
	rem := remainder{state: rivertype.JobStateRetryable, attempt: job.Attempt, msg: m, err: attemptError(job.Attempt, err)}
	attrs := []any{"inbox", ib.Name(), "message_id", m.ID, "batch", job.Args.Batch, "job_id", job.ID, "attempt", job.Attempt, "error", err}
	switch {
	case isCancel(err):
		rem.state, rem.scheduledAt = rivertype.JobStateCancelled, now
	case IsPermanent(err) || job.Attempt >= ib.cfg.MaxAttempts:
		rem.state, rem.scheduledAt = rivertype.JobStateDiscarded, now
	default:
		delay := ib.retryDelay(job.Attempt)
		rem.scheduledAt = now.Add(delay)
		if delay <= riverSchedulerInterval {
			// As River's executor leaves a job whose retry is due before its
			// scheduler's next run: available, for a fetch once it is due.
			rem.state = rivertype.JobStateAvailable
		}
		r.logger.WarnContext(ctx, "inbox message failed, will retry as a job of its own", append(attrs, "retry_in", delay)...)
		return rem
	}
	ib.givenUp.Add(1)
	r.logger.ErrorContext(ctx, "inbox message failed for good", append(attrs, "state", rem.state)...)
	return rem
}

func isCancel(err error) bool {
	var jc *river.JobCancelError
	return errors.As(err, &jc)
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

// readBatch reads the messages of the job's range and the row's count.
func (r *runner) readBatch(ctx context.Context, a batchArgs) ([]Message, int, error) {
	var count int
	var data []byte
	err := r.pool.QueryRow(ctx, r.sql.readBatch, a.Batch).Scan(&count, &data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, errBatchGone
	}
	if err != nil {
		return nil, 0, fmt.Errorf("error reading inbox batch %d: %w", a.Batch, err)
	}
	if a.From < 0 || a.From >= count {
		return nil, 0, fmt.Errorf("%w: the job runs from message %d of %d", ErrMalformed, a.From, count)
	}
	msgs, err := decodeFrom(data, a.From, count-a.From)
	if err != nil {
		return nil, 0, err
	}
	if a.From+len(msgs) != count {
		return nil, 0, fmt.Errorf("%w: %d messages, the row says %d", ErrMalformed, a.From+len(msgs), count)
	}
	return msgs, count, nil
}

// complete completes the job and deletes its row in one statement (the
// path of a batch whose every message succeeded), guarded by the job
// running at this attempt: an attempt whose job was handed on meanwhile (a
// process that lost its liveness) records nothing. River's completer, told
// of the success afterwards, finds the job finalized and leaves it.
func (r *runner) complete(ctx context.Context, job *river.Job[batchArgs]) error {
	// The job's context without its cancellation: River finds its client
	// there, and a shutdown must not keep the outcome from being recorded.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	now := time.Now().UTC()
	err := r.pool.QueryRow(ctx, r.sql.completeBatch, []int64{job.ID}, []int32{int32(job.Attempt)}, now, job.Args.Batch).Scan(new(int64))
	if errors.Is(err, pgx.ErrNoRows) {
		r.logger.WarnContext(ctx, "inbox batch job no longer running at this attempt: its outcome is dropped", "batch", job.Args.Batch, "job_id", job.ID, "attempt", job.Attempt)
		return nil
	}
	return err
}

// errStale is an attempt whose job is no longer running at it.
var errStale = errors.New("the job is no longer running at this attempt")

// finish records a batch's remainders in one transaction: it completes the
// job (guarded by its attempt, as complete), inserts the message jobs, and
// deletes the row, or, when rest is not -1, hands the row's messages from
// rest on to a new batch job. River's producers are woken after the commit
// when a job was made available.
func (r *runner) finish(ctx context.Context, ib *Inbox, job *river.Job[batchArgs], rems []remainder, rest, total int) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	now := time.Now().UTC()
	jobs := make([]riverjob.AttemptedJob, len(rems))
	for i, rem := range rems {
		args, err := json.Marshal(messageJobArgs(ib.Name(), rem.msg))
		if err != nil {
			return fmt.Errorf("error encoding the job of message %q: %w", rem.msg.ID, err)
		}
		jobs[i] = riverjob.AttemptedJob{Kind: MessageKind, Args: args, State: rem.state, Attempt: rem.attempt,
			MaxAttempts: ib.cfg.MaxAttempts, ScheduledAt: rem.scheduledAt, Error: rem.err}
	}
	var restArgs []byte
	if rest >= 0 {
		var err error
		if restArgs, err = json.Marshal(batchArgs{Inbox: ib.Name(), Batch: job.Args.Batch, From: rest, Count: total - rest}); err != nil {
			return err
		}
	}
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		done, err := riverjob.CompleteRunning(ctx, tx, r.schema, []riverjob.Attempt{{ID: job.ID, Attempt: job.Attempt}}, now)
		if err != nil {
			return err
		}
		if len(done) == 0 {
			return errStale
		}
		if len(jobs) > 0 {
			if err := riverjob.InsertAttempted(ctx, tx, r.schema, ib.cfg.Queue, jobs, now); err != nil {
				return err
			}
		}
		if rest < 0 {
			_, err = tx.Exec(ctx, r.sql.deleteBatch, job.Args.Batch)
			return err
		}
		_, err = tx.Exec(ctx, r.sql.continueBatch, restArgs, ib.cfg.Queue, riverjob.MaxAttempts(ib.cfg.MaxAttempts), job.Args.Batch)
		return err
	})
	if errors.Is(err, errStale) {
		r.logger.WarnContext(ctx, "inbox batch job no longer running at this attempt: its outcome is dropped", "batch", job.Args.Batch, "job_id", job.ID, "attempt", job.Attempt)
		return nil
	}
	if err != nil {
		return err
	}
	if rest >= 0 {
		r.logger.InfoContext(ctx, "inbox batch interrupted: the rest runs as a new batch job", "inbox", ib.Name(), "batch", job.Args.Batch, "from", rest, "count", total-rest)
	}
	wake := rest >= 0
	for _, j := range jobs {
		wake = wake || j.State == rivertype.JobStateAvailable
	}
	if wake {
		if err := riverjob.Wake(ctx, r.pool, r.schema, []string{ib.cfg.Queue}); err != nil {
			r.logger.WarnContext(ctx, "error waking River for an inbox batch's jobs", "error", err)
		}
	}
	return nil
}

const readBatchSQL = `SELECT count, messages FROM /*schema*/tributary_inbox_batch WHERE id = $1`

// completeBatchSQL completes the job ($1 its id, $2 its attempt, $3 now;
// riverjob.CompleteRunningUpdate) and deletes its row ($4) when it did,
// and returns the job's id; no row when the job was not running at that
// attempt.
var completeBatchSQL = `
WITH done AS (
    ` + riverjob.CompleteRunningUpdate("$1", "$2", "$3") + `
), del AS (
    DELETE FROM /*schema*/tributary_inbox_batch WHERE id = $4 AND EXISTS (SELECT 1 FROM done)
)
SELECT id FROM done`

const deleteBatchSQL = `DELETE FROM /*schema*/tributary_inbox_batch WHERE id = $1`

// continueBatchSQL inserts the batch job that runs the rest of row $4 ($1
// its args; riverjob.NewJobInsert) and makes it the row's job.
var continueBatchSQL = `
WITH j AS (
    ` + riverjob.NewJobInsert("(VALUES (1)) AS v(one)", "$1::jsonb", "'"+BatchKind+"'", "$2::text", "$3::smallint") + `
)
UPDATE /*schema*/tributary_inbox_batch SET job_id = (SELECT id FROM j) WHERE id = $4`
