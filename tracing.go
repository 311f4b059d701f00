package tributary

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracingShutdownTimeout bounds the flush of the last spans at exit.
const tracingShutdownTimeout = 5 * time.Second

// StartTracing exports traces over OTLP/HTTP to cfg.OTLPEndpoint by making
// an SDK tracer provider OpenTelemetry's global one: River's middleware,
// the events and the AMQP bridge trace through the global provider. With
// no endpoint it installs nothing and every span is a no-op. The exporter
// reads the other standard variables itself (OTEL_EXPORTER_OTLP_HEADERS,
// ..._TIMEOUT), the resource OTEL_SERVICE_NAME (default "tributary") and
// OTEL_RESOURCE_ATTRIBUTES. The returned stop flushes the last spans; call
// it at exit. App.Start and App.Run call StartTracing themselves.
func StartTracing(ctx context.Context, cfg TracingConfig, logger *slog.Logger) (stop func(), err error) {
	if cfg.OTLPEndpoint == "" {
		return func() {}, nil
	}
	if err := checkOTLPEndpoint(cfg.OTLPEndpoint); err != nil {
		return nil, err
	}
	// The endpoint is a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is: traces
	// go to its /v1/traces.
	u, err := url.Parse(cfg.OTLPEndpoint)
	if err != nil {
		return nil, err
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("error creating the OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(attribute.String("service.name", "tributary")),
		resource.Environment(),
	)
	if err != nil {
		return nil, fmt.Errorf("error reading OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if logger == nil {
		logger = slog.Default()
	}
	logger.Debug("exporting traces over OTLP/HTTP")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			logger.Warn("error flushing traces at exit", "error", err)
		}
	}, nil
}

// startTracing starts the App's trace export, once.
func (a *App) startTracing(ctx context.Context) error {
	a.tracingMu.Lock()
	defer a.tracingMu.Unlock()
	if a.stopTracing != nil {
		return nil
	}
	stop, err := StartTracing(ctx, a.cfg.Tracing, a.cfg.Logger)
	if err != nil {
		return err
	}
	a.stopTracing = stop
	return nil
}

// flushTracing stops the App's trace export.
func (a *App) flushTracing() {
	a.tracingMu.Lock()
	defer a.tracingMu.Unlock()
	if a.stopTracing != nil {
		a.stopTracing()
		a.stopTracing = nil
	}
}
