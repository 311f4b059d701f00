package events_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// laneBundle is one ordered consumer ("lanes") running in a runtime, whose
// handler does what each note's text asks: "fail" fails every time, "flaky"
// fails while failing is set, "hang" waits for its context, "gate" waits
// for the bundle's gate, anything else succeeds.
type laneBundle struct {
	failing atomic.Bool
	db      *pgtest.DB
	rt      *queue.Runtime
	inst    *events.Installation
	em      *events.Emitter
	loose   *events.Emitter
	rec     *recorder
	gate    chan struct{}
}

// setupLanes starts the consumer with the given ordering and retry delays,
// and the rest of its configuration the default (its lanes chain).
func setupLanes(t *testing.T, ordering events.Ordering, delays ...time.Duration) *laneBundle {
	t.Helper()
	if len(delays) == 0 {
		delays = []time.Duration{10 * time.Millisecond}
	}
	return setupLanesWith(t, events.ConsumerConfig{Ordering: ordering, RetryDelays: delays})
}

// setupLanesWith is setupLanes with the consumer's configuration cfg (its
// name is set to "lanes").
func setupLanesWith(t *testing.T, cfg events.ConsumerConfig) *laneBundle {
	t.Helper()
	db := pgtest.New(t)
	b := &laneBundle{db: db, rec: &recorder{}, gate: make(chan struct{})}
	cfg.Name = "lanes"
	c, err := events.NewConsumer(cfg)
	require.NoError(t, err)
	events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error {
		switch m.Payload.Text {
		case "fail":
			return errors.New("downstream says no")
		case "flaky":
			if b.failing.Load() {
				return errors.New("downstream is flaky")
			}
		case "hang":
			<-ctx.Done()
			return ctx.Err()
		case "gate":
			select {
			case <-b.gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		b.rec.add(call{eventID: m.ID, aggregateID: m.AggregateID, attempt: m.Attempt})
		return nil
	})
	events.On(c, orderPlacedEvent, func(ctx context.Context, m events.Message[orderPlaced]) error {
		b.rec.add(call{eventID: m.ID, aggregateID: m.AggregateID, attempt: m.Attempt})
		return nil
	})
	if l, ok := c.Limit(); ok {
		b.rt, b.inst = startLimitedEvents(t, db, l, c)
	} else {
		b.rt, b.inst = startEvents(t, db, events.ForwarderConfig{}, c)
	}
	b.em = newEmitter(t, db)
	b.loose = newEmitter(t, db, looseOrderEvent, noteEvent)
	return b
}

func (b *laneBundle) emit(t *testing.T, agg, text string) string {
	t.Helper()
	id, err := b.em.Emit(context.Background(), b.db.Pool, noteEvent, noteV1{Text: text}, events.Meta{AggregateID: agg})
	require.NoError(t, err)
	return id
}

// emitInvalid emits an order the consumer's validation rejects.
func (b *laneBundle) emitInvalid(t *testing.T, agg string) string {
	t.Helper()
	id, err := b.loose.Emit(context.Background(), b.db.Pool, looseOrderEvent, looseOrder{OrderID: "o", Amount: -1}, events.Meta{AggregateID: agg})
	require.NoError(t, err)
	return id
}

// waitJob waits for the event's dispatch job to reach state and returns its
// id. State laneEvent waits for the event to wait as a lane event (no job
// yet; id 0).
func (b *laneBundle) waitJob(t *testing.T, eventID, state string) int64 {
	t.Helper()
	var id int64
	pgtest.WaitFor(t, 15*time.Second, "the dispatch of "+eventID+" to be "+state, func() (bool, error) {
		var s string
		id, s, _ = dispatchJob(t, b.db, "lanes", eventID)
		return s == state, nil
	})
	return id
}

// asPendingJobs turns the lane events of aggregate agg into pending
// dispatch jobs, their event packed: the dispatch jobs waiting behind a
// lane's head that an older version wrote, and that the dispatcher puts
// back when one was made available early.
func (b *laneBundle) asPendingJobs(t *testing.T, agg string) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), b.db.Q(`WITH ev AS (
    DELETE FROM /*schema*/tributary_event_lane_event WHERE aggregate_id = $1 RETURNING queue, max_attempts, args
)
INSERT INTO /*schema*/river_job (state, attempt, max_attempts, created_at, scheduled_at, priority, args, kind, metadata, queue, tags)
SELECT 'pending', 0, max_attempts, now(), now(), 1, jsonb_set(args::jsonb, '{event}', to_jsonb((args::jsonb -> 'event')::text)),
       'tributary.event.dispatch', '{}', queue, '{}' FROM ev`), agg)
	require.NoError(t, err)
}

