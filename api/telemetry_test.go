package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/apitest"
)

// Every request but probes and scrapes is a server span named after its
// route template (never the raw path), with its status and problem code,
// and refusals carry none of the request's secrets either.
func TestRequestSpans(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	b := setup(t, func(o *setupOpts) {
		o.API = func(c *api.Config) {
			c.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		}
	})

	const canary = "canary-value-31d7"
	resp := b.Post(t, b.TenantA, "span-key-canary-000001",
		`{"amount": 100, "currency": "USD", "payment_method": "pm_`+canary+`", "metadata": {"k": "`+canary+`"}, "colour": "`+canary+`"}`)
	apitest.RequireProblem(t, resp, http.StatusBadRequest, api.CodeUnknownField)
	require.Equal(t, http.StatusNotFound, b.Get(t, b.TenantA, "/v1/charges/ch_01m8mdx3p6yj8wvvgvpy8dykhz").Status)
	require.Equal(t, http.StatusNotFound, b.Request(t, http.MethodGet, "/no/such/"+canary, "").Status)
	require.Equal(t, http.StatusOK, b.Request(t, http.MethodGet, "/healthz", "").Status)

	ended := spans.Ended()
	require.Len(t, ended, 3, "no span for /healthz")
	type seen struct{ name, status, problem, tenant string }
	var got []seen
	for _, span := range ended {
		require.Equal(t, trace.SpanKindServer, span.SpanKind())
		require.Equal(t, codes.Unset, span.Status().Code, "4xx is the client's error, not the server's")
		s := seen{name: span.Name()}
		for _, kv := range span.Attributes() {
			require.NotContains(t, kv.Value.Emit(), canary)
			require.NotContains(t, kv.Value.Emit(), b.TenantA.Key)
			switch kv.Key {
			case "http.response.status_code":
				s.status = kv.Value.Emit()
			case "chargeflow.problem.code":
				s.problem = kv.Value.Emit()
			case "chargeflow.tenant.id":
				s.tenant = kv.Value.Emit()
			}
		}
		got = append(got, s)
	}
	require.Equal(t, []seen{
		{"POST /v1/charges", "400", "unknown_field", b.TenantA.ID},
		{"GET /v1/charges/:id", "404", "not_found", b.TenantA.ID},
		{"GET unmatched", "404", "not_found", ""},
	}, got)
}

// Without a metrics handler, /metrics is a plain 404 problem.
func TestMetricsRouteWithoutMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	apitest.RequireProblem(t, b.Request(t, http.MethodGet, "/metrics", ""), http.StatusNotFound, api.CodeNotFound)
}
