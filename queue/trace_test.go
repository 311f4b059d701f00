package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestOtelConfigured: without providers the tracing middleware runs the job
// directly; once a tracer provider is set (after the middleware was made, as
// an application may do) the next job gets its work span, and a meter
// provider alone also counts as configured. It pins the otel internals
// otelConfigured relies on, so an otel upgrade that moves its default
// providers fails here.
func TestOtelConfigured(t *testing.T) {
	// Not parallel: it sets the global providers.
	mw := tracingMiddleware().(rivertype.WorkerMiddleware)
	job := &rivertype.JobRow{ID: 1, Kind: "demo.noop", Queue: "default", Attempt: 1, MaxAttempts: 25,
		CreatedAt: time.Now(), ScheduledAt: time.Now(), Metadata: []byte(`{}`), EncodedArgs: []byte(`{}`)}
	failed := errors.New("job failed")
	calls := 0
	work := func(context.Context) error { calls++; return failed }

	require.False(t, otelConfigured(), "no provider set in this test binary yet")
	require.ErrorIs(t, mw.Work(context.Background(), job, work), failed)
	require.Equal(t, 1, calls)

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		if otel.GetTracerProvider() != prevTP {
			otel.SetTracerProvider(prevTP)
		}
		_ = tp.Shutdown(context.Background())
	})
	require.True(t, otelConfigured())
	require.ErrorIs(t, mw.Work(context.Background(), job, work), failed)
	require.Equal(t, 2, calls)
	spans := rec.Ended()
	require.Len(t, spans, 1)
	require.Equal(t, "river.work/demo.noop", spans[0].Name())

	otel.SetTracerProvider(prevTP)
	require.False(t, otelConfigured(), "the default tracer provider back")
	prevMP := otel.GetMeterProvider()
	otel.SetMeterProvider(noop.NewMeterProvider())
	t.Cleanup(func() { otel.SetMeterProvider(prevMP) })
	require.True(t, otelConfigured(), "a meter provider alone")
}
