package psp_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/psp/psptest"
)

const refundJSON = `{"id":"rf_1","status":"succeeded","charge":"py_1","amount":500,"currency":"USD","reference":"re_canary_ref","created_at":"2030-01-01T00:00:00Z"}`

// refundRequest is a valid refund request; tests change what they care
// about. Its reference and tag are canaries no error may quote.
func refundRequest(key string) psp.RefundRequest {
	return psp.RefundRequest{Key: key, Charge: "py_1", Amount: 500, Currency: "USD", Reference: "re_canary_ref", Reason: "requested_by_customer", Tag: "tn_canary_tag"}
}

// requireNoRequestValues checks that err quotes neither the reference nor
// the tenant tag of refundRequest.
func requireNoRequestValues(t *testing.T, err error) {
	t.Helper()
	require.NotContains(t, err.Error(), "canary_ref")
	require.NotContains(t, err.Error(), "canary_tag")
}

func TestClientRefundSendsTheWireRequest(t *testing.T) {
	t.Parallel()

	type received struct {
		method, path, key, tag, contentType string
		body                                map[string]any
	}
	got := make(chan received, 2)
	server, requests := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		got <- received{r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), r.Header.Get("X-Tenant-Tag"), r.Header.Get("Content-Type"), body}
		_, _ = io.WriteString(w, refundJSON)
	})
	client := psp.NewClient(psp.Config{BaseURL: server.URL + "/"})

	refund, err := client.Refund(t.Context(), refundRequest("rk_1"))
	require.NoError(t, err)
	require.Equal(t, psp.Refund{ID: "rf_1", Status: psp.StatusSucceeded, Charge: "py_1", Amount: 500, Currency: "USD", Reference: "re_canary_ref"}, refund)

	r := <-got
	require.Equal(t, http.MethodPost, r.method)
	require.Equal(t, "/v1/refunds", r.path)
	require.Equal(t, "rk_1", r.key, "the provider key is the Idempotency-Key")
	require.Equal(t, "tn_canary_tag", r.tag, "the tenant tag, as a charge's")
	require.Equal(t, "application/json", r.contentType)
	require.Equal(t, map[string]any{"charge": "py_1", "amount": float64(500), "reference": "re_canary_ref", "reason": "requested_by_customer"}, r.body)

	// Without a reason or a tag, neither is sent.
	plain := refundRequest("rk_2")
	plain.Reason, plain.Tag = "", ""
	_, err = client.Refund(t.Context(), plain)
	require.NoError(t, err)
	r = <-got
	require.Empty(t, r.tag)
	require.Equal(t, map[string]any{"charge": "py_1", "amount": float64(500), "reference": "re_canary_ref"}, r.body)
	require.Equal(t, int32(2), requests.Load())
}

