package adyen

import (
	"encoding/json"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/psp/adyen/checkoutspec"
)

// The adapter is held to Adyen's published description of Checkout v71
// (docs/provider.md, "Adyen's description in the tests"): every request
// shape it sends is recorded and validated, and the set of shapes must be
// exactly the one listed here, so a new field fails until it is reviewed;
// requests that each differ by one thing the description does not allow
// are refused, so the check can fail; and every answer the tests' servers
// give is one the description allows.

// modificationRoute matches the path of a modification of a payment (a
// refund, a capture, a cancel) and names which.
var modificationRoute = regexp.MustCompile(`^/v71/payments/[^/]+/(refunds|captures|cancels)$`)

// shapeOf is an exchange's shape: its method, its route as the description
// names it, and the JSON property paths of its body, sorted.
func shapeOf(t *testing.T, e checkoutspec.Exchange) string {
	t.Helper()
	route := strings.TrimPrefix(e.Path, "/v71")
	if m := modificationRoute.FindStringSubmatch(e.Path); m != nil {
		route = "/payments/{paymentPspReference}/" + m[1]
	}
	var body map[string]any
	require.NoError(t, json.Unmarshal(e.Body, &body))
	return strings.Join(append([]string{e.Method, route}, propertyPaths("", body)...), " ")
}

// propertyPaths are the dotted paths of every leaf property of v, sorted.
func propertyPaths(prefix string, v map[string]any) []string {
	var paths []string
	for _, name := range slices.Sorted(maps.Keys(v)) {
		path := prefix + name
		if inner, ok := v[name].(map[string]any); ok && !strings.HasSuffix(path, "metadata") {
			paths = append(paths, propertyPaths(path+".", inner)...)
			continue
		}
		if inner, ok := v[name].(map[string]any); ok {
			// Metadata's keys are ours: each is a shape of its own.
			for _, key := range slices.Sorted(maps.Keys(inner)) {
				paths = append(paths, path+"."+key)
			}
			continue
		}
		paths = append(paths, path)
	}
	return paths
}

