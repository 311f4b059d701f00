package bench

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/jobs/inbox"
	"github.com/tributary-run/tributary/queue"
)

// AMQPInboxName is the inbox of RunAMQP's inbox side.
const AMQPInboxName = "bench_amqp"

// AMQPInboxWorkersDefault is AMQPOptions.InboxWorkers' default.
const AMQPInboxWorkersDefault = 10

// amqpInbox is the inbox of round's inbox side: each round's batches go to
// a River queue of their own, so the handled measurement can take one
// round's backlog alone. Its handler does nothing: on the inbound side
// nothing works the queue; handle counts for the handled measurement.
func amqpInbox(round int, handle func()) (*inbox.Inbox, error) {
	return inbox.New(inbox.Config{
		Name:  AMQPInboxName,
		Queue: fmt.Sprintf("bench_inbox_r%d", round+1),
		HandleFunc: func(context.Context, *inbox.Message) error {
			if handle != nil {
				handle()
			}
			return nil
		},
	})
}

// inboxHandled starts a runtime with the inbox of round installed (a no-op
// handler, workers River workers on its queue) on the backlog that round
// ingested, and returns how long it took to handle n messages, timed from
// the runtime's start.
func inboxHandled(ctx context.Context, pool *pgxpool.Pool, opts AMQPOptions, round, n int) (time.Duration, error) {
	var handled atomic.Int64
	ib, err := amqpInbox(round, func() { handled.Add(1) })
	if err != nil {
		return 0, err
	}
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{Schema: opts.InboxSchema, Logger: opts.Logger,
		Queues: map[string]int{ib.Config().Queue: opts.InboxWorkers}})
	if err != nil {
		return 0, err
	}
	if err := inbox.Install(rt, ib); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := rt.Start(ctx); err != nil {
		return 0, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = rt.Stop(sctx)
	}()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for handled.Load() < int64(n) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	took := time.Since(start)
	if st := ib.Stats(); st.Failed > 0 {
		return took, fmt.Errorf("the no-op handler failed %d times", st.Failed)
	}
	return took, nil
}

// measureInboxHandled is RunAMQP's handled measurement: a runtime works the
// inbox backlog of the last round (opts.Messages messages), on the CPU
// pool when there is one, so its backends' CPU is read.
func measureInboxHandled(ctx context.Context, opts AMQPOptions, dbCPU *cpuPool, meter cpuMeter, res *AMQPResult, w io.Writer) error {
	pool, ok := opts.DB.(*pgxpool.Pool)
	if dbCPU != nil {
		pool, ok = dbCPU.Pool, true
	}
	if !ok {
		fmt.Fprintln(w, "inbox handled: skipped (the database is not a pool)")
		return nil
	}
	cpu := meter.start()
	d, err := inboxHandled(ctx, pool, opts, opts.Rounds-1, opts.Messages)
	if err != nil {
		return fmt.Errorf("inbox handled: %w", err)
	}
	res.InboxHandled = rate(opts.Messages, d)
	res.InboxHandledCPU = cpu(opts.Messages)
	fmt.Fprintf(w, "inbox handled: a runtime with the inbox installed (no-op handler, %d workers) handled round %d's backlog of %d messages at %.0f msg/s (from its start), CPU %s\n",
		opts.InboxWorkers, opts.Rounds, opts.Messages, res.InboxHandled, res.InboxHandledCPU)
	return nil
}
