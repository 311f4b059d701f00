package main

import (
	"context"

	"github.com/tributary-run/tributary"
)

// startTracing exports traces over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT
// is set (tributary.StartTracing); unset, every span is a no-op.
func (a *app) startTracing(ctx context.Context) error {
	stop, err := tributary.StartTracing(ctx, a.cfg.Tracing, a.logger)
	if err != nil {
		return err
	}
	a.stopTracing = stop
	return nil
}
