//go:build lab

package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/reconciler"
	"github.com/chargeflow/chargeflow/tenant"
)

// observedSystem is the API, a worker and a reconciler built by the same
// functions the commands use, in this process, on a test database and the
// real fake provider over loopback, with an in-memory span recorder in
// place of an exporter and the real Prometheus exposition.
type observedSystem struct {
	pool       *pgxpool.Pool
	apiURL     string
	pspURL     string
	apiKey     string
	tenantID   string
	spans      *tracetest.SpanRecorder
	tel        *telemetry
	reconciler *reconciler.Reconciler
}

func startObservedSystem(t *testing.T) *observedSystem {
	t.Helper()
	ctx := context.Background()
	dbURL := dbtest.URL(t)
	s := &observedSystem{spans: tracetest.NewSpanRecorder()}

	tracerProvider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(s.spans))
	meterProvider, metrics, err := newMetrics(resource.Empty())
	require.NoError(t, err)
	s.tel = &telemetry{tracerProvider: tracerProvider, meterProvider: meterProvider, metrics: metrics,
		shutdown: func(context.Context) error { return nil }}
	t.Cleanup(func() {
		_ = tracerProvider.Shutdown(ctx)
		_ = meterProvider.Shutdown(ctx)
	})

	s.pspURL = fakepsptest.Start(t, fakepsp.Config{}).URL

	e := env{getenv: func(string) string { return "" }, stdout: io.Discard, stderr: io.Discard}
	logger := slog.New(slog.DiscardHandler)
	c := common{databaseURL: dbURL, logLevel: "info"}

	// The flags of `all`, with the commands' own defaults.
	var o app.Options
	var addr string
	parseTestFlags(t, e, func(fs *flag.FlagSet) {
		bindAPI(fs, &o, &addr)
		bindProvider(fs, &o)
		bindWorker(fs, &o)
		bindReconciler(fs, &o)
	}, "--lock-timeout", "100ms", "--psp-url", s.pspURL, "--call-timeout", "300ms", "--unknown-check-after", "1ms", "--concurrency", "4")
	o = roleSetup{base: logger, tel: s.tel}.options(o, c, "test")

	a, err := app.NewAPI(ctx, o)
	require.NoError(t, err)
	t.Cleanup(a.Close)
	s.pool = a.Pool
	apiServer := httptest.NewServer(a.Server.Handler())
	t.Cleanup(apiServer.Close)
	s.apiURL = apiServer.URL

	created, key, err := tenant.Create(ctx, a.Pool, "observed")
	require.NoError(t, err)
	s.tenantID, s.apiKey = created.ID, key

	workerClient, err := app.NewWorker(a.Pool, o)
	require.NoError(t, err)
	require.NoError(t, workerClient.Start(ctx))
	t.Cleanup(func() { _ = app.StopRiver(ctx, workerClient) })

	s.reconciler, err = app.NewReconciler(a.Pool, a.Jobs, o)
	require.NoError(t, err)
	return s
}

// parseTestFlags binds a command's flags and parses args, so tests get the
// commands' own defaults.
func parseTestFlags(t *testing.T, e env, bind func(*flag.FlagSet), args ...string) {
	t.Helper()
	fs := newFlagSet("test", e)
	bind(fs)
	require.NoError(t, fs.Parse(args))
}

func (s *observedSystem) post(t *testing.T, idempotencyKey, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.apiURL+"/v1/charges", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idempotencyKey)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp
}

func (s *observedSystem) waitForState(t *testing.T, chargeID string, state intent.State) {
	t.Helper()
	require.Eventually(t, func() bool {
		c, err := intent.Get(context.Background(), s.pool, s.tenantID, chargeID)
		return err == nil && c.State == state
	}, 20*time.Second, 5*time.Millisecond, "charge %s never reached %s", chargeID, state)
}

