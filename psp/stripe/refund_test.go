package stripe_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/psp/psptest"
	pspstripe "github.com/chargeflow/chargeflow/psp/stripe"
)

// refundRequest is a valid refund request; tests change what they care
// about. Its reference and tag are canaries no error or span may quote.
func refundRequest(key string) psp.RefundRequest {
	return psp.RefundRequest{Key: key, Charge: "pi_1", Amount: 500, Currency: "USD", Reference: "rf_canary_ref", Reason: "requested_by_customer", Tag: "tn_canary_tag"}
}

// refundJSON is a Refund as Stripe serialises it.
func refundJSON(id, status, reference string, extra ...string) string {
	return fmt.Sprintf(`{"id":%q,"object":"refund","amount":500,"currency":"usd","status":%q,"payment_intent":"pi_1","charge":"ch_1",`+
		`"created":1,"reason":"requested_by_customer","metadata":{"chargeflow_refund":%q,"chargeflow_tenant":"tn_canary_tag"}%s}`,
		id, status, reference, strings.Join(extra, ""))
}

// requireRefundError checks requirePSPError's rules, and that err quotes
// none of the refund's metadata values.
func requireRefundError(t *testing.T, err error, kind error, reason string) *psp.Error {
	t.Helper()
	pspErr := requirePSPError(t, err, kind, reason)
	require.NotContains(t, err.Error(), "canary_ref")
	require.NotContains(t, err.Error(), "canary_tag")
	require.NotContains(t, err.Error(), "dashboard.stripe.com", "not stripe-go's JSON of the error")
	return pspErr
}

func TestRefundSendsOneRefund(t *testing.T) {
	t.Parallel()

	server := startStripeServer(t, answer(200, refundJSON("re_1", "succeeded", "rf_canary_ref")))
	refund, err := newAdapter(server.URL).Refund(t.Context(), refundRequest("rk_1"))
	require.NoError(t, err)
	require.Equal(t, psp.Refund{ID: "re_1", Status: psp.StatusSucceeded, Charge: "pi_1", Amount: 500, Currency: "USD", Reference: "rf_canary_ref"}, refund)

	require.Equal(t, 1, server.count())
	req, form := server.request(0)
	require.Equal(t, http.MethodPost, req.Method)
	require.Equal(t, "/v1/refunds", req.URL.Path)
	require.Equal(t, "rk_1", req.Header.Get("Idempotency-Key"), "the provider key is Stripe's idempotency key")
	require.Equal(t, "Bearer "+testKey, req.Header.Get("Authorization"))
	require.Equal(t, "pi_1", form.Get("payment_intent"))
	require.Equal(t, "500", form.Get("amount"))
	require.Equal(t, "requested_by_customer", form.Get("reason"))
	require.Equal(t, "rf_canary_ref", form.Get("metadata[chargeflow_refund]"), "our reference, for a lookup without the refund's id")
	require.Equal(t, "tn_canary_tag", form.Get("metadata[chargeflow_tenant]"))
	var sent []string
	for name := range form {
		sent = append(sent, name)
	}
	slices.Sort(sent)
	require.Equal(t, []string{"amount", "metadata[chargeflow_refund]", "metadata[chargeflow_tenant]", "payment_intent", "reason"}, sent,
		"nothing else: no charge, no currency")

	// Without a reason or a tag, neither is sent.
	plain := refundRequest("rk_2")
	plain.Reason, plain.Tag = "", ""
	_, err = newAdapter(server.URL).Refund(t.Context(), plain)
	require.NoError(t, err)
	_, form = server.request(1)
	require.False(t, form.Has("reason"))
	require.False(t, form.Has("metadata[chargeflow_tenant]"))
}

