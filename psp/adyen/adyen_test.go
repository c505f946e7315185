package adyen

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/psp/psptest"
)

const (
	testAPIKey   = "AQE_canary_api_key"
	testMerchant = "ChargeflowTest"
)

// chargeRequest is a valid charge request; tests change what they care
// about. Its payment method is a canary no error or span may carry.
func chargeRequest(key string) psp.ChargeRequest {
	return psp.ChargeRequest{Key: key, Amount: 1000, Currency: "EUR", PaymentMethod: "pm_canary_stored", Reference: "ch_1", Tag: "tn_1"}
}

// refundRequest is a valid refund request of the payment testPSP.
func refundRequest(key string) psp.RefundRequest {
	return psp.RefundRequest{Key: key, Charge: testPSP, Amount: 400, Currency: "EUR", Reference: "re_1", Reason: "requested_by_customer", Tag: "tn_1"}
}

// requirePSPError checks that err is a *psp.Error of kind and reason and
// carries neither the payment method, the API key nor Adyen's free text.
func requirePSPError(t *testing.T, err error, kind error, reason string) *psp.Error {
	t.Helper()
	require.ErrorIs(t, err, kind)
	var pspErr *psp.Error
	require.ErrorAs(t, err, &pspErr)
	require.Equal(t, reason, pspErr.Reason, "error: %v", err)
	require.NotContains(t, err.Error(), "pm_canary")
	require.NotContains(t, err.Error(), "canary_api_key")
	return pspErr
}

// received is one request a test server was sent.
type received struct {
	method, path string
	header       http.Header
	body         []byte
}

// adyenServer is a loopback server that answers Adyen-shaped JSON and
// keeps every request it was sent.
type adyenServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []received
}

func startServer(t *testing.T, handler http.HandlerFunc) *adyenServer {
	t.Helper()
	s := &adyenServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.requests = append(s.requests, received{method: r.Method, path: r.URL.EscapedPath(), header: r.Header.Clone(), body: body})
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if key := r.Header.Get("Idempotency-Key"); key != "" {
			w.Header().Set("Idempotency-Key", key)
		}
		handler(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *adyenServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

func (s *adyenServer) request(i int) received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[i]
}

// answerWith writes a.
func answerWith(a answer) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}
}

// hang answers nothing until the client hangs up (or five seconds pass).
func hang(_ http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(5 * time.Second):
	}
}

// newAdapter is an adapter for the API at serverURL + "/v71".
func newAdapter(serverURL string, edit ...func(*Config)) *Adapter {
	cfg := Config{BaseURL: serverURL + "/v71", APIKey: testAPIKey, MerchantAccount: testMerchant, Timeout: 2 * time.Second}
	for _, e := range edit {
		e(&cfg)
	}
	return New(cfg)
}

// jsonOf decodes a request body for comparison.
func jsonOf(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(body, &v))
	return v
}

func TestChargeSendsOnePayment(t *testing.T) {
	t.Parallel()

	server := startServer(t, answerWith(answerAuthorised))
	charge, err := newAdapter(server.URL).Charge(t.Context(), chargeRequest("cf_ch_1"))
	require.NoError(t, err)
	require.Equal(t, psp.Charge{ID: testPSP, Status: psp.StatusSucceeded, Amount: 1000, Currency: "EUR", Reference: "ch_1"}, charge)

	require.Equal(t, 1, server.count())
	req := server.request(0)
	require.Equal(t, http.MethodPost, req.method)
	require.Equal(t, "/v71/payments", req.path)
	require.Equal(t, "cf_ch_1", req.header.Get("Idempotency-Key"))
	require.Equal(t, testAPIKey, req.header.Get("X-API-Key"))
	require.Equal(t, "application/json", req.header.Get("Content-Type"))
	require.Equal(t, map[string]any{
		"amount":                   map[string]any{"currency": "EUR", "value": 1000.0},
		"merchantAccount":          testMerchant,
		"reference":                "ch_1",
		"paymentMethod":            map[string]any{"type": "scheme", "storedPaymentMethodId": "pm_canary_stored"},
		"shopperReference":         "tn_1",
		"shopperInteraction":       "ContAuth",
		"recurringProcessingModel": "UnscheduledCardOnFile",
		"returnUrl":                DefaultReturnURL,
		"metadata":                 map[string]any{"chargeflow_tenant": "tn_1"},
	}, jsonOf(t, req.body))
}

