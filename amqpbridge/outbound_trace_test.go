package amqpbridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
)

// An event the outbound bridge forwards to an exchange is published as a
// child of the span that emitted it, and the message carries that trace to
// whoever consumes it.
func TestOutboundEventContinuesItsTrace(t *testing.T) {
	// Not parallel: it sets the global tracer provider.
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	conn := amqptest.Conn(t)
	ch := amqptest.Channel(t, conn)
	db := pgtest.New(t)
	exchange := amqptest.UniqueName("tributary-outbound-trace")
	qname := amqptest.UniqueName("outbound-trace-sink")
	t.Cleanup(func() {
		if c, err := amqptest.Conn(t).Channel(); err == nil {
			_ = c.ExchangeDelete(exchange, false, false)
		}
	})
	amqptest.DeleteQueuesOnCleanup(t, conn, qname)
	require.NoError(t, ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil))
	_, err := ch.QueueDeclare(qname, true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(qname, "order.*", exchange, false, nil))

	pub, err := amqpbridge.NewPublisher(amqpbridge.Config{URL: amqptest.URL(), ConnectionName: amqptest.UniqueName("tributary-test"), Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	out, err := amqpbridge.NewOutbound(pub, amqpbridge.OutboundConfig{Exchange: exchange})
	require.NoError(t, err)
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		require.NoError(t, rt.AddService(pub))
		_, err := events.Install(rt, events.InstallConfig{Forwarder: events.ForwarderConfig{Publishers: []outbox.Publisher{out}}})
		require.NoError(t, err)
	})
	reg, err := events.NewRegistry(orderPlacedEvent)
	require.NoError(t, err)
	em, err := events.NewEmitter(events.EmitterConfig{Schema: db.Schema, Registry: reg})
	require.NoError(t, err)

	ctx, root := tp.Tracer("app").Start(context.Background(), "place order")
	_, err = em.Emit(ctx, db.Pool, orderPlacedEvent, orderPlaced{ID: 8}, events.Meta{})
	require.NoError(t, err)
	root.End()

	d := amqptest.Get(t, ch, qname, 30*time.Second)
	sent := amqpbridge.HeaderSpanContext(d.Headers)
	require.True(t, sent.IsValid(), "headers %v", d.Headers)
	require.Equal(t, root.SpanContext().TraceID(), sent.TraceID())
	byID := map[trace.SpanID]tracetest.SpanStub{}
	amqptest.Eventually(t, 10*time.Second, "the publish span to end", func() bool {
		for _, s := range exporter.GetSpans() {
			byID[s.SpanContext.SpanID()] = s
		}
		_, ok := byID[sent.SpanID()]
		return ok
	})
	publish := byID[sent.SpanID()]
	require.Equal(t, "publish "+exchange, publish.Name)
	emit, ok := byID[publish.Parent.SpanID()]
	require.True(t, ok, "the publish span's parent was exported")
	require.Equal(t, "tributary.emit order.placed", emit.Name)
	require.Equal(t, root.SpanContext().SpanID(), emit.Parent.SpanID())
}
