package events

import (
	"context"
	"log/slog"
	"sync"

	"github.com/tributary-run/tributary/outbox"
)

type ctxKey int

// ctxKeyHandler holds a handler's *lazyLogger, which also carries the
// event's correlation id: one context value, not two.
const ctxKeyHandler ctxKey = 0

// CorrelationID returns the correlation id of the event a handler is
// running for, or "" outside a handler. Pass it on as Meta.CorrelationID
// when the handler emits events of its own.
func CorrelationID(ctx context.Context) string {
	if l, ok := ctx.Value(ctxKeyHandler).(*lazyLogger); ok {
		return l.ev.Metadata.CorrelationID
	}
	return ""
}

// Logger returns the handler's logger, which carries the consumer, event id
// and type, aggregate and correlation id as attributes. Outside a handler it
// returns slog.Default().
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(ctxKeyHandler).(*lazyLogger); ok {
		return l.get()
	}
	return slog.Default()
}

// lazyLogger builds a handler's logger on first use: slog's With formats
// the attributes at once, and even gathering them (a slice of boxed
// values) was a dozen allocations an event, work that most handlers
// (which never log) would pay for on every event.
type lazyLogger struct {
	base     *slog.Logger
	consumer string
	ev       *outbox.Event
	jobID    int64
	attempt  int
	seq      int64
	once     sync.Once
	logger   *slog.Logger
}

func (l *lazyLogger) get() *slog.Logger {
	l.once.Do(func() {
		attrs := []any{"consumer", l.consumer, "event_id", l.ev.ID, "event_type", l.ev.EventType,
			"correlation_id", l.ev.Metadata.CorrelationID, "job_id", l.jobID, "attempt", l.attempt}
		if l.ev.AggregateID != "" {
			attrs = append(attrs, "aggregate_id", l.ev.AggregateID, "seq", l.seq)
		}
		l.logger = l.base.With(attrs...)
	})
	return l.logger
}

func withHandlerContext(ctx context.Context, logger *lazyLogger) context.Context {
	return context.WithValue(ctx, ctxKeyHandler, logger)
}
