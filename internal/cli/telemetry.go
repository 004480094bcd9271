package cli

import (
	"context"
	"errors"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"

	"github.com/agentichost/agentic/host"
)

// otelFromEnv returns the host's telemetry, exported over OTLP/HTTP, when
// the standard environment asks for it: OTEL_EXPORTER_OTLP_ENDPOINT (or
// its _TRACES_ / _METRICS_ forms) set, OTEL_SDK_DISABLED not "true". The
// exporters read the rest of the standard variables themselves (headers,
// timeouts, TLS); OTEL_SERVICE_NAME names the service, "agentic-host" by
// default. Otherwise it returns nil: the command exports nothing and makes
// no connection. shutdown flushes what is buffered.
func otelFromEnv(ctx context.Context, env Env) (tel *host.Telemetry, shutdown func(context.Context) error, err error) {
	none := func(context.Context) error { return nil }
	if strings.EqualFold(env.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, none, nil
	}
	traces := env.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || env.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	metrics := env.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || env.Getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != ""
	if !traces && !metrics {
		return nil, none, nil
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(serviceName(env))))
	if err != nil {
		return nil, none, err
	}
	res, err = resource.Merge(res, resourceFromEnv(ctx))
	if err != nil {
		return nil, none, err
	}
	tel = &host.Telemetry{RecordContent: strings.EqualFold(env.Getenv("AGENTIC_OTEL_RECORD_CONTENT"), "true")}
	var stops []func(context.Context) error
	if traces {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, none, err
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		tel.TracerProvider = tp
		stops = append(stops, tp.Shutdown)
	}
	if metrics {
		exp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return nil, none, err
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)), sdkmetric.WithResource(res))
		tel.MeterProvider = mp
		stops = append(stops, mp.Shutdown)
	}
	return tel, func(ctx context.Context) error {
		var errs []error
		for _, stop := range stops {
			errs = append(errs, stop(ctx))
		}
		return errors.Join(errs...)
	}, nil
}

func serviceName(env Env) string {
	if s := env.Getenv("OTEL_SERVICE_NAME"); s != "" {
		return s
	}
	return "agentic-host"
}

// resourceFromEnv is OTEL_RESOURCE_ATTRIBUTES, when it parses.
func resourceFromEnv(ctx context.Context) *resource.Resource {
	r, err := resource.New(ctx, resource.WithFromEnv())
	if err != nil {
		return resource.Empty()
	}
	return r
}
