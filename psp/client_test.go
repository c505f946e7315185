package psp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/psp/psptest"
)

const chargeJSON = `{"id":"py_1","status":"succeeded","amount":1000,"currency":"USD","reference":"ch_1"}`

// visaRequest is a valid charge request; tests change the fields they care
// about.
func visaRequest(key string) psp.ChargeRequest {
	return psp.ChargeRequest{Key: key, Amount: 1000, Currency: "USD", PaymentMethod: "pm_card_visa", Reference: "ch_1"}
}

// requirePSPError checks that err is an *psp.Error of kind and reason, and
// returns it for further checks.
func requirePSPError(t *testing.T, err error, kind error, reason string) *psp.Error {
	t.Helper()

	require.ErrorIs(t, err, kind)
	var pspErr *psp.Error
	require.ErrorAs(t, err, &pspErr)
	require.Equal(t, reason, pspErr.Reason, "error: %v", err)
	return pspErr
}

// countingServer starts a loopback server that counts requests and answers
// each with handler.
func countingServer(t *testing.T, handler http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()

	var requests atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		handler(w, r)
	}))
	t.Cleanup(server.Close)
	return server, &requests
}

func TestClientChargeSendsTheWireRequest(t *testing.T) {
	t.Parallel()

	type received struct {
		method, path, key, tag, contentType string
		body                                map[string]any
	}
	got := make(chan received, 1)
	server, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		got <- received{r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), r.Header.Get("X-Tenant-Tag"), r.Header.Get("Content-Type"), body}
		_, _ = io.WriteString(w, `{"id":"py_9","status":"failed","amount":1250,"currency":"EUR","reference":"ch_9","decline_code":"expired_card"}`)
	})

	client := psp.NewClient(psp.Config{BaseURL: server.URL + "/"})
	charge, err := client.Charge(t.Context(), psp.ChargeRequest{
		Key: "pk_ch_9", Amount: 1250, Currency: "EUR", PaymentMethod: "pm_card_chargeDeclinedExpiredCard", Reference: "ch_9", Tag: "tenant-a",
	})
	require.NoError(t, err, "a decline is a value, not an error")
	require.Equal(t, psp.Charge{ID: "py_9", Status: psp.StatusFailed, Amount: 1250, Currency: "EUR", Reference: "ch_9", DeclineCode: "expired_card"}, charge)

	r := <-got
	require.Equal(t, http.MethodPost, r.method)
	require.Equal(t, "/v1/charges", r.path)
	require.Equal(t, "pk_ch_9", r.key)
	require.Equal(t, "tenant-a", r.tag)
	require.Equal(t, "application/json", r.contentType)
	require.Equal(t, map[string]any{
		"amount": float64(1250), "currency": "EUR", "payment_method": "pm_card_chargeDeclinedExpiredCard", "reference": "ch_9",
	}, r.body)
}

func TestClientChargeWithoutKeyIsNotSent(t *testing.T) {
	t.Parallel()

	server, requests := countingServer(t, func(w http.ResponseWriter, r *http.Request) {})
	client := psp.NewClient(psp.Config{BaseURL: server.URL})

	_, err := client.Charge(t.Context(), visaRequest(""))
	requirePSPError(t, err, psp.ErrNotApplied, "invalid_request")
	require.Zero(t, requests.Load())
}

func TestClientChargeConnectionRefusedIsNotApplied(t *testing.T) {
	t.Parallel()

	client := psp.NewClient(psp.Config{BaseURL: psptest.ClosedURL(t), Timeout: 2 * time.Second})
	_, err := client.Charge(t.Context(), visaRequest("pk_refused"))
	requirePSPError(t, err, psp.ErrNotApplied, "connection_refused")
	require.NotErrorIs(t, err, psp.ErrUnknownOutcome)
}

func TestClientChargeDialTimeoutIsNotApplied(t *testing.T) {
	t.Parallel()

	// A dialer that never connects, like a provider address that drops SYNs.
	transport := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	t.Cleanup(transport.CloseIdleConnections)

	client := psp.NewClient(psp.Config{
		BaseURL:    "http://127.0.0.1:9",
		Timeout:    50 * time.Millisecond,
		HTTPClient: &http.Client{Transport: transport},
	})
	_, err := client.Charge(t.Context(), visaRequest("pk_dial_timeout"))
	requirePSPError(t, err, psp.ErrNotApplied, "dial_timeout")
}

