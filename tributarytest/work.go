package tributarytest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// Runner is what WorkUntilIdle starts and stops: a *tributary.App, or a
// *queue.Runtime for a test of the feature packages on their own.
type Runner interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// WorkOpts are options for WorkUntilIdle. A nil *WorkOpts is the
// defaults.
type WorkOpts struct {
	// Timeout bounds the wait for idle when ctx has no earlier deadline.
	//
	// Defaults to 30 seconds.
	Timeout time.Duration
	// PollInterval is how often the database is read.
	//
	// Defaults to 20 milliseconds.
	PollInterval time.Duration
	// Settle is how long the schema must stay idle, read after read, before
	// it counts as idle: longer than any hand-off that happens outside the
	// transaction that finishes a job.
	//
	// Defaults to 200 milliseconds.
	Settle time.Duration
}

// Defaults of WorkOpts.
const (
	WorkTimeoutDefault      = 30 * time.Second
	WorkPollIntervalDefault = 20 * time.Millisecond
	WorkSettleDefault       = 200 * time.Millisecond
)

// WorkUntilIdle starts app, waits until its schema (db's) is idle, and
// stops it, so that the jobs a test enqueued, the events it emitted (their
// forwarding and every consumer's handler) and the workflows it started
// run to completion, with whatever they enqueue, emit or start in turn.
//
// Idle means no job is available or running, none is scheduled or
// retryable with its time come, and no outbox row waits to be forwarded,
// read after read for WorkOpts.Settle. A job waiting for a later time (a
// retry's backoff, a snooze, a workflow's Sleep or AwaitSignal) and a
// workflow task pending behind it do not keep the schema busy: the test
// sees them as they are, and WorkUntilIdle logs them. It reads the
// database rather than subscribing to River's events, whose subscription
// drops events past its buffer.
//
// When ctx ends or the timeout passes first, the test fails with what was
// left: the jobs not finished (kind, state, attempts, last error) and the
// outbox rows not forwarded. The app must not be running already: its
// schema must be db.Schema.
func WorkUntilIdle(ctx context.Context, tb testing.TB, db *DB, app Runner, opts *WorkOpts) {
	tb.Helper()
	if opts == nil {
		opts = &WorkOpts{}
	}
	if schema := schemaOfRunner(app); schema != "" && schema != db.Schema {
		tb.Fatalf("tributarytest: the app works schema %q, the test's schema is %q: set the app's Schema to db.Schema", schema, db.Schema)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(opts.Timeout, WorkTimeoutDefault))
	defer cancel()
	if err := app.Start(ctx); err != nil {
		tb.Fatalf("tributarytest: starting the app: %v", err)
		return
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := app.Stop(stopCtx); err != nil {
			tb.Errorf("tributarytest: stopping the app: %v", err)
		}
	}()

	poll := cmp.Or(opts.PollInterval, WorkPollIntervalDefault)
	settle := cmp.Or(opts.Settle, WorkSettleDefault)
	var idleSince time.Time
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			tb.Fatalf("tributarytest: %s", db.leftover(context.WithoutCancel(ctx), "the schema did not become idle before "+ctxEnd(ctx)))
			return
		case <-timer.C:
		}
		busy, err := db.busy(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			tb.Fatalf("tributarytest: %v", err)
			return
		case err != nil:
			continue // the deadline passed during the read: report above
		case busy:
			idleSince = time.Time{}
		case idleSince.IsZero():
			idleSince = time.Now()
		case time.Since(idleSince) >= settle:
			if left := db.leftover(ctx, ""); left != "" {
				tb.Logf("tributarytest: idle, with work waiting for later: %s", left)
			}
			return
		}
		timer.Reset(poll)
	}
}

// schemaOfRunner is the schema app works, when it says: a *tributary.App
// through its runtime, a *queue.Runtime itself.
func schemaOfRunner(app Runner) string {
	switch app := app.(type) {
	case interface{ Runtime() *queue.Runtime }:
		return app.Runtime().Schema()
	case interface{ Schema() string }:
		return app.Schema()
	}
	return ""
}

