package events_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/outbox"
)

// dispatchJob finds the dispatch job of an event for a consumer.
func dispatchJob(t *testing.T, db *pgtest.DB, consumer, eventID string) (id int64, state string, errs string) {
	t.Helper()
	ctx := context.Background()
	err := db.Pool.QueryRow(ctx, db.Q(`
        SELECT id, state::text, coalesce(errors::text, '') FROM /*schema*/river_job
        WHERE kind = 'tributary.event.dispatch' AND args->>'consumer' = $1 AND (args->>'event')::jsonb->>'id' = $2`),
		consumer, eventID).Scan(&id, &state, &errs)
	if err == nil {
		return id, state, errs
	}
	// No job: the event may wait as a lane event (id 0).
	var claimed bool
	err = db.Pool.QueryRow(ctx, db.Q(`SELECT claimed_by IS NOT NULL FROM /*schema*/tributary_event_lane_event
        WHERE consumer = $1 AND (args::jsonb->>'event')::jsonb->>'id' = $2`), consumer, eventID).Scan(&claimed)
	switch {
	case err != nil:
		return 0, "", ""
	case claimed:
		return 0, laneEventClaimed, ""
	default:
		return 0, laneEvent, ""
	}
}

func TestDispatchValidationFailure(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db    *pgtest.DB
		loose *events.Emitter
		rec   *recorder
	}
	setup := func(t *testing.T, ordering events.Ordering) *testBundle {
		t.Helper()
		db := pgtest.New(t)
		rec := &recorder{}
		c := fastConsumer(t, "strict", func(cfg *events.ConsumerConfig) { cfg.Ordering = ordering })
		events.On(c, orderPlacedEvent, func(ctx context.Context, m events.Message[orderPlaced]) error {
			rec.add(call{consumer: m.Consumer, eventID: m.ID, aggregateID: m.AggregateID, attempt: m.Attempt, payload: m.Payload})
			return nil
		})
		startEvents(t, db, events.ForwarderConfig{}, c)
		return &testBundle{db: db, loose: newEmitter(t, db, looseOrderEvent), rec: rec}
	}
	emit := func(t *testing.T, b *testBundle, agg string, p looseOrder) string {
		t.Helper()
		id, err := b.loose.Emit(context.Background(), b.db.Pool, looseOrderEvent, p, events.Meta{AggregateID: agg})
		require.NoError(t, err)
		return id
	}

	t.Run("BlockPolicyHoldsTheAggregate", func(t *testing.T) {
		t.Parallel()
		b := setup(t, events.OrderingBlock)
		bad := emit(t, b, "A", looseOrder{OrderID: "a1", Amount: -5})
		behind := emit(t, b, "A", looseOrder{OrderID: "a2", Amount: 1})
		other := emit(t, b, "B", looseOrder{OrderID: "b1", Amount: 1})

		pgtest.WaitFor(t, 15*time.Second, "the invalid dispatch to be cancelled", func() (bool, error) {
			_, state, _ := dispatchJob(t, b.db, "strict", bad)
			return state == string(rivertype.JobStateCancelled), nil
		})
		pgtest.WaitFor(t, 10*time.Second, "the other aggregate's event", func() (bool, error) {
			return b.rec.count(func(c call) bool { return c.eventID == other }) == 1, nil
		})
		_, _, errs := dispatchJob(t, b.db, "strict", bad)
		require.Contains(t, errs, "amount must not be negative", "the reason is recorded on the job")
		_, state, _ := dispatchJob(t, b.db, "strict", behind)
		require.True(t, waiting(state), "the rest of the aggregate waits: %s", state)
		require.Zero(t, b.rec.count(func(c call) bool { return c.aggregateID == "A" }), "no handler ran for the blocked aggregate")
	})

	t.Run("SkipPolicyMovesOn", func(t *testing.T) {
		t.Parallel()
		b := setup(t, events.OrderingSkip)
		bad := emit(t, b, "A", looseOrder{OrderID: "a1", Extra: "unknown to the consumer"})
		behind := emit(t, b, "A", looseOrder{OrderID: "a2", Amount: 1})

		pgtest.WaitFor(t, 15*time.Second, "the event behind the invalid one", func() (bool, error) {
			return b.rec.count(func(c call) bool { return c.eventID == behind }) == 1, nil
		})
		pgtest.WaitFor(t, 10*time.Second, "the invalid dispatch to be recorded as cancelled", func() (bool, error) {
			_, state, _ := dispatchJob(t, b.db, "strict", bad)
			return state == string(rivertype.JobStateCancelled), nil
		})
		_, _, errs := dispatchJob(t, b.db, "strict", bad)
		require.Contains(t, errs, "unknown field")
		require.Contains(t, errs, "extra")
		require.Equal(t, 1, b.rec.count(nil), "the invalid event never reached the handler, and was not retried")
	})
}