// A charge to be captured later is sent for manual capture, and Adyen's
// Authorised is then money held, not moved; a refusal is a decline as
// ever.
func TestChargeToCaptureLaterIsHeld(t *testing.T) {
	t.Parallel()

	server := startServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == "cf_ch_2" {
			answerWith(answerRefused)(w, r)
			return
		}
		answerWith(answerAuthorised)(w, r)
	})
	adapter := newAdapter(server.URL)
	req := chargeRequest("cf_ch_1")
	req.CaptureLater = true
	held, err := adapter.Charge(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, psp.Charge{ID: testPSP, Status: psp.StatusRequiresCapture, Amount: 1000, Currency: "EUR", Reference: "ch_1"}, held)
	body := jsonOf(t, server.request(0).body)
	require.Equal(t, map[string]any{"manualCapture": "true"}, body["additionalData"])

	req.Key = "cf_ch_2"
	declined, err := adapter.Charge(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, psp.StatusFailed, declined.Status)
	require.Equal(t, "insufficient_funds", declined.DeclineCode)

	_, err = adapter.Charge(t.Context(), chargeRequest("cf_ch_3"))
	require.NoError(t, err)
	require.NotContains(t, jsonOf(t, server.request(2).body), "additionalData", "a charge captured at once asks nothing of the kind")
}

func TestChargeWithoutATenantSendsNone(t *testing.T) {
	t.Parallel()

	server := startServer(t, answerWith(answerAuthorised))
	req := chargeRequest("cf_ch_1")
	req.Tag = ""
	_, err := newAdapter(server.URL, func(c *Config) { c.ReturnURL = "https://shop.example/back" }).Charge(t.Context(), req)
	require.NoError(t, err)
	body := jsonOf(t, server.request(0).body)
	require.NotContains(t, body, "shopperReference")
	require.NotContains(t, body, "metadata")
	require.Equal(t, "https://shop.example/back", body["returnUrl"])
}

// Each answer is classified as classify's table says, through the real
// transport, with exactly one request for each charge.
func TestChargeClassifiesAdyensAnswers(t *testing.T) {
	t.Parallel()

	declined := func(code string) psp.Charge {
		return psp.Charge{ID: testPSP, Status: psp.StatusFailed, Amount: 1000, Currency: "EUR", Reference: "ch_1", DeclineCode: code}
	}
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		charge  psp.Charge
		kind    error
		reason  string
		code    string
		id      string
	}{
		{name: "Authorised", handler: answerWith(answerAuthorised),
			charge: psp.Charge{ID: testPSP, Status: psp.StatusSucceeded, Amount: 1000, Currency: "EUR", Reference: "ch_1"}},
		{name: "Refused", handler: answerWith(answerRefused), charge: declined("insufficient_funds")},
		{name: "Cancelled", handler: answerWith(answerCancelled), charge: declined("canceled")},
		{name: "Error", handler: answerWith(answerError), charge: declined("processing_error")},
		{name: "Pending names the payment", handler: answerWith(answerPending), kind: psp.ErrUnknownOutcome, reason: "result_pending", id: testPSP},
		{name: "Authorised without its amount", handler: answerWith(answerNoAmount), kind: psp.ErrUnknownOutcome, reason: "malformed_body", id: testPSP},
		{name: "400", handler: answerWith(answer400), kind: psp.ErrNotApplied, reason: "invalid_request", code: "702"},
		{name: "401", handler: answerWith(answer401), kind: psp.ErrNotApplied, reason: "authentication_failed", code: "000"},
		{name: "403", handler: answerWith(answer403), kind: psp.ErrNotApplied, reason: "permission_denied", code: "901"},
		{name: "429", handler: answerWith(answer429), kind: psp.ErrNotApplied, reason: "rate_limited", code: "100"},
		{name: "422 validation", handler: answerWith(answer422Validation), kind: psp.ErrNotApplied, reason: "validation", code: "14_030"},
		{name: "422 704", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Transient-Error", "true")
			answerWith(answer422InProgress)(w, r)
		}, kind: psp.ErrUnknownOutcome, reason: "idempotency_key_in_use", code: "704"},
		{name: "409 704", handler: answerWith(answer409InProgress), kind: psp.ErrUnknownOutcome, reason: "idempotency_key_in_use", code: "704"},
		{name: "422 configuration", handler: answerWith(answer422Other), kind: psp.ErrUnknownOutcome, reason: "status_422", code: "905_1"},
		{name: "500", handler: answerWith(answer500), kind: psp.ErrUnknownOutcome, reason: "status_500", code: "905"},
		{name: "502 from a proxy", handler: answerWith(answer502Proxy), kind: psp.ErrUnknownOutcome, reason: "status_502"},
		{name: "a redirect is not followed", handler: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/v71/elsewhere", http.StatusTemporaryRedirect)
		}, kind: psp.ErrUnknownOutcome, reason: "status_307"},
		{name: "malformed JSON", handler: answerWith(answer{200, answerAuthorised.body[:30], false}), kind: psp.ErrUnknownOutcome, reason: "malformed_body"},
		{name: "hang past the timeout", handler: hang, kind: psp.ErrUnknownOutcome, reason: "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			server := startServer(t, tc.handler)
			adapter := newAdapter(server.URL)
			if tc.reason == "timeout" {
				adapter = newAdapter(server.URL, func(c *Config) { c.Timeout = 300 * time.Millisecond })
			}
			charge, err := adapter.Charge(t.Context(), chargeRequest("cf_"+strings.ReplaceAll(tc.name, " ", "_")))
			require.Equal(t, 1, server.count(), "exactly one request")
			if tc.kind == nil {
				require.NoError(t, err)
				require.Equal(t, tc.charge, charge)
				return
			}
			require.Zero(t, charge)
			pspErr := requirePSPError(t, err, tc.kind, tc.reason)
			require.Equal(t, tc.code, pspErr.ProviderCode)
			require.Equal(t, tc.id, pspErr.ProviderID)
		})
	}
}

