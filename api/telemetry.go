package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/chargeflow/chargeflow/intent"
)

// The API's metrics. Exported under these names through OpenTelemetry;
// Prometheus sees dots as underscores, seconds as a _seconds suffix and
// counters with _total.
const (
	// MetricRequestDuration is the HTTP request duration histogram, in
	// seconds, by method, route template and status: the accept latency is
	// its POST /v1/charges series.
	MetricRequestDuration = "http.server.request.duration"

	// MetricReplays counts requests answered with a stored response
	// (Idempotent-Replayed: true), by source: "memory" when this process
	// kept the record (--replay-cache), "database" when it read it.
	MetricReplays = "chargeflow.api.idempotent_replays"

	// MetricProblems counts problem responses by code; request_in_progress
	// is the 409 of a request racing another with the same key.
	MetricProblems = "chargeflow.api.problems"

	// MetricCharges is the number of charges in each state, over every
	// tenant, counted in the database (package census, which bounds how
	// often; intent.Census): label estimate is "true" on a settled state's
	// count estimated from the planner's statistics, "false" on an exact
	// one.
	MetricCharges = "chargeflow.charges"
)

// The values of the replays metric's source attribute.
const (
	// ReplaySourceMemory: this process kept the record (--replay-cache).
	ReplaySourceMemory = "memory"
	// ReplaySourceDatabase: the record was read from Postgres.
	ReplaySourceDatabase = "database"
)

// The replays metric's source attribute, made once.
var (
	replaySourceMemory   = metric.WithAttributes(attribute.String("source", ReplaySourceMemory))
	replaySourceDatabase = metric.WithAttributes(attribute.String("source", ReplaySourceDatabase))
)

// instrumentationName names the tracer and meter of this package.
const instrumentationName = "github.com/chargeflow/chargeflow/api"

// traced says whether a route's requests get a span: probes and scrapes
// arrive every few seconds and would bury the requests worth reading. They
// are still timed.
func traced(route string) bool {
	switch route {
	case "/healthz", "/readyz", "/metrics":
		return false
	}
	return true
}

// telemetry is the API's tracer and instruments; nil providers give no-op
// ones.
type telemetry struct {
	tracer          trace.Tracer
	requestDuration metric.Float64Histogram
	replays         metric.Int64Counter
	problems        metric.Int64Counter
}

func newTelemetry(cfg Config) (telemetry, error) {
	tp, mp := cfg.TracerProvider, cfg.MeterProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	meter := mp.Meter(instrumentationName)
	t := telemetry{tracer: tp.Tracer(instrumentationName)}
	var err error
	if t.requestDuration, err = meter.Float64Histogram(MetricRequestDuration,
		metric.WithDescription("Duration of HTTP requests, by method, route template and status."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)); err != nil {
		return telemetry{}, fmt.Errorf("api: metric %s: %w", MetricRequestDuration, err)
	}
	if t.replays, err = meter.Int64Counter(MetricReplays,
		metric.WithDescription("Requests answered with the stored response of an earlier request with the same Idempotency-Key, by where the record came from (memory: this process's replay cache; database)."),
		metric.WithUnit("{request}")); err != nil {
		return telemetry{}, fmt.Errorf("api: metric %s: %w", MetricReplays, err)
	}
	if t.problems, err = meter.Int64Counter(MetricProblems,
		metric.WithDescription("Problem responses, by code (request_in_progress is the 409 of a concurrent duplicate)."),
		metric.WithUnit("{response}")); err != nil {
		return telemetry{}, fmt.Errorf("api: metric %s: %w", MetricProblems, err)
	}
	// The counters are exported from the start, at zero, so that rate()
	// and increase() see their first increment.
	t.replays.Add(context.Background(), 0, replaySourceMemory)
	t.replays.Add(context.Background(), 0, replaySourceDatabase)
	for _, code := range Codes() {
		t.problems.Add(context.Background(), 0, metric.WithAttributes(attribute.String("code", string(code))))
	}

	chargesGauge, err := meter.Int64ObservableGauge(MetricCharges,
		metric.WithDescription("Charges in each state, over every tenant."),
		metric.WithUnit("{charge}"))
	if err != nil {
		return telemetry{}, fmt.Errorf("api: metric %s: %w", MetricCharges, err)
	}
	states := intent.States()
	stateAttrs := make([]map[bool]metric.ObserveOption, len(states))
	for i, state := range states {
		stateAttrs[i] = map[bool]metric.ObserveOption{
			false: metric.WithAttributes(attribute.String("state", string(state)), attribute.String("estimate", "false")),
			true:  metric.WithAttributes(attribute.String("state", string(state)), attribute.String("estimate", "true")),
		}
	}
	logger := cfg.Logger
	if _, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		census, _, err := cfg.Census.Counts(ctx)
		if err != nil {
			// A missing sample is what an alert on absence catches.
			logger.WarnContext(ctx, "charges by state metric", "err", err.Error())
			return nil
		}
		for i, state := range states {
			o.ObserveInt64(chargesGauge, census.Counts[state], stateAttrs[i][census.Estimated[state]])
		}
		return nil
	}, chargesGauge); err != nil {
		return telemetry{}, fmt.Errorf("api: metric %s callback: %w", MetricCharges, err)
	}
	return t, nil
}