// recordedRequests drives the adapter through every request shape it
// sends — a charge with and without a tenant, a refund with each reason
// and without one, a charge to capture later, its capture and a cancel —
// against a loopback server answering as Adyen does, through
// checkoutspec's Recorder, and returns what was recorded, in that order.
func recordedRequests(t *testing.T) []checkoutspec.Exchange {
	t.Helper()
	server := startServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/refunds"):
			answerWith(answerRefundReceived)(w, r)
		case strings.HasSuffix(r.URL.Path, "/captures"):
			answerWith(answerCaptureReceived)(w, r)
		case strings.HasSuffix(r.URL.Path, "/cancels"):
			answerWith(answerCancelReceived)(w, r)
		default:
			answerWith(answerAuthorised)(w, r)
		}
	})
	recorder := &checkoutspec.Recorder{Next: psp.NewTransport()}
	adapter := newAdapter(server.URL, func(c *Config) { c.HTTPClient = &http.Client{Transport: recorder} })
	ctx := t.Context()

	_, err := adapter.Charge(ctx, chargeRequest("cf_ch_1"))
	require.NoError(t, err)
	withoutTenant := chargeRequest("cf_ch_2")
	withoutTenant.Tag = ""
	_, err = adapter.Charge(ctx, withoutTenant)
	require.NoError(t, err)
	for _, reason := range []string{"requested_by_customer", "duplicate", "fraudulent", ""} {
		refund := refundRequest("cf_re_" + reason)
		refund.Reason = reason
		_, err := adapter.Refund(ctx, refund)
		requirePSPError(t, err, psp.ErrUnknownOutcome, "refund_received")
	}
	later := chargeRequest("cf_ch_3")
	later.CaptureLater = true
	held, err := adapter.Charge(ctx, later)
	require.NoError(t, err)
	require.Equal(t, psp.StatusRequiresCapture, held.Status)
	_, err = adapter.Capture(ctx, operationRequest("cf_cp_1", "cp_1"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "capture_received")
	_, err = adapter.Cancel(ctx, operationRequest("cf_cx_1", "cx_1"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "cancel_received")
	return recorder.Exchanges()
}

// The recorded exchanges, by what they are (recordedRequests' order).
const (
	recordedCharge  = 0
	recordedRefund  = 2
	recordedHeld    = 6
	recordedCapture = 7
	recordedCancel  = 8
)

func TestRequestsAreAdyens(t *testing.T) {
	t.Parallel()

	spec, err := checkoutspec.Load()
	require.NoError(t, err)
	exchanges := recordedRequests(t)
	require.Len(t, exchanges, 9)

	var shapes []string
	for _, e := range exchanges {
		require.NoError(t, spec.ValidateRequest(e), "the description refuses %s %s", e.Method, e.Path)
		require.NoError(t, spec.ValidateResponse(e), "the description refuses the answer to %s %s", e.Method, e.Path)
		if shape := shapeOf(t, e); !slices.Contains(shapes, shape) {
			shapes = append(shapes, shape)
		}
	}
	const payment = "amount.currency amount.value merchantAccount"
	require.Equal(t, []string{
		"POST /payments " + payment + " metadata.chargeflow_tenant paymentMethod.storedPaymentMethodId paymentMethod.type " +
			"recurringProcessingModel reference returnUrl shopperInteraction shopperReference",
		"POST /payments " + payment + " paymentMethod.storedPaymentMethodId paymentMethod.type " +
			"recurringProcessingModel reference returnUrl shopperInteraction",
		"POST /payments/{paymentPspReference}/refunds " + payment + " merchantRefundReason reference",
		"POST /payments/{paymentPspReference}/refunds " + payment + " reference",
		"POST /payments additionalData.manualCapture " + payment + " metadata.chargeflow_tenant paymentMethod.storedPaymentMethodId " +
			"paymentMethod.type recurringProcessingModel reference returnUrl shopperInteraction shopperReference",
		"POST /payments/{paymentPspReference}/captures " + payment + " reference",
		"POST /payments/{paymentPspReference}/cancels merchantAccount reference",
	}, shapes, "every request shape the adapter sends, each valid by the description")

	for _, e := range exchanges {
		require.Equal(t, "application/json", e.Header.Get("Content-Type"))
		require.NotEmpty(t, e.Header.Get("Idempotency-Key"))
		require.LessOrEqual(t, len(e.Header.Get("Idempotency-Key")), MaxKeyLength)
		require.Equal(t, testAPIKey, e.Header.Get("X-API-Key"), "the description's ApiKeyAuth")
	}
}

// The check above can fail: requests that each differ from the adapter's
// by one thing the description does not allow are refused, while the
// adapter's own are accepted.
func TestTheDescriptionRefusesWhatAdyenWould(t *testing.T) {
	t.Parallel()

	spec, err := checkoutspec.Load()
	require.NoError(t, err)
	exchanges := recordedRequests(t)
	charge, refund := exchanges[recordedCharge], exchanges[recordedRefund]
	held, capture, cancel := exchanges[recordedHeld], exchanges[recordedCapture], exchanges[recordedCancel]

	variant := func(e checkoutspec.Exchange, edit func(body map[string]any)) checkoutspec.Exchange {
		var body map[string]any
		require.NoError(t, json.Unmarshal(e.Body, &body))
		edit(body)
		changed, err := json.Marshal(body)
		require.NoError(t, err)
		e.Body = changed
		return e
	}
	object := func(body map[string]any, name string) map[string]any { return body[name].(map[string]any) }

	// Each is refused for the one thing it changed: the validator's words
	// for it.
	for _, tc := range []struct {
		name    string
		request checkoutspec.Exchange
		refusal string
	}{
		{"a charge without returnUrl", variant(charge, func(b map[string]any) { delete(b, "returnUrl") }), `property "returnUrl" is missing`},
		{"a charge without merchantAccount", variant(charge, func(b map[string]any) { delete(b, "merchantAccount") }), `property "merchantAccount" is missing`},
		{"a charge without reference", variant(charge, func(b map[string]any) { delete(b, "reference") }), `property "reference" is missing`},
		{"a charge without a currency", variant(charge, func(b map[string]any) { delete(object(b, "amount"), "currency") }), `property "currency" is missing`},
		{"a charge with an unknown property", variant(charge, func(b map[string]any) { b["chargeflowCharge"] = "ch_1" }), `property "chargeflowCharge" is unsupported`},
		{"a charge whose value is a string", variant(charge, func(b map[string]any) { object(b, "amount")["value"] = "1000" }), `"/amount/value": value must be an integer`},
		{"a charge of an unknown interaction", variant(charge, func(b map[string]any) { b["shopperInteraction"] = "Phone" }), `"/shopperInteraction": value is not one of the allowed values`},
		{"a charge of an unknown model", variant(charge, func(b map[string]any) { b["recurringProcessingModel"] = "Sometimes" }), `"/recurringProcessingModel": value is not one of the allowed values`},
		{"a charge whose metadata is a number", variant(charge, func(b map[string]any) { object(b, "metadata")["chargeflow_tenant"] = 1 }), `"/metadata/chargeflow_tenant": value must be a string`},
		{"a charge of a two-letter shopper", variant(charge, func(b map[string]any) { b["shopperReference"] = "tn" }), `"/shopperReference": minimum string length is 3`},
		{"a refund without an amount", variant(refund, func(b map[string]any) { delete(b, "amount") }), `property "amount" is missing`},
		{"a refund without merchantAccount", variant(refund, func(b map[string]any) { delete(b, "merchantAccount") }), `property "merchantAccount" is missing`},
		{"a refund with metadata", variant(refund, func(b map[string]any) { b["metadata"] = map[string]any{"chargeflow_tenant": "tn_1"} }), `property "metadata" is unsupported`},
		{"a refund of our reason, not Adyen's", variant(refund, func(b map[string]any) { b["merchantRefundReason"] = "requested_by_customer" }), `"/merchantRefundReason": value is not one of the allowed values`},
		{"a refund in a four-letter currency", variant(refund, func(b map[string]any) { object(b, "amount")["currency"] = "EURO" }), `"/amount/currency": maximum string length is 3`},
		{"a refund whose reference is a number", variant(refund, func(b map[string]any) { b["reference"] = 1 }), `"/reference": value must be a string`},
		{"a manual capture asked with a boolean", variant(held, func(b map[string]any) { object(b, "additionalData")["manualCapture"] = true }),
			`"/additionalData/manualCapture": value must be a string`},
		{"a capture without an amount", variant(capture, func(b map[string]any) { delete(b, "amount") }), `property "amount" is missing`},
		{"a capture without merchantAccount", variant(capture, func(b map[string]any) { delete(b, "merchantAccount") }), `property "merchantAccount" is missing`},
		{"a capture with metadata", variant(capture, func(b map[string]any) { b["metadata"] = map[string]any{"chargeflow_tenant": "tn_1"} }), `property "metadata" is unsupported`},
		{"a capture whose value is a string", variant(capture, func(b map[string]any) { object(b, "amount")["value"] = "600" }), `"/amount/value": value must be an integer`},
		{"a cancel with an amount", variant(cancel, func(b map[string]any) { b["amount"] = map[string]any{"currency": "EUR", "value": 1000} }), `property "amount" is unsupported`},
		{"a cancel without merchantAccount", variant(cancel, func(b map[string]any) { delete(b, "merchantAccount") }), `property "merchantAccount" is missing`},
	} {
		require.ErrorContains(t, spec.ValidateRequest(tc.request), tc.refusal, tc.name)
	}
	wrongRoute := charge
	wrongRoute.Path = "/v71/payment"
	require.Error(t, spec.ValidateRequest(wrongRoute), "a route the description does not have")

	for _, e := range []checkoutspec.Exchange{charge, refund, held, capture, cancel} {
		require.NoError(t, spec.ValidateRequest(e), "%s %s", e.Method, e.Path)
	}
}

// Every answer the tests' servers give, where the description covers its
// status, is one Adyen's description allows; the check refuses one it
// does not.
func TestAnswersAreAdyens(t *testing.T) {
	t.Parallel()

	spec, err := checkoutspec.Load()
	require.NoError(t, err)
	exchanges := recordedRequests(t)
	charge, refund := exchanges[recordedCharge], exchanges[recordedRefund]
	capture, cancel := exchanges[recordedCapture], exchanges[recordedCancel]
	json := http.Header{"Content-Type": {"application/json"}}
	answered := func(e checkoutspec.Exchange, a answer) checkoutspec.Exchange {
		e.Status, e.ResponseHeader, e.ResponseBody = a.status, json, []byte(a.body)
		return e
	}

	validated := 0
	for _, calls := range []struct {
		request checkoutspec.Exchange
		answers []answer
	}{{charge, paymentAnswers}, {refund, refundAnswers}, {capture, captureAnswers}, {cancel, cancelAnswers}} {
		for _, a := range calls.answers {
			if !a.inSpec {
				continue
			}
			require.NoError(t, spec.ValidateResponse(answered(calls.request, a)), "%d %s", a.status, a.body)
			validated++
		}
	}
	require.Equal(t, 40, validated)

	require.Error(t, spec.ValidateResponse(answered(refund, answer{201, strings.Replace(answerRefundReceived.body, "received", "refunded", 1), false})),
		"a refund status the description does not allow")
	require.Error(t, spec.ValidateResponse(answered(charge, answer{200, paymentJSON("Charged", ""), false})),
		"a result code the description does not allow")
	require.Error(t, spec.ValidateResponse(answered(capture, answer{201, strings.Replace(answerCaptureReceived.body, "received", "captured", 1), false})),
		"a capture status the description does not allow")
	require.Error(t, spec.ValidateResponse(answered(cancel, answerCaptureReceived)),
		"a cancel's acknowledgement names no amount")
}