func TestChargeToAClosedPortIsNotApplied(t *testing.T) {
	t.Parallel()

	_, err := newAdapter(psptest.ClosedURL(t)).Charge(t.Context(), chargeRequest("cf_ch_1"))
	requirePSPError(t, err, psp.ErrNotApplied, "connection_refused")
}

func TestChargeRefusesWhatCannotBeSent(t *testing.T) {
	t.Parallel()

	server := startServer(t, answerWith(answerAuthorised))
	noReference := chargeRequest("cf_ch_1")
	noReference.Reference = ""
	for name, tc := range map[string]struct {
		adapter *Adapter
		req     psp.ChargeRequest
	}{
		"no API key":          {newAdapter(server.URL, func(c *Config) { c.APIKey = "" }), chargeRequest("cf_ch_1")},
		"no merchant account": {newAdapter(server.URL, func(c *Config) { c.MerchantAccount = "" }), chargeRequest("cf_ch_1")},
		"no key":              {newAdapter(server.URL), chargeRequest(" ")},
		"a key over 64":       {newAdapter(server.URL), chargeRequest(strings.Repeat("k", 65))},
		"no reference":        {newAdapter(server.URL), noReference},
	} {
		_, err := tc.adapter.Charge(t.Context(), tc.req)
		requirePSPError(t, err, psp.ErrNotApplied, "invalid_request")
		require.Zero(t, server.count(), name)
	}
	_, err := newAdapter(server.URL).Charge(t.Context(), chargeRequest(strings.Repeat("k", 64)))
	require.NoError(t, err, "64 characters is Adyen's limit, not over it")
}

