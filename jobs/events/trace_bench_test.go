package events

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/tributary-run/tributary/outbox"
)

// BenchmarkTracingWithoutProvider is what tracing adds to one event when no
// tracer provider is set (the default): the emit span and one consumer's
// handler span, both no-ops. The baseline in the same run is encoding the
// event's metadata, which every emit does anyway.
//
//	go test -run '^$' -bench TracingWithoutProvider -benchmem ./jobs/events/
func BenchmarkTracingWithoutProvider(b *testing.B) {
	md, _ := json.Marshal(outbox.Metadata{CorrelationID: "req-1"})
	rows := []outboxRow{{id: "0190c1f2-0000-7000-8000-000000000000", eventType: "order.placed", metadata: string(md)}}
	ev := &outbox.Event{ID: rows[0].id, EventType: "order.placed"}
	ctx := context.Background()
	b.Run("baseline-metadata-encode", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(outbox.Metadata{CorrelationID: "req-1"})
		}
	})
	b.Run("emit-and-handle-spans", func(b *testing.B) {
		for b.Loop() {
			_, span, _ := startEmitSpan(ctx, rows)
			endSpan(span, nil)
			_, hspan := startHandleSpan(ctx, "billing", ev, 1)
			endSpan(hspan, nil)
		}
	})
}
