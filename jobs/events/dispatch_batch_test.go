package events_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// batchJobs counts the batched dispatch jobs of a consumer by state.
func batchJobs(t *testing.T, db *pgtest.DB, consumer string) map[string]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), db.Q(`
        SELECT state::text, count(*) FROM /*schema*/river_job
        WHERE kind = 'tributary.event.dispatch_batch' AND args->>'consumer' = $1 GROUP BY 1`), consumer)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		require.NoError(t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func TestDispatchBatch(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	rec := &recorder{}
	// Never split: on a slow machine 24 handlers can outlast the default
	// 50 ms, and the split (TestDispatchBatchSplitsForSlowHandlers) would
	// give the events not yet handled jobs of their own.
	batched := fastConsumer(t, "batched", func(cfg *events.ConsumerConfig) {
		cfg.DispatchBatch, cfg.DispatchBatchSplitAfter = 50, -1
	})
	handle := func(ctx context.Context, m events.Message[orderPlaced]) error {
		rec.add(call{consumer: m.Consumer, eventID: m.ID, attempt: m.Attempt, payload: m.Payload})
		switch m.Payload.OrderID {
		case "flaky":
			if m.Attempt == 1 {
				return fmt.Errorf("flaky the first time")
			}
		case "boom":
			if m.Attempt == 1 {
				panic("kaboom")
			}
		case "always":
			return fmt.Errorf("always failing")
		}
		return nil
	}
	events.On(batched, orderPlacedEvent, handle)
	// A consumer without batching gets every event as well.
	plain := fastConsumer(t, "plain", func(cfg *events.ConsumerConfig) { cfg.DispatchBatch = 1 })
	events.On(plain, orderPlacedEvent, func(ctx context.Context, m events.Message[orderPlaced]) error {
		rec.add(call{consumer: m.Consumer, eventID: m.ID, attempt: m.Attempt})
		return nil
	})
	// One forwarding loop, so the emit's rows are forwarded in one batch.
	_, inst := startEvents(t, db, events.ForwarderConfig{Concurrency: 1}, batched, plain)
	loose := newEmitter(t, db, looseOrderEvent)

	// One transaction, so one forwarded batch and one batched job.
	var items []events.Emission
	for i := range 20 {
		items = append(items, events.Emission{Def: looseOrderEvent, Payload: looseOrder{OrderID: fmt.Sprintf("ok-%d", i), Amount: 1}})
	}
	items = append(items,
		events.Emission{Def: looseOrderEvent, Payload: looseOrder{OrderID: "flaky", Amount: 1}},
		events.Emission{Def: looseOrderEvent, Payload: looseOrder{OrderID: "boom", Amount: 1}},
		events.Emission{Def: looseOrderEvent, Payload: looseOrder{OrderID: "always", Amount: 1}},
		events.Emission{Def: looseOrderEvent, Payload: looseOrder{OrderID: "invalid", Amount: -1}},
	)
	ids, err := loose.EmitMany(ctx, db.Pool, items)
	require.NoError(t, err)
	flaky, boom, always, invalid := ids[20], ids[21], ids[22], ids[23]

	pgtest.WaitFor(t, 20*time.Second, "the always-failing event to be discarded", func() (bool, error) {
		_, state, _ := dispatchJob(t, db, "batched", always)
		return state == string(rivertype.JobStateDiscarded), nil
	})
	pgtest.WaitFor(t, 10*time.Second, "the flaky and panicking events to succeed on their retry", func() (bool, error) {
		_, s1, _ := dispatchJob(t, db, "batched", flaky)
		_, s2, _ := dispatchJob(t, db, "batched", boom)
		return s1 == string(rivertype.JobStateCompleted) && s2 == string(rivertype.JobStateCompleted), nil
	})
	pgtest.WaitFor(t, 10*time.Second, "the plain consumer to get every event", func() (bool, error) {
		return rec.count(func(c call) bool { return c.consumer == "plain" }) == len(ids)-1, nil // the invalid one fails its validation
	})

	require.Equal(t, map[string]int{"completed": 1}, batchJobs(t, db, "batched"), "the events travelled in one batched job")
	require.Empty(t, batchJobs(t, db, "plain"), "the plain consumer got one job per event")

	callsOf := func(id string) []int {
		var attempts []int
		for _, c := range rec.snapshot() {
			if c.consumer == "batched" && c.eventID == id {
				attempts = append(attempts, c.attempt)
			}
		}
		return attempts
	}
	for i := range 20 {
		require.Equal(t, []int{1}, callsOf(ids[i]), "event %d handled exactly once", i)
		_, state, _ := dispatchJob(t, db, "batched", ids[i])
		require.Empty(t, state, "a successful batched event has no job of its own")
	}
	require.Equal(t, []int{1, 2}, callsOf(flaky), "the failed event was retried as attempt 2")
	require.Equal(t, []int{1, 2}, callsOf(boom), "the panic was recovered and retried")
	require.Equal(t, []int{1, 2, 3, 4}, callsOf(always), "one attempt plus the consumer's three retries")
	require.Empty(t, callsOf(invalid), "a payload failing validation never reaches the handler")

	_, state, errs := dispatchJob(t, db, "batched", invalid)
	require.Equal(t, string(rivertype.JobStateCancelled), state, "validation failures are not retried")
	require.Contains(t, errs, "amount must not be negative", "the reason is recorded on the job")
	_, _, errs = dispatchJob(t, db, "batched", boom)
	require.Contains(t, errs, "kaboom")
	_, _, errs = dispatchJob(t, db, "batched", always)
	for attempt := 1; attempt <= 4; attempt++ {
		require.Contains(t, errs, fmt.Sprintf(`\"attempt\": %d`, attempt), "every attempt's error is on the discarded job")
	}

	st := inst.Dispatcher.Stats()
	require.GreaterOrEqual(t, st.Panics, int64(1))
	require.GreaterOrEqual(t, st.ValidationFailures, int64(2), "once per consumer")
}

// TestDispatchBatchShutdown stops a worker in the middle of a batch: the
// events not yet handled move to a new batched job, and the next worker
// handles only those.
func TestDispatchBatchShutdown(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	rec := &recorder{}
	started := make(chan struct{})
	consumer := func(block bool) *events.Consumer {
		c := fastConsumer(t, "batched", func(cfg *events.ConsumerConfig) {
			cfg.DispatchBatch, cfg.DispatchBatchSplitAfter = 10, -1 // a slow machine must not split it before o-3
		})
		events.On(c, orderPlacedEvent, func(ctx context.Context, m events.Message[orderPlaced]) error {
			if block && m.Payload.OrderID == "o-3" {
				close(started)
				<-ctx.Done() // held until the shutdown cancels it
				return ctx.Err()
			}
			rec.add(call{eventID: m.ID, attempt: m.Attempt})
			return nil
		})
		return c
	}
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{ShutdownTimeout: 200 * time.Millisecond}, func(rt *queue.Runtime) {
		_, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{consumer(true)}})
		require.NoError(t, err)
	})
	em := newEmitter(t, db)
	var items []events.Emission
	for i := range 8 {
		items = append(items, events.Emission{Def: orderPlacedEvent, Payload: orderPlaced{OrderID: fmt.Sprintf("o-%d", i), Amount: 1}})
	}
	ids, err := em.EmitMany(ctx, db.Pool, items)
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("the batch did not reach the blocking event")
	}
	stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, rt.Stop(stopCtx))
	require.Equal(t, 3, rec.count(nil), "o-0 to o-2 ran before the shutdown")
	require.Equal(t, map[string]int{"completed": 1, "available": 1}, batchJobs(t, db, "batched"),
		"the interrupted batch completed and left the rest as a new batch")

	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		_, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{consumer(false)}})
		require.NoError(t, err)
	})
	pgtest.WaitFor(t, 15*time.Second, "the rest of the batch", func() (bool, error) {
		return rec.count(nil) == len(ids), nil
	})
	for _, id := range ids {
		require.Equal(t, 1, rec.count(func(c call) bool { return c.eventID == id }), "event %s handled once", id)
	}
	pgtest.WaitFor(t, 10*time.Second, "both batched jobs completed", func() (bool, error) {
		st := batchJobs(t, db, "batched")
		return st["completed"] == 2 && len(st) == 1, nil
	})
}