// laneEvent is the state of an event waiting as a lane event, without a
// dispatch job (a chained consumer's, migration 0016); laneEventClaimed
// that of a lane event a chain runs.
const (
	laneEvent        = "lane event"
	laneEventClaimed = "lane event claimed"
)

// laneEventState is laneEvent or laneEventClaimed for an event that is a
// lane event, "" for one that is not.
func (b *laneBundle) laneEventState(t *testing.T, eventID string) string {
	t.Helper()
	var claimed []bool
	rows, err := b.db.Pool.Query(context.Background(), b.db.Q(`SELECT claimed_by IS NOT NULL FROM /*schema*/tributary_event_lane_event
        WHERE consumer = 'lanes' AND (args::jsonb->>'event')::jsonb->>'id' = $1`), eventID)
	require.NoError(t, err)
	claimed, err = pgx.CollectRows(rows, pgx.RowTo[bool])
	require.NoError(t, err)
	switch {
	case len(claimed) == 0:
		return ""
	case claimed[0]:
		return laneEventClaimed
	default:
		return laneEvent
	}
}

func (b *laneBundle) waitHandled(t *testing.T, eventID string) {
	t.Helper()
	pgtest.WaitFor(t, 15*time.Second, "event "+eventID+" to be handled", func() (bool, error) {
		return b.rec.count(func(c call) bool { return c.eventID == eventID }) > 0, nil
	})
}

// ageLanes makes every lane look quiet to the repair sweep.
func (b *laneBundle) ageLanes(t *testing.T) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), b.db.Q(`UPDATE /*schema*/tributary_event_lane SET updated_at = updated_at - interval '1 hour'`))
	require.NoError(t, err)
}

// handledOrder is the ids of the handled events in handling order.
func (b *laneBundle) handledOrder() []string {
	var ids []string
	for _, c := range b.rec.snapshot() {
		ids = append(ids, c.eventID)
	}
	return ids
}

// TestLaneHeadCancelledOrDeletedElsewhere: a head cancelled or deleted
// outside tributary (River's client or UI, SQL) releases its lane through
// the repair sweep; a running head cancelled through River releases it as
// soon as its handler returns.
func TestLaneHeadCancelledOrDeletedElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CancelledThroughRiver", func(t *testing.T) {
		t.Parallel()
		b := setupLanes(t, events.OrderingBlock, time.Hour)
		head := b.emit(t, "A", "fail")
		next := b.emit(t, "A", "ok")
		headJob := b.waitJob(t, head, "retryable")
		_, err := b.rt.River().JobCancel(ctx, headJob)
		require.NoError(t, err)
		b.ageLanes(t)
		b.inst.Dispatcher.RepairLanes(ctx)
		b.waitHandled(t, next)
	})

	t.Run("RunningHeadCancelledThroughRiver", func(t *testing.T) {
		t.Parallel()
		b := setupLanes(t, events.OrderingBlock)
		head := b.emit(t, "A", "hang")
		next := b.emit(t, "A", "ok")
		headJob := b.waitJob(t, head, "running")
		_, err := b.rt.River().JobCancel(ctx, headJob)
		require.NoError(t, err)
		b.waitHandled(t, next) // no repair sweep: the dispatcher releases it
		b.waitJob(t, head, "cancelled")
	})

	t.Run("DeletedWithSQL", func(t *testing.T) {
		t.Parallel()
		b := setupLanes(t, events.OrderingBlock, time.Hour)
		head := b.emit(t, "A", "fail")
		next := b.emit(t, "A", "ok")
		headJob := b.waitJob(t, head, "retryable")
		_, err := b.db.Pool.Exec(ctx, b.db.Q(`DELETE FROM /*schema*/river_job WHERE id = $1`), headJob)
		require.NoError(t, err)
		b.ageLanes(t)
		b.inst.Dispatcher.RepairLanes(ctx)
		b.waitHandled(t, next)
	})
}

