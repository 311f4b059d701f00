package queue

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
)

// BenchmarkTracingMiddlewareWithoutProvider is what River's otel middleware
// adds to each job worked when no tracer or meter provider is set (the
// default); the baseline is the same job function called directly.
//
//	go test -run '^$' -bench TracingMiddlewareWithoutProvider -benchmem ./queue/
func BenchmarkTracingMiddlewareWithoutProvider(b *testing.B) {
	mw := tracingMiddleware().(rivertype.WorkerMiddleware)
	job := &rivertype.JobRow{ID: 1, Kind: "demo.noop", Queue: "default", Attempt: 1, MaxAttempts: 25,
		CreatedAt: time.Now(), ScheduledAt: time.Now(), Metadata: []byte(`{}`), EncodedArgs: []byte(`{}`)}
	work := func(context.Context) error { return nil }
	ctx := context.Background()
	b.Run("baseline-direct", func(b *testing.B) {
		for b.Loop() {
			_ = work(ctx)
		}
	})
	b.Run("otelriver-work", func(b *testing.B) {
		for b.Loop() {
			_ = mw.Work(ctx, job, work)
		}
	})
}
