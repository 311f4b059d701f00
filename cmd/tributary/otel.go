package main

import (
	"context"
	"fmt"
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

// startTracing exports traces over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT
// is set, by making an SDK tracer provider the global one: River's
// middleware, the events and the AMQP bridge trace through the global
// provider. Unset, nothing is installed and every span is a no-op. The
// exporter reads the other standard variables itself (OTEL_EXPORTER_OTLP_HEADERS,
// ..._TIMEOUT), the resource OTEL_SERVICE_NAME (default "tributary") and
// OTEL_RESOURCE_ATTRIBUTES.
func (a *app) startTracing(ctx context.Context) error {
	if a.cfg.OTLPEndpoint == "" {
		return nil
	}
	exp, err := otlptracehttp.New(ctx) // the endpoint comes from the environment
	if err != nil {
		return fmt.Errorf("error creating the OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(attribute.String("service.name", "tributary")),
		resource.Environment(),
	)
	if err != nil {
		return fmt.Errorf("error reading OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	a.stopTracing = func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			a.logger.Warn("error flushing traces at exit", "error", err)
		}
	}
	a.logger.Debug("exporting traces over OTLP/HTTP")
	return nil
}
