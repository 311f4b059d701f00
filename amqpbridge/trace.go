package amqpbridge

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing of the bridge, all of it here. Spans go to the global tracer
// provider (otel.SetTracerProvider); without one they are no-ops and no
// header is added. The W3C trace context travels in the "traceparent" and
// "tracestate" headers, as OpenTelemetry's propagators for amqplib-based
// services write and read them, both ways: a publish carries the span of
// its context (or, for a message that already carries trace context such
// as an outbox event's, a child of that), and a consumed message's handler
// span is a child of the span that published it.

// TracerName is the instrumentation scope of the bridge's spans.
const TracerName = "github.com/tributary-run/tributary/amqpbridge"

// The trace context headers.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

func tracer() trace.Tracer { return otel.Tracer(TracerName) }

// headerCarrier adapts message headers to the propagators. Only string
// values are read: that is how every W3C propagator writes them.
type headerCarrier amqp.Table

func (h headerCarrier) Get(key string) string {
	v, _ := h[key].(string)
	return v
}

func (h headerCarrier) Set(key, value string) { h[key] = value }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// HeaderSpanContext returns the span context message headers carry, invalid
// when they carry none.
func HeaderSpanContext(headers amqp.Table) trace.SpanContext {
	if headers == nil {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), headerCarrier(headers)))
}

// startPublishSpan starts the span of one publish and returns msg with the
// span's trace context in its headers (a copy: the caller's table is not
// changed). Without a span in ctx, a message that carries trace context
// already is published as its child.
func startPublishSpan(ctx context.Context, exchange, routingKey string, msg amqp.Publishing) (amqp.Publishing, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		if sc := HeaderSpanContext(msg.Headers); sc.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	dest := exchange
	if dest == "" {
		dest = routingKey // the default exchange routes to the queue of that name
	}
	ctx, span := tracer().Start(ctx, "publish "+dest, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.destination.name", exchange),
		attribute.String("messaging.rabbitmq.destination.routing_key", routingKey),
		attribute.String("messaging.message.id", msg.MessageId),
	))
	if !span.SpanContext().IsValid() {
		return msg, span
	}
	h := make(amqp.Table, len(msg.Headers)+2)
	for k, v := range msg.Headers {
		h[k] = v
	}
	delete(h, HeaderTraceState) // the new context's state, or none
	propagation.TraceContext{}.Inject(ctx, headerCarrier(h))
	msg.Headers = h
	return msg, span
}

// startProcessSpan starts the span of handling one delivery: a child of
// the span that published it when its headers say which.
func startProcessSpan(ctx context.Context, d *Delivery) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("messaging.system", "rabbitmq"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", d.Queue),
		attribute.String("messaging.message.id", d.MessageID),
		attribute.Int("tributary.amqp.retry_count", d.RetryCount),
	)}
	if sc := HeaderSpanContext(d.Headers); sc.IsValid() {
		if cur := trace.SpanContextFromContext(ctx); cur.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: cur}))
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return tracer().Start(ctx, "process "+d.Queue, opts...)
}

// tracedHandOff wraps a batch hand-off in a span linked to the span of each
// message of the batch that carries one (a batch has many parents).
func tracedHandOff(queue string, handOff func(context.Context, []*Delivery) error) func(context.Context, []*Delivery) error {
	return func(ctx context.Context, batch []*Delivery) error {
		var links []trace.Link
		for _, d := range batch {
			if sc := HeaderSpanContext(d.Headers); sc.IsValid() {
				links = append(links, trace.Link{SpanContext: sc})
			}
		}
		ctx, span := tracer().Start(ctx, "process "+queue, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
			trace.WithAttributes(
				attribute.String("messaging.system", "rabbitmq"),
				attribute.String("messaging.operation.type", "process"),
				attribute.String("messaging.destination.name", queue),
				attribute.Int("messaging.batch.message_count", len(batch)),
			))
		err := handOff(ctx, batch)
		endSpan(span, err)
		return err
	}
}

func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
