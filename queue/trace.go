package queue

import (
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
)

// tracingMiddleware is River's own OpenTelemetry middleware
// (rivercontrib/otelriver) on the global tracer and meter providers: every
// job inserted gets an insert span and every job worked a work span
// ("river.work/KIND"), whose context the job's code runs in. The inserting
// span's W3C trace context is stored in the job's metadata and linked from
// the work span. Without providers (otel.SetTracerProvider) the spans are
// no-ops. Every River client tributary creates has it, outermost.
func tracingMiddleware() rivertype.Middleware {
	return otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
		EnableTracePropagation:      true,
		EnableWorkSpanJobKindSuffix: true,
	})
}
