package psp

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Outcome is what one provider call proved, in the words of the metrics and
// spans: the four answers of the package doc, with a decline counted as a
// charge and a failed refund as a refund (each is an answer, not a failure
// of the call).
type Outcome string

const (
	// OutcomeCharge means the provider answered with a charge, succeeded or
	// declined.
	OutcomeCharge Outcome = "charge"

	// OutcomeRefund means the provider answered a refund call or a refund
	// lookup with a refund, succeeded or failed (a refusal included).
	OutcomeRefund Outcome = "refund"

	// OutcomeNotApplied means it is proven that the provider did not apply
	// the request (ErrNotApplied).
	OutcomeNotApplied Outcome = "not_applied"

	// OutcomeUnknown means the request may or may not have been applied
	// (ErrUnknownOutcome), or a lookup failed.
	OutcomeUnknown Outcome = "unknown"

	// OutcomeNotFound means a lookup proved that no charge exists for the
	// key (ErrNotFound).
	OutcomeNotFound Outcome = "not_found"
)

// OutcomeOf classifies the error of Charge or Lookup as an Outcome; the
// error of a refund call is OutcomeOp's.
func OutcomeOf(err error) Outcome {
	return OutcomeOp(OpCharge, err)
}

// OutcomeOp classifies the error of a call of op as an Outcome: a nil error
// is OutcomeRefund for a refund or a refund lookup, OutcomeCharge otherwise.
func OutcomeOp(op Op, err error) Outcome {
	switch {
	case err == nil && (op == OpRefund || op == OpRefundLookup):
		return OutcomeRefund
	case err == nil:
		return OutcomeCharge
	case errors.Is(err, ErrNotFound):
		return OutcomeNotFound
	case errors.Is(err, ErrNotApplied):
		return OutcomeNotApplied
	default:
		return OutcomeUnknown
	}
}

// MetricCallDuration is the histogram of provider call latency, in seconds,
// by op (charge, lookup, refund, refund_lookup, capture, cancel) and
// outcome.
const MetricCallDuration = "chargeflow.provider.call.duration"

// instrumentationName names the tracer and meter of this package.
const instrumentationName = "github.com/chargeflow/chargeflow/psp"

// telemetry is the client's tracer and instruments. It is built once per
// Client; nil providers give no-op ones.
type telemetry struct {
	tracer       trace.Tracer
	propagator   propagation.TextMapPropagator
	callDuration metric.Float64Histogram
	// serverAttrs name the provider's host and port on every span.
	serverAttrs []attribute.KeyValue
}

