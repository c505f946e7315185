package fakepsp_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/lockedbuf"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
)

// testBundle is what a fake provider test needs: the provider, served over
// loopback TCP, and a psp client pointed at it.
type testBundle struct {
	provider   *fakepsp.Server
	url        string
	http       *http.Client
	client     *psp.Client
	ledgerPath string
}

// setup starts a provider for cfg on loopback. An empty cfg.LedgerPath gets a
// fresh file in the test's temporary directory.
func setup(t *testing.T, cfg fakepsp.Config) *testBundle {
	t.Helper()

	started := fakepsptest.Start(t, cfg)
	return &testBundle{
		provider:   started.Server,
		url:        started.URL,
		http:       started.Client(),
		client:     psp.NewClient(psp.Config{BaseURL: started.URL}),
		ledgerPath: started.LedgerPath,
	}
}

// clientWithTimeout returns a psp client for the bundle's server that gives
// up after timeout.
func (b *testBundle) clientWithTimeout(timeout time.Duration) *psp.Client {
	return psp.NewClient(psp.Config{BaseURL: b.url, Timeout: timeout})
}

// response is a raw HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// errorCode returns the code of a provider error body.
func (r response) errorCode(t *testing.T) string {
	t.Helper()

	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(r.body, &body), "body: %s", r.body)
	return body.Error.Code
}

