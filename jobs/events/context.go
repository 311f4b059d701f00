package events

import (
	"context"
	"log/slog"
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
	if l, ok := ctx.Value(ctxKeyLogger).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

func withHandlerContext(ctx context.Context, correlationID string, logger *slog.Logger) context.Context {
	ctx = context.WithValue(ctx, ctxKeyCorrelation, correlationID)
	return context.WithValue(ctx, ctxKeyLogger, logger)
}
