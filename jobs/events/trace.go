package events

import (
	"context"
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tributary-run/tributary/outbox"
)

// Tracing of events, all of it here. Spans go to the global tracer provider
// (otel.SetTracerProvider); without one they are no-ops and nothing is added
// to the events. The emit span's W3C trace context travels in the event's
// metadata (outbox.Metadata.TraceParent/TraceState), so every consumer's
// handler span is its child, in whatever process and however much later the
// handler runs, and the AMQP bridge publishes the event as its child too.

// TracerName is the instrumentation scope of the events' spans.
const TracerName = "github.com/tributary-run/tributary/jobs/events"

// Span names.
const (
	SpanEmit   = "tributary.emit"
	SpanHandle = "tributary.handle"
)

func tracer() trace.Tracer { return otel.Tracer(TracerName) }

// startEmitSpan starts the span of one emitting statement (one or more
// events) and writes its trace context into each row's metadata.
func startEmitSpan(ctx context.Context, rows []outboxRow) (context.Context, trace.Span, error) {
	typ := rows[0].eventType
	ctx, span := tracer().Start(ctx, SpanEmit+" "+typ, trace.WithSpanKind(trace.SpanKindProducer))
	if !span.SpanContext().IsValid() {
		return ctx, span, nil
	}
	if span.IsRecording() { // attributes cost allocations; a no-op span drops them
		span.SetAttributes(attribute.String("tributary.event.type", typ), attribute.Int("tributary.event.count", len(rows)))
		if len(rows) == 1 {
			span.SetAttributes(attribute.String("tributary.event.id", rows[0].id))
		}
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	for i := range rows {
		var md outbox.Metadata
		if err := json.Unmarshal([]byte(rows[i].metadata), &md); err != nil {
			return ctx, span, fmt.Errorf("error adding trace context to the metadata of event %s: %w", rows[i].id, err)
		}
		md.TraceParent, md.TraceState = carrier["traceparent"], carrier["tracestate"]
		b, err := json.Marshal(md)
		if err != nil {
			return ctx, span, fmt.Errorf("error adding trace context to the metadata of event %s: %w", rows[i].id, err)
		}
		rows[i].metadata = string(b)
	}
	return ctx, span, nil
}

// startHandleSpan starts the span of one delivery of ev to consumer c: a
// child of the span that emitted the event, linked to the span of the job
// that delivers it (River's, when its middleware traces).
func startHandleSpan(ctx context.Context, consumer string, ev *outbox.Event, attempt int) (context.Context, trace.Span) {
	kind := trace.WithSpanKind(trace.SpanKindConsumer)
	var ctxOut context.Context
	var span trace.Span
	if emitted := EmittedSpanContext(ev.Metadata); emitted.IsValid() {
		parent := trace.ContextWithRemoteSpanContext(ctx, emitted)
		if job := trace.SpanContextFromContext(ctx); job.IsValid() {
			ctxOut, span = tracer().Start(parent, SpanHandle+" "+ev.EventType, kind, trace.WithLinks(trace.Link{SpanContext: job}))
		} else {
			ctxOut, span = tracer().Start(parent, SpanHandle+" "+ev.EventType, kind)
		}
	} else {
		ctxOut, span = tracer().Start(ctx, SpanHandle+" "+ev.EventType, kind)
	}
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("tributary.consumer", consumer),
			attribute.String("tributary.event.type", ev.EventType),
			attribute.String("tributary.event.id", ev.ID),
			attribute.Int("tributary.attempt", attempt),
		)
	}
	return ctxOut, span
}

// endSpan records err on span and ends it.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// EmittedSpanContext returns the span context an event's metadata carries:
// that of the span that emitted it, invalid when it carries none.
func EmittedSpanContext(md outbox.Metadata) trace.SpanContext {
	if md.TraceParent == "" {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{"traceparent": md.TraceParent, "tracestate": md.TraceState}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}
