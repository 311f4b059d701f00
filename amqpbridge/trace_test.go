package amqpbridge

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tributary-run/tributary/internal/amqptest"
)

// The trace context travels in string headers "traceparent" and
// "tracestate", as OpenTelemetry's W3C propagator in an amqplib-based
// service writes and reads them: a message such a service published is
// handled in a child of its span, and what the publisher sends carries the
// publish span for such a service to continue.
func TestTraceContextInHeadersBothWays(t *testing.T) {
	// Not parallel: it sets the global tracer provider.
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	cfg, b := testConfig(t, amqptest.UniqueName("trace"))
	got := make(chan trace.SpanContext, 1)
	c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Handler: func(ctx context.Context, d *Delivery) error {
		got <- trace.SpanContextFromContext(ctx)
		return nil
	}})

	// In: headers as a Node service's propagator sets them.
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	publishRaw(t, b.ch, c.Topology().Main, []byte(`{}`), amqp.Table{"traceparent": traceparent, "tracestate": "vendor=1"})
	var sc trace.SpanContext
	select {
	case sc = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the message was not handled within 10s")
	}
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", sc.TraceID().String())
	require.Equal(t, "vendor=1", sc.TraceState().String())
	var process tracetest.SpanStub
	amqptest.Eventually(t, 5*time.Second, "the process span to end", func() bool {
		for _, s := range exporter.GetSpans() {
			if s.SpanContext.SpanID() == sc.SpanID() {
				process = s
				return true
			}
		}
		return false
	})
	require.Equal(t, "00f067aa0ba902b7", process.Parent.SpanID().String(), "the handler's span is the publisher's child")
	require.True(t, process.Parent.IsRemote())
	t.Logf("consumed: %q, parent %s", process.Name, process.Parent.SpanID())

	// Out: the publisher's message carries its publish span.
	pub, err := NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Stop(context.Background()) })
	ctx, parent := tp.Tracer("test").Start(context.Background(), "caller")
	dest := amqptest.UniqueName("trace-out")
	_, err = b.ch.QueueDeclare(dest, false, true, false, false, nil)
	require.NoError(t, err)
	headers := amqp.Table{"x-app": "kept"}
	require.NoError(t, pub.Publish(ctx, "", dest, amqp.Publishing{Body: []byte(`{}`), Headers: headers}))
	parent.End()
	require.Equal(t, amqp.Table{"x-app": "kept"}, headers, "the caller's headers are not changed")
	m := amqptest.Get(t, b.ch, dest, 5*time.Second)
	require.Equal(t, "kept", m.Headers["x-app"])
	sent := HeaderSpanContext(m.Headers)
	require.True(t, sent.IsValid(), "headers %v", m.Headers)
	require.Equal(t, parent.SpanContext().TraceID(), sent.TraceID())
	var publish tracetest.SpanStub
	for _, s := range exporter.GetSpans() {
		if s.SpanContext.SpanID() == sent.SpanID() {
			publish = s
		}
	}
	require.Equal(t, "publish "+dest, publish.Name)
	require.Equal(t, parent.SpanContext().SpanID(), publish.Parent.SpanID())
	t.Logf("published: %q, traceparent %v", publish.Name, m.Headers["traceparent"])
}
