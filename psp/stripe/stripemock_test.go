package stripe_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/psp"
	pspstripe "github.com/chargeflow/chargeflow/psp/stripe"
	"github.com/chargeflow/chargeflow/psp/stripe/stripemocktest"
)

// mockKey is a key stripe-mock accepts: it refuses one that is not
// sk_test_ and one more part, as Stripe's test keys are.
const mockKey = "sk_test_chargeflow"

// mockRecorder is the adapter's transport to stripe-mock: it sends each
// request to the mock, records whether the mock accepted it, and can then
// reshape the mock's answer (the mock answers every call with the same
// fixture) so that the adapter goes on to its next request shape: a first
// list page says there are more after it, so that a second page is asked
// for.
type mockRecorder struct {
	next http.RoundTripper

	mu       sync.Mutex
	requests []mockRequest
}

// mockRequest is one request the adapter sent, and the mock's verdict.
type mockRequest struct {
	shape   string // "GET /v1/refunds limit payment_intent": the method, the route, the parameters' names
	version string // the Stripe-Version it was sent with
	status  int
	answer  string // the mock's error, when it refused
}

// pinnedAPIVersion is the API version stripe-go sends, which stripe-mock's
// pin was chosen for (docs/provider.md, "Stripe's mock in the tests").
const pinnedAPIVersion = "2025-08-27.basil"

// routes names the adapter's paths by their route.
var routes = []struct {
	pattern *regexp.Regexp
	route   string
}{
	{regexp.MustCompile(`^/v1/payment_intents/search$`), "/v1/payment_intents/search"},
	{regexp.MustCompile(`^/v1/payment_intents/[^/]+$`), "/v1/payment_intents/{intent}"},
	{regexp.MustCompile(`^/v1/payment_intents/[^/]+/capture$`), "/v1/payment_intents/{intent}/capture"},
	{regexp.MustCompile(`^/v1/payment_intents/[^/]+/cancel$`), "/v1/payment_intents/{intent}/cancel"},
	{regexp.MustCompile(`^/v1/refunds/[^/]+$`), "/v1/refunds/{refund}"},
}

func routeOf(path string) string {
	for _, r := range routes {
		if r.pattern.MatchString(path) {
			return r.route
		}
	}
	return path
}

func (m *mockRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	params := req.URL.Query()
	if req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		if len(body) > 0 {
			if params, err = url.ParseQuery(string(body)); err != nil {
				return nil, err
			}
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range params {
			if !yield(name) {
				return
			}
		}
	})
	resp, err := m.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	recorded := mockRequest{shape: strings.Join(append([]string{req.Method, routeOf(req.URL.Path)}, names...), " "),
		version: req.Header.Get("Stripe-Version"), status: resp.StatusCode}
	if resp.StatusCode/100 != 2 {
		recorded.answer = string(body)
	}
	m.mu.Lock()
	m.requests = append(m.requests, recorded)
	m.mu.Unlock()

	if resp.StatusCode == http.StatusOK {
		body = m.reshape(req, body)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Del("Content-Length")
	return resp, nil
}

// reshape makes a first list page say that more follow.
func (m *mockRecorder) reshape(req *http.Request, body []byte) []byte {
	var page map[string]any
	if req.Method != http.MethodGet || req.URL.Query().Has("starting_after") ||
		json.Unmarshal(body, &page) != nil || page["object"] != "list" {
		return body
	}
	page["has_more"] = true
	reshaped, err := json.Marshal(page)
	if err != nil {
		panic(err)
	}
	return reshaped
}

// take returns the requests recorded since the last take.
func (m *mockRecorder) take() []mockRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	taken := m.requests
	m.requests = nil
	return taken
}

// TestStripeMock runs the adapter's requests against stripe-mock, Stripe's
// server that validates each request against Stripe's OpenAPI description
// (the version scripts/ensure-stripe-mock pins), one mock for both parts.
func TestStripeMock(t *testing.T) {
	t.Parallel()

	baseURL := stripemocktest.Start(t)
	t.Run("every request shape the adapter sends is accepted", func(t *testing.T) {
		t.Parallel()
		requestsAgainstStripeMock(t, baseURL)
	})
	t.Run("the mock refuses what Stripe would", func(t *testing.T) {
		t.Parallel()
		stripeMockRefuses(t, baseURL)
	})
}