func (s *observedSystem) faults(t *testing.T, schedule fakepsp.Schedule) {
	t.Helper()
	require.NoError(t, fakepsp.SetFaults(context.Background(), s.pspURL, schedule))
}

// span waits for an ended span matching name and, when set, charge id.
func (s *observedSystem) span(t *testing.T, name, chargeID string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, span := range s.spans.Ended() {
			if span.Name() == name && (chargeID == "" || attr(span, "chargeflow.charge.id") == chargeID) {
				found = span
				return true
			}
		}
		return false
	}, 20*time.Second, 5*time.Millisecond, "no %s span for %q", name, chargeID)
	return found
}

// child waits for an ended span named name whose parent is parent.
func (s *observedSystem) child(t *testing.T, parent sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		for _, span := range s.spans.Ended() {
			if span.Name() == name && span.Parent().SpanID() == parent.SpanContext().SpanID() {
				found = span
				return true
			}
		}
		return false
	}, 20*time.Second, 5*time.Millisecond, "no %s span under %s", name, parent.Name())
	require.Equal(t, parent.SpanContext().TraceID(), found.SpanContext().TraceID())
	return found
}

func attr(span sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range span.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// A charge's request, its charge.submit run and the provider call are one
// trace, parent to child; a lookup by the reconciler is a span too; and no
// span carries an API key, an idempotency key, a payment method, a
// description or a metadata value.
func TestTraceFollowsAChargeFromRequestToProvider(t *testing.T) {
	t.Parallel()
	s := startObservedSystem(t)

	const (
		idempotencyKey = "canary-idem-key-7f3a9c51"
		description    = "canary-description-52e1"
		metadataValue  = "canary-metadata-value-88b0"
		paymentMethod  = "pm_card_visa"
	)
	body := `{"amount": 1234, "currency": "USD", "payment_method": "` + paymentMethod + `", "description": "` + description +
		`", "metadata": {"order": "` + metadataValue + `"}}`
	// The client's own trace is linked, never adopted.
	const clientTraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	resp := s.post(t, idempotencyKey, body, "traceparent", clientTraceParent)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	chargeID := strings.TrimPrefix(resp.Header.Get("Location"), "/v1/charges/")
	s.waitForState(t, chargeID, intent.StateSucceeded)

	request := s.span(t, "POST /v1/charges", chargeID)
	require.Equal(t, trace.SpanKindServer, request.SpanKind())
	require.False(t, request.Parent().IsValid(), "the request span is a root")
	require.NotEqual(t, "0af7651916cd43dd8448eb211c80319c", request.SpanContext().TraceID().String())
	require.Len(t, request.Links(), 1)
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", request.Links()[0].SpanContext.TraceID().String())
	require.Equal(t, "/v1/charges", attr(request, "http.route"))
	require.Equal(t, "201", attr(request, "http.response.status_code"))
	require.Equal(t, s.tenantID, attr(request, "chargeflow.tenant.id"))

	run := s.child(t, request, "charge.submit")
	require.Equal(t, trace.SpanKindConsumer, run.SpanKind())
	require.True(t, run.Parent().IsRemote(), "the run's parent came through the job's metadata")
	require.Equal(t, chargeID, attr(run, "chargeflow.charge.id"))
	require.Equal(t, "succeeded", attr(run, "chargeflow.charge.state"))

	call := s.child(t, run, "psp.charge")
	require.Equal(t, trace.SpanKindClient, call.SpanKind())
	require.Equal(t, "charge", attr(call, "psp.outcome"))
	require.Equal(t, "succeeded", attr(call, "psp.charge.status"))

	// A call whose answer is lost: the charge goes unknown, and the
	// reconciler's lookup finds it.
	s.faults(t, fakepsp.Schedule{Rules: []fakepsp.Rule{{On: fakepsp.OnCharge, Fault: fakepsp.FaultApplyThenTimeout, P: 1, MS: 1000}}})
	resp = s.post(t, "canary-idem-key-lost-0001", body)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	lostID := strings.TrimPrefix(resp.Header.Get("Location"), "/v1/charges/")
	s.waitForState(t, lostID, intent.StateUnknown)
	s.faults(t, fakepsp.Schedule{})
	lostRun := s.span(t, "charge.submit", lostID)
	require.Equal(t, "unknown", attr(s.child(t, lostRun, "psp.charge"), "psp.outcome"))

	require.Eventually(t, func() bool {
		res, err := s.reconciler.RunOnce(context.Background())
		require.NoError(t, err)
		return res.Succeeded == 1
	}, 10*time.Second, 10*time.Millisecond)
	reconcile := s.span(t, "charge.reconcile", lostID)
	require.Equal(t, "lookup_found_succeeded", attr(reconcile, "chargeflow.reconcile.decision"))
	lookup := s.child(t, reconcile, "psp.lookup")
	require.Equal(t, "charge", attr(lookup, "psp.outcome"))

	canaries := []string{s.apiKey, idempotencyKey, "canary-idem-key-lost-0001", paymentMethod, description, metadataValue}
	for _, span := range s.spans.Ended() {
		texts := []string{span.Name(), span.Status().Description}
		kvs := append([]attribute.KeyValue{}, span.Attributes()...)
		for _, event := range span.Events() {
			texts = append(texts, event.Name)
			kvs = append(kvs, event.Attributes...)
		}
		for _, link := range span.Links() {
			kvs = append(kvs, link.Attributes...)
		}
		for _, kv := range kvs {
			texts = append(texts, string(kv.Key), kv.Value.Emit())
		}
		for _, text := range texts {
			for _, canary := range canaries {
				require.NotContains(t, text, canary, "span %s", span.Name())
			}
		}
	}
}

// After some traffic, GET /metrics on the API's listener is the Prometheus
// text of every metric operators alert on.
func TestMetricsAfterTraffic(t *testing.T) {
	t.Parallel()
	s := startObservedSystem(t)
	ctx := context.Background()

	body := `{"amount": 500, "currency": "EUR", "payment_method": "pm_card_visa"}`
	first := s.post(t, "metrics-key-000000001", body)
	require.Equal(t, http.StatusCreated, first.StatusCode)
	chargeID := strings.TrimPrefix(first.Header.Get("Location"), "/v1/charges/")
	replay := s.post(t, "metrics-key-000000001", body)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	require.Equal(t, http.StatusBadRequest, s.post(t, "metrics-key-000000002", `{"amount": 5`).StatusCode)
	s.waitForState(t, chargeID, intent.StateSucceeded)

	// A request racing one that holds its key gets 409 once lock_timeout
	// (100 ms here) passes.
	held := "metrics-key-held-0001"
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	now := time.Now().UTC().Truncate(time.Microsecond)
	heldID := ids.New("ch", now)
	keyHash := sha256.Sum256([]byte(held))
	_, err = intent.Accept(ctx, tx, intent.Acceptance{
		Charge: intent.Charge{TenantID: s.tenantID, ID: heldID, State: intent.StatePending, Amount: 500, Currency: "EUR",
			PaymentMethod: "pm_card_visa", Provider: "fakepsp", ProviderKey: intent.ProviderKeyFor(heldID), CreatedAt: now, UpdatedAt: now},
		Actor: "test", KeyHash: keyHash[:], Fingerprint: keyHash[:], StatusCode: 201, ResponseBody: []byte(`{}`), ExpiresAt: now.Add(time.Hour)})
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, s.post(t, held, body).StatusCode)
	require.NoError(t, tx.Rollback(ctx))

	// An unknown outcome, resolved by the reconciler.
	s.faults(t, fakepsp.Schedule{Rules: []fakepsp.Rule{{On: fakepsp.OnCharge, Fault: fakepsp.FaultApplyThenTimeout, P: 1, MS: 1000}}})
	lost := s.post(t, "metrics-key-lost-0001", body)
	lostID := strings.TrimPrefix(lost.Header.Get("Location"), "/v1/charges/")
	s.waitForState(t, lostID, intent.StateUnknown)
	s.faults(t, fakepsp.Schedule{})
	require.Eventually(t, func() bool {
		res, err := s.reconciler.RunOnce(ctx)
		require.NoError(t, err)
		return res.Succeeded == 1
	}, 10*time.Second, 10*time.Millisecond)

	resp, err := http.Get(s.apiURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)

	value := func(name string, labels ...string) float64 {
		t.Helper()
		family, ok := families[name]
		require.True(t, ok, "no metric %s", name)
		for _, m := range family.GetMetric() {
			if hasLabels(m, labels...) {
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount())
				}
			}
		}
		t.Fatalf("no sample of %s with %v", name, labels)
		return 0
	}
	require.Equal(t, 3.0, value("http_server_request_duration_seconds",
		"http_request_method", "POST", "http_route", "/v1/charges", "http_response_status_code", "201"), "two new charges and a replay")
	require.Equal(t, 1.0, value("chargeflow_api_idempotent_replays_total", "source", "memory"), "the process that wrote the record kept it")
	require.Equal(t, 0.0, value("chargeflow_api_idempotent_replays_total", "source", "database"))
	require.Equal(t, 1.0, value("chargeflow_api_problems_total", "code", "invalid_json"))
	require.Equal(t, 1.0, value("chargeflow_api_problems_total", "code", "request_in_progress"))
	require.Equal(t, 2.0, value("chargeflow_charges", "state", "succeeded"))
	require.Equal(t, 0.0, value("chargeflow_charges", "state", "unknown"))
	require.Equal(t, 1.0, value("chargeflow_provider_call_duration_seconds", "op", "charge", "outcome", "charge"))
	require.Equal(t, 1.0, value("chargeflow_provider_call_duration_seconds", "op", "charge", "outcome", "unknown"))
	require.Equal(t, 1.0, value("chargeflow_provider_call_duration_seconds", "op", "lookup", "outcome", "charge"))
	require.Equal(t, 1.0, value("chargeflow_outbox_unknown_outcomes_total", "reason", "timeout"))
	require.Equal(t, 1.0, value("chargeflow_reconciler_decisions_total", "decision", "succeeded"))
	require.Equal(t, 0.0, value("chargeflow_reconciler_lag_seconds", "provider", "fakepsp"))
	require.Contains(t, families, "go_goroutines", "the Go runtime collector is registered")
}