func TestChargeMakesExactlyOneAttempt(t *testing.T) {
	t.Parallel()

	// psp's TestClientChargeMakesExactlyOneAttempt is the control: plain
	// net/http re-sends such a POST on a new connection.
	t.Run("the adapter sends once and reports an unknown outcome", func(t *testing.T) {
		t.Parallel()

		server := psptest.StartLosingServer(t, []byte(answerAuthorised.body))
		transport := &http.Transport{}
		t.Cleanup(transport.CloseIdleConnections)
		adapter := newAdapter(server.URL(), func(c *Config) { c.HTTPClient = &http.Client{Transport: transport} })

		_, err := adapter.Charge(t.Context(), chargeRequest("cf_first"))
		require.NoError(t, err)
		_, err = adapter.Charge(t.Context(), chargeRequest("cf_second"))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
		require.Equal(t, int32(2), server.Requests.Load(), "the dropped POST was not sent again")
		require.Equal(t, int32(1), server.Conns.Load(), "no second connection was opened for a re-send")
	})

	t.Run("the default transport sends once too", func(t *testing.T) {
		t.Parallel()

		server := psptest.StartLosingServer(t, []byte(answerAuthorised.body))
		adapter := newAdapter(server.URL())
		_, err := adapter.Charge(t.Context(), chargeRequest("cf_first"))
		require.NoError(t, err)
		_, err = adapter.Charge(t.Context(), chargeRequest("cf_second"))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
		require.Equal(t, int32(2), server.Requests.Load())
	})

	t.Run("a refund is sent once", func(t *testing.T) {
		t.Parallel()

		server := psptest.StartLosingServer(t, []byte(answerRefundReceived.body))
		adapter := newAdapter(server.URL())
		_, err := adapter.Refund(t.Context(), refundRequest("cf_re_first"))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "refund_received")
		_, err = adapter.Refund(t.Context(), refundRequest("cf_re_second"))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
		require.Equal(t, int32(2), server.Requests.Load())
	})
}

// A charge Adyen reads and never answers: when the call times out, Adyen's
// end must see the connection reset, not closed, so that nothing the call
// had not yet sent reaches Adyen later (docs/provider.md, "Nothing arrives
// after the timeout"). The adapter's default transport does it.
func TestTimedOutCallIsAborted(t *testing.T) {
	t.Parallel()

	url, ended := psptest.StartSilentServer(t)
	adapter := newAdapter(url, func(c *Config) { c.Timeout = 200 * time.Millisecond })
	_, err := adapter.Charge(t.Context(), chargeRequest("cf_aborted"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "timeout")
	select {
	case err := <-ended:
		require.True(t, errors.Is(err, syscall.ECONNRESET), "Adyen's end saw %v, want a reset", err)
	case <-time.After(time.Minute):
		t.Fatal("the connection never ended")
	}
}

// TestCallsAreHTTP1 has a server that offers HTTP/2: the adapter's calls,
// on psp's transport, still go over HTTP/1.1, where a cancelled call closes
// its connection.
func TestCallsAreHTTP1(t *testing.T) {
	t.Parallel()

	var mu sync.Mutex
	var protos []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos = append(protos, r.Proto)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answerAuthorised.body)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	transport := psp.NewTransport()
	transport.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
	adapter := newAdapter(srv.URL, func(c *Config) { c.HTTPClient = &http.Client{Transport: transport} })

	_, err := adapter.Charge(t.Context(), chargeRequest("cf_ch_1"))
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"HTTP/1.1"}, protos)
}

func TestRefundSendsOneRefund(t *testing.T) {
	t.Parallel()

	server := startServer(t, answerWith(answerRefundReceived))
	adapter := newAdapter(server.URL)
	refund, err := adapter.Refund(t.Context(), refundRequest("cf_re_1"))
	require.Zero(t, refund, "a received refund is not settled")
	pspErr := requirePSPError(t, err, psp.ErrUnknownOutcome, "refund_received")
	require.Equal(t, testRefundPSP, pspErr.ProviderID, "the refund's pspReference, which its notification names")

	require.Equal(t, 1, server.count())
	req := server.request(0)
	require.Equal(t, http.MethodPost, req.method)
	require.Equal(t, "/v71/payments/"+testPSP+"/refunds", req.path)
	require.Equal(t, "cf_re_1", req.header.Get("Idempotency-Key"))
	require.Equal(t, testAPIKey, req.header.Get("X-API-Key"))
	require.Equal(t, map[string]any{
		"amount":               map[string]any{"currency": "EUR", "value": 400.0},
		"merchantAccount":      testMerchant,
		"reference":            "re_1",
		"merchantRefundReason": "CUSTOMER REQUEST",
	}, jsonOf(t, req.body))

	for reason, want := range map[string]any{"duplicate": "DUPLICATE", "fraudulent": "FRAUD", "": nil, "other": nil} {
		req := refundRequest("cf_re_" + reason)
		req.Reason = reason
		_, err := adapter.Refund(t.Context(), req)
		requirePSPError(t, err, psp.ErrUnknownOutcome, "refund_received")
		require.Equal(t, want, jsonOf(t, server.request(server.count()-1).body)["merchantRefundReason"], reason)
	}

	odd := refundRequest("cf_re_odd")
	odd.Charge = "a/b c"
	_, err = adapter.Refund(t.Context(), odd)
	requirePSPError(t, err, psp.ErrUnknownOutcome, "refund_received")
	require.Equal(t, "/v71/payments/a%2Fb%20c/refunds", server.request(server.count()-1).path, "the payment is one path segment")
}

