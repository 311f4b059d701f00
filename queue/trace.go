package queue

import (
	"context"
	"reflect"

	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel"
)

// tracingMiddleware is River's own OpenTelemetry middleware
// (rivercontrib/otelriver) on the global tracer and meter providers: every
// job inserted gets an insert span and every job worked a work span
// ("river.work/KIND"), whose context the job's code runs in. The inserting
// span's W3C trace context is stored in the job's metadata and linked from
// the work span. Without providers (otel.SetTracerProvider,
// otel.SetMeterProvider) it is skipped, job by job (see otelConfigured).
// Every River client tributary creates has it, outermost.
func tracingMiddleware() rivertype.Middleware {
	return newTracing(nil)
}

// newTracing is tracingMiddleware with guard, when not nil, called inside
// it as the innermost layer: the runtime's guardJob, when no other
// middleware sits between the two, so a job passes one layer of River's
// middleware chain instead of two.
func newTracing(guard rivertype.WorkerMiddleware) tracing {
	return tracing{otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		EnableTracePropagation:      true,
		EnableWorkSpanJobKindSuffix: true,
	}), guard}
}

// tracing is otelriver's middleware, bypassed while the process has set no
// provider: its spans and instruments would then do nothing, but it still
// built them (a span, the attribute set of three instruments sorted and
// hashed, the job's metadata decoded for a link): most of the CPU per job
// that tributary's runtime would spend over a bare River client in
// `tributary bench jobs`. Its other methods (River's metric hook) are
// otelriver's own.
//
// Being the outermost layer of every job, Work also makes room on the job's
// goroutine for all of it at once (growJobStack).
type tracing struct {
	*otelriver.Middleware
	guard rivertype.WorkerMiddleware
}

func (t tracing) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	growJobStack()
	if !otelConfigured() {
		if t.guard != nil {
			return t.guard.Work(ctx, job, doInner)
		}
		return doInner(ctx)
	}
	if t.guard != nil {
		return t.Middleware.Work(ctx, job, func(ctx context.Context) error { return t.guard.Work(ctx, job, doInner) })
	}
	return t.Middleware.Work(ctx, job, doInner)
}

func (t tracing) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	if !otelConfigured() {
		return doInner(ctx)
	}
	return t.Middleware.InsertMany(ctx, params, doInner)
}

// otelGlobalPackage is where OpenTelemetry's default global providers live:
// until a process sets its own, otel.GetTracerProvider and
// otel.GetMeterProvider return these delegating no-ops.
const otelGlobalPackage = "go.opentelemetry.io/otel/internal/global"

// otelConfigured reports whether the process has set a global tracer or
// meter provider. It is asked per job (two atomic loads), so a provider set
// after the runtime was created counts from the next job on, as it would
// with otelriver always on (its tracer delegates to the provider set
// later). TestOtelConfigured pins the otel internals this relies on.
func otelConfigured() bool {
	return !isOtelDefault(otel.GetTracerProvider()) || !isOtelDefault(otel.GetMeterProvider())
}

func isOtelDefault(provider any) bool {
	t := reflect.TypeOf(provider)
	return t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == otelGlobalPackage
}
