package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// TestInstallConsumerQueueWorked: a consumer names no queue and lands on
// "events"; Install refuses it on a runtime that does not work that queue
// (its events would never be handled), naming the consumer and the queue,
// unless told the queue is worked elsewhere.
func TestInstallConsumerQueueWorked(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	c, err := events.NewConsumer(events.ConsumerConfig{Name: "billing"})
	require.NoError(t, err)
	require.Equal(t, events.QueueDefault, c.Config().Queue)
	events.On(c, events.Define[struct{}]("order.placed", nil), func(context.Context, events.Message[struct{}]) error { return nil })
	require.Equal(t, []string{"order.placed"}, func() (names []string) {
		for _, d := range c.Definitions() {
			names = append(names, d.Name())
		}
		return names
	}())

	newRuntime := func(queues map[string]int) *queue.Runtime {
		rt, err := queue.NewRuntime(db.Pool, queue.RuntimeConfig{Schema: db.Schema, Logger: pgtest.Logger(t), Queues: queues})
		require.NoError(t, err)
		return rt
	}
	_, err = events.Install(newRuntime(nil), events.InstallConfig{Consumers: []*events.Consumer{c}})
	require.ErrorContains(t, err, `consumer billing dispatches on queue "events", which this runtime does not work (it works default)`)

	_, err = events.Install(newRuntime(nil), events.InstallConfig{Consumers: []*events.Consumer{c}, SkipQueueCheck: true})
	require.NoError(t, err)

	rt := newRuntime(map[string]int{"default": 1, "events": 1})
	require.Equal(t, map[string]int{"default": 1, "events": 1}, rt.Queues())
	_, err = events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{c}})
	require.NoError(t, err)
}

// TestDispatcherAddConsumer: a consumer added before Start is recorded and
// runs as one given in the config; a nil one, a second of one name and one
// added after Start are refused.
func TestDispatcherAddConsumer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	rt, err := queue.NewRuntime(db.Pool, queue.RuntimeConfig{Schema: db.Schema, Logger: pgtest.Logger(t), Queues: map[string]int{"default": 1, "events": 1}})
	require.NoError(t, err)
	inst, err := events.Install(rt, events.InstallConfig{})
	require.NoError(t, err)
	placed := events.Define[struct{}]("order.placed", nil)
	handled := make(chan struct{}, 1)
	c, err := events.NewConsumer(events.ConsumerConfig{Name: "billing"})
	require.NoError(t, err)
	events.On(c, placed, func(context.Context, events.Message[struct{}]) error {
		handled <- struct{}{}
		return nil
	})
	require.EqualError(t, inst.Dispatcher.AddConsumer(nil), "nil consumer")
	require.NoError(t, inst.Dispatcher.AddConsumer(c))
	require.EqualError(t, inst.Dispatcher.AddConsumer(c), `consumer "billing" is given twice`)
	require.Equal(t, []*events.Consumer{c}, inst.Dispatcher.Consumers())

	require.NoError(t, rt.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
	})
	late, err := events.NewConsumer(events.ConsumerConfig{Name: "late"})
	require.NoError(t, err)
	require.EqualError(t, inst.Dispatcher.AddConsumer(late), "consumer late: cannot add a consumer after the dispatcher started")

	reg, err := events.NewRegistry(placed)
	require.NoError(t, err)
	em, err := events.NewEmitter(events.EmitterConfig{Schema: db.Schema, Registry: reg})
	require.NoError(t, err)
	_, err = em.Emit(ctx, db.Pool, placed, struct{}{}, events.Meta{AggregateID: "o-1"})
	require.NoError(t, err)
	select {
	case <-handled:
	case <-time.After(30 * time.Second):
		t.Fatal("the added consumer did not handle the event within 30s")
	}
}
