package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// runner runs the inboxes of one runtime: the River workers of both kinds
// of inbox job find the inbox of a job by its name here.
type runner struct {
	pool    *pgxpool.Pool
	schema  string
	logger  *slog.Logger
	inboxes map[string]*Inbox
	sql     statements
}

// statements are the workers' statements qualified for the runtime's
// schema.
type statements struct {
	readBatch, completeBatch, deleteBatch, continueBatch string
}

// Install registers the workers of the inboxes' jobs (batches and single
// messages) on rt, once for all of them: each job runs with the handler of
// the inbox it names. Give every inbox the process runs to one call; a
// second call on the same runtime is an error (River takes one worker per
// job kind). Install before rt starts. A job of an inbox the process did
// not install waits for a process that did (see notRunHere); so does every
// job a process takes after Install with no inboxes at all, which is what
// a process that works a queue an inbox may share, without running that
// inbox, should do (`tributary worker` does): without the workers, River
// fails such a job as one of an unknown kind, and discards it once its
// attempts are spent.
func Install(rt *queue.Runtime, inboxes ...*Inbox) error {
	q := func(sql string) string { return queue.Qualify(rt.Schema(), sql) }
	r := &runner{pool: rt.Pool(), schema: rt.Schema(), logger: rt.Logger().With("component", "inbox"), inboxes: map[string]*Inbox{},
		sql: statements{readBatch: q(readBatchSQL), completeBatch: q(completeBatchSQL), deleteBatch: q(deleteBatchSQL), continueBatch: q(continueBatchSQL)}}
	for _, ib := range inboxes {
		if ib == nil {
			return errors.New("inbox.Install: a nil inbox")
		}
		if _, dup := r.inboxes[ib.Name()]; dup {
			return fmt.Errorf("inbox %q is given twice", ib.Name())
		}
		r.inboxes[ib.Name()] = ib
	}
	if err := river.AddWorkerSafely[batchArgs](rt.Workers(), &batchWorker{r: r}); err != nil {
		return fmt.Errorf("error adding the inbox workers (give every inbox to one Install call): %w", err)
	}
	if err := river.AddWorkerSafely[messageArgs](rt.Workers(), &messageWorker{r: r}); err != nil {
		return fmt.Errorf("error adding the inbox workers (give every inbox to one Install call): %w", err)
	}
	return nil
}

// notRunHere is the outcome of a job for an inbox this process did not
// install (renamed or removed from the code, or one another service runs
// on a shared queue): it is snoozed, which spends no attempt, on a doubling
// wait, for a process that runs the inbox to take it. There is no registry
// of inboxes to tell a removed one from one that runs elsewhere, so it is
// never given up: an operator cancels or deletes such jobs.
func (r *runner) notRunHere(ctx context.Context, name string, job *rivertype.JobRow) error {
	wait, first := riverjob.NotRunHereWait(job.Metadata)
	attrs := []any{"inbox", name, "job_id", job.ID, "kind", job.Kind, "installed_here", slices.Sorted(maps.Keys(r.inboxes)), "retry_in", wait}
	if first {
		r.logger.WarnContext(ctx, "job for an inbox this process does not run: waiting for a process that does", attrs...)
	} else {
		r.logger.DebugContext(ctx, "job for an inbox this process does not run: waiting", attrs...)
	}
	return river.JobSnooze(wait)
}

// recordFailed marks a failure of the inbox's own reads and writes around
// the handlers (reading a batch, recording its outcome), as opposed to a
// handler's failure.
var recordFailed = riverjob.OwnRecord

// snoozeLostConnection turns a failure of the inbox's own records that is
// the database connection failing into a snooze: the job runs again without
// spending an attempt, so a burst of terminated sessions cannot discard
// batches whose handlers never failed.
func (r *runner) snoozeLostConnection(ctx context.Context, job *rivertype.JobRow, err error) error {
	cause, lost := riverjob.RecordLostConnection(err)
	if !lost {
		return err
	}
	delay := riverjob.RecordRetryDelay(job.Metadata)
	r.logger.WarnContext(ctx, "the database connection failed while recording an inbox job: it runs again, its attempt not counted",
		"job_id", job.ID, "kind", job.Kind, "attempt", job.Attempt, "retry_in", delay, "error", cause)
	return river.JobSnooze(delay)
}
