package events

import (
	"context"
	"log/slog"
	"sync"
)

type ctxKey int

const (
	ctxKeyCorrelation ctxKey = iota
	ctxKeyLogger
)

// CorrelationID returns the correlation id of the event a handler is
// running for, or "" outside a handler. Pass it on as Meta.CorrelationID
// when the handler emits events of its own.
func CorrelationID(ctx context.Context) string {
	id, _ := ctx.Value(ctxKeyCorrelation).(string)
	return id
}

// Logger returns the handler's logger, which carries the consumer, event id
// and type, aggregate and correlation id as attributes. Outside a handler it
// returns slog.Default().
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(ctxKeyLogger).(*lazyLogger); ok {
		return l.get()
	}
	return slog.Default()
}

// lazyLogger builds a handler's logger on first use: slog's With formats
// the attributes at once, work that most handlers (which never log) would
// pay for on every event.
type lazyLogger struct {
	base   *slog.Logger
	attrs  []any
	once   sync.Once
	logger *slog.Logger
}

func (l *lazyLogger) get() *slog.Logger {
	l.once.Do(func() { l.logger = l.base.With(l.attrs...) })
	return l.logger
}

func withHandlerContext(ctx context.Context, correlationID string, logger *lazyLogger) context.Context {
	ctx = context.WithValue(ctx, ctxKeyCorrelation, correlationID)
	return context.WithValue(ctx, ctxKeyLogger, logger)
}