func TestClientChargeTimeoutAfterConnectingIsUnknown(t *testing.T) {
	t.Parallel()

	server, requests := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		// Never answer. Reading the body first lets net/http notice the
		// client hanging up, which cancels the request's context.
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	})

	client := psp.NewClient(psp.Config{BaseURL: server.URL, Timeout: 100 * time.Millisecond})
	_, err := client.Charge(t.Context(), visaRequest("pk_timeout"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "timeout")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, int32(1), requests.Load())
}

func TestClientChargeHonoursTheCallersContext(t *testing.T) {
	t.Parallel()

	server, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	})

	client := psp.NewClient(psp.Config{BaseURL: server.URL, Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := client.Charge(ctx, visaRequest("pk_caller_deadline"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "timeout")
}

func TestClientChargeStatuses(t *testing.T) {
	t.Parallel()

	tests := []struct {
		status int
		body   string
		kind   error
		reason string
	}{
		{http.StatusTooManyRequests, `{"error":{"code":"rate_limited"}}`, psp.ErrNotApplied, "status_429"},
		{http.StatusBadRequest, `{"error":{"code":"parameter_invalid"}}`, psp.ErrNotApplied, "status_400"},
		{http.StatusUnauthorized, ``, psp.ErrNotApplied, "status_401"},
		{http.StatusNotFound, `404 page not found`, psp.ErrNotApplied, "status_404"},
		{http.StatusRequestEntityTooLarge, ``, psp.ErrNotApplied, "status_413"},
		{http.StatusInternalServerError, `{"error":{"code":"internal_error"}}`, psp.ErrUnknownOutcome, "status_500"},
		{http.StatusBadGateway, ``, psp.ErrUnknownOutcome, "status_502"},
		{http.StatusServiceUnavailable, ``, psp.ErrUnknownOutcome, "status_503"},
		{http.StatusRequestTimeout, ``, psp.ErrUnknownOutcome, "status_408"},
		{http.StatusConflict, `{"error":{"code":"idempotency_key_reused"}}`, psp.ErrUnknownOutcome, "status_409"},
		{http.StatusUnprocessableEntity, `{"error":{"code":"idempotency_key_reused"}}`, psp.ErrUnknownOutcome, "status_422"},
		{http.StatusFound, ``, psp.ErrUnknownOutcome, "status_302"},
		{http.StatusOK, `{"id":"py_1","status":"processing"}`, psp.ErrUnknownOutcome, "unknown_status"},
		{http.StatusOK, `{"status":"succeeded"}`, psp.ErrUnknownOutcome, "malformed_body"},
		{http.StatusOK, `not json`, psp.ErrUnknownOutcome, "malformed_body"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d %s", tt.status, tt.reason), func(t *testing.T) {
			t.Parallel()

			server, requests := countingServer(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.status == http.StatusFound {
					w.Header().Set("Location", "/v1/charges/elsewhere")
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})

			client := psp.NewClient(psp.Config{BaseURL: server.URL})
			charge, err := client.Charge(t.Context(), visaRequest("pk_status"))
			require.Equal(t, psp.Charge{}, charge)
			pspErr := requirePSPError(t, err, tt.kind, tt.reason)
			require.Equal(t, tt.status, pspErr.StatusCode)
			require.Equal(t, int32(1), requests.Load(), "exactly one request, redirects are not followed")
		})
	}
}

func TestClientChargeMakesExactlyOneAttempt(t *testing.T) {
	t.Parallel()

	t.Run("net/http alone re-sends a POST with an Idempotency-Key", func(t *testing.T) {
		t.Parallel()

		// The control: without the client's precaution the transport sends
		// the second POST twice, once per connection, and reports success.
		server := psptest.StartLosingServer(t, []byte(chargeJSON))
		transport := &http.Transport{}
		t.Cleanup(transport.CloseIdleConnections)
		httpClient := &http.Client{Transport: transport}

		post := func(key string) error {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, server.URL()+"/v1/charges", bytes.NewReader([]byte(`{}`)))
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", key)
			resp, err := httpClient.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		}
		require.NoError(t, post("pk_first"))
		require.NoError(t, post("pk_second"), "the transport hid the dropped connection by re-sending")
		require.Equal(t, int32(3), server.Requests.Load())
	})

	t.Run("the psp client sends once and reports an unknown outcome", func(t *testing.T) {
		t.Parallel()

		server := psptest.StartLosingServer(t, []byte(chargeJSON))
		transport := &http.Transport{}
		t.Cleanup(transport.CloseIdleConnections)
		client := psp.NewClient(psp.Config{BaseURL: server.URL(), HTTPClient: &http.Client{Transport: transport}})

		_, err := client.Charge(t.Context(), visaRequest("pk_first"))
		require.NoError(t, err)
		_, err = client.Charge(t.Context(), visaRequest("pk_second"))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
		require.Equal(t, int32(2), server.Requests.Load(), "the dropped POST was not sent again")
		require.Equal(t, int32(1), server.Conns.Load(), "no second connection was opened for a re-send")
	})

	t.Run("the default transport sends once too", func(t *testing.T) {
		t.Parallel()

		server := psptest.StartLosingServer(t, []byte(chargeJSON))
		client := psp.NewClient(psp.Config{BaseURL: server.URL()})

		_, err := client.Charge(t.Context(), visaRequest("pk_first"))
		require.NoError(t, err)
		_, err = client.Charge(t.Context(), visaRequest("pk_second"))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
		require.Equal(t, int32(2), server.Requests.Load())
	})
}