func ctxEnd(ctx context.Context) string {
	if deadline, ok := ctx.Deadline(); ok && context.Cause(ctx) == context.DeadlineExceeded {
		return "the deadline (" + deadline.Format(time.TimeOnly) + ")"
	}
	return "the context ended (" + context.Cause(ctx).Error() + ")"
}

// busy reports whether anything in the schema can make progress now.
func (db *DB) busy(ctx context.Context) (bool, error) {
	var busy bool
	err := readTx(ctx, db.Pool, func(tx pgx.Tx) error {
		jobs, err := listJobs(ctx, tx, db.Schema, river.NewJobListParams().
			States(rivertype.JobStateAvailable, rivertype.JobStateRunning, rivertype.JobStateScheduled, rivertype.JobStateRetryable).
			Where("scheduled_at <= now()").First(1))
		if err != nil {
			return err
		}
		if len(jobs) > 0 {
			busy = true
			return nil
		}
		for _, status := range []string{events.StatusPending, events.StatusClaimed} {
			rows, err := events.ListOutbox(ctx, tx, db.Schema, events.ListParams{Status: status, Limit: 1, WithoutPayload: true})
			if err != nil {
				return err
			}
			if len(rows) > 0 {
				busy = true
				return nil
			}
		}
		return nil
	})
	return busy, err
}

// leftover describes the jobs not finished and the outbox rows not
// forwarded, prefixed with what happened; "" when there are none and no
// prefix.
func (db *DB) leftover(ctx context.Context, what string) string {
	var parts []string
	if what != "" {
		parts = append(parts, what)
	}
	err := readTx(ctx, db.Pool, func(tx pgx.Tx) error {
		jobs, err := listJobs(ctx, tx, db.Schema, river.NewJobListParams().States(
			rivertype.JobStateAvailable, rivertype.JobStateRunning, rivertype.JobStateScheduled,
			rivertype.JobStateRetryable, rivertype.JobStatePending))
		if err != nil {
			return err
		}
		if len(jobs) > 0 {
			parts = append(parts, "jobs not finished: "+describeUnfinished(jobs))
		}
		for _, status := range []string{events.StatusPending, events.StatusClaimed} {
			rows, err := events.ListOutbox(ctx, tx, db.Schema, events.ListParams{Status: status, Limit: listLimit, WithoutPayload: true})
			if err != nil {
				return err
			}
			if len(rows) > 0 {
				parts = append(parts, fmt.Sprintf("outbox rows not forwarded (%s): %s", status, describeEvents(rows, true)))
			}
		}
		// A consumer's events behind its lane's head wait outside River's
		// table; count them by consumer, head jobs included.
		pending, err := events.CountPendingDispatches(ctx, tx, db.Schema)
		if err != nil {
			return err
		}
		var consumers []string
		for consumer, n := range pending {
			if n > 0 {
				consumers = append(consumers, fmt.Sprintf("%s %d", consumer, n))
			}
		}
		if len(consumers) > 0 {
			slices.Sort(consumers)
			parts = append(parts, "events not yet handled, by consumer: "+strings.Join(consumers, ", "))
		}
		return nil
	})
	if err != nil {
		parts = append(parts, "(reading what was left: "+err.Error()+")")
	}
	return strings.Join(parts, "; ")
}

func describeUnfinished(jobs []*rivertype.JobRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d job(s):", len(jobs))
	for i, j := range jobs {
		if i == showLimit {
			fmt.Fprintf(&b, "\n\t... and %d more", len(jobs)-showLimit)
			break
		}
		fmt.Fprintf(&b, "\n\tjob %d kind %q queue %q state %s attempt %d/%d scheduled at %s",
			j.ID, j.Kind, j.Queue, j.State, j.Attempt, j.MaxAttempts, j.ScheduledAt.Format(time.RFC3339Nano))
		if n := len(j.Errors); n > 0 {
			fmt.Fprintf(&b, " last error %q", j.Errors[n-1].Error)
		}
	}
	return b.String()
}
