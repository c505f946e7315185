package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprometheus "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeflow/chargeflow/internal/buildinfo"
)

// telemetry is how one process observes itself: the tracer and meter
// providers every component's Config gets, and the Prometheus exposition of
// the meter's reader. It is built here, from the environment, and nowhere
// else: no package of ours reads an OpenTelemetry global.
type telemetry struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	// metrics serves the Prometheus text format of every metric.
	metrics http.Handler
	// shutdown flushes and stops the providers.
	shutdown func(context.Context) error
}

// newTelemetry builds a process's telemetry. Spans are always made (their
// trace ids are in the logs); they leave the process only when
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT names an
// OTLP/HTTP collector. The exporter's other settings (headers, timeout,
// compression, TLS) and the sampler (OTEL_TRACES_SAMPLER, default: follow
// the parent, else sample everything) are the SDK's standard variables.
//
// The SDK reports what it cannot handle (an unreachable collector, say)
// through otel's process-wide error handler, which prints plain text to
// stderr by default; it is pointed at logger here, so every line stays JSON.
// That one process-wide setting is made here and nowhere else.
func newTelemetry(ctx context.Context, e env, role string, logger *slog.Logger) (*telemetry, error) {
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("opentelemetry", "err", err.Error())
	}))
	res := resource.NewSchemaless(
		attribute.String("service.name", cmp.Or(e.getenv("OTEL_SERVICE_NAME"), serviceName(role))),
		attribute.String("chargeflow.role", role),
	)
	traceOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	endpoint, err := otlpTracesEndpoint(e)
	if err != nil {
		return nil, err
	}
	if endpoint != "" {
		exporter, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
		if err != nil {
			return nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		traceOpts = append(traceOpts, sdktrace.WithBatcher(exporter))
	}
	tracerProvider := sdktrace.NewTracerProvider(traceOpts...)
	meterProvider, metrics, err := newMetrics(res)
	if err != nil {
		return nil, errors.Join(err, tracerProvider.Shutdown(ctx))
	}
	return &telemetry{
		tracerProvider: tracerProvider,
		meterProvider:  meterProvider,
		metrics:        metrics,
		shutdown: func(ctx context.Context) error {
			return errors.Join(tracerProvider.Shutdown(ctx), meterProvider.Shutdown(ctx))
		},
	}, nil
}

// serviceName is the default service.name of a role: "chargeflow-api",
// "chargeflow-worker", …, and plain "github.com/chargeflow/chargeflow" for `all`.
func serviceName(role string) string {
	if role == "all" {
		return "github.com/chargeflow/chargeflow"
	}
	return "chargeflow-" + role
}

// otlpTracesEndpoint is the OTLP/HTTP traces URL the environment names, or
// "" for none. The signal-specific variable is used as it is; the general
// one is a base URL that gets /v1/traces, as the OTLP specification says.
func otlpTracesEndpoint(e env) (string, error) {
	endpoint := e.getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	name := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	if endpoint == "" {
		base := e.getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		if base == "" {
			return "", nil
		}
		endpoint, name = strings.TrimRight(base, "/")+"/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT"
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s=%q: want an http:// or https:// URL", name, endpoint)
	}
	return endpoint, nil
}

// newMetrics builds a meter provider whose reader is a Prometheus registry
// of this process's own (not the client library's global one), with the Go
// runtime and process collectors beside it, and the handler that serves it.
func newMetrics(res *resource.Resource) (*sdkmetric.MeterProvider, http.Handler, error) {
	registry := prometheus.NewRegistry()
	build := buildinfo.Read()
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "chargeflow_build_info",
		Help: "Always 1: the build this process runs, by version, commit and Go version.",
	}, []string{"version", "commit", "goversion"})
	buildInfo.WithLabelValues(build.Version, build.Commit, build.GoVersion).Set(1)
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo,
	} {
		if err := registry.Register(c); err != nil {
			return nil, nil, fmt.Errorf("register prometheus collector: %w", err)
		}
	}
	exporter, err := otelprometheus.New(otelprometheus.WithRegisterer(registry), otelprometheus.WithoutScopeInfo())
	if err != nil {
		return nil, nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(res))
	return provider, promhttp.HandlerFor(registry, promhttp.HandlerOpts{}), nil
}

// shutdownTelemetry flushes what the process traced, for at most five
// seconds, when it stops.
func shutdownTelemetry(ctx context.Context, tel *telemetry, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), telemetryFlush)
	defer cancel()
	if err := tel.shutdown(ctx); err != nil {
		logger.Warn("shut down telemetry", "err", err.Error())
	}
}

// serveMetrics serves GET /metrics on addr until ctx is done, for the
// processes that have no API listener. An empty addr serves nothing.
func serveMetrics(ctx context.Context, addr string, tel *telemetry, logger *slog.Logger) error {
	if addr == "" {
		<-ctx.Done()
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", tel.metrics)
	return serveHTTP(ctx, addr, mux, logger, serveOptions{})
}