// TestLaneJobRunAheadThroughRiver: a pending lane job made available through
// River directly (not tributary) does not run before its lane's head: the
// dispatcher puts it back to pending, attempt not spent, and it runs after
// the head.
func TestLaneJobRunAheadThroughRiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	head := b.emit(t, "A", "gate")
	next := b.emit(t, "A", "ok")
	b.waitJob(t, head, "running")
	b.waitJob(t, next, laneEvent)
	b.asPendingJobs(t, "A")
	nextJob := b.waitJob(t, next, "pending")

	row, err := b.rt.River().JobRetry(ctx, nextJob)
	require.NoError(t, err)
	require.Equal(t, "available", string(row.State))
	pgtest.WaitFor(t, 15*time.Second, "the early job to be worked and put back", func() (bool, error) {
		var state string
		var attempted bool
		err := b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT state::text, attempted_at IS NOT NULL FROM /*schema*/river_job WHERE id = $1`), nextJob).Scan(&state, &attempted)
		return state == "pending" && attempted, err
	})
	require.Zero(t, b.rec.count(nil), "nothing ran ahead of the head")
	var attempt int
	require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT attempt FROM /*schema*/river_job WHERE id = $1`), nextJob).Scan(&attempt))
	require.Zero(t, attempt, "the early start did not spend an attempt")

	close(b.gate)
	b.waitHandled(t, next)
	require.Equal(t, []string{head, next}, b.handledOrder())
	require.Equal(t, 1, b.rec.snapshot()[1].attempt)
}

// TestDispatchForUnregisteredConsumer: a dispatch for a consumer that no
// worker of its queue runs (renamed or removed) waits without spending its
// attempts, instead of failing for good and blocking its lane.
func TestDispatchForUnregisteredConsumer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	// "gone" was registered by a worker that no longer runs it.
	gone := fastConsumer(t, "gone", nil)
	events.On(gone, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error { return nil })
	d, err := events.NewDispatcher(b.db.Pool, events.DispatcherConfig{Schema: b.db.Schema, Consumers: []*events.Consumer{gone}, LaneRepairInterval: -1})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	require.NoError(t, d.Stop(ctx))

	ev := b.emit(t, "A", "ok")
	b.waitHandled(t, ev)
	var jobID int64
	var state, errs string
	var attempt int
	pgtest.WaitFor(t, 15*time.Second, "the dispatch for gone to be tried, and to wait", func() (bool, error) {
		err := b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT id, state::text, attempt, coalesce(errors::text, '') FROM /*schema*/river_job
            WHERE args->>'consumer' = 'gone' AND attempted_at IS NOT NULL AND state <> 'running'`)).Scan(&jobID, &state, &attempt, &errs)
		return err == nil, nil
	})
	require.Zero(t, attempt, "no attempt spent")
	require.Empty(t, errs, "no failure recorded")
	require.Contains(t, []string{"scheduled", "available"}, state, "waiting for a worker that runs it")
}

// TestLaneCompletionKeepsRiverOutput: a lane dispatch completed alone (one
// at a time on a quiet lane, the completion a transaction of its own) keeps
// what its handler recorded in River's metadata: River's completer merges
// it after the lane's commit completed the job.
func TestLaneCompletionKeepsRiverOutput(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	c := fastConsumer(t, "outputs", func(cfg *events.ConsumerConfig) { cfg.DispatchBatch = 1 })
	events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error {
		return river.RecordOutput(ctx, m.Payload.Text)
	})
	startEvents(t, db, events.ForwarderConfig{}, c)
	texts := []string{"one", "two", "three"}
	em := newEmitter(t, db)
	for i, text := range texts {
		_, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: text}, events.Meta{AggregateID: "A"})
		require.NoError(t, err)
		// Each event after the one before completed: every completion alone.
		pgtest.WaitFor(t, 20*time.Second, "the dispatch of "+text+" completed with its output", func() (bool, error) {
			var n int
			err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job
WHERE kind = 'tributary.event.dispatch' AND state = 'completed' AND metadata ? 'output'`)).Scan(&n)
			return n == i+1, err
		})
	}
	rows, err := db.Pool.Query(ctx, db.Q(`SELECT metadata ->> 'output' FROM /*schema*/river_job
WHERE kind = 'tributary.event.dispatch' ORDER BY (args ->> 'seq')::bigint`))
	require.NoError(t, err)
	outputs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, texts, outputs)
}