func TestConsumerDispatchBatchValidation(t *testing.T) {
	t.Parallel()
	for _, n := range []int{-1, events.DispatchBatchMax + 1} {
		_, err := events.NewConsumer(events.ConsumerConfig{Name: "c", DispatchBatch: n})
		require.ErrorContains(t, err, fmt.Sprintf("invalid DispatchBatch %d", n))
	}
	c, err := events.NewConsumer(events.ConsumerConfig{Name: "c"})
	require.NoError(t, err)
	require.Equal(t, events.DispatchBatchDefault, c.Config().DispatchBatch)
	require.Equal(t, events.DispatchBatchSplitAfterDefault, c.Config().DispatchBatchSplitAfter)
}

// TestConsumerQueueValidation: a queue River would refuse is refused when
// the consumer is made, naming it, not later by every dispatch insert of
// the forwarder.
func TestConsumerQueueValidation(t *testing.T) {
	t.Parallel()
	for _, q := range []string{"Orders", "two words", "a__b", "-a", strings.Repeat("q", 65)} {
		_, err := events.NewConsumer(events.ConsumerConfig{Name: "c", Queue: q})
		require.ErrorContains(t, err, fmt.Sprintf("consumer c: invalid queue %q", q))
	}
	for _, q := range []string{"", "orders", "orders_v2", "a-b-c", strings.Repeat("q", 64)} {
		_, err := events.NewConsumer(events.ConsumerConfig{Name: "c", Queue: q})
		require.NoError(t, err, q)
	}
}

