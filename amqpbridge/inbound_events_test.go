package amqpbridge

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

type noteEvent struct {
	N int `json:"n"`
}

// TestEventInserter runs messages from a real RabbitMQ queue through the
// inbound bridge into the in-database bus of a real runtime: each reaches
// the consumer once with what its message carried, and the messages that
// cannot be events go to .failed alone.
func TestEventInserter(t *testing.T) {
	t.Parallel()
	cfg, b := testConfig(t, amqptest.UniqueName("inbound-events"))
	db := pgtest.New(t)

	var mu sync.Mutex
	got := map[string][]events.Message[noteEvent]{}
	c, err := events.NewConsumer(events.ConsumerConfig{Name: "notes", Queue: "default"})
	require.NoError(t, err)
	events.On(c, events.Define[noteEvent]("amqp.note", nil), func(_ context.Context, m events.Message[noteEvent]) error {
		mu.Lock()
		defer mu.Unlock()
		got[m.ID] = append(got[m.ID], m)
		return nil
	})
	rt, err := queue.NewRuntime(db.Pool, queue.RuntimeConfig{Schema: db.Schema, Logger: pgtest.Logger(t), FetchCooldown: 5 * time.Millisecond})
	require.NoError(t, err)
	inst, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{c}, NoForwarder: true})
	require.NoError(t, err)
	require.NoError(t, rt.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Stop(ctx)
	})

	in := startInbound(t, cfg, b, InboundConfig{Queue: b.queue, DB: db.Pool, Insert: EventInserter(inst.Bus, EventInserterConfig{})})

	publish := func(p amqp.Publishing) {
		t.Helper()
		p.DeliveryMode = amqp.Persistent
		require.NoError(t, b.ch.PublishWithContext(context.Background(), "", in.Topology().Main, false, false, p))
	}
	stamp := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	const n = 40
	for i := range n {
		p := amqp.Publishing{
			MessageId: fmt.Sprintf("m-%d", i), Type: "amqp.note", CorrelationId: "corr-1", Timestamp: stamp,
			Body:    fmt.Appendf(nil, `{"n":%d}`, i),
			Headers: amqp.Table{HeaderActor: "warehouse", "x-meta-tenant": "t1", HeaderEventVersion: int32(2)},
		}
		if i%4 == 0 { // every fourth with an aggregate, through its lane
			p.Headers[HeaderAggregateID] = fmt.Sprintf("order-%d", i%3)
		}
		publish(p)
		if i == 20 {
			publish(amqp.Publishing{MessageId: "bad-json", Type: "amqp.note", Body: []byte("not json")})
			publish(amqp.Publishing{MessageId: "no-type", Body: []byte(`{"n":-1}`)})
		}
	}

	reasons := map[string]string{}
	for range 2 {
		f := amqptest.Get(t, b.ch, in.Topology().Failed, 10*time.Second)
		reasons[f.MessageId] = headerString(f.Headers, HeaderFailureReason)
	}
	require.Contains(t, reasons["bad-json"], `message "bad-json" cannot be an event: the body is not JSON`)
	require.Contains(t, reasons["no-type"], `message "no-type" cannot be an event: it has no type property`)

	amqptest.Eventually(t, 20*time.Second, "every event handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == n
	})
	require.Equal(t, 0, amqptest.Depth(t, b.ch, in.Topology().Main))
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		ms := got[fmt.Sprintf("m-%d", i)]
		require.Len(t, ms, 1, "message m-%d", i)
		m := ms[0]
		require.Equal(t, i, m.Payload.N)
		require.Equal(t, "amqp.note", m.Type)
		require.Equal(t, 2, m.Version)
		require.Equal(t, events.EventKindIntegration, m.EventKind)
		require.Equal(t, "corr-1", m.Metadata.CorrelationID)
		require.Equal(t, "warehouse", m.Metadata.Actor)
		require.Equal(t, map[string]string{"tenant": "t1"}, m.Metadata.Extra)
		require.True(t, stamp.Equal(m.CreatedAt), "created at %v", m.CreatedAt)
		if i%4 == 0 {
			require.Equal(t, fmt.Sprintf("order-%d", i%3), m.AggregateID)
		} else {
			require.Empty(t, m.AggregateID)
		}
	}
}