func TestDispatchFailures(t *testing.T) {
	t.Parallel()

	t.Run("PanicIsRecoveredAndRetried", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		var calls atomic.Int64
		c := fastConsumer(t, "panicky", nil)
		events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error {
			calls.Add(1)
			if m.Payload.Text == "boom" && m.Attempt == 1 {
				panic("kaboom")
			}
			return nil
		})
		_, inst := startEvents(t, db, events.ForwarderConfig{}, c)
		ids := emitLane(t, db, "n", "boom", "after")
		boom := ids[0]

		pgtest.WaitFor(t, 15*time.Second, "both events handled", func() (bool, error) {
			// after runs in the chain of boom's job, without a job of its
			// own.
			_, s1, _ := dispatchJob(t, db, "panicky", boom)
			return s1 == "completed" && calls.Load() == 3, nil
		})
		_, _, errs := dispatchJob(t, db, "panicky", boom)
		require.Contains(t, errs, "handler panicked: kaboom")
		require.Equal(t, int64(3), calls.Load())
		st := inst.Dispatcher.Stats()
		require.Equal(t, int64(1), st.Panics)
		require.Equal(t, int64(1), st.Failed)
		require.Equal(t, int64(2), st.Handled)
	})

	t.Run("ExhaustedRetriesBlockUntilJobRetry", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		var healthy atomic.Bool
		rec := &recorder{}
		var processed atomic.Int64
		c := fastConsumer(t, "flaky", func(cfg *events.ConsumerConfig) {
			cfg.OnProcessedFunc = func(ctx context.Context, p events.Processed) { processed.Add(1) }
		})
		events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error {
			if m.Payload.Text == "first" && !healthy.Load() {
				return errors.New("downstream unavailable")
			}
			rec.add(call{eventID: m.ID, attempt: m.Attempt})
			return nil
		})
		rt, _ := startEvents(t, db, events.ForwarderConfig{}, c)
		ids := emitLane(t, db, "x", "first", "second")
		first, second := ids[0], ids[1]

		var jobID int64
		pgtest.WaitFor(t, 15*time.Second, "the failing dispatch to be discarded", func() (bool, error) {
			id, state, _ := dispatchJob(t, db, "flaky", first)
			jobID = id
			return state == "discarded", nil
		})
		_, _, errs := dispatchJob(t, db, "flaky", first)
		require.Contains(t, errs, "downstream unavailable")
		require.Equal(t, int64(4), processed.Load(), "first try plus three retries")
		_, state, _ := dispatchJob(t, db, "flaky", second)
		require.True(t, waiting(state), state)

		healthy.Store(true)
		_, err := rt.River().JobRetry(context.Background(), jobID)
		require.NoError(t, err)
		pgtest.WaitFor(t, 15*time.Second, "the replayed and the held event", func() (bool, error) {
			return rec.count(nil) == 2, nil
		})
		calls := rec.snapshot()
		require.Equal(t, first, calls[0].eventID)
		require.Equal(t, second, calls[1].eventID)
	})

	t.Run("SkipOwnEventKindsAndRegisteredTypes", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		rec := &recorder{}
		own := fastConsumer(t, "own", func(cfg *events.ConsumerConfig) {
			cfg.SourceService = "test"
			cfg.SkipOwnEventKinds = []events.EventKind{events.EventKindIntegration}
		})
		other := fastConsumer(t, "other", nil)
		for _, c := range []*events.Consumer{own, other} {
			require.NoError(t, c.Subscribe(
				events.Handle(noteEvent, func(ctx context.Context, m events.Message[noteV1]) error {
					rec.add(call{consumer: m.Consumer + "/1", eventID: m.ID})
					return nil
				}),
				events.Handle(noteEvent, func(ctx context.Context, m events.Message[noteV1]) error {
					rec.add(call{consumer: m.Consumer + "/2", eventID: m.ID})
					return nil
				}),
				events.Handle(orderPlacedEvent, func(ctx context.Context, m events.Message[orderPlaced]) error {
					rec.add(call{consumer: m.Consumer + "/order", eventID: m.ID})
					return nil
				}),
			))
		}
		require.Equal(t, []string{"test.note", "test.order_placed"}, own.RegisteredEventTypes())
		startEvents(t, db, events.ForwarderConfig{}, own, other)
		em := newEmitter(t, db)
		ctx := context.Background()
		_, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "integration from test"}, events.Meta{})
		require.NoError(t, err)
		_, err = em.Emit(ctx, db.Pool, orderPlacedEvent, orderPlaced{OrderID: "domain"}, events.Meta{})
		require.NoError(t, err)

		pgtest.WaitFor(t, 15*time.Second, "deliveries", func() (bool, error) {
			return rec.count(nil) == 4, nil
		})
		pgtest.WaitFor(t, 10*time.Second, "dispatch jobs to finish", func() (bool, error) {
			return db.CountJobs(t, "available", "running", "retryable", "pending") == 0, nil
		})
		got := map[string]int{}
		var order []string
		for _, c := range rec.snapshot() {
			got[c.consumer]++
			if c.consumer == "other/1" || c.consumer == "other/2" {
				order = append(order, c.consumer)
			}
		}
		require.Equal(t, map[string]int{"other/1": 1, "other/2": 1, "other/order": 1, "own/order": 1}, map[string]int{
			"other/1": got["other/1"], "other/2": got["other/2"], "other/order": got["other/order"], "own/order": got["own/order"]})
		require.Zero(t, got["own/1"]+got["own/2"], "own integration events are skipped")
		require.Equal(t, []string{"other/1", "other/2"}, order, "handlers run in registration order")
	})
}