func hasLabels(m *dto.Metric, pairs ...string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		if have[pairs[i]] != pairs[i+1] {
			return false
		}
	}
	return true
}

// The worker and the reconciler serve /metrics on --metrics-addr.
func TestMetricsAddr(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	for role, small := range map[string][]string{"worker": {"--concurrency", "2"}, "reconciler": {"--max-conns", "2"}} {
		t.Run(role, func(t *testing.T) {
			t.Parallel()
			p := start(t, []string{"DATABASE_URL=" + dbURL, "PSP_URL=http://127.0.0.1:1"}, append([]string{role, "--metrics-addr", "127.0.0.1:0"}, small...)...)
			resp, err := http.Get(p.listenAddr() + "/metrics")
			require.NoError(t, err)
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Contains(t, string(data), "go_goroutines")
			require.Contains(t, string(data), `service_name="chargeflow-`+role+`"`, "target_info names the process")
		})
	}
}

func TestOTLPTracesEndpoint(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		env     map[string]string
		want    string
		wantErr bool
	}{
		{env: map[string]string{}, want: ""},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}, want: "http://collector:4318/v1/traces"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector/custom", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4318"},
			want: "https://collector/custom"},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, wantErr: true},
	} {
		got, err := otlpTracesEndpoint(env{getenv: func(k string) string { return tt.env[k] }})
		if tt.wantErr {
			require.Error(t, err, "%v", tt.env)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tt.want, got)
	}
}