// The fake's 409 refusals are failed refunds carrying the request; every
// other answer is classified as a charge's would be, with one request each.
func TestClientRefundAnswers(t *testing.T) {
	t.Parallel()

	refused := func(code string) psp.Refund {
		return psp.Refund{Status: psp.StatusFailed, Charge: "py_1", Amount: 500, Currency: "USD", Reference: "re_canary_ref", FailureCode: code}
	}
	tests := []struct {
		name   string
		status int
		body   string
		refund psp.Refund
		kind   error
		reason string
	}{
		{name: "succeeded", status: 200, body: refundJSON,
			refund: psp.Refund{ID: "rf_1", Status: psp.StatusSucceeded, Charge: "py_1", Amount: 500, Currency: "USD", Reference: "re_canary_ref"}},
		{name: "failed", status: 200, body: `{"id":"rf_2","status":"failed","charge":"py_1","amount":500,"currency":"USD","reference":"re_canary_ref","failure_code":"declined"}`,
			refund: psp.Refund{ID: "rf_2", Status: psp.StatusFailed, Charge: "py_1", Amount: 500, Currency: "USD", Reference: "re_canary_ref", FailureCode: "declined"}},
		{name: "exceeds the charge", status: 409, body: `{"error":{"code":"refund_exceeds_charge","message":"re_canary_ref exceeds"}}`, refund: refused("refund_exceeds_charge")},
		{name: "charge not refundable", status: 409, body: `{"error":{"code":"charge_not_refundable","message":"no"}}`, refund: refused("charge_not_refundable")},
		{name: "key reused", status: 409, body: `{"error":{"code":"idempotency_key_reused"}}`, kind: psp.ErrUnknownOutcome, reason: "status_409"},
		{name: "rate limited", status: 429, body: `{"error":{"code":"rate_limited"}}`, kind: psp.ErrNotApplied, reason: "status_429"},
		{name: "bad request", status: 400, body: `{"error":{"code":"parameter_invalid"}}`, kind: psp.ErrNotApplied, reason: "status_400"},
		{name: "no refunds here", status: 404, body: `404 page not found`, kind: psp.ErrNotApplied, reason: "status_404"},
		{name: "server error", status: 500, body: `{"error":{"code":"internal_error"}}`, kind: psp.ErrUnknownOutcome, reason: "status_500"},
		{name: "unavailable", status: 503, kind: psp.ErrUnknownOutcome, reason: "status_503"},
		{name: "redirect", status: 302, kind: psp.ErrUnknownOutcome, reason: "status_302"},
		{name: "pending", status: 200, body: `{"id":"rf_1","status":"pending"}`, kind: psp.ErrUnknownOutcome, reason: "unknown_status"},
		{name: "not json", status: 200, body: `not json`, kind: psp.ErrUnknownOutcome, reason: "malformed_body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			server, requests := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.status == http.StatusFound {
					w.Header().Set("Location", "/v1/refunds/elsewhere")
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			refund, err := psp.NewClient(psp.Config{BaseURL: server.URL}).Refund(t.Context(), refundRequest("rk_"+tt.name))
			require.Equal(t, int32(1), requests.Load(), "exactly one request, redirects are not followed")
			if tt.kind == nil {
				require.NoError(t, err)
				require.Equal(t, tt.refund, refund)
				return
			}
			require.Zero(t, refund)
			pspErr := requirePSPError(t, err, tt.kind, tt.reason)
			require.Equal(t, tt.status, pspErr.StatusCode)
			requireNoRequestValues(t, err)
		})
	}
}

func TestClientRefundRefusesWhatCannotBeSent(t *testing.T) {
	t.Parallel()

	server, requests := countingServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, refundJSON) })
	client := psp.NewClient(psp.Config{BaseURL: server.URL})
	for name, edit := range map[string]func(*psp.RefundRequest){
		"no key":          func(r *psp.RefundRequest) { r.Key = "" },
		"no charge":       func(r *psp.RefundRequest) { r.Charge = "" },
		"no amount":       func(r *psp.RefundRequest) { r.Amount = 0 },
		"negative amount": func(r *psp.RefundRequest) { r.Amount = -1 },
	} {
		req := refundRequest("rk_1")
		edit(&req)
		_, err := client.Refund(t.Context(), req)
		requirePSPError(t, err, psp.ErrNotApplied, "invalid_request")
		require.Zero(t, requests.Load(), name)
	}
}

func TestClientRefundConnectionRules(t *testing.T) {
	t.Parallel()

	t.Run("refused is not applied", func(t *testing.T) {
		t.Parallel()

		_, err := psp.NewClient(psp.Config{BaseURL: psptest.ClosedURL(t)}).Refund(t.Context(), refundRequest("rk_1"))
		requirePSPError(t, err, psp.ErrNotApplied, "connection_refused")
		requireNoRequestValues(t, err)
	})

	t.Run("a timeout once sent is unknown", func(t *testing.T) {
		t.Parallel()

		server, requests := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		})
		_, err := psp.NewClient(psp.Config{BaseURL: server.URL, Timeout: 100 * time.Millisecond}).Refund(t.Context(), refundRequest("rk_1"))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "timeout")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, int32(1), requests.Load())
	})
}