// Each answer is classified as classify's table says, through the real
// stripe-go, with exactly one request for each refund although stripe-go,
// left to itself, retries 409s, 5xx, lock timeouts and connection errors.
func TestRefundClassifiesStripesAnswers(t *testing.T) {
	t.Parallel()

	refused := func(code string) psp.Refund {
		return psp.Refund{Status: psp.StatusFailed, Charge: "pi_1", Amount: 500, Currency: "USD", Reference: "rf_canary_ref", FailureCode: code}
	}
	withHeader := func(name string, handler http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(name, "true")
			handler(w, r)
		}
	}
	// The PaymentIntent an error about an intent carries.
	intentError := `{"error":{"type":"invalid_request_error","code":"payment_intent_unexpected_state","message":"This PaymentIntent (pi_1) does not have a successful charge to refund.",` +
		`"payment_intent":` + intentJSON("pi_1", "requires_payment_method", "ch_1", 1) + `}}`

	tests := []struct {
		name    string
		handler http.HandlerFunc
		refund  psp.Refund
		kind    error
		reason  string
		code    string
		id      string
	}{
		{name: "succeeded", handler: answer(200, refundJSON("re_1", "succeeded", "rf_canary_ref")),
			refund: psp.Refund{ID: "re_1", Status: psp.StatusSucceeded, Charge: "pi_1", Amount: 500, Currency: "USD", Reference: "rf_canary_ref"}},
		{name: "failed", handler: answer(200, refundJSON("re_1", "failed", "rf_canary_ref", `,"failure_reason":"expired_or_canceled_card"`)),
			refund: psp.Refund{ID: "re_1", Status: psp.StatusFailed, Charge: "pi_1", Amount: 500, Currency: "USD", Reference: "rf_canary_ref", FailureCode: "expired_or_canceled_card"}},
		{name: "canceled", handler: answer(200, refundJSON("re_1", "canceled", "rf_canary_ref")),
			refund: psp.Refund{ID: "re_1", Status: psp.StatusFailed, Charge: "pi_1", Amount: 500, Currency: "USD", Reference: "rf_canary_ref", FailureCode: "canceled"}},
		{name: "pending names the refund", handler: answer(200, refundJSON("re_7", "pending", "rf_canary_ref")),
			kind: psp.ErrUnknownOutcome, reason: "refund_pending", id: "re_7"},
		{name: "requires_action names the refund", handler: answer(200, refundJSON("re_7", "requires_action", "rf_canary_ref")),
			kind: psp.ErrUnknownOutcome, reason: "refund_requires_action", id: "re_7"},
		{name: "charge already refunded", handler: answer(400, errorJSON("invalid_request_error", "charge_already_refunded", "Charge ch_1 has already been refunded.")),
			refund: refused("charge_already_refunded")},
		{name: "more than is left", handler: answer(400, errorJSON("invalid_request_error", "amount_too_large", "Refund amount ($6.00) is greater than unrefunded amount on charge ($5.00)")),
			refund: refused("amount_too_large")},
		{name: "replayed refusal", handler: withHeader("Idempotent-Replayed", answer(400, errorJSON("invalid_request_error", "charge_already_refunded", "Charge ch_1 has already been refunded."))),
			refund: refused("charge_already_refunded")},
		{name: "intent that did not succeed", handler: answer(400, intentError), refund: refused("payment_intent_unexpected_state")},
		{name: "400 without code or param: an API version the account does not accept",
			handler: answer(400, `{"error":{"type":"invalid_request_error","message":"Invalid Stripe API version: 2025-08-27.basil"}}`),
			kind:    psp.ErrNotApplied, reason: "invalid_request"},
		{name: "400 without a code, param amount: more than is left, as recorded",
			handler: answer(400, `{"error":{"type":"invalid_request_error","param":"amount","message":"Refund amount ($6.00) is greater than unrefunded amount on charge ($5.00)"}}`),
			kind:    psp.ErrNotApplied, reason: "invalid_request"},
		{name: "400 without a code, replayed",
			handler: withHeader("Idempotent-Replayed", answer(400, `{"error":{"type":"invalid_request_error","message":"This PaymentIntent (pi_1) does not have a successful charge to refund."}}`)),
			kind:    psp.ErrUnknownOutcome, reason: "replayed_error"},
		{name: "400 idempotency_error", handler: answer(400, errorJSON("idempotency_error", "", "Keys for idempotent requests can only be used with the same parameters they were first used with.")),
			kind: psp.ErrUnknownOutcome, reason: "idempotency_key_reused"},
		{name: "409 key in use", handler: answer(409, errorJSON("invalid_request_error", "idempotency_key_in_use", "There is currently another in-progress request using this Idempotent Key.")),
			kind: psp.ErrUnknownOutcome, reason: "idempotency_key_in_use", code: "idempotency_key_in_use"},
		{name: "429 rate limited", handler: answer(429, errorJSON("invalid_request_error", "rate_limit", "Too many requests.")),
			kind: psp.ErrNotApplied, reason: "rate_limited", code: "rate_limit"},
		{name: "429 lock timeout", handler: withHeader("Stripe-Should-Retry", answer(429, errorJSON("invalid_request_error", "lock_timeout", "This object cannot be accessed right now."))),
			kind: psp.ErrNotApplied, reason: "lock_timeout", code: "lock_timeout"},
		{name: "400 invalid request quoting the metadata", handler: answer(400, errorJSON("invalid_request_error", "parameter_invalid_string_empty", "Invalid metadata[chargeflow_refund]: rf_canary_ref")),
			kind: psp.ErrNotApplied, reason: "invalid_request", code: "parameter_invalid_string_empty"},
		{name: "400 no such payment intent", handler: answer(400, errorJSON("invalid_request_error", "resource_missing", "No such payment_intent: 'pi_1'")),
			kind: psp.ErrNotApplied, reason: "invalid_request", code: "resource_missing"},
		{name: "400 replayed", handler: withHeader("Idempotent-Replayed", answer(400, errorJSON("invalid_request_error", "parameter_invalid_integer", "Invalid integer."))),
			kind: psp.ErrUnknownOutcome, reason: "replayed_error", code: "parameter_invalid_integer"},
		{name: "401", handler: answer(401, errorJSON("invalid_request_error", "", "Invalid API Key provided: sk_test_****_key")),
			kind: psp.ErrNotApplied, reason: "authentication_failed"},
		{name: "500", handler: answer(500, errorJSON("api_error", "", "Something went wrong on Stripe's end.")),
			kind: psp.ErrUnknownOutcome, reason: "status_500"},
		{name: "503 with should-retry", handler: withHeader("Stripe-Should-Retry", answer(503, errorJSON("api_error", "", "Unavailable."))),
			kind: psp.ErrUnknownOutcome, reason: "status_503"},
		{name: "malformed JSON", handler: answer(200, refundJSON("re_1", "succeeded", "rf_canary_ref")[:60]),
			kind: psp.ErrUnknownOutcome, reason: "malformed_body"},
		{name: "502 from a proxy", handler: answer(502, "<html>bad gateway</html>"),
			kind: psp.ErrUnknownOutcome, reason: "status_502"},
		{name: "hang past the timeout", handler: hang, kind: psp.ErrUnknownOutcome, reason: "timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			server, adapter := answeringAdapter(t, tc.handler, tc.reason == "timeout")
			refund, err := adapter.Refund(t.Context(), refundRequest("rk_"+tc.name))
			require.Equal(t, 1, server.count(), "exactly one request: stripe-go's retries are off")
			if tc.kind == nil {
				require.NoError(t, err)
				require.Equal(t, tc.refund, refund)
				return
			}
			require.Zero(t, refund)
			pspErr := requireRefundError(t, err, tc.kind, tc.reason)
			require.Equal(t, tc.code, pspErr.ProviderCode)
			require.Equal(t, tc.id, pspErr.ProviderID)
		})
	}
}

