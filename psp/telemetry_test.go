package psp_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeflow/chargeflow/psp"
)

// Every call is a client span under the caller's span, labelled with what
// the answer proved; the provider receives the trace context; the latency
// histogram counts calls by op and outcome; and neither carries the
// payment method.
func TestClientTracesAndMeasuresEveryCall(t *testing.T) {
	t.Parallel()

	var mu sync.Mutex
	var traceParents []string
	server, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		traceParents = append(traceParents, r.Header.Get("traceparent"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.Header.Get("Idempotency-Key") == "key-broken":
			w.WriteHeader(http.StatusServiceUnavailable)
		case r.Method == http.MethodPost:
			_, _ = io.WriteString(w, chargeJSON)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"code":"charge_not_found"}}`)
		}
	})
	spans := tracetest.NewSpanRecorder()
	tracerProvider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	meterProvider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	client := psp.NewClient(psp.Config{BaseURL: server.URL, TracerProvider: tracerProvider, MeterProvider: meterProvider})

	ctx, parent := tracerProvider.Tracer("test").Start(context.Background(), "charge.submit")
	_, err := client.Charge(ctx, psp.ChargeRequest{Key: "key-1", Amount: 1000, Currency: "USD", PaymentMethod: "pm_canary_method", Reference: "ch_1"})
	require.NoError(t, err)
	_, err = client.Charge(ctx, psp.ChargeRequest{Key: "key-broken", Amount: 1000, Currency: "USD", PaymentMethod: "pm_canary_method", Reference: "ch_1"})
	require.ErrorIs(t, err, psp.ErrUnknownOutcome)
	_, err = client.Lookup(ctx, "key-2")
	require.ErrorIs(t, err, psp.ErrNotFound)
	parent.End()

	ended := spans.Ended()
	require.Len(t, ended, 4)
	want := []struct {
		name, outcome string
		status        codes.Code
	}{
		{"psp.charge", "charge", codes.Unset},
		{"psp.charge", "unknown", codes.Error},
		{"psp.lookup", "not_found", codes.Unset},
	}
	for i, w := range want {
		span := ended[i]
		require.Equal(t, w.name, span.Name())
		require.Equal(t, trace.SpanKindClient, span.SpanKind())
		require.Equal(t, parent.SpanContext().SpanID(), span.Parent().SpanID(), "a child of the caller's span")
		require.Equal(t, w.status, span.Status().Code)
		var outcome string
		for _, kv := range span.Attributes() {
			if kv.Key == "psp.outcome" {
				outcome = kv.Value.AsString()
			}
			require.NotContains(t, kv.Value.Emit(), "pm_canary_method")
		}
		require.Equal(t, w.outcome, outcome)
		// The provider saw this span as the parent of its work.
		require.Equal(t, "00-"+span.SpanContext().TraceID().String()+"-"+span.SpanContext().SpanID().String()+"-01", traceParents[i])
	}
	require.Contains(t, ended[1].Status().Description, "status_503")

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	counts := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			require.Equal(t, psp.MetricCallDuration, m.Name)
			require.Equal(t, "s", m.Unit)
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				op, _ := dp.Attributes.Value("op")
				outcome, _ := dp.Attributes.Value("outcome")
				counts[op.AsString()+"/"+outcome.AsString()] = dp.Count
			}
		}
	}
	require.Equal(t, map[string]uint64{"charge/charge": 1, "charge/unknown": 1, "lookup/not_found": 1}, counts)
}

func TestOutcomeOf(t *testing.T) {
	t.Parallel()

	require.Equal(t, psp.OutcomeCharge, psp.OutcomeOf(nil))
	require.Equal(t, psp.OutcomeNotFound, psp.OutcomeOf(psp.ErrNotFound))
	require.Equal(t, psp.OutcomeNotApplied, psp.OutcomeOf(&psp.Error{Kind: psp.ErrNotApplied, Reason: "status_429"}))
	require.Equal(t, psp.OutcomeUnknown, psp.OutcomeOf(&psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "timeout"}))
	require.Equal(t, psp.OutcomeUnknown, psp.OutcomeOf(io.EOF))
	require.True(t, strings.HasPrefix(psp.MetricCallDuration, "chargeflow."))
}

// Refunds are recorded like charges, under their own ops, and neither the
// spans nor the metrics carry the key, the reference or the tenant tag.
func TestClientTracesAndMeasuresRefunds(t *testing.T) {
	t.Parallel()

	server, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.Header.Get("Idempotency-Key") == "rk_canary_refused":
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"error":{"code":"refund_exceeds_charge"}}`)
		case r.Method == http.MethodPost && r.Header.Get("Idempotency-Key") == "rk_canary_broken":
			w.WriteHeader(http.StatusServiceUnavailable)
		case r.Method == http.MethodPost:
			_, _ = io.WriteString(w, refundJSON)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"code":"refund_not_found"}}`)
		}
	})
	spans := tracetest.NewSpanRecorder()
	tracerProvider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	meterProvider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	client := psp.NewClient(psp.Config{BaseURL: server.URL, TracerProvider: tracerProvider, MeterProvider: meterProvider})

	ctx, parent := tracerProvider.Tracer("test").Start(context.Background(), "refund.submit")
	_, err := client.Refund(ctx, refundRequest("rk_canary_ok"))
	require.NoError(t, err)
	_, err = client.Refund(ctx, refundRequest("rk_canary_refused"))
	require.NoError(t, err, "a refusal is a failed refund")
	_, err = client.Refund(ctx, refundRequest("rk_canary_broken"))
	require.ErrorIs(t, err, psp.ErrUnknownOutcome)
	_, err = client.FindRefund(ctx, psp.LookupRequest{Key: "rk_canary_ok", Reference: "re_canary_ref", Charge: "py_1"})
	require.ErrorIs(t, err, psp.ErrNotFound)
	parent.End()

	ended := spans.Ended()
	require.Len(t, ended, 5)
	want := []struct {
		name   string
		attrs  map[string]string
		status codes.Code
	}{
		{"psp.refund", map[string]string{"psp.op": "refund", "psp.outcome": "refund", "psp.refund.status": "succeeded"}, codes.Unset},
		{"psp.refund", map[string]string{"psp.outcome": "refund", "psp.refund.status": "failed", "psp.refund.failure_code": "refund_exceeds_charge"}, codes.Unset},
		{"psp.refund", map[string]string{"psp.outcome": "unknown", "psp.reason": "status_503"}, codes.Error},
		{"psp.refund_lookup", map[string]string{"psp.op": "refund_lookup", "psp.outcome": "not_found"}, codes.Unset},
	}
	for i, w := range want {
		span := ended[i]
		require.Equal(t, w.name, span.Name())
		require.Equal(t, parent.SpanContext().SpanID(), span.Parent().SpanID(), "a child of the caller's span")
		require.Equal(t, w.status, span.Status().Code)
		got := map[string]string{}
		for _, kv := range span.Attributes() {
			got[string(kv.Key)] = kv.Value.Emit()
			for _, canary := range []string{"canary", "re_canary_ref", "tn_canary_tag"} {
				require.NotContains(t, kv.Value.Emit(), canary, "span attribute %s", kv.Key)
			}
		}
		for k, v := range w.attrs {
			require.Equal(t, v, got[k], "span %d attribute %s", i, k)
		}
		require.NotContains(t, span.Status().Description, "canary")
	}

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	counts := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				for _, kv := range dp.Attributes.ToSlice() {
					require.NotContains(t, kv.Value.Emit(), "canary")
				}
				op, _ := dp.Attributes.Value("op")
				outcome, _ := dp.Attributes.Value("outcome")
				counts[op.AsString()+"/"+outcome.AsString()] = dp.Count
			}
		}
	}
	require.Equal(t, map[string]uint64{"refund/refund": 2, "refund/unknown": 1, "refund_lookup/not_found": 1}, counts)
}

func TestOutcomeOp(t *testing.T) {
	t.Parallel()

	require.Equal(t, psp.OutcomeRefund, psp.OutcomeOp(psp.OpRefund, nil))
	require.Equal(t, psp.OutcomeRefund, psp.OutcomeOp(psp.OpRefundLookup, nil))
	require.Equal(t, psp.OutcomeCharge, psp.OutcomeOp(psp.OpLookup, nil))
	require.Equal(t, psp.OutcomeNotFound, psp.OutcomeOp(psp.OpRefundLookup, psp.ErrNotFound))
	require.Equal(t, psp.OutcomeNotApplied, psp.OutcomeOp(psp.OpRefund, &psp.Error{Kind: psp.ErrNotApplied, Reason: "status_429"}))
}