func TestRefundClassifiesAdyensAnswers(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		a      answer
		kind   error
		reason string
	}{
		{answer422Validation, psp.ErrNotApplied, "validation"},
		{answer401, psp.ErrNotApplied, "authentication_failed"},
		{answer422InProgress, psp.ErrUnknownOutcome, "idempotency_key_in_use"},
		{answer500, psp.ErrUnknownOutcome, "status_500"},
	} {
		server := startServer(t, answerWith(tc.a))
		refund, err := newAdapter(server.URL).Refund(t.Context(), refundRequest("cf_re_1"))
		require.Zero(t, refund)
		pspErr := requirePSPError(t, err, tc.kind, tc.reason)
		require.Empty(t, pspErr.ProviderID, "an error's pspReference is not the refund's")
		require.Equal(t, 1, server.count())
	}
}

func TestRefundRefusesWhatCannotBeSent(t *testing.T) {
	t.Parallel()

	server := startServer(t, answerWith(answerRefundReceived))
	adapter := newAdapter(server.URL)
	for name, edit := range map[string]func(*psp.RefundRequest){
		"no key":          func(r *psp.RefundRequest) { r.Key = "" },
		"no payment":      func(r *psp.RefundRequest) { r.Charge = "" },
		"no amount":       func(r *psp.RefundRequest) { r.Amount = 0 },
		"negative amount": func(r *psp.RefundRequest) { r.Amount = -1 },
		"no reference":    func(r *psp.RefundRequest) { r.Reference = "" },
	} {
		req := refundRequest("cf_re_1")
		edit(&req)
		_, err := adapter.Refund(t.Context(), req)
		requirePSPError(t, err, psp.ErrNotApplied, "invalid_request")
		require.Zero(t, server.count(), name)
	}
}

// Adyen has no lookup: Find and FindRefund send nothing and prove nothing,
// whatever they are given, and never say not found.
func TestFindHasNoLookup(t *testing.T) {
	t.Parallel()

	server := startServer(t, answerWith(answerAuthorised))
	adapter := newAdapter(server.URL)
	q := psp.LookupRequest{Key: "cf_ch_1", Reference: "ch_1", ProviderID: testPSP, FirstSent: time.Now(), LastSent: time.Now()}
	charge, err := adapter.Find(t.Context(), q)
	require.Zero(t, charge)
	requirePSPError(t, err, psp.ErrUnknownOutcome, "no_lookup")
	require.NotErrorIs(t, err, psp.ErrNotFound)

	q.Charge = testPSP
	refund, err := adapter.FindRefund(t.Context(), q)
	require.Zero(t, refund)
	requirePSPError(t, err, psp.ErrUnknownOutcome, "no_lookup")
	require.NotErrorIs(t, err, psp.ErrNotFound)
	require.Zero(t, server.count())
}

func TestCapabilities(t *testing.T) {
	t.Parallel()

	adapter := New(Config{Timeout: 7 * time.Second})
	require.Equal(t, psp.Capabilities{
		Name: "adyen", KeyWindow: 7 * 24 * time.Hour, Lookup: psp.LookupByResend, Consistency: psp.Strong,
		ByProviderID: false, Refunds: true, Notifications: true, SeparateCapture: true, HoldWindow: 7 * 24 * time.Hour,
	}, adapter.Capabilities())
	require.Equal(t, 7*time.Second, adapter.Timeout())
	require.Equal(t, psp.DefaultTimeout, New(Config{}).Timeout())

	named := New(Config{Name: "adyen_eu", KeyWindow: 31 * 24 * time.Hour, HoldWindow: 28 * 24 * time.Hour})
	require.Equal(t, "adyen_eu", named.Capabilities().Name)
	require.Equal(t, 31*24*time.Hour, named.Capabilities().KeyWindow)
	require.Equal(t, 28*24*time.Hour, named.Capabilities().Hold())
}