// instrument is the outermost middleware: one server span per request,
// named "METHOD /route/template", and the request duration histogram. The
// span is the parent of everything the request does, the River job insert
// included, which is how the charge.submit run joins the request's trace.
//
// A traceparent sent by the client is linked, not adopted: a caller on the
// internet does not choose our trace ids or our sampling.
//
// The span carries the route, status, tenant and charge ids, the problem
// code and whether the answer was a replay — never headers, the body, keys
// or payment details.
func (s *Server) instrument(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		req := c.Request()
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		method := methodLabel(req.Method)
		ctx := req.Context()
		var span trace.Span
		if traced(route) {
			opts := []trace.SpanStartOption{
				trace.WithNewRoot(),
				trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(
					attribute.String("http.request.method", method),
					attribute.String("http.route", route),
					attribute.String("url.scheme", scheme(req)),
				),
			}
			incoming := propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(req.Header))
			if sc := trace.SpanContextFromContext(incoming); sc.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
			}
			ctx, span = s.telemetry.tracer.Start(ctx, method+" "+route, opts...)
			c.SetRequest(req.WithContext(ctx))
		}
		if err := next(c); err != nil {
			c.Error(err)
		}
		status := c.Response().Status

		s.telemetry.requestDuration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(
			attribute.String("http.request.method", method),
			attribute.String("http.route", route),
			attribute.Int("http.response.status_code", status)))
		replayed, _ := c.Get(logReplayKey).(bool)
		if replayed {
			source := replaySourceDatabase
			if fromMemory, _ := c.Get(logReplayMemoryKey).(bool); fromMemory {
				source = replaySourceMemory
			}
			s.telemetry.replays.Add(ctx, 1, source)
		}
		p, _ := c.Get(logProblemKey).(*Problem)
		if p != nil {
			s.telemetry.problems.Add(ctx, 1, metric.WithAttributes(attribute.String("code", string(p.Code))))
		}

		if span != nil {
			endSpan(c, span, status, replayed, p)
		}
		return nil
	}
}

// endSpan records the request's outcome on its span and ends it.
func endSpan(c echo.Context, span trace.Span, status int, replayed bool, p *Problem) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if v, ok := c.Get(logTenantKey).(string); ok {
			span.SetAttributes(attribute.String("chargeflow.tenant.id", v))
		}
		if v, ok := c.Get(logChargeKey).(string); ok {
			span.SetAttributes(attribute.String("chargeflow.charge.id", v))
		}
		if replayed {
			span.SetAttributes(attribute.Bool("chargeflow.idempotent_replay", true))
		}
		if p != nil {
			span.SetAttributes(attribute.String("chargeflow.problem.code", string(p.Code)))
		}
		if status >= http.StatusInternalServerError {
			description := strconv.Itoa(status)
			if p != nil {
				description = string(p.Code)
			}
			span.SetStatus(codes.Error, description)
		}
	}
	span.End()
}

// methodLabel keeps the method attribute to the known methods, so a client
// cannot mint new series by inventing one.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "_OTHER"
}

// scheme is the url.scheme attribute: TLS terminates here or not at all.
func scheme(req *http.Request) string {
	if req.TLS != nil {
		return "https"
	}
	return "http"
}

// serveMetrics serves the Prometheus exposition of Config.Metrics, or 404
// when this process was built without one.
func (s *Server) serveMetrics(c echo.Context) error {
	if s.cfg.Metrics == nil {
		return NewProblem(CodeNotFound, "this process serves no metrics")
	}
	s.cfg.Metrics.ServeHTTP(c.Response(), c.Request())
	return nil
}