// do sends one raw request to the bundle's server.
func (b *testBundle) do(t *testing.T, method, path string, header http.Header, body string) response {
	t.Helper()

	req, err := http.NewRequestWithContext(t.Context(), method, b.url+path, strings.NewReader(body))
	require.NoError(t, err)
	for name, values := range header {
		req.Header[name] = values
	}
	resp, err := b.http.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// postCharge sends a raw charge request with an Idempotency-Key.
func (b *testBundle) postCharge(t *testing.T, key, body string) response {
	t.Helper()

	return b.do(t, http.MethodPost, "/v1/charges", http.Header{"Idempotency-Key": {key}}, body)
}

// getJSON decodes the answer to GET path into v and requires a 200.
func (b *testBundle) getJSON(t *testing.T, path string, v any) {
	t.Helper()

	resp := b.do(t, http.MethodGet, path, nil, "")
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	require.NoError(t, json.Unmarshal(resp.body, v))
}

// ledger returns GET /_admin/ledger, with declines when all is set.
func (b *testBundle) ledger(t *testing.T, all bool) []fakepsp.LedgerEntry {
	t.Helper()

	path := "/_admin/ledger"
	if all {
		path += "?all=true"
	}
	var ledger fakepsp.LedgerResponse
	b.getJSON(t, path, &ledger)
	return ledger.Charges
}

// charge makes a charge through the psp client and requires an answer.
func (b *testBundle) charge(t *testing.T, req psp.ChargeRequest) psp.Charge {
	t.Helper()

	charge, err := b.client.Charge(t.Context(), req)
	require.NoError(t, err)
	return charge
}

// visa returns a charge request that succeeds.
func visa(key string) psp.ChargeRequest {
	return psp.ChargeRequest{Key: key, Amount: 1000, Currency: "USD", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_" + key}
}

// requirePSPError checks that err is a *psp.Error of kind and reason.
func requirePSPError(t *testing.T, err error, kind error, reason string) *psp.Error {
	t.Helper()

	require.ErrorIs(t, err, kind)
	var pspErr *psp.Error
	require.ErrorAs(t, err, &pspErr)
	require.Equal(t, reason, pspErr.Reason, "error: %v", err)
	return pspErr
}

// faults builds a schedule from rules.
func faults(rules ...fakepsp.Rule) fakepsp.Schedule {
	return fakepsp.Schedule{Seed: 1, Rules: rules}
}

// ptr returns a pointer to v.
func ptr[T any](v T) *T { return &v }

// testClock is a clock tests move by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock {
	return &testClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// debugLogger logs everything as JSON into a buffer.
func debugLogger() (*slog.Logger, *lockedbuf.Buffer) {
	buf := &lockedbuf.Buffer{}
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// eventually waits for condition with a deadline, polling briefly.
func eventually(t *testing.T, condition func() bool, msg string) {
	t.Helper()

	require.Eventually(t, condition, 5*time.Second, 10*time.Millisecond, msg)
}

// refundBody is the JSON body of a fake protocol refund of amount of charge,
// for our reference.
func refundBody(charge string, amount int64, reference string) string {
	return fmt.Sprintf(`{"charge":%q,"amount":%d,"reference":%q}`, charge, amount, reference)
}

// postRefund sends a raw refund request with an Idempotency-Key.
func (b *testBundle) postRefund(t *testing.T, key, body string) response {
	t.Helper()

	return b.do(t, http.MethodPost, "/v1/refunds", http.Header{"Idempotency-Key": {key}}, body)
}

// tryRefund sends a raw refund request through client and returns what the
// transport did instead of requiring an answer: the faults that drop
// connections leave none.
func (b *testBundle) tryRefund(t *testing.T, client *http.Client, key, body string) (response, error) {
	t.Helper()

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.url+"/v1/refunds", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// refundAnswer is the fake protocol's refund object.
type refundAnswer struct {
	psp.Refund
	CreatedAt time.Time `json:"created_at"`
}

// refund refunds amount of charge under key, for the reference "re_" + key,
// and requires the refund.
func (b *testBundle) refund(t *testing.T, key, charge string, amount int64) refundAnswer {
	t.Helper()

	resp := b.postRefund(t, key, refundBody(charge, amount, "re_"+key))
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	var refund refundAnswer
	require.NoError(t, json.Unmarshal(resp.body, &refund))
	return refund
}

// refunds returns every refund on disk, as a client reads them.
func (b *testBundle) refunds(t *testing.T) []fakepsp.RefundEntry {
	t.Helper()

	refunds, err := fakepsp.FetchRefunds(t.Context(), b.url)
	require.NoError(t, err)
	return refunds
}

// refundLookup is GET /v1/refunds/by-key/{key}.
func (b *testBundle) refundLookup(t *testing.T, key string) response {
	t.Helper()

	return b.do(t, http.MethodGet, "/v1/refunds/by-key/"+key, nil, "")
}

// refundFound reports whether a lookup of key finds a refund, requiring the
// 404 refund_not_found otherwise.
func (b *testBundle) refundFound(t *testing.T, key string) bool {
	t.Helper()

	resp := b.refundLookup(t, key)
	if resp.status == http.StatusOK {
		return true
	}
	require.Equal(t, http.StatusNotFound, resp.status, "body: %s", resp.body)
	require.Equal(t, "refund_not_found", resp.errorCode(t))
	return false
}

// sendWhileExecuting sends twice with send, which makes one request with a
// fixed key under a latency fault: the second only once the first is
// executing (its latency fault has fired), however slow the machine. It
// returns what the request that executed answered and the other's error.
func sendWhileExecuting[T any](t *testing.T, b *testBundle, send func() (T, error)) (succeeded T, refused error) {
	t.Helper()

	type result struct {
		answer T
		err    error
	}
	results := make(chan result, 2)
	var wg sync.WaitGroup
	start := func() {
		wg.Go(func() {
			answer, err := send()
			results <- result{answer, err}
		})
	}
	start()
	require.Eventually(t, func() bool {
		state, err := fakepsp.FetchFaults(t.Context(), b.url)
		return err == nil && state.Fired[fakepsp.FaultLatency] > 0
	}, 10*time.Second, 10*time.Millisecond, "the first request is executing")
	start()
	wg.Wait()
	close(results)

	executed := 0
	for r := range results {
		if r.err == nil {
			succeeded = r.answer
			executed++
		} else {
			refused = r.err
		}
	}
	require.Equal(t, 1, executed, "one request executed, the other was refused: %v", refused)
	return succeeded, refused
}
