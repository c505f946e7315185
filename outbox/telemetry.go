package outbox

import (
	"context"
	"fmt"
	"strings"

	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/submit"
)

// MetricUnknownOutcomes counts charges the worker moved to unknown, by
// reason: the provider call's outcome was unknown (the psp reason, such as
// timeout, reset_after_send or status_503), or a rerun found the charge
// submitting (rerun_found_submitting).
const MetricUnknownOutcomes = "chargeflow.outbox.unknown_outcomes"

// instrumentationName names the tracer and meter of this package.
const instrumentationName = "github.com/chargeflow/chargeflow/outbox"

// telemetry is the worker's tracer and instruments; nil providers give
// no-op ones.
type telemetry struct {
	tracer          trace.Tracer
	unknownOutcomes metric.Int64Counter
}

func newTelemetry(tp trace.TracerProvider, mp metric.MeterProvider) (telemetry, error) {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	unknownOutcomes, err := mp.Meter(instrumentationName).Int64Counter(MetricUnknownOutcomes,
		metric.WithDescription("Charges the outbox worker moved to unknown, by reason."),
		metric.WithUnit("{charge}"))
	if err != nil {
		return telemetry{}, fmt.Errorf("outbox: metric %s: %w", MetricUnknownOutcomes, err)
	}
	// A worker dying mid-call is the reason an alert watches
	// (rerun_found_submitting): exported at zero from the start, so the
	// first one is an increase. The provider's reasons are an open set.
	unknownOutcomes.Add(context.Background(), 0, metric.WithAttributes(attribute.String("reason", "rerun_found_submitting")))
	return telemetry{tracer: tp.Tracer(instrumentationName), unknownOutcomes: unknownOutcomes}, nil
}

// startRun opens the span of one run of a charge.submit job. Its parent is
// whatever TraceContext put in ctx: the span that inserted the job. It
// carries identifiers only, never the charge's payment details.
func (t telemetry) startRun(ctx context.Context, job *river.Job[submit.ChargeArgs]) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, job.Kind, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		attribute.String("chargeflow.charge.id", job.Args.ChargeID),
		attribute.String("chargeflow.tenant.id", job.Args.TenantID),
		attribute.Int64("river.job.id", job.ID),
		attribute.Int("river.job.attempt", job.Attempt),
		attribute.String("river.queue", job.Queue),
	))
}

// settled records where a run left the charge, once that is committed: on
// the run's span, and in MetricUnknownOutcomes when it is unknown.
func (t telemetry) settled(ctx context.Context, state intent.State, reason string) {
	trace.SpanFromContext(ctx).SetAttributes(
		attribute.String("chargeflow.charge.state", string(state)),
		attribute.String("chargeflow.move.reason", reason))
	if state == intent.StateUnknown {
		t.unknownOutcomes.Add(ctx, 1, metric.WithAttributes(
			attribute.String("reason", strings.TrimPrefix(reason, unknownReasonPrefix))))
	}
}

// unknownReasonPrefix starts the event reason of an unknown provider
// outcome; the metric label is the psp reason after it.
const unknownReasonPrefix = "outcome_unknown:"
