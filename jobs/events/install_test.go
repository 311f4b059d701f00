package events_test

import (
	"context"
	"testing"

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