func TestClientRefundMakesExactlyOneAttempt(t *testing.T) {
	t.Parallel()

	// The connection-losing server drops the second request of its first
	// keep-alive connection: without the client's precaution net/http
	// would send that refund again on a new connection.
	for name, transport := range map[string]func(t *testing.T) *http.Client{
		"a transport of the caller's": func(t *testing.T) *http.Client {
			transport := &http.Transport{}
			t.Cleanup(transport.CloseIdleConnections)
			return &http.Client{Transport: transport}
		},
		"the default transport": func(*testing.T) *http.Client { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			server := psptest.StartLosingServer(t, []byte(refundJSON))
			client := psp.NewClient(psp.Config{BaseURL: server.URL(), HTTPClient: transport(t)})

			_, err := client.Refund(t.Context(), refundRequest("rk_first"))
			require.NoError(t, err)
			_, err = client.Refund(t.Context(), refundRequest("rk_second"))
			requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
			requireNoRequestValues(t, err)
			require.Equal(t, int32(2), server.Requests.Load(), "the lost refund was not sent again")
			require.Equal(t, int32(1), server.Conns.Load(), "no second connection was opened for a re-send")
		})
	}
}

func TestClientFindRefund(t *testing.T) {
	t.Parallel()

	// A provider with one refund, under a key that needs escaping.
	const key = "rk/with space?&%"
	var (
		mu    sync.Mutex
		paths []string
	)
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(paths)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/refunds/by-key/{key}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("key") {
		case key:
			_, _ = io.WriteString(w, refundJSON)
		case "rk_unavailable":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "rk_slow":
			<-r.Context().Done()
		case "rk_charge_code":
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"code":"charge_not_found"}}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"code":"refund_not_found","message":"no refund"}}`)
		}
	})
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.EscapedPath())
		mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(server.Close)
	client := psp.NewClient(psp.Config{BaseURL: server.URL})
	lookup := func(key string) psp.LookupRequest {
		return psp.LookupRequest{Key: key, Reference: "re_canary_ref", Charge: "py_1"}
	}

	refund, err := client.FindRefund(t.Context(), lookup(key))
	require.NoError(t, err)
	require.Equal(t, psp.Refund{ID: "rf_1", Status: psp.StatusSucceeded, Charge: "py_1", Amount: 500, Currency: "USD", Reference: "re_canary_ref"}, refund)
	require.Equal(t, "/v1/refunds/by-key/rk%2Fwith%20space%3F&%25", seen()[0], "the key is one escaped path segment")

	_, err = client.FindRefund(t.Context(), lookup("rk_missing"))
	require.Equal(t, psp.ErrNotFound, err, "proven by the provider's refund_not_found")

	_, err = client.FindRefund(t.Context(), lookup("rk_charge_code"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "status_404")

	_, err = psp.NewClient(psp.Config{BaseURL: server.URL + "/wrong/prefix"}).FindRefund(t.Context(), lookup("rk_missing"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "status_404")

	_, err = client.FindRefund(t.Context(), lookup("rk_unavailable"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "status_503")

	_, err = psp.NewClient(psp.Config{BaseURL: server.URL, Timeout: 100 * time.Millisecond}).FindRefund(t.Context(), lookup("rk_slow"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "timeout")

	_, err = client.FindRefund(t.Context(), psp.LookupRequest{Reference: "re_canary_ref", Charge: "py_1"})
	requirePSPError(t, err, psp.ErrUnknownOutcome, "invalid_request")
	require.Len(t, seen(), 6, "a lookup without a key is not sent")

	_, err = psp.NewClient(psp.Config{BaseURL: psptest.ClosedURL(t)}).FindRefund(t.Context(), lookup("rk_1"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "connection_refused")
	require.NotErrorIs(t, err, psp.ErrNotApplied, "a lookup is never not applied")
	requireNoRequestValues(t, err)
}

func TestClientIsARefunder(t *testing.T) {
	t.Parallel()

	var provider psp.Provider = psp.NewClient(psp.Config{})
	refunder, ok := provider.(psp.Refunder)
	require.True(t, ok)
	require.NotNil(t, refunder)
	require.True(t, provider.Capabilities().Refunds)
	require.True(t, psp.NewClient(psp.Config{Capabilities: psp.Capabilities{Name: "other"}}).Capabilities().Refunds)
}