// Calls are psp's spans, under the caller's, with the trace context sent
// to Adyen, measured by op and outcome, and without the payment method,
// the API key, our references or the tenant: a charge, a refund, a capture
// and a cancel.
func TestTelemetry(t *testing.T) {
	t.Parallel()

	var mu sync.Mutex
	var traceParents []string
	server := startServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		traceParents = append(traceParents, r.Header.Get("traceparent"))
		mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/refunds"):
			answerWith(answerRefundReceived)(w, r)
		case strings.HasSuffix(r.URL.Path, "/captures"):
			answerWith(answerCaptureReceived)(w, r)
		case strings.HasSuffix(r.URL.Path, "/cancels"):
			answerWith(answerCancelReceived)(w, r)
		default:
			answerWith(answerRefused)(w, r)
		}
	})
	spans := tracetest.NewSpanRecorder()
	tracerProvider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	meterProvider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	adapter := newAdapter(server.URL, func(c *Config) { c.TracerProvider, c.MeterProvider = tracerProvider, meterProvider })

	ctx, parent := tracerProvider.Tracer("test").Start(context.Background(), "charge.submit")
	_, err := adapter.Charge(ctx, chargeRequest("cf_ch_1"))
	require.NoError(t, err)
	_, err = adapter.Refund(ctx, refundRequest("cf_re_1"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "refund_received")
	_, err = adapter.Capture(ctx, operationRequest("cf_cp_1", "cp_1"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "capture_received")
	_, err = adapter.Cancel(ctx, operationRequest("cf_cx_1", "cx_1"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "cancel_received")
	parent.End()

	ended := spans.Ended()
	require.Len(t, ended, 5)
	for i, want := range []struct {
		name, outcome string
		status        codes.Code
	}{{"psp.charge", "charge", codes.Unset}, {"psp.refund", "unknown", codes.Error},
		{"psp.capture", "unknown", codes.Error}, {"psp.cancel", "unknown", codes.Error}} {
		span := ended[i]
		require.Equal(t, want.name, span.Name())
		require.Equal(t, parent.SpanContext().SpanID(), span.Parent().SpanID())
		require.Equal(t, want.status, span.Status().Code)
		attrs := map[string]string{}
		for _, kv := range span.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
			for _, secret := range []string{"pm_canary", "canary_api_key", "ch_1", "re_1", "cp_1", "cx_1", "tn_1", "cf_"} {
				require.NotContains(t, kv.Value.Emit(), secret)
			}
		}
		require.NotContains(t, span.Status().Description, "pm_canary")
		require.Equal(t, want.outcome, attrs["psp.outcome"])
		require.Equal(t, "00-"+span.SpanContext().TraceID().String()+"-"+span.SpanContext().SpanID().String()+"-01", traceParents[i],
			"Adyen is sent the trace context")
	}
	require.Equal(t, "insufficient_funds", attrsOf(ended[0])["psp.decline_code"])
	require.Equal(t, "refund_received", attrsOf(ended[1])["psp.reason"])
	require.Equal(t, "capture_received", attrsOf(ended[2])["psp.reason"])
	require.Equal(t, "cancel_received", attrsOf(ended[3])["psp.reason"])

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	counts := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			require.Equal(t, psp.MetricCallDuration, m.Name)
			for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
				op, _ := dp.Attributes.Value("op")
				outcome, _ := dp.Attributes.Value("outcome")
				counts[op.AsString()+"/"+outcome.AsString()] = dp.Count
			}
		}
	}
	require.Equal(t, map[string]uint64{"charge/charge": 1, "refund/unknown": 1, "capture/unknown": 1, "cancel/unknown": 1}, counts)
}

func attrsOf(span sdktrace.ReadOnlySpan) map[string]string {
	attrs := map[string]string{}
	for _, kv := range span.Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	return attrs
}
