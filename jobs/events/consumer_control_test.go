package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
)

// registerElsewhere records a consumer as a worker that then stopped
// running it would have.
func registerElsewhere(t *testing.T, db *pgtest.DB, c *events.Consumer) *events.Dispatcher {
	t.Helper()
	ctx := context.Background()
	d, err := events.NewDispatcher(db.Pool, events.DispatcherConfig{Schema: db.Schema, Consumers: []*events.Consumer{c}, LaneRepairInterval: -1})
	require.NoError(t, err)
	require.NoError(t, d.Start(ctx))
	require.NoError(t, d.Stop(ctx))
	return d
}

func consumerInfo(t *testing.T, db *pgtest.DB, name string) events.ConsumerInfo {
	t.Helper()
	list, err := events.ListConsumers(context.Background(), db.Pool, db.Schema)
	require.NoError(t, err)
	for _, c := range list {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("consumer %s is not listed", name)
	return events.ConsumerInfo{}
}

// dispatchCount counts consumer's dispatches: its jobs and lane events.
func dispatchCount(t *testing.T, db *pgtest.DB, consumer string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`SELECT (SELECT count(*) FROM /*schema*/river_job WHERE args->>'consumer' = $1)
        + (SELECT count(*) FROM /*schema*/tributary_event_lane_event WHERE consumer = $1)`), consumer).Scan(&n))
	return n
}

// TestConsumerNobodyRuns: a consumer no live worker has run for its
// InactiveAfter stops receiving new events (until a worker runs it again);
// the list shows it; removing it removes its work and lanes.
func TestConsumerNobodyRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	renamed, err := events.NewConsumer(events.ConsumerConfig{Name: "billing.v1", InactiveAfter: 10 * time.Minute})
	require.NoError(t, err)
	events.On(renamed, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error { return nil })
	registerElsewhere(t, b.db, renamed)

	// Within InactiveAfter its events wait for it (a deploy loses nothing).
	first := b.emit(t, "A", "ok")
	second := b.emit(t, "A", "ok")
	b.waitHandled(t, second)
	id, state, _ := dispatchJob(t, b.db, "billing.v1", first)
	require.NotZero(t, id)
	require.NotEqual(t, "retryable", state)
	info := consumerInfo(t, b.db, "billing.v1")
	require.True(t, info.Active)
	require.Equal(t, int64(2), info.Pending)
	require.Equal(t, []string{"test.note"}, info.Patterns)
	require.Equal(t, "10m0s", info.InactiveAfter)
	require.Equal(t, events.OrderingBlock, info.Ordering)

	// Not seen by a live worker for longer: new events are not for it.
	_, err = b.db.Pool.Exec(ctx, b.db.Q(`UPDATE /*schema*/tributary_event_consumer SET seen_at = seen_at - interval '11 minutes' WHERE name = 'billing.v1'`))
	require.NoError(t, err)
	later := b.emit(t, "A", "ok")
	b.waitHandled(t, later)
	_, state, _ = dispatchJob(t, b.db, "billing.v1", later)
	require.Empty(t, state, "an inactive consumer gets no new dispatches")
	require.Equal(t, 2, dispatchCount(t, b.db, "billing.v1"))
	info = consumerInfo(t, b.db, "billing.v1")
	require.False(t, info.Active)
	require.Equal(t, int64(2), info.Pending, "its work so far stays until removed")
	live := consumerInfo(t, b.db, "lanes")
	require.True(t, live.Active)
	require.WithinDuration(t, time.Now(), live.SeenAt, time.Minute)

	// A live consumer is not removed by mistake; an unknown name is named.
	_, err = events.RemoveConsumer(ctx, b.db.Pool, b.db.Schema, "lanes", events.RemoveConsumerOpts{})
	require.ErrorIs(t, err, events.ErrConsumerLive)
	_, err = events.RemoveConsumer(ctx, b.db.Pool, b.db.Schema, "nobody", events.RemoveConsumerOpts{})
	require.ErrorIs(t, err, events.ErrUnknownConsumer)
	require.Contains(t, err.Error(), `"nobody"`)

	res, err := events.RemoveConsumer(ctx, b.db.Pool, b.db.Schema, "billing.v1", events.RemoveConsumerOpts{})
	require.NoError(t, err)
	// The head may be running at that moment (tried, found not run here);
	// it is cancelled when it ends. When it ends between the removal's
	// delete of the waiting jobs and its count of the running ones (it is
	// snoozed for the worker that runs the consumer), neither counts it:
	// the report is what the removal saw, and the wait below shows nothing
	// is left.
	require.Contains(t, []int64{1, 2}, res.Jobs+res.Running, "jobs %d, running %d", res.Jobs, res.Running)
	require.Equal(t, int64(1), res.Lanes)
	pgtest.WaitFor(t, 10*time.Second, "no unfinished work left for the removed consumer", func() (bool, error) {
		var n int
		err := b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE args->>'consumer' = 'billing.v1' AND finalized_at IS NULL`)).Scan(&n)
		return n == 0, err
	})
	_, err = events.RemoveConsumer(ctx, b.db.Pool, b.db.Schema, "billing.v1", events.RemoveConsumerOpts{})
	require.ErrorIs(t, err, events.ErrUnknownConsumer, "nothing of it is left")
	list, err := events.ListConsumers(ctx, b.db.Pool, b.db.Schema)
	require.NoError(t, err)
	require.Len(t, list, 1)
}

// TestConsumerBackFromInactive: a worker that runs an inactive consumer
// again makes it receive new events again.
func TestConsumerBackFromInactive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupLanes(t, events.OrderingBlock)
	c, err := events.NewConsumer(events.ConsumerConfig{Name: "audit", InactiveAfter: events.InactiveAfterMin})
	require.NoError(t, err)
	events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error { return nil })
	d := registerElsewhere(t, b.db, c)
	_, err = b.db.Pool.Exec(ctx, b.db.Q(`UPDATE /*schema*/tributary_event_consumer SET seen_at = seen_at - interval '1 hour' WHERE name = 'audit'`))
	require.NoError(t, err)
	missed := b.emit(t, "A", "ok")
	b.waitHandled(t, missed)
	require.Zero(t, dispatchCount(t, b.db, "audit"))

	require.NoError(t, d.Start(ctx))
	t.Cleanup(func() { _ = d.Stop(ctx) })
	back := b.emit(t, "A", "ok")
	b.waitHandled(t, back)
	id, _, _ := dispatchJob(t, b.db, "audit", back)
	require.NotZero(t, id)
	require.True(t, consumerInfo(t, b.db, "audit").Active)
}

func TestConsumerInactiveAfterValidation(t *testing.T) {
	t.Parallel()
	_, err := events.NewConsumer(events.ConsumerConfig{Name: "x", InactiveAfter: time.Minute})
	require.ErrorContains(t, err, "InactiveAfter 1m0s is too short")
	c, err := events.NewConsumer(events.ConsumerConfig{Name: "x", InactiveAfter: -1})
	require.NoError(t, err)
	require.Negative(t, c.Config().InactiveAfter)
	c, err = events.NewConsumer(events.ConsumerConfig{Name: "x"})
	require.NoError(t, err)
	require.Equal(t, events.InactiveAfterDefault, c.Config().InactiveAfter)
}
