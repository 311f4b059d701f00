package amqpbridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/amqpbridge/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

type orderPlaced struct {
	ID int `json:"id"`
}

var orderPlacedEvent = events.Define[orderPlaced]("order.placed", nil)

// TestOutboundBehindTheForwarder runs the whole outbound path: an event
// emitted into the outbox is forwarded by the events forwarder to the
// Outbound publisher, arrives on a queue bound to the exchange by its event
// type, and its outbox row is SENT (which the forwarder does only once every
// publisher, here after the broker's confirm, accepted it).
func TestOutboundBehindTheForwarder(t *testing.T) {
	t.Parallel()
	conn := amqptest.Conn(t)
	ch := amqptest.Channel(t, conn)
	db := pgtest.New(t)
	exchange := amqptest.UniqueName("tributary-outbound")
	qname := amqptest.UniqueName("outbound-sink")
	t.Cleanup(func() {
		if c, err := amqptest.Conn(t).Channel(); err == nil {
			_ = c.ExchangeDelete(exchange, false, false)
		}
	})
	amqptest.DeleteQueuesOnCleanup(t, conn, qname)

	cfg := amqpbridge.Config{URL: amqptest.URL(), ConnectionName: amqptest.UniqueName("tributary-test"), Logger: pgtest.Logger(t)}
	pub, err := amqpbridge.NewPublisher(cfg)
	require.NoError(t, err)
	out, err := amqpbridge.NewOutbound(pub, amqpbridge.OutboundConfig{Exchange: exchange})
	require.NoError(t, err)
	// The exchange and a queue for order events exist before anything is
	// forwarded (the outbound side declares the exchange too).
	require.NoError(t, ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil))
	_, err = ch.QueueDeclare(qname, true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(qname, "order.*", exchange, false, nil))

	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		require.NoError(t, rt.AddService(pub)) // before the forwarder: stopped after it
		_, err := events.Install(rt, events.InstallConfig{Forwarder: events.ForwarderConfig{Publishers: []queue.OutboxPublisher{out}}})
		require.NoError(t, err)
	})

	reg, err := events.NewRegistry(orderPlacedEvent)
	require.NoError(t, err)
	em, err := events.NewEmitter(events.EmitterConfig{Schema: db.Schema, Registry: reg})
	require.NoError(t, err)
	id, err := em.EmitTx(context.Background(), db.Pool, orderPlacedEvent, orderPlaced{ID: 7}, events.Meta{AggregateID: "order-7"})
	require.NoError(t, err)

	d := amqptest.Get(t, ch, qname, 30*time.Second)
	require.Equal(t, id, d.MessageId)
	require.Equal(t, "order.placed", d.RoutingKey)
	require.JSONEq(t, `{"id":7}`, string(d.Body))
	require.Equal(t, "order-7", d.Headers[amqpbridge.HeaderAggregateID])

	amqptest.Eventually(t, 10*time.Second, "outbox row SENT", func() bool {
		var status string
		require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q("SELECT status FROM /*schema*/tributary_outbox WHERE id = $1"), id).Scan(&status))
		return status == "SENT"
	})
}