func TestRefundRefusesWhatCannotBeSent(t *testing.T) {
	t.Parallel()

	server := startStripeServer(t, answer(200, refundJSON("re_1", "succeeded", "rf_canary_ref")))
	for name, tc := range map[string]struct {
		adapter *pspstripe.Adapter
		edit    func(*psp.RefundRequest)
	}{
		"no API key":      {pspstripe.New(pspstripe.Config{BaseURL: server.URL}), func(*psp.RefundRequest) {}},
		"no key":          {newAdapter(server.URL), func(r *psp.RefundRequest) { r.Key = " " }},
		"too long key":    {newAdapter(server.URL), func(r *psp.RefundRequest) { r.Key = strings.Repeat("k", 256) }},
		"no charge":       {newAdapter(server.URL), func(r *psp.RefundRequest) { r.Charge = "" }},
		"no amount":       {newAdapter(server.URL), func(r *psp.RefundRequest) { r.Amount = 0 }},
		"negative amount": {newAdapter(server.URL), func(r *psp.RefundRequest) { r.Amount = -500 }},
	} {
		req := refundRequest("rk_1")
		tc.edit(&req)
		_, err := tc.adapter.Refund(t.Context(), req)
		requireRefundError(t, err, psp.ErrNotApplied, "invalid_request")
		require.Zero(t, server.count(), name)
	}
}