func newTelemetry(cfg Config, baseURL string) telemetry {
	tp := cfg.TracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	mp := cfg.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	callDuration, err := mp.Meter(instrumentationName).Float64Histogram(MetricCallDuration,
		metric.WithDescription("Latency of provider calls, by op (charge, lookup, refund, refund_lookup) and what the answer proved."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	if err != nil {
		// The name and options are constants that the package's tests
		// export through a real SDK, so this cannot fail in a build that
		// passed them; NewClient has no error to return, so a broken
		// instrument falls back to a silent one rather than a nil.
		callDuration = metricnoop.Float64Histogram{}
	}
	t := telemetry{tracer: tp.Tracer(instrumentationName), propagator: propagation.TraceContext{}, callDuration: callDuration}
	if u, err := url.Parse(baseURL); err == nil {
		host, port, splitErr := net.SplitHostPort(u.Host)
		if splitErr != nil {
			host = u.Host
		}
		t.serverAttrs = append(t.serverAttrs, attribute.String("server.address", host))
		if n, err := strconv.Atoi(port); err == nil {
			t.serverAttrs = append(t.serverAttrs, attribute.Int("server.port", n))
		}
	}
	return t
}

// Telemetry records provider calls the way psp.Client records its own: one
// client span per call ("psp.charge", "psp.lookup", "psp.refund",
// "psp.refund_lookup") labelled with what the
// answer proved, the W3C trace context for the provider, and one sample of
// MetricCallDuration. Other adapters (psp/stripe) record through it, so
// dashboards and alerts read one set of names whichever provider is
// configured. The zero value is not usable; use NewTelemetry.
type Telemetry struct{ t telemetry }

// NewTelemetry returns the telemetry of calls to the provider at baseURL
// (its host and port label every span). Nil providers record nothing.
func NewTelemetry(tp trace.TracerProvider, mp metric.MeterProvider, baseURL string) Telemetry {
	return Telemetry{t: newTelemetry(Config{TracerProvider: tp, MeterProvider: mp}, baseURL)}
}

// Start opens the span of one call of op under ctx's span and writes the
// trace context into header, for the adapter to send with its request(s).
func (t Telemetry) Start(ctx context.Context, op Op, header http.Header) (context.Context, trace.Span) {
	return t.t.start(ctx, op, header)
}

// End records what the call proved (OutcomeOp(op, err), ReasonOf(err), the
// charge's status) on span and in the latency histogram since start, and
// ends span. Only classified facts are recorded, never the request.
func (t Telemetry) End(ctx context.Context, span trace.Span, op Op, start time.Time, answer Charge, err error) {
	t.t.end(ctx, span, op, start, answer.spanAttributes(), err)
}

// EndRefund is End for a refund call or a refund lookup: the refund's
// status and failure code, never its reference, metadata or key.
func (t Telemetry) EndRefund(ctx context.Context, span trace.Span, op Op, start time.Time, answer Refund, err error) {
	t.t.end(ctx, span, op, start, answer.spanAttributes(), err)
}

// spanAttributes are what a call's span records of a charge it answered.
func (c Charge) spanAttributes() []attribute.KeyValue {
	attrs := []attribute.KeyValue{attribute.String("psp.charge.status", string(c.Status))}
	if c.DeclineCode != "" {
		attrs = append(attrs, attribute.String("psp.decline_code", c.DeclineCode))
	}
	return attrs
}

// spanAttributes are what a call's span records of a refund it answered.
func (r Refund) spanAttributes() []attribute.KeyValue {
	attrs := []attribute.KeyValue{attribute.String("psp.refund.status", string(r.Status))}
	if r.FailureCode != "" {
		attrs = append(attrs, attribute.String("psp.refund.failure_code", r.FailureCode))
	}
	return attrs
}

// start opens the client span of one call ("psp.<op>") and
// writes the W3C trace context into the request headers, so a provider that
// traces joins the caller's trace.
func (t telemetry) start(ctx context.Context, op Op, header http.Header) (context.Context, trace.Span) {
	attrs := make([]attribute.KeyValue, 0, len(t.serverAttrs)+1)
	attrs = append(attrs, attribute.String("psp.op", string(op)))
	attrs = append(attrs, t.serverAttrs...)
	ctx, span := t.tracer.Start(ctx, "psp."+string(op), trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	t.propagator.Inject(ctx, propagation.HeaderCarrier(header))
	return ctx, span
}

// end records what the call proved on its span and in the latency
// histogram, and ends the span. Only classified facts go in: the op, the
// outcome, the stable reason, the HTTP status and, when the provider
// answered with a charge or a refund, answer (its status and code) — never
// the request (which carries the payment method, the reference, the key)
// or raw error text.
func (t telemetry) end(ctx context.Context, span trace.Span, op Op, start time.Time, answer []attribute.KeyValue, err error) {
	outcome := OutcomeOp(op, err)
	t.callDuration.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(
		attribute.String("op", string(op)), attribute.String("outcome", string(outcome))))

	span.SetAttributes(attribute.String("psp.outcome", string(outcome)))
	var pspErr *Error
	if errors.As(err, &pspErr) {
		span.SetAttributes(attribute.String("psp.reason", pspErr.Reason))
		if pspErr.StatusCode != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", pspErr.StatusCode))
		}
	}
	switch outcome {
	case OutcomeCharge, OutcomeRefund:
		span.SetAttributes(answer...)
	case OutcomeNotFound:
		// A proven not-found is an answer, not a failure of the call.
	default:
		span.SetStatus(codes.Error, string(outcome)+": "+ReasonOf(err))
	}
	span.End()
}