func TestClientChargeResetAfterSendIsUnknown(t *testing.T) {
	t.Parallel()

	// Read the request, then reset the connection (SO_LINGER 0 sends RST).
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		conn, err := listener.Accept()
		if err != nil {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(conn))
		if err == nil {
			_, _ = io.Copy(io.Discard, req.Body)
		}
		_ = conn.(*net.TCPConn).SetLinger(0)
		_ = conn.Close()
	})
	t.Cleanup(func() {
		_ = listener.Close()
		wg.Wait()
	})

	client := psp.NewClient(psp.Config{BaseURL: "http://" + listener.Addr().String()})
	_, err = client.Charge(t.Context(), visaRequest("pk_reset"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
}

func TestClientLookup(t *testing.T) {
	t.Parallel()

	// A provider with one charge, under a key that needs escaping.
	const key = "pk/with space?&%"
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/charges/by-key/{key}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("key") {
		case key:
			_, _ = io.WriteString(w, chargeJSON)
		case "pk_unavailable":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "pk_slow":
			<-r.Context().Done()
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"error":{"code":"charge_not_found","message":"no charge"}}`)
		}
	})
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)
	client := psp.NewClient(psp.Config{BaseURL: server.URL})

	t.Run("found", func(t *testing.T) {
		t.Parallel()

		charge, err := client.Lookup(t.Context(), key)
		require.NoError(t, err)
		require.Equal(t, "py_1", charge.ID)
	})

	t.Run("not found is proven by the provider's error code", func(t *testing.T) {
		t.Parallel()

		_, err := client.Lookup(t.Context(), "pk_missing")
		require.ErrorIs(t, err, psp.ErrNotFound)
		require.NotErrorIs(t, err, psp.ErrUnknownOutcome)
	})

	t.Run("a bare 404 from a wrong route proves nothing", func(t *testing.T) {
		t.Parallel()

		wrongRoute := psp.NewClient(psp.Config{BaseURL: server.URL + "/wrong/prefix"})
		_, err := wrongRoute.Lookup(t.Context(), "pk_missing")
		requirePSPError(t, err, psp.ErrUnknownOutcome, "status_404")
		require.NotErrorIs(t, err, psp.ErrNotFound)
	})

	t.Run("5xx is unknown", func(t *testing.T) {
		t.Parallel()

		_, err := client.Lookup(t.Context(), "pk_unavailable")
		requirePSPError(t, err, psp.ErrUnknownOutcome, "status_503")
	})

	t.Run("timeout is unknown", func(t *testing.T) {
		t.Parallel()

		impatient := psp.NewClient(psp.Config{BaseURL: server.URL, Timeout: 100 * time.Millisecond})
		_, err := impatient.Lookup(t.Context(), "pk_slow")
		requirePSPError(t, err, psp.ErrUnknownOutcome, "timeout")
	})

	t.Run("connection refused is unknown, never not applied", func(t *testing.T) {
		t.Parallel()

		_, err := psp.NewClient(psp.Config{BaseURL: psptest.ClosedURL(t)}).Lookup(t.Context(), "pk_any")
		requirePSPError(t, err, psp.ErrUnknownOutcome, "connection_refused")
		require.NotErrorIs(t, err, psp.ErrNotApplied)
		require.NotErrorIs(t, err, psp.ErrNotFound)
	})
}

func TestClientLookupEscapesTheKey(t *testing.T) {
	t.Parallel()

	got := make(chan string, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/charges/by-key/{key}", func(w http.ResponseWriter, r *http.Request) {
		got <- r.PathValue("key")
		_, _ = io.WriteString(w, chargeJSON)
	})
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)

	const key = "tenant/42 order?#%"
	_, err := psp.NewClient(psp.Config{BaseURL: server.URL}).Lookup(t.Context(), key)
	require.NoError(t, err)
	require.Equal(t, key, <-got)
}