// TestDispatchBatchSplitsForSlowHandlers gives a batch of 10 events a
// handler slower than the split time: the first event runs in the batch, and
// the other nine leave it as dispatch jobs of their own, each handled once.
func TestDispatchBatchSplitsForSlowHandlers(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	rec := &recorder{}
	c := fastConsumer(t, "slow", func(cfg *events.ConsumerConfig) {
		cfg.DispatchBatch = 10
		cfg.DispatchBatchSplitAfter = 20 * time.Millisecond
	})
	events.On(c, orderPlacedEvent, func(ctx context.Context, m events.Message[orderPlaced]) error {
		time.Sleep(30 * time.Millisecond) // the handler's work, slower than the split time
		rec.add(call{eventID: m.ID, attempt: m.Attempt})
		return nil
	})
	startEvents(t, db, events.ForwarderConfig{Concurrency: 1}, c)
	em := newEmitter(t, db)
	var items []events.Emission
	for i := range 10 {
		items = append(items, events.Emission{Def: orderPlacedEvent, Payload: orderPlaced{OrderID: fmt.Sprintf("o-%d", i), Amount: 1}})
	}
	ids, err := em.EmitMany(ctx, db.Pool, items)
	require.NoError(t, err)
	pgtest.WaitFor(t, 15*time.Second, "every event handled", func() (bool, error) {
		return rec.count(nil) == len(ids), nil
	})
	for i, id := range ids {
		require.Equal(t, 1, rec.count(func(c call) bool { return c.eventID == id }), "event %d handled once", i)
		_, state, _ := dispatchJob(t, db, "slow", id)
		if i == 0 {
			require.Empty(t, state, "the first event ran in the batch")
		} else {
			require.NotEmpty(t, state, "event %d was split off into a job of its own", i)
		}
	}
	require.Equal(t, map[string]int{"completed": 1}, batchJobs(t, db, "slow"))
}

// TestDispatchBatchBoundedByBytes forwards four events of 400 KiB in one
// batch: a batched job takes at most dispatchBatchMaxBytes of them, so they
// travel two by two.
func TestDispatchBatchBoundedByBytes(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	rec := &recorder{}
	c := fastConsumer(t, "bulky", nil)
	events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error {
		rec.add(call{eventID: m.ID})
		return nil
	})
	startEvents(t, db, events.ForwarderConfig{Concurrency: 1}, c)
	em := newEmitter(t, db)
	text := strings.Repeat("x", 400<<10)
	items := make([]events.Emission, 4)
	for i := range items {
		items[i] = events.Emission{Def: noteEvent, Payload: noteV1{Text: text}}
	}
	ids, err := em.EmitMany(ctx, db.Pool, items)
	require.NoError(t, err)
	pgtest.WaitFor(t, 15*time.Second, "every event handled", func() (bool, error) {
		return rec.count(nil) == len(ids), nil
	})
	rows, err := db.Pool.Query(ctx, db.Q(`SELECT jsonb_array_length(args->'events') FROM /*schema*/river_job
        WHERE kind = 'tributary.event.dispatch_batch' ORDER BY id`))
	require.NoError(t, err)
	sizes, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{2, 2}, sizes, "two events of 400 KiB per job under the 1 MiB bound")
	for _, id := range ids {
		require.Equal(t, 1, rec.count(func(c call) bool { return c.eventID == id }))
	}
}
