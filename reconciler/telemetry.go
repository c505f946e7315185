package reconciler

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/chargeflow/chargeflow/intent"
)

// The reconciler's metrics.
const (
	// MetricDecisions counts what the reconciler did with each leased
	// charge, by decision: succeeded, failed, requeued, not_yet_proven,
	// lookup_error, needs_review, stale_submitting, and the writes it
	// dropped: fenced (its lease had expired and another reconciler took
	// the charge) and conflict (someone else moved the charge first); and
	// stranded_requeued, pending charges given a new job because River gave
	// up on theirs.
	MetricDecisions = "chargeflow.reconciler.decisions"

	// MetricLag is how long, in seconds, the most overdue charge of the
	// reconciler's provider has been waiting for it (intent.ReconcileLag),
	// read from the database at each collection.
	MetricLag = "chargeflow.reconciler.lag"
)

// instrumentationName names the tracer and meter of this package.
const instrumentationName = "github.com/chargeflow/chargeflow/reconciler"

// lagQueryTimeout bounds the lag query of one collection, so a slow
// database makes a scrape miss the gauge rather than hang.
const lagQueryTimeout = 2 * time.Second

// telemetry is the reconciler's tracer and instruments; nil providers give
// no-op ones.
type telemetry struct {
	tracer    trace.Tracer
	decisions metric.Int64Counter
}

func newTelemetry(cfg Config, lag func(context.Context) (time.Duration, error)) (telemetry, error) {
	tp, mp := cfg.TracerProvider, cfg.MeterProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	meter := mp.Meter(instrumentationName)
	decisions, err := meter.Int64Counter(MetricDecisions,
		metric.WithDescription("What the reconciler did with each leased charge, by decision, including fenced and conflicting writes it dropped."),
		metric.WithUnit("{charge}"))
	if err != nil {
		return telemetry{}, fmt.Errorf("reconciler: metric %s: %w", MetricDecisions, err)
	}
	// Every decision is exported from the start, at zero, so that rate()
	// and increase() see its first occurrence.
	for _, d := range (Result{}).byDecision() {
		decisions.Add(context.Background(), 0, metric.WithAttributes(attribute.String("decision", d.name)))
	}
	lagGauge, err := meter.Float64ObservableGauge(MetricLag,
		metric.WithDescription("Age of the most overdue charge this reconciler's provider has waiting: an unknown charge past its next check, or one stuck in submitting."),
		metric.WithUnit("s"))
	if err != nil {
		return telemetry{}, fmt.Errorf("reconciler: metric %s: %w", MetricLag, err)
	}
	provider := metric.WithAttributes(attribute.String("provider", cfg.Provider.Client.Capabilities().Name))
	logger := cfg.Logger
	_, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, lagQueryTimeout)
		defer cancel()
		d, err := lag(ctx)
		if err != nil {
			// A missing sample is what an alert on absence catches; the
			// SDK's own error handler is not ours to configure.
			logger.WarnContext(ctx, "reconciler lag metric", "err", err.Error())
			return nil
		}
		o.ObserveFloat64(lagGauge, d.Seconds(), provider)
		return nil
	}, lagGauge)
	if err != nil {
		return telemetry{}, fmt.Errorf("reconciler: metric %s callback: %w", MetricLag, err)
	}
	return telemetry{tracer: tp.Tracer(instrumentationName), decisions: decisions}, nil
}

// startReconcile opens the span of one leased charge. It carries
// identifiers only, never the charge's payment details.
func (t telemetry) startReconcile(ctx context.Context, c intent.Charge) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, "charge.reconcile", trace.WithAttributes(
		attribute.String("chargeflow.charge.id", c.ID),
		attribute.String("chargeflow.tenant.id", c.TenantID),
		attribute.String("chargeflow.charge.state", string(c.State)),
		attribute.Int64("chargeflow.lease_token", c.LeaseToken),
	))
}

// endReconcile records what happened to the charge on its span.
func endReconcile(span trace.Span, res Result, err error) {
	for _, d := range res.decisions() {
		span.SetAttributes(attribute.String("chargeflow.reconcile.result", d.name))
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
}

// decided counts one RunOnce's decisions.
func (t telemetry) decided(ctx context.Context, res Result) {
	for _, d := range res.decisions() {
		t.decisions.Add(ctx, int64(d.count), metric.WithAttributes(attribute.String("decision", d.name)))
	}
}

// decisionCount is one non-zero decision of a Result.
type decisionCount struct {
	name  string
	count int
}

// decisions lists the non-zero decisions of r under their metric names.
func (r Result) decisions() []decisionCount {
	var out []decisionCount
	for _, d := range r.byDecision() {
		if d.count > 0 {
			out = append(out, d)
		}
	}
	return out
}

// byDecision lists every decision of r under its metric name.
func (r Result) byDecision() []decisionCount {
	return []decisionCount{
		{"stale_submitting", r.StaleSubmitting},
		{"succeeded", r.Succeeded},
		{"failed", r.Failed},
		{"requeued", r.Requeued},
		{"not_yet_proven", r.NotYetProven},
		{"lookup_error", r.LookupErrors},
		{"needs_review", r.NeedsReview},
		{"fenced", r.Fenced},
		{"conflict", r.Conflicts},
		{"stranded_requeued", r.Stranded},
		{"hold_released", r.Released},
	}
}
