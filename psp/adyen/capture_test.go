package adyen

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/psp/psptest"
)

// operationRequest is a valid capture of 6.00 EUR of the payment testPSP
// (our charge ch_1), for our capture cp_1; a cancel reads the same
// request, its reference cx_1.
func operationRequest(key, reference string) psp.OperationRequest {
	return psp.OperationRequest{Key: key, Charge: testPSP, Amount: 600, Currency: "EUR", Reference: reference, ChargeReference: "ch_1", Tag: "tn_1"}
}

// modification is one of the adapter's two modification calls, for the
// tests that treat them alike.
type modification struct {
	name      string
	call      func(*Adapter, context.Context, psp.OperationRequest) (psp.Charge, error)
	reference string
	route     string
	received  answer
	id        string
}

var modifications = []modification{
	{"capture", (*Adapter).Capture, "cp_1", "/captures", answerCaptureReceived, testCapturePSP},
	{"cancel", (*Adapter).Cancel, "cx_1", "/cancels", answerCancelReceived, testCancelPSP},
}

// A capture and a cancel are each one POST under the payment, with the
// operation's key and our operation's id as reference; Adyen's
// acknowledgement is an unknown outcome naming the modification, which its
// notification settles. Sent again with its key, the request is the same
// byte for byte, so Adyen answers it with the first one's result.
func TestModificationsSendOneRequest(t *testing.T) {
	t.Parallel()

	for _, m := range modifications {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()

			server := startServer(t, answerWith(m.received))
			adapter := newAdapter(server.URL)
			charge, err := m.call(adapter, t.Context(), operationRequest("cf_"+m.reference, m.reference))
			require.Zero(t, charge, "a received %s is not settled", m.name)
			pspErr := requirePSPError(t, err, psp.ErrUnknownOutcome, m.name+"_received")
			require.Equal(t, m.id, pspErr.ProviderID, "the %s's pspReference, which its notification names", m.name)
			require.Equal(t, http.StatusCreated, pspErr.StatusCode)

			require.Equal(t, 1, server.count())
			req := server.request(0)
			require.Equal(t, http.MethodPost, req.method)
			require.Equal(t, "/v71/payments/"+testPSP+m.route, req.path)
			require.Equal(t, "cf_"+m.reference, req.header.Get("Idempotency-Key"))
			require.Equal(t, testAPIKey, req.header.Get("X-API-Key"))
			want := map[string]any{"merchantAccount": testMerchant, "reference": m.reference}
			if m.name == "capture" {
				want["amount"] = map[string]any{"currency": "EUR", "value": 600.0}
			}
			require.Equal(t, want, jsonOf(t, req.body))

			_, err = m.call(adapter, t.Context(), operationRequest("cf_"+m.reference, m.reference))
			requirePSPError(t, err, psp.ErrUnknownOutcome, m.name+"_received")
			again := server.request(1)
			require.Equal(t, string(req.body), string(again.body), "the re-send is the same request")
			require.Equal(t, req.header.Get("Idempotency-Key"), again.header.Get("Idempotency-Key"))

			odd := operationRequest("cf_odd", m.reference)
			odd.Charge = "a/b c"
			_, err = m.call(adapter, t.Context(), odd)
			requirePSPError(t, err, psp.ErrUnknownOutcome, m.name+"_received")
			require.Equal(t, "/v71/payments/a%2Fb%20c"+m.route, server.request(2).path, "the payment is one path segment")
		})
	}
}