func TestRefundToAClosedPortIsNotApplied(t *testing.T) {
	t.Parallel()

	_, err := newAdapter(psptest.ClosedURL(t)).Refund(t.Context(), refundRequest("rk_1"))
	requireRefundError(t, err, psp.ErrNotApplied, "connection_refused")
}

func TestRefundMakesExactlyOneAttempt(t *testing.T) {
	t.Parallel()

	// The connection-losing server drops the second request of its first
	// keep-alive connection: stripe-go sets GetBody, so net/http would
	// send that refund again on a new connection (the charge's control
	// test shows it) unless the adapter's transport forbids it.
	for name, client := range map[string]func(t *testing.T) *http.Client{
		"a transport of the caller's": func(t *testing.T) *http.Client {
			transport := &http.Transport{}
			t.Cleanup(transport.CloseIdleConnections)
			return &http.Client{Transport: transport}
		},
		"the default transport": func(*testing.T) *http.Client { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			server := psptest.StartLosingServer(t, []byte(refundJSON("re_1", "succeeded", "rf_canary_ref")))
			adapter := newAdapter(server.URL(), func(c *pspstripe.Config) { c.HTTPClient = client(t) })

			_, err := adapter.Refund(t.Context(), refundRequest("rk_first"))
			require.NoError(t, err)
			_, err = adapter.Refund(t.Context(), refundRequest("rk_second"))
			requireRefundError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
			require.Equal(t, int32(2), server.Requests.Load(), "the lost refund was not sent again")
			require.Equal(t, int32(1), server.Conns.Load())
		})
	}
}

func TestFindRefundByProviderID(t *testing.T) {
	t.Parallel()

	server := startStripeServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/refunds/re_1":
			answer(200, refundJSON("re_1", "succeeded", "rf_canary_ref"))(w, r)
		case "/v1/refunds/re_pending":
			answer(200, refundJSON("re_pending", "pending", "rf_canary_ref"))(w, r)
		default:
			answer(404, errorJSON("invalid_request_error", "resource_missing", "No such refund: 're_x'"))(w, r)
		}
	})
	adapter := newAdapter(server.URL)
	// The charge and the reference are there too: the id wins.
	q := psp.LookupRequest{Key: "rk_1", Reference: "rf_canary_ref", Charge: "pi_1"}

	q.ProviderID = "re_1"
	refund, err := adapter.FindRefund(t.Context(), q)
	require.NoError(t, err)
	require.Equal(t, psp.Refund{ID: "re_1", Status: psp.StatusSucceeded, Charge: "pi_1", Amount: 500, Currency: "USD", Reference: "rf_canary_ref"}, refund)

	q.ProviderID = "re_pending"
	_, err = adapter.FindRefund(t.Context(), q)
	pspErr := requireRefundError(t, err, psp.ErrUnknownOutcome, "refund_pending")
	require.Equal(t, "re_pending", pspErr.ProviderID)

	q.ProviderID = "re_missing"
	_, err = adapter.FindRefund(t.Context(), q)
	require.Equal(t, psp.ErrNotFound, err, "Stripe's resource_missing for an id it named")

	require.Equal(t, 3, server.count())
	for i, id := range []string{"re_1", "re_pending", "re_missing"} {
		req, _ := server.request(i)
		require.Equal(t, http.MethodGet, req.Method)
		require.Equal(t, "/v1/refunds/"+id, req.URL.Path)
	}
}

// stored is a refund a refundListServer holds.
type stored struct{ id, status, reference string }

// refundListServer serves GET /v1/refunds?payment_intent=pi_1 over refunds
// (newest first, paged with limit and starting_after), failing the
// requests fail says (counted from 1).
func refundListServer(t *testing.T, refunds []stored, fail func(request int) bool) *stripeServer {
	t.Helper()
	var requests atomic.Int32
	return startStripeServer(t, func(w http.ResponseWriter, r *http.Request) {
		if fail != nil && fail(int(requests.Add(1))) {
			answer(500, errorJSON("api_error", "", "Something went wrong."))(w, r)
			return
		}
		q := r.URL.Query()
		if r.URL.Path != "/v1/refunds" || q.Get("payment_intent") != "pi_1" {
			answer(404, errorJSON("invalid_request_error", "", "Unrecognized request URL"))(w, r)
			return
		}
		limit, _ := strconv.Atoi(q.Get("limit"))
		start := 0
		if after := q.Get("starting_after"); after != "" {
			start = slices.IndexFunc(refunds, func(s stored) bool { return s.id == after }) + 1
		}
		end := min(start+limit, len(refunds))
		var bodies []string
		for _, s := range refunds[start:end] {
			bodies = append(bodies, refundJSON(s.id, s.status, s.reference))
		}
		answer(200, fmt.Sprintf(`{"object":"list","url":"/v1/refunds","has_more":%t,"data":[%s]}`,
			end < len(refunds), strings.Join(bodies, ",")))(w, r)
	})
}