// requestsAgainstStripeMock drives the adapter through every request shape
// it sends — a charge with and without a tenant, a retrieve, a search, a
// scan of the list paged on, a refund with and without a reason and a
// tenant, a charge to capture later, a capture and a cancel, a refund's
// retrieve and its list paged on — against stripe-mock,
// which refuses with 400 a parameter Stripe does not know, a value of the
// wrong type or enum, or a required one missing. Every request must be
// accepted, and every shape must have been sent, so a new parameter is
// checked here before it reaches Stripe.
func requestsAgainstStripeMock(t *testing.T, baseURL string) {
	recorder := &mockRecorder{next: http.DefaultTransport}
	adapter := pspstripe.New(pspstripe.Config{BaseURL: baseURL, APIKey: mockKey, HTTPClient: &http.Client{Transport: recorder},
		ClockSkew: time.Second})
	ctx := t.Context()

	// What the adapter makes of the mock's answers: the mock answers every
	// call with its fixtures (a PaymentIntent requires_payment_method
	// without a payment error, a refund succeeded, metadata empty).
	charge := visaRequest("cf_mock_1")
	_, err := adapter.Charge(ctx, charge)
	pspErr := requirePSPError(t, err, psp.ErrUnknownOutcome, "intent_requires_payment_method")
	intentID := pspErr.ProviderID
	require.True(t, strings.HasPrefix(intentID, "pi_"), intentID)
	charge.Key, charge.Tag = "cf_mock_2", ""
	_, err = adapter.Charge(ctx, charge)
	requirePSPError(t, err, psp.ErrUnknownOutcome, "intent_requires_payment_method")

	_, err = adapter.Find(ctx, psp.LookupRequest{Key: "cf_mock_1", Reference: "ch_1", ProviderID: intentID})
	requirePSPError(t, err, psp.ErrUnknownOutcome, "intent_requires_payment_method")

	sent := time.Now()
	lookup := psp.LookupRequest{Key: "cf_mock_1", Reference: "ch_1", FirstSent: sent.Add(-time.Hour), LastSent: sent,
		Sends: []time.Time{sent.Add(-time.Hour), sent}}
	// The search's fixture hit is not ours, so the scan runs: two windows
	// of two pages each, none ours.
	_, err = adapter.Find(ctx, lookup)
	require.ErrorIs(t, err, psp.ErrNotFound)

	refund := psp.RefundRequest{Key: "rk_mock_1", Charge: intentID, Amount: 100, Currency: "USD", Reference: "re_1", Reason: "requested_by_customer", Tag: "tn_1"}
	got, err := adapter.Refund(ctx, refund)
	require.NoError(t, err)
	require.Equal(t, psp.StatusSucceeded, got.Status)
	refund.Key, refund.Reason, refund.Tag = "rk_mock_2", "", ""
	_, err = adapter.Refund(ctx, refund)
	require.NoError(t, err)

	// A charge to capture later, its capture and its cancel. The mock's
	// fixture intent is no manual one, and never held.
	later := visaRequest("cf_mock_3")
	later.CaptureLater = true
	_, err = adapter.Charge(ctx, later)
	requirePSPError(t, err, psp.ErrUnknownOutcome, "intent_requires_payment_method")
	operation := psp.OperationRequest{Key: "cf_cp_mock", Charge: intentID, Amount: 500, Currency: "USD", Reference: "cp_1", ChargeReference: "ch_1"}
	_, err = adapter.Capture(ctx, operation)
	requirePSPError(t, err, psp.ErrUnknownOutcome, "intent_requires_payment_method")
	operation.Key = "cf_cx_mock"
	_, err = adapter.Cancel(ctx, operation)
	requirePSPError(t, err, psp.ErrUnknownOutcome, "intent_requires_payment_method")

	byID, err := adapter.FindRefund(ctx, psp.LookupRequest{Key: "rk_mock_1", Charge: intentID, Reference: "re_1", ProviderID: got.ID})
	require.NoError(t, err)
	require.Equal(t, got.ID, byID.ID)
	_, err = adapter.FindRefund(ctx, psp.LookupRequest{Key: "rk_mock_1", Charge: intentID, Reference: "re_1"})
	require.ErrorIs(t, err, psp.ErrNotFound, "the fixture refund is not ours")

	requests := recorder.take()
	var shapes []string
	for _, r := range requests {
		require.Equal(t, http.StatusOK, r.status, "stripe-mock refused %s: %s", r.shape, r.answer)
		require.Equal(t, pinnedAPIVersion, r.version,
			"stripe-go sends another API version: move stripe-mock's pin in scripts/ensure-stripe-mock to match it, and say so in docs/provider.md")
		if !slices.Contains(shapes, r.shape) {
			shapes = append(shapes, r.shape)
		}
	}
	const intent = "amount automatic_payment_methods[allow_redirects] automatic_payment_methods[enabled] confirm currency metadata[chargeflow_charge]"
	require.Equal(t, []string{
		"POST /v1/payment_intents " + intent + " metadata[chargeflow_tenant] payment_method",
		"POST /v1/payment_intents " + intent + " payment_method",
		"GET /v1/payment_intents/{intent}",
		"GET /v1/payment_intents/search limit query",
		"GET /v1/payment_intents created[gte] created[lte] limit",
		"GET /v1/payment_intents created[gte] created[lte] limit starting_after",
		"POST /v1/refunds amount metadata[chargeflow_refund] metadata[chargeflow_tenant] payment_intent reason",
		"POST /v1/refunds amount metadata[chargeflow_refund] payment_intent",
		"POST /v1/payment_intents amount automatic_payment_methods[allow_redirects] automatic_payment_methods[enabled] capture_method confirm currency metadata[chargeflow_charge] metadata[chargeflow_tenant] payment_method",
		"POST /v1/payment_intents/{intent}/capture amount_to_capture",
		"POST /v1/payment_intents/{intent}/cancel",
		"GET /v1/refunds/{refund}",
		"GET /v1/refunds limit payment_intent",
		"GET /v1/refunds limit payment_intent starting_after",
	}, shapes, "every request shape the adapter sends, each accepted by stripe-mock")
	scans := 0
	for _, r := range requests {
		if strings.HasPrefix(r.shape, "GET /v1/payment_intents created") {
			scans++
		}
	}
	require.Equal(t, 4, scans, "two windows, two pages each")
}

// stripeMockRefuses shows that the check above can fail: requests that
// differ from the adapter's by one parameter Stripe's description does not
// allow are refused with 400, and the adapter's own are accepted.
func stripeMockRefuses(t *testing.T, baseURL string) {
	ids := stripemocktest.IDs{Intent: "pi_1", Refund: "re_1", PaymentMethod: "pm_card_visa", ToCapture: "pi_2", ToCancel: "pi_3", Held: "pi_4"}
	for i, r := range stripemocktest.Requests(ids) {
		status := stripemocktest.Send(t, http.DefaultClient, baseURL, mockKey, fmt.Sprintf("cf_variant_%d", i), r)
		want := http.StatusBadRequest
		if r.Valid {
			want = http.StatusOK
		}
		assert.Equal(t, want, status, r.Name)
	}
}