// Adyen's answers to a modification are classified as a charge's errors
// are, through the real transport, each with exactly one request; a
// modification that never reached Adyen applied nothing.
func TestModificationsClassifyAdyensAnswers(t *testing.T) {
	t.Parallel()

	for _, m := range modifications {
		for _, tc := range []struct {
			name    string
			handler http.HandlerFunc
			kind    error
			reason  string
			code    string
		}{
			{"422 validation", answerWith(answer422Validation), psp.ErrNotApplied, "validation", "14_030"},
			{"401", answerWith(answer401), psp.ErrNotApplied, "authentication_failed", "000"},
			{"429", answerWith(answer429), psp.ErrNotApplied, "rate_limited", "100"},
			{"422 704", answerWith(answer422InProgress), psp.ErrUnknownOutcome, "idempotency_key_in_use", "704"},
			{"500", answerWith(answer500), psp.ErrUnknownOutcome, "status_500", "905"},
			{"502 from a proxy", answerWith(answer502Proxy), psp.ErrUnknownOutcome, "status_502", ""},
			{"a payment's answer", answerWith(answerAuthorised), psp.ErrUnknownOutcome, "malformed_body", ""},
			{"hang past the timeout", hang, psp.ErrUnknownOutcome, "timeout", ""},
		} {
			t.Run(m.name+" "+tc.name, func(t *testing.T) {
				t.Parallel()

				server := startServer(t, tc.handler)
				adapter := newAdapter(server.URL, func(c *Config) { c.Timeout = 300 * time.Millisecond })
				charge, err := m.call(adapter, t.Context(), operationRequest("cf_"+m.reference, m.reference))
				require.Zero(t, charge)
				require.Equal(t, 1, server.count(), "exactly one request")
				pspErr := requirePSPError(t, err, tc.kind, tc.reason)
				require.Equal(t, tc.code, pspErr.ProviderCode)
				require.Empty(t, pspErr.ProviderID, "an error's pspReference is not the modification's")
			})
		}

		t.Run(m.name+" to a closed port", func(t *testing.T) {
			t.Parallel()
			_, err := m.call(newAdapter(psptest.ClosedURL(t)), t.Context(), operationRequest("cf_"+m.reference, m.reference))
			requirePSPError(t, err, psp.ErrNotApplied, "connection_refused")
		})

		t.Run(m.name+" is sent once", func(t *testing.T) {
			t.Parallel()
			server := psptest.StartLosingServer(t, []byte(m.received.body))
			adapter := newAdapter(server.URL())
			_, err := m.call(adapter, t.Context(), operationRequest("cf_first", m.reference))
			requirePSPError(t, err, psp.ErrUnknownOutcome, m.name+"_received")
			_, err = m.call(adapter, t.Context(), operationRequest("cf_second", m.reference))
			requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
			require.Equal(t, int32(2), server.Requests.Load(), "the dropped POST was not sent again")
		})
	}
}

func TestModificationsRefuseWhatCannotBeSent(t *testing.T) {
	t.Parallel()

	server := startServer(t, answerWith(answerCaptureReceived))
	for _, m := range modifications {
		for name, edit := range map[string]func(*psp.OperationRequest){
			"no key": func(r *psp.OperationRequest) { r.Key = "" },
			"a key over 64": func(r *psp.OperationRequest) {
				r.Key = strings.Repeat("k", 65)
			},
			"no payment":   func(r *psp.OperationRequest) { r.Charge = "" },
			"no reference": func(r *psp.OperationRequest) { r.Reference = "" },
		} {
			req := operationRequest("cf_"+m.reference, m.reference)
			edit(&req)
			_, err := m.call(newAdapter(server.URL), t.Context(), req)
			requirePSPError(t, err, psp.ErrNotApplied, "invalid_request")
			require.Zero(t, server.count(), "%s: %s", m.name, name)
		}
		_, err := m.call(newAdapter(server.URL, func(c *Config) { c.APIKey = "" }), t.Context(), operationRequest("cf_"+m.reference, m.reference))
		requirePSPError(t, err, psp.ErrNotApplied, "invalid_request")
		require.Zero(t, server.count(), "%s without an API key", m.name)
	}

	adapter := newAdapter(server.URL)
	for _, value := range []int64{0, -1} {
		req := operationRequest("cf_cp_1", "cp_1")
		req.Amount = value
		_, err := adapter.Capture(t.Context(), req)
		requirePSPError(t, err, psp.ErrNotApplied, "invalid_request")
		require.Zero(t, server.count(), "a capture of %d", value)
	}
	req := operationRequest("cf_cx_1", "cx_1")
	req.Amount = 0
	_, err := adapter.Cancel(t.Context(), req)
	// A cancel names no amount, so it needs none.
	requirePSPError(t, err, psp.ErrUnknownOutcome, "cancel_received")
}