func TestFindRefundByReference(t *testing.T) {
	t.Parallel()

	// Five refunds of pi_1, newest first; re_3 is ours.
	refunds := []stored{
		{"re_5", "succeeded", "rf_other_5"},
		{"re_4", "succeeded", "rf_other_4"},
		{"re_3", "succeeded", "rf_canary_ref"},
		{"re_2", "succeeded", "rf_other_2"},
		{"re_1", "succeeded", "rf_other_1"},
	}
	q := psp.LookupRequest{Key: "rk_1", Reference: "rf_canary_ref", Charge: "pi_1"}
	small := func(c *pspstripe.Config) { c.PageSize = 2 }
	ours := psp.Refund{ID: "re_3", Status: psp.StatusSucceeded, Charge: "pi_1", Amount: 500, Currency: "USD", Reference: "rf_canary_ref"}

	t.Run("found after reading every page", func(t *testing.T) {
		t.Parallel()

		server := refundListServer(t, refunds, nil)
		refund, err := newAdapter(server.URL, small).FindRefund(t.Context(), q)
		require.NoError(t, err)
		require.Equal(t, ours, refund)

		require.Equal(t, 3, server.count(), "every page, to prove there is no second match")
		var after []string
		for i := range 3 {
			req, form := server.request(i)
			require.Equal(t, http.MethodGet, req.Method)
			require.Equal(t, "/v1/refunds", req.URL.Path)
			require.Equal(t, "pi_1", form.Get("payment_intent"))
			require.Equal(t, "2", form.Get("limit"))
			require.False(t, form.Has("metadata[chargeflow_refund]"), "the list cannot filter by metadata: the adapter matches")
			after = append(after, form.Get("starting_after"))
		}
		require.Equal(t, []string{"", "re_4", "re_2"}, after)
	})

	t.Run("not found after the whole list", func(t *testing.T) {
		t.Parallel()

		server := refundListServer(t, refunds, nil)
		other := q
		other.Reference = "rf_nobody"
		_, err := newAdapter(server.URL, small).FindRefund(t.Context(), other)
		require.Equal(t, psp.ErrNotFound, err)
		require.Equal(t, 3, server.count())
	})

	t.Run("an intent without refunds", func(t *testing.T) {
		t.Parallel()

		server := refundListServer(t, nil, nil)
		_, err := newAdapter(server.URL).FindRefund(t.Context(), q)
		require.Equal(t, psp.ErrNotFound, err)
		require.Equal(t, 1, server.count())
	})

	t.Run("a pending match names the refund", func(t *testing.T) {
		t.Parallel()

		pending := slices.Clone(refunds)
		pending[2].status = "pending"
		server := refundListServer(t, pending, nil)
		_, err := newAdapter(server.URL).FindRefund(t.Context(), q)
		pspErr := requireRefundError(t, err, psp.ErrUnknownOutcome, "refund_pending")
		require.Equal(t, "re_3", pspErr.ProviderID)
	})

	t.Run("two matches are never a pick", func(t *testing.T) {
		t.Parallel()

		twice := slices.Clone(refunds)
		twice[0].reference = "rf_canary_ref"
		server := refundListServer(t, twice, nil)
		_, err := newAdapter(server.URL, small).FindRefund(t.Context(), q)
		pspErr := requireRefundError(t, err, psp.ErrUnknownOutcome, "multiple_matches")
		require.Empty(t, pspErr.ProviderID)
		require.ErrorContains(t, err, "re_5, re_3")
	})

	t.Run("a failed page proves nothing", func(t *testing.T) {
		t.Parallel()

		server := refundListServer(t, refunds, func(request int) bool { return request == 2 })
		_, err := newAdapter(server.URL, small).FindRefund(t.Context(), q)
		requireRefundError(t, err, psp.ErrUnknownOutcome, "status_500")
		require.Equal(t, 2, server.count())
	})

	t.Run("a list longer than allowed proves nothing", func(t *testing.T) {
		t.Parallel()

		server := refundListServer(t, refunds, nil)
		_, err := newAdapter(server.URL, small, func(c *pspstripe.Config) { c.MaxPages = 2 }).FindRefund(t.Context(), q)
		requireRefundError(t, err, psp.ErrUnknownOutcome, "scan_too_long")
		require.Equal(t, 2, server.count())
	})

	t.Run("an answer that is not a list proves nothing", func(t *testing.T) {
		t.Parallel()

		server := startStripeServer(t, answer(200, `{"object":"search_result","has_more":false,"data":[]}`))
		_, err := newAdapter(server.URL).FindRefund(t.Context(), q)
		requireRefundError(t, err, psp.ErrUnknownOutcome, "malformed_body")
	})

	t.Run("a page slower than the call timeout proves nothing", func(t *testing.T) {
		t.Parallel()

		server := startStripeServer(t, func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		_, err := newAdapter(server.URL, func(c *pspstripe.Config) { c.Timeout = 200 * time.Millisecond }).FindRefund(t.Context(), q)
		requireRefundError(t, err, psp.ErrUnknownOutcome, "timeout")
	})

	t.Run("a lookup without an id, a charge or a reference is refused", func(t *testing.T) {
		t.Parallel()

		server := refundListServer(t, refunds, nil)
		adapter := newAdapter(server.URL)
		for _, bad := range []psp.LookupRequest{{Key: "rk_1", Charge: "pi_1"}, {Key: "rk_1", Reference: "rf_canary_ref"}, {Key: "rk_1"}} {
			_, err := adapter.FindRefund(t.Context(), bad)
			requireRefundError(t, err, psp.ErrUnknownOutcome, "invalid_request")
		}
		_, err := pspstripe.New(pspstripe.Config{BaseURL: server.URL}).FindRefund(t.Context(), q)
		requireRefundError(t, err, psp.ErrUnknownOutcome, "invalid_request")
		require.Zero(t, server.count())
	})
}

// Refunds are psp's spans, under the caller's, with the trace context sent
// to Stripe, and without the key, the reference or the tenant tag.
func TestRefundTelemetry(t *testing.T) {
	t.Parallel()

	server := startStripeServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			answer(400, errorJSON("invalid_request_error", "charge_already_refunded", "Charge ch_1 has already been refunded."))(w, r)
			return
		}
		answer(200, `{"object":"list","has_more":false,"data":[`+refundJSON("re_1", "succeeded", "rf_canary_ref")+`]}`)(w, r)
	})
	spans := tracetest.NewSpanRecorder()
	tracerProvider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	adapter := newAdapter(server.URL, func(c *pspstripe.Config) { c.TracerProvider = tracerProvider })

	ctx, parent := tracerProvider.Tracer("test").Start(context.Background(), "refund.submit")
	refund, err := adapter.Refund(ctx, refundRequest("rk_canary_key"))
	require.NoError(t, err)
	require.Equal(t, "charge_already_refunded", refund.FailureCode)
	_, err = adapter.FindRefund(ctx, psp.LookupRequest{Key: "rk_canary_key", Reference: "rf_canary_ref", Charge: "pi_1"})
	require.NoError(t, err)
	parent.End()

	ended := spans.Ended()
	require.Len(t, ended, 3)
	for i, want := range []struct{ name, outcome, status string }{{"psp.refund", "refund", "failed"}, {"psp.refund_lookup", "refund", "succeeded"}} {
		span := ended[i]
		require.Equal(t, want.name, span.Name())
		require.Equal(t, parent.SpanContext().SpanID(), span.Parent().SpanID())
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range span.Attributes() {
			attrs[kv.Key] = kv.Value
			require.NotContains(t, kv.Value.Emit(), "canary", "span attribute %s", kv.Key)
		}
		require.Equal(t, want.outcome, attrs["psp.outcome"].AsString())
		require.Equal(t, want.status, attrs["psp.refund.status"].AsString())

		req, _ := server.request(i)
		require.Contains(t, req.Header.Get("traceparent"), span.SpanContext().TraceID().String(), "Stripe is sent the trace context")
	}
	require.Equal(t, "charge_already_refunded", func() string {
		for _, kv := range ended[0].Attributes() {
			if kv.Key == "psp.refund.failure_code" {
				return kv.Value.AsString()
			}
		}
		return ""
	}())
}