var _ = outbox.Event{}

func TestLaneRepair(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	d, f, em := startBusForwarder(t, db, "repair")
	first, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "1"}, events.Meta{AggregateID: "z"})
	require.NoError(t, err)
	second, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "2"}, events.Meta{AggregateID: "z"})
	require.NoError(t, err)
	_, err = f.ForwardOnce(ctx)
	require.NoError(t, err)
	id1, s1, _ := dispatchJob(t, db, "repair", first)
	_, s2, _ := dispatchJob(t, db, "repair", second)
	require.Equal(t, "available", s1)
	require.True(t, waiting(s2), s2)

	// The first completes but its promotion is lost (as if edited by hand).
	_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/river_job SET state = 'completed', finalized_at = now() WHERE id = $1`), id1)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_event_lane SET head_seq = 2, updated_at = now() - interval '1 minute'`))
	require.NoError(t, err)

	require.Equal(t, 1, d.RepairLanes(ctx))
	_, s2, _ = dispatchJob(t, db, "repair", second)
	require.Equal(t, "available", s2)
	require.Zero(t, d.RepairLanes(ctx), "nothing left to repair")
}

// A stuck head is repaired while its aggregate's events keep coming: the
// events forwarded behind it change the lane's tail, not its head, so they
// do not make the lane look busy to the sweep (they used to, and a lane
// under a steady stream stayed stuck until the stream paused for 10 s).
func TestLaneRepairWhileEventsKeepComing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	d, f, em := startBusForwarder(t, db, "repair")
	emit := func(text string) string {
		id, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: text}, events.Meta{AggregateID: "z"})
		require.NoError(t, err)
		return id
	}
	first, second := emit("1"), emit("2")
	_, err := f.ForwardOnce(ctx)
	require.NoError(t, err)
	id1, _, _ := dispatchJob(t, db, "repair", first)

	// The first completes but its promotion is lost, a minute ago.
	_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/river_job SET state = 'completed', finalized_at = now() WHERE id = $1`), id1)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_event_lane SET head_seq = 2, updated_at = now() - interval '1 minute'`))
	require.NoError(t, err)

	// A third event of the aggregate arrives just before the sweep.
	third := emit("3")
	_, err = f.ForwardOnce(ctx)
	require.NoError(t, err)
	_, s3, _ := dispatchJob(t, db, "repair", third)
	require.True(t, waiting(s3), s3)

	require.Equal(t, 1, d.RepairLanes(ctx), "the stuck head is promoted")
	_, s2, _ := dispatchJob(t, db, "repair", second)
	require.Equal(t, "available", s2)
	_, s3, _ = dispatchJob(t, db, "repair", third)
	require.True(t, waiting(s3), "the event behind the head still waits its turn: %s", s3)
}

// startBusForwarder starts a dispatcher of one no-op consumer of noteEvent
// (without its repair sweep) and returns it with a forwarder to the bus that
// runs only when asked (ForwardOnce) and an emitter.
func startBusForwarder(t *testing.T, db *pgtest.DB, consumer string) (*events.Dispatcher, *events.Forwarder, *events.Emitter) {
	t.Helper()
	ctx := context.Background()
	c := fastConsumer(t, consumer, nil)
	events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error { return nil })
	d, err := events.NewDispatcher(db.Pool, events.DispatcherConfig{Schema: db.Schema, Consumers: []*events.Consumer{c}, LaneRepairInterval: -1})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	bus, err := events.NewBus(db.Client(t))
	require.NoError(t, err)
	f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{Schema: db.Schema, Publishers: []outbox.Publisher{bus}})
	require.NoError(t, err)
	return d, f, newEmitter(t, db)
}
