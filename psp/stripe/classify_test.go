package stripe

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	stripego "github.com/stripe/stripe-go/v82"

	"github.com/chargeflow/chargeflow/psp"
)

// The errors below are shaped the way net/http returns them beneath
// stripe-go.
func urlErr(err error) error {
	return &url.Error{Op: "Post", URL: "https://api.stripe.com/v1/payment_intents", Err: err}
}

func opErr(op string, err error) error { return urlErr(&net.OpError{Op: op, Net: "tcp", Err: err}) }

var (
	refused     = opErr("dial", os.NewSyscallError("connect", syscall.ECONNREFUSED))
	dialTimeout = opErr("dial", os.ErrDeadlineExceeded)
	ctxDeadline = urlErr(context.DeadlineExceeded)
	reset       = opErr("read", os.NewSyscallError("read", syscall.ECONNRESET))
	// stripe-go's decoding error quotes the body it could not decode.
	undecodable = errors.New(`Couldn't deserialize JSON (response status: 200, body sample: '{"id":"pi_1","payment_method":"pm_canary'): unexpected end of JSON input`)
)

// sent is an attempt of o whose request was written.
func sent(o op) attempt { return attempt{op: o, gotConn: true, wroteRequest: true} }

// stripeErr is an answer stripe-go decoded into a *stripego.Error. Its
// message quotes a canary no error may repeat.
func stripeErr(o op, status int, typ stripego.ErrorType, code stripego.ErrorCode, edit ...func(*stripego.Error)) attempt {
	e := &stripego.Error{Type: typ, Code: code, HTTPStatusCode: status, RequestID: "req_1",
		Msg: "No such PaymentMethod: 'pm_canary'"}
	for _, f := range edit {
		f(e)
	}
	a := sent(o)
	a.status, a.err = status, e
	return a
}

func withIntent(pi *stripego.PaymentIntent) func(*stripego.Error) {
	return func(e *stripego.Error) { e.PaymentIntent = pi }
}

func replayed(a attempt) attempt { a.replayed = true; return a }

// garbled is an answer stripe-go could not decode.
func garbled(o op, status int, bodyErr error) attempt {
	a := sent(o)
	a.status, a.err, a.bodyErr = status, undecodable, bodyErr
	if bodyErr != nil {
		a.err = bodyErr
	}
	return a
}

// want is what classify must make of an attempt: a charge or a refund (or
// nothing, for a page) when kind is nil, else an error of kind.
type want struct {
	charge       psp.Charge
	refund       psp.Refund
	kind         error // nil for a value; ErrNotApplied, ErrUnknownOutcome or ErrNotFound
	reason       string
	providerCode string
	providerID   string
	wraps        error
}

// requireClassified checks classify(a) against w.
func requireClassified(t *testing.T, a attempt, w want) {
	t.Helper()
	got, err := classify(a)
	if w.kind == nil {
		require.NoError(t, err)
		require.Equal(t, answer{charge: w.charge, refund: w.refund}, got)
		return
	}
	require.ErrorIs(t, err, w.kind)
	require.Zero(t, got)
	if w.kind == psp.ErrNotFound {
		require.Equal(t, psp.ErrNotFound, err, "a bare ErrNotFound, as Lookup returns it")
		return
	}
	var pspErr *psp.Error
	require.ErrorAs(t, err, &pspErr)
	require.Equal(t, w.reason, pspErr.Reason)
	require.Equal(t, w.providerCode, pspErr.ProviderCode)
	require.Equal(t, w.providerID, pspErr.ProviderID)
	if w.wraps != nil {
		require.ErrorIs(t, err, w.wraps)
	}
	require.NotContains(t, err.Error(), "pm_canary", "an error never quotes Stripe's message")
}

func TestClassify(t *testing.T) {
	t.Parallel()

	intent := func(status stripego.PaymentIntentStatus, edit ...func(*stripego.PaymentIntent)) *stripego.PaymentIntent {
		pi := &stripego.PaymentIntent{ID: "pi_1", Status: status, Amount: 1000, Currency: "usd",
			Metadata: map[string]string{MetadataKey: "ch_1"}}
		for _, e := range edit {
			e(pi)
		}
		return pi
	}
	lastError := func(code stripego.ErrorCode, decline stripego.DeclineCode) func(*stripego.PaymentIntent) {
		return func(pi *stripego.PaymentIntent) {
			pi.LastPaymentError = &stripego.Error{Type: stripego.ErrorTypeCard, Code: code, DeclineCode: decline}
		}
	}
	succeeded := psp.Charge{ID: "pi_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "USD", Reference: "ch_1"}
	declined := func(code string) psp.Charge {
		return psp.Charge{ID: "pi_1", Status: psp.StatusFailed, Amount: 1000, Currency: "USD", Reference: "ch_1", DeclineCode: code}
	}

	ok := func(o op, pi *stripego.PaymentIntent) attempt {
		a := sent(o)
		a.status, a.intent = 200, pi
		return a
	}
	listPage := func(object string, hasMore bool, intents ...*stripego.PaymentIntent) attempt {
		a := sent(opList)
		a.status = 200
		p := &intentPage{Object: object, Data: intents}
		p.HasMore = hasMore
		a.page = p
		return a
	}
	page := func(hasMore bool, intents ...*stripego.PaymentIntent) attempt {
		return listPage("list", hasMore, intents...)
	}
	searchPage := func(object string, intents ...*stripego.PaymentIntent) attempt {
		a := listPage(object, false, intents...)
		a.op = opSearch
		return a
	}
	withDecline := func(code stripego.DeclineCode) func(*stripego.Error) {
		return func(e *stripego.Error) { e.DeclineCode = code }
	}

	tests := []struct {
		name    string
		attempt attempt
		want    want
	}{
		// Values: a charge, or a decline.
		{"charge succeeded", ok(opCharge, intent("succeeded")), want{charge: succeeded}},
		{"charge declined with the intent in the error", stripeErr(opCharge, 402, stripego.ErrorTypeCard, "card_declined",
			withDecline("insufficient_funds"), withIntent(intent("requires_payment_method"))), want{charge: declined("insufficient_funds")}},
		{"card error without decline_code uses its code", stripeErr(opCharge, 402, stripego.ErrorTypeCard, "expired_card",
			withIntent(intent("requires_payment_method"))), want{charge: declined("expired_card")}},
		{"answer requires_payment_method after a payment error", ok(opCharge, intent("requires_payment_method", lastError("card_declined", "do_not_honor"))), want{charge: declined("do_not_honor")}},
		{"answer canceled", ok(opCharge, intent("canceled")), want{charge: declined("canceled")}},
		{"a payment error without decline_code uses its code", ok(opCharge, intent("requires_payment_method", lastError("expired_card", ""))), want{charge: declined("expired_card")}},
		{"a payment error with neither code proves no decline", ok(opCharge, intent("requires_payment_method", lastError("", ""))),
			want{kind: psp.ErrUnknownOutcome, reason: "intent_requires_payment_method", providerID: "pi_1"}},
		{"answer canceled after a payment error", ok(opCharge, intent("canceled", lastError("card_declined", "fraudulent"))), want{charge: declined("fraudulent")}},
		{"the card error's decline code before the intent's payment error", stripeErr(opCharge, 402, stripego.ErrorTypeCard, "card_declined",
			withDecline("lost_card"), withIntent(intent("requires_payment_method", lastError("card_declined", "do_not_honor")))), want{charge: declined("lost_card")}},
		{"an error that is no card error: the intent's payment error", stripeErr(opCharge, 400, stripego.ErrorTypeInvalidRequest, "payment_intent_unexpected_state",
			withIntent(intent("requires_payment_method", lastError("card_declined", "do_not_honor")))), want{charge: declined("do_not_honor")}},
		{"replayed success is the same success", replayed(ok(opCharge, intent("succeeded"))), want{charge: succeeded}},

		// Not final: unknown, with the intent's id for a strong lookup.
		{"processing", ok(opCharge, intent("processing")), want{kind: psp.ErrUnknownOutcome, reason: "intent_processing", providerID: "pi_1"}},
		{"requires_action", ok(opCharge, intent("requires_action")), want{kind: psp.ErrUnknownOutcome, reason: "intent_requires_action", providerID: "pi_1"}},
		{"requires_confirmation", ok(opCharge, intent("requires_confirmation")), want{kind: psp.ErrUnknownOutcome, reason: "intent_requires_confirmation", providerID: "pi_1"}},
		{"requires_capture", ok(opCharge, intent("requires_capture")), want{kind: psp.ErrUnknownOutcome, reason: "intent_requires_capture", providerID: "pi_1"}},
		{"requires_payment_method without an error", ok(opCharge, intent("requires_payment_method")), want{kind: psp.ErrUnknownOutcome, reason: "intent_requires_payment_method", providerID: "pi_1"}},
		{"a status we do not know", ok(opCharge, intent("pending_review")), want{kind: psp.ErrUnknownOutcome, reason: "unknown_status", providerID: "pi_1"}},
		{"500 carrying a processing intent", stripeErr(opCharge, 500, stripego.ErrorTypeAPI, "", withIntent(intent("processing"))), want{kind: psp.ErrUnknownOutcome, reason: "intent_processing", providerID: "pi_1"}},

		// Not applied: refused before execution.
		{"400 invalid request", stripeErr(opCharge, 400, stripego.ErrorTypeInvalidRequest, "parameter_missing"), want{kind: psp.ErrNotApplied, reason: "invalid_request", providerCode: "parameter_missing"}},
		{"400 no such payment method", stripeErr(opCharge, 400, stripego.ErrorTypeInvalidRequest, "resource_missing"), want{kind: psp.ErrNotApplied, reason: "invalid_request", providerCode: "resource_missing"}},
		{"404 unrecognized url", stripeErr(opCharge, 404, stripego.ErrorTypeInvalidRequest, ""), want{kind: psp.ErrNotApplied, reason: "invalid_request"}},
		{"401 bad key", stripeErr(opCharge, 401, stripego.ErrorTypeInvalidRequest, "api_key_expired"), want{kind: psp.ErrNotApplied, reason: "authentication_failed", providerCode: "api_key_expired"}},
		{"403 restricted key", stripeErr(opCharge, 403, stripego.ErrorTypeInvalidRequest, ""), want{kind: psp.ErrNotApplied, reason: "permission_denied"}},
		{"429 rate limited", stripeErr(opCharge, 429, stripego.ErrorTypeInvalidRequest, "rate_limit"), want{kind: psp.ErrNotApplied, reason: "rate_limited", providerCode: "rate_limit"}},
		{"429 lock timeout", stripeErr(opCharge, 429, stripego.ErrorTypeInvalidRequest, "lock_timeout"), want{kind: psp.ErrNotApplied, reason: "lock_timeout", providerCode: "lock_timeout"}},
		{"connection refused", attempt{op: opCharge, err: refused}, want{kind: psp.ErrNotApplied, reason: "connection_refused", wraps: syscall.ECONNREFUSED}},
		{"dial timeout", attempt{op: opCharge, err: dialTimeout}, want{kind: psp.ErrNotApplied, reason: "dial_timeout"}},
		{"400 from something in front of Stripe", garbled(opCharge, 400, nil), want{kind: psp.ErrNotApplied, reason: "status_400"}},

		// Unknown: the request may have executed.
		{"key reused with other parameters", stripeErr(opCharge, 400, stripego.ErrorTypeIdempotency, ""), want{kind: psp.ErrUnknownOutcome, reason: "idempotency_key_reused"}},
		{"key in use by a request still executing", stripeErr(opCharge, 409, stripego.ErrorTypeInvalidRequest, "idempotency_key_in_use"), want{kind: psp.ErrUnknownOutcome, reason: "idempotency_key_in_use", providerCode: "idempotency_key_in_use"}},
		{"other 409", stripeErr(opCharge, 409, stripego.ErrorTypeInvalidRequest, "resource_already_exists"), want{kind: psp.ErrUnknownOutcome, reason: "conflict", providerCode: "resource_already_exists"}},
		{"replayed 400 was an execution's answer", replayed(stripeErr(opCharge, 400, stripego.ErrorTypeInvalidRequest, "parameter_invalid_integer")), want{kind: psp.ErrUnknownOutcome, reason: "replayed_error", providerCode: "parameter_invalid_integer"}},
		{"replayed 429", replayed(stripeErr(opCharge, 429, stripego.ErrorTypeInvalidRequest, "lock_timeout")), want{kind: psp.ErrUnknownOutcome, reason: "replayed_error", providerCode: "lock_timeout"}},
		{"card error without an intent", stripeErr(opCharge, 402, stripego.ErrorTypeCard, "card_declined"), want{kind: psp.ErrUnknownOutcome, reason: "card_error_without_intent", providerCode: "card_declined"}},
		{"402 that is not a card error", stripeErr(opCharge, 402, stripego.ErrorTypeInvalidRequest, ""), want{kind: psp.ErrUnknownOutcome, reason: "status_402"}},
		{"500 api error", stripeErr(opCharge, 500, stripego.ErrorTypeAPI, ""), want{kind: psp.ErrUnknownOutcome, reason: "status_500"}},
		{"503", stripeErr(opCharge, 503, stripego.ErrorTypeAPI, ""), want{kind: psp.ErrUnknownOutcome, reason: "status_503"}},
		{"502 from a proxy", garbled(opCharge, 502, nil), want{kind: psp.ErrUnknownOutcome, reason: "status_502"}},
		{"200 not json", garbled(opCharge, 200, nil), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"200 body cut off", garbled(opCharge, 200, io.ErrUnexpectedEOF), want{kind: psp.ErrUnknownOutcome, reason: "body_read_failed", wraps: io.ErrUnexpectedEOF}},
		{"200 body timed out", garbled(opCharge, 200, ctxDeadline), want{kind: psp.ErrUnknownOutcome, reason: "timeout", wraps: context.DeadlineExceeded}},
		{"200 intent without id", ok(opCharge, &stripego.PaymentIntent{Status: "succeeded"}), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"redirect", func() attempt { a := ok(opCharge, intent("succeeded")); a.status = 302; return a }(), want{kind: psp.ErrUnknownOutcome, reason: "status_302"}},
		{"timeout after connecting", attempt{op: opCharge, gotConn: true, err: ctxDeadline}, want{kind: psp.ErrUnknownOutcome, reason: "timeout", wraps: context.DeadlineExceeded}},
		{"reset after sending", attempt{op: opCharge, gotConn: true, wroteRequest: true, err: reset}, want{kind: psp.ErrUnknownOutcome, reason: "reset_after_send", wraps: syscall.ECONNRESET}},

		// A retrieve: found, not found only on Stripe's resource_missing.
		{"retrieve succeeded", ok(opRetrieve, intent("succeeded")), want{charge: succeeded}},
		{"retrieve declined", ok(opRetrieve, intent("requires_payment_method", lastError("card_declined", ""))), want{charge: declined("card_declined")}},
		{"retrieve still processing", ok(opRetrieve, intent("processing")), want{kind: psp.ErrUnknownOutcome, reason: "intent_processing", providerID: "pi_1"}},
		{"retrieve resource_missing", stripeErr(opRetrieve, 404, stripego.ErrorTypeInvalidRequest, "resource_missing"), want{kind: psp.ErrNotFound}},
		{"retrieve 404 without the code", stripeErr(opRetrieve, 404, stripego.ErrorTypeInvalidRequest, ""), want{kind: psp.ErrUnknownOutcome, reason: "status_404"}},
		{"retrieve bare 404", garbled(opRetrieve, 404, nil), want{kind: psp.ErrUnknownOutcome, reason: "status_404"}},
		{"retrieve 429 is not a not-applied", stripeErr(opRetrieve, 429, stripego.ErrorTypeInvalidRequest, "rate_limit"), want{kind: psp.ErrUnknownOutcome, reason: "status_429", providerCode: "rate_limit"}},
		{"retrieve 401", stripeErr(opRetrieve, 401, stripego.ErrorTypeInvalidRequest, ""), want{kind: psp.ErrUnknownOutcome, reason: "status_401"}},
		{"retrieve connection refused", attempt{op: opRetrieve, err: refused}, want{kind: psp.ErrUnknownOutcome, reason: "connection_refused"}},

		// A list page: nil when it is a well-formed page.
		{"page", page(true, intent("succeeded")), want{}},
		{"last page", page(false), want{}},
		{"page that is not a list", listPage("", false), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"no page at all", func() attempt { a := page(false); a.page = nil; return a }(), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"empty page with more", page(true), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"page with an intent without id", page(false, &stripego.PaymentIntent{}), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"list 404 resource_missing proves nothing", stripeErr(opList, 404, stripego.ErrorTypeInvalidRequest, "resource_missing"), want{kind: psp.ErrUnknownOutcome, reason: "status_404", providerCode: "resource_missing"}},
		{"list 500", stripeErr(opList, 500, stripego.ErrorTypeAPI, ""), want{kind: psp.ErrUnknownOutcome, reason: "status_500"}},
		{"list 400", stripeErr(opList, 400, stripego.ErrorTypeInvalidRequest, "parameter_invalid_integer"), want{kind: psp.ErrUnknownOutcome, reason: "status_400", providerCode: "parameter_invalid_integer"}},
		{"list not json", garbled(opList, 200, nil), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},

		// A search page: the same rules, but a search_result.
		{"search page", searchPage("search_result", intent("succeeded")), want{}},
		{"search answered with a list", searchPage("list"), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"search 400 is not a not-applied", stripeErr(opSearch, 400, stripego.ErrorTypeInvalidRequest, "parameter_invalid"), want{kind: psp.ErrUnknownOutcome, reason: "status_400", providerCode: "parameter_invalid"}},
		{"search 429", stripeErr(opSearch, 429, stripego.ErrorTypeInvalidRequest, "rate_limit"), want{kind: psp.ErrUnknownOutcome, reason: "status_429", providerCode: "rate_limit"}},
	}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			requireClassified(t, tc.attempt, tc.want)
		})
	}
}

func TestClassifyNeverQuotesStripesMessage(t *testing.T) {
	t.Parallel()

	_, err := classify(attempt{op: opCharge, gotConn: true, wroteRequest: true, status: 400, err: &stripego.Error{
		Type: stripego.ErrorTypeInvalidRequest, Code: "resource_missing", HTTPStatusCode: 400, RequestID: "req_9",
		Msg: "No such PaymentMethod: 'pm_canary'", Param: "payment_method",
	}})
	require.EqualError(t, err, "psp: request not applied (invalid_request, status 400, code resource_missing): stripe: 400 invalid_request_error (code resource_missing, request req_9)")
}

func TestMatchReference(t *testing.T) {
	t.Parallel()

	pi := func(id, reference string, status stripego.PaymentIntentStatus) *stripego.PaymentIntent {
		return &stripego.PaymentIntent{ID: id, Status: status, Amount: 500, Currency: "eur", Metadata: map[string]string{MetadataKey: reference}}
	}
	others := []*stripego.PaymentIntent{pi("pi_a", "ch_a", "succeeded"), {ID: "pi_b", Status: "succeeded"}, pi("pi_c", "ch_c", "processing")}

	_, err := matchReference(others, "ch_1")
	require.Equal(t, psp.ErrNotFound, err, "a complete scan without a match")

	_, err = matchReference(nil, "ch_1")
	require.Equal(t, psp.ErrNotFound, err, "an empty window")

	charge, err := matchReference(append(others, pi("pi_1", "ch_1", "succeeded")), "ch_1")
	require.NoError(t, err)
	require.Equal(t, psp.Charge{ID: "pi_1", Status: psp.StatusSucceeded, Amount: 500, Currency: "EUR", Reference: "ch_1"}, charge)

	_, err = matchReference(append(others, pi("pi_1", "ch_1", "processing")), "ch_1")
	require.ErrorIs(t, err, psp.ErrUnknownOutcome)
	require.Equal(t, "pi_1", psp.ProviderIDOf(err), "the match's id, for a strong retrieve next time")

	_, err = matchReference(append(others, pi("pi_1", "ch_1", "succeeded"), pi("pi_2", "ch_1", "requires_payment_method")), "ch_1")
	require.ErrorIs(t, err, psp.ErrUnknownOutcome)
	require.Equal(t, "multiple_matches", psp.ReasonOf(err))
	require.Empty(t, psp.ProviderIDOf(err), "never a pick")
	require.ErrorContains(t, err, "pi_1, pi_2")
}

// A refund is classified by the charge's rules, through the same
// classifier, with Stripe's refusals of a refund for the charge's state as
// a failed refund.
func TestClassifyRefund(t *testing.T) {
	t.Parallel()

	refund := func(status stripego.RefundStatus, edit ...func(*stripego.Refund)) *stripego.Refund {
		r := &stripego.Refund{ID: "re_1", Status: status, Amount: 500, Currency: "usd",
			PaymentIntent: &stripego.PaymentIntent{ID: "pi_1"},
			Metadata:      map[string]string{MetadataRefundKey: "rf_ours", MetadataTenantKey: "tn_1"}}
		for _, e := range edit {
			e(r)
		}
		return r
	}
	because := func(reason stripego.RefundFailureReason) func(*stripego.Refund) {
		return func(r *stripego.Refund) { r.FailureReason = reason }
	}
	ok := func(o op, r *stripego.Refund) attempt {
		a := sent(o)
		a.status, a.refund = 200, r
		return a
	}
	listed := func(object string, hasMore bool, refunds ...*stripego.Refund) attempt {
		a := sent(opRefundList)
		a.status = 200
		p := &refundPage{Object: object, Data: refunds}
		p.HasMore = hasMore
		a.page = p
		return a
	}
	value := func(status psp.Status, failureCode string) want {
		return want{refund: psp.Refund{ID: "re_1", Status: status, Charge: "pi_1", Amount: 500, Currency: "USD", Reference: "rf_ours", FailureCode: failureCode}}
	}
	refusal := func(code string) want { return want{refund: psp.Refund{Status: psp.StatusFailed, FailureCode: code}} }
	processing := &stripego.PaymentIntent{ID: "pi_1", Status: "processing"}

	tests := []struct {
		name    string
		attempt attempt
		want    want
	}{
		// Values: a refund, succeeded or failed.
		{"refund succeeded", ok(opRefund, refund("succeeded")), value(psp.StatusSucceeded, "")},
		{"refund failed with Stripe's reason", ok(opRefund, refund("failed", because("expired_or_canceled_card"))), value(psp.StatusFailed, "expired_or_canceled_card")},
		{"refund failed without a reason", ok(opRefund, refund("failed")), value(psp.StatusFailed, "failed")},
		{"refund canceled", ok(opRefund, refund("canceled")), value(psp.StatusFailed, "canceled")},
		{"refund canceled with a reason", ok(opRefund, refund("canceled", because("merchant_request"))), value(psp.StatusFailed, "merchant_request")},
		{"replayed success is the same success", replayed(ok(opRefund, refund("succeeded"))), value(psp.StatusSucceeded, "")},
		{"refund of a charge without an intent", ok(opRefund, refund("succeeded", func(r *stripego.Refund) { r.PaymentIntent = nil })),
			want{refund: psp.Refund{ID: "re_1", Status: psp.StatusSucceeded, Amount: 500, Currency: "USD", Reference: "rf_ours"}}},

		// Refused for the charge's state: a failed refund, Stripe's code.
		{"charge already refunded", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "charge_already_refunded"), refusal("charge_already_refunded")},
		{"more than is left", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "amount_too_large"), refusal("amount_too_large")},
		{"charge not refundable", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "charge_not_refundable"), refusal("charge_not_refundable")},
		{"charge disputed", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "charge_disputed"), refusal("charge_disputed")},
		{"payment disputed", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "refund_disputed_payment"), refusal("refund_disputed_payment")},
		{"intent that did not succeed", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "payment_intent_unexpected_state", withIntent(processing)), refusal("payment_intent_unexpected_state")},
		{"replayed refusal is the same refusal", replayed(stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "charge_already_refunded")), refusal("charge_already_refunded")},
		{"a refusal code with a param is the same refusal", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "amount_too_large", func(e *stripego.Error) { e.Param = "amount" }), refusal("amount_too_large")},

		// A refusal without one of those codes says nothing about the
		// charge: Stripe refused the request's form, before execution. Not
		// applied, so retried (and sent to review when the retries run out);
		// replayed, unknown.
		{"400 without code or param (an API version the account does not accept)", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, ""), want{kind: psp.ErrNotApplied, reason: "invalid_request"}},
		{"400 without a code, param amount (more than is left, as recorded)", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "", func(e *stripego.Error) { e.Param = "amount" }), want{kind: psp.ErrNotApplied, reason: "invalid_request"}},
		{"400 without a code, another param", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "", func(e *stripego.Error) { e.Param = "reason" }), want{kind: psp.ErrNotApplied, reason: "invalid_request"}},
		{"400 unknown parameter", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "parameter_unknown", func(e *stripego.Error) { e.Param = "payment_intent" }), want{kind: psp.ErrNotApplied, reason: "invalid_request", providerCode: "parameter_unknown"}},
		{"400 a code about the account, not the charge", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "balance_insufficient"), want{kind: psp.ErrNotApplied, reason: "invalid_request", providerCode: "balance_insufficient"}},
		{"400 a code Stripe does not document", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "refund_refused_for_reasons"), want{kind: psp.ErrNotApplied, reason: "invalid_request", providerCode: "refund_refused_for_reasons"}},
		{"400 without a code, replayed", replayed(stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "")), want{kind: psp.ErrUnknownOutcome, reason: "replayed_error"}},
		{"400 without a code, param amount, replayed", replayed(stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "", func(e *stripego.Error) { e.Param = "amount" })), want{kind: psp.ErrUnknownOutcome, reason: "replayed_error"}},
		{"a refusal code on a card error", stripeErr(opRefund, 402, stripego.ErrorTypeCard, "charge_already_refunded"), want{kind: psp.ErrUnknownOutcome, reason: "status_402", providerCode: "charge_already_refunded"}},
		{"a refusal code on a 404", stripeErr(opRefund, 404, stripego.ErrorTypeInvalidRequest, "charge_not_refundable"), want{kind: psp.ErrNotApplied, reason: "invalid_request", providerCode: "charge_not_refundable"}},
		{"a refusal code on a refund lookup", stripeErr(opRefundRetrieve, 400, stripego.ErrorTypeInvalidRequest, "charge_already_refunded"), want{kind: psp.ErrUnknownOutcome, reason: "status_400", providerCode: "charge_already_refunded"}},
		{"a charge's 400 without a code is still not applied", stripeErr(opCharge, 400, stripego.ErrorTypeInvalidRequest, ""), want{kind: psp.ErrNotApplied, reason: "invalid_request"}},

		// Not final: unknown, with the refund's id for a strong lookup.
		{"pending", ok(opRefund, refund("pending")), want{kind: psp.ErrUnknownOutcome, reason: "refund_pending", providerID: "re_1"}},
		{"requires_action", ok(opRefund, refund("requires_action")), want{kind: psp.ErrUnknownOutcome, reason: "refund_requires_action", providerID: "re_1"}},
		{"a status we do not know", ok(opRefund, refund("reversed")), want{kind: psp.ErrUnknownOutcome, reason: "unknown_status", providerID: "re_1"}},

		// Not applied: refused before execution.
		{"400 invalid request", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "parameter_missing"), want{kind: psp.ErrNotApplied, reason: "invalid_request", providerCode: "parameter_missing"}},
		{"400 no such payment intent", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "resource_missing"), want{kind: psp.ErrNotApplied, reason: "invalid_request", providerCode: "resource_missing"}},
		{"400 carrying an intent never names it as the refund", stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "parameter_invalid_integer", withIntent(processing)),
			want{kind: psp.ErrNotApplied, reason: "invalid_request", providerCode: "parameter_invalid_integer"}},
		{"404 unrecognized url", stripeErr(opRefund, 404, stripego.ErrorTypeInvalidRequest, ""), want{kind: psp.ErrNotApplied, reason: "invalid_request"}},
		{"401", stripeErr(opRefund, 401, stripego.ErrorTypeInvalidRequest, ""), want{kind: psp.ErrNotApplied, reason: "authentication_failed"}},
		{"403", stripeErr(opRefund, 403, stripego.ErrorTypeInvalidRequest, ""), want{kind: psp.ErrNotApplied, reason: "permission_denied"}},
		{"429 rate limited", stripeErr(opRefund, 429, stripego.ErrorTypeInvalidRequest, "rate_limit"), want{kind: psp.ErrNotApplied, reason: "rate_limited", providerCode: "rate_limit"}},
		{"429 lock timeout", stripeErr(opRefund, 429, stripego.ErrorTypeInvalidRequest, "lock_timeout"), want{kind: psp.ErrNotApplied, reason: "lock_timeout", providerCode: "lock_timeout"}},
		{"connection refused", attempt{op: opRefund, err: refused}, want{kind: psp.ErrNotApplied, reason: "connection_refused"}},
		{"dial timeout", attempt{op: opRefund, err: dialTimeout}, want{kind: psp.ErrNotApplied, reason: "dial_timeout"}},
		{"400 from something in front of Stripe", garbled(opRefund, 400, nil), want{kind: psp.ErrNotApplied, reason: "status_400"}},

		// Unknown: the refund may have executed.
		{"key reused with other parameters", stripeErr(opRefund, 400, stripego.ErrorTypeIdempotency, ""), want{kind: psp.ErrUnknownOutcome, reason: "idempotency_key_reused"}},
		{"idempotency error with a refusal code", stripeErr(opRefund, 400, stripego.ErrorTypeIdempotency, "charge_already_refunded"), want{kind: psp.ErrUnknownOutcome, reason: "idempotency_key_reused", providerCode: "charge_already_refunded"}},
		{"key in use", stripeErr(opRefund, 409, stripego.ErrorTypeInvalidRequest, "idempotency_key_in_use"), want{kind: psp.ErrUnknownOutcome, reason: "idempotency_key_in_use", providerCode: "idempotency_key_in_use"}},
		{"other 409", stripeErr(opRefund, 409, stripego.ErrorTypeInvalidRequest, "charge_already_refunded"), want{kind: psp.ErrUnknownOutcome, reason: "conflict", providerCode: "charge_already_refunded"}},
		{"replayed 400 was an execution's answer", replayed(stripeErr(opRefund, 400, stripego.ErrorTypeInvalidRequest, "parameter_invalid_integer")), want{kind: psp.ErrUnknownOutcome, reason: "replayed_error", providerCode: "parameter_invalid_integer"}},
		{"replayed 429", replayed(stripeErr(opRefund, 429, stripego.ErrorTypeInvalidRequest, "lock_timeout")), want{kind: psp.ErrUnknownOutcome, reason: "replayed_error", providerCode: "lock_timeout"}},
		{"402 card error is no decline of a refund", stripeErr(opRefund, 402, stripego.ErrorTypeCard, "card_declined"), want{kind: psp.ErrUnknownOutcome, reason: "status_402", providerCode: "card_declined"}},
		{"500 api error", stripeErr(opRefund, 500, stripego.ErrorTypeAPI, ""), want{kind: psp.ErrUnknownOutcome, reason: "status_500"}},
		{"500 carrying an intent is not a charge", stripeErr(opRefund, 500, stripego.ErrorTypeAPI, "", withIntent(processing)), want{kind: psp.ErrUnknownOutcome, reason: "status_500"}},
		{"500 with a refusal code", stripeErr(opRefund, 500, stripego.ErrorTypeAPI, "charge_already_refunded"), want{kind: psp.ErrUnknownOutcome, reason: "status_500", providerCode: "charge_already_refunded"}},
		{"502 from a proxy", garbled(opRefund, 502, nil), want{kind: psp.ErrUnknownOutcome, reason: "status_502"}},
		{"200 not json", garbled(opRefund, 200, nil), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"200 body cut off", garbled(opRefund, 200, io.ErrUnexpectedEOF), want{kind: psp.ErrUnknownOutcome, reason: "body_read_failed", wraps: io.ErrUnexpectedEOF}},
		{"200 refund without id", ok(opRefund, &stripego.Refund{Status: "succeeded"}), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"200 without a refund", ok(opRefund, nil), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"timeout after connecting", attempt{op: opRefund, gotConn: true, err: ctxDeadline}, want{kind: psp.ErrUnknownOutcome, reason: "timeout", wraps: context.DeadlineExceeded}},
		{"reset after sending", attempt{op: opRefund, gotConn: true, wroteRequest: true, err: reset}, want{kind: psp.ErrUnknownOutcome, reason: "reset_after_send", wraps: syscall.ECONNRESET}},

		// A retrieve: found, not found only on Stripe's resource_missing.
		{"retrieve succeeded", ok(opRefundRetrieve, refund("succeeded")), value(psp.StatusSucceeded, "")},
		{"retrieve failed", ok(opRefundRetrieve, refund("failed", because("lost_or_stolen_card"))), value(psp.StatusFailed, "lost_or_stolen_card")},
		{"retrieve still pending", ok(opRefundRetrieve, refund("pending")), want{kind: psp.ErrUnknownOutcome, reason: "refund_pending", providerID: "re_1"}},
		{"retrieve resource_missing", stripeErr(opRefundRetrieve, 404, stripego.ErrorTypeInvalidRequest, "resource_missing"), want{kind: psp.ErrNotFound}},
		{"retrieve 404 without the code", stripeErr(opRefundRetrieve, 404, stripego.ErrorTypeInvalidRequest, ""), want{kind: psp.ErrUnknownOutcome, reason: "status_404"}},
		{"retrieve bare 404", garbled(opRefundRetrieve, 404, nil), want{kind: psp.ErrUnknownOutcome, reason: "status_404"}},
		{"retrieve refusal code is no refusal", stripeErr(opRefundRetrieve, 400, stripego.ErrorTypeInvalidRequest, "charge_already_refunded"), want{kind: psp.ErrUnknownOutcome, reason: "status_400", providerCode: "charge_already_refunded"}},
		{"retrieve 429 is not a not-applied", stripeErr(opRefundRetrieve, 429, stripego.ErrorTypeInvalidRequest, "rate_limit"), want{kind: psp.ErrUnknownOutcome, reason: "status_429", providerCode: "rate_limit"}},
		{"retrieve connection refused", attempt{op: opRefundRetrieve, err: refused}, want{kind: psp.ErrUnknownOutcome, reason: "connection_refused"}},

		// A page of a charge's refunds: nil when it is a well-formed page.
		{"page", listed("list", true, refund("succeeded")), want{}},
		{"last page", listed("list", false), want{}},
		{"page that is not a list", listed("search_result", false), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"empty page with more", listed("list", true), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"page with a refund without id", listed("list", false, &stripego.Refund{}), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"page with a hole", listed("list", false, nil), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"list 404 resource_missing proves nothing", stripeErr(opRefundList, 404, stripego.ErrorTypeInvalidRequest, "resource_missing"), want{kind: psp.ErrUnknownOutcome, reason: "status_404", providerCode: "resource_missing"}},
		{"list 400", stripeErr(opRefundList, 400, stripego.ErrorTypeInvalidRequest, "parameter_invalid_string_empty"), want{kind: psp.ErrUnknownOutcome, reason: "status_400", providerCode: "parameter_invalid_string_empty"}},
		{"list 500", stripeErr(opRefundList, 500, stripego.ErrorTypeAPI, ""), want{kind: psp.ErrUnknownOutcome, reason: "status_500"}},
		{"list not json", garbled(opRefundList, 200, nil), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"list connection refused", attempt{op: opRefundList, err: refused}, want{kind: psp.ErrUnknownOutcome, reason: "connection_refused"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			requireClassified(t, tc.attempt, tc.want)
		})
	}
}

func TestMatchRefund(t *testing.T) {
	t.Parallel()

	refund := func(id, reference string, status stripego.RefundStatus) *stripego.Refund {
		return &stripego.Refund{ID: id, Status: status, Amount: 300, Currency: "eur", PaymentIntent: &stripego.PaymentIntent{ID: "pi_1"},
			Metadata: map[string]string{MetadataRefundKey: reference}}
	}
	// Refunds of the same intent: ours among others, one made by hand.
	others := []*stripego.Refund{refund("re_a", "rf_a", "succeeded"), {ID: "re_b", Status: "succeeded"}, refund("re_c", "rf_c", "pending")}

	_, err := matchRefund(others, "rf_1")
	require.Equal(t, psp.ErrNotFound, err, "a complete list without a match")

	_, err = matchRefund(nil, "rf_1")
	require.Equal(t, psp.ErrNotFound, err, "an intent without refunds")

	found, err := matchRefund(append(others, refund("re_1", "rf_1", "succeeded")), "rf_1")
	require.NoError(t, err)
	require.Equal(t, psp.Refund{ID: "re_1", Status: psp.StatusSucceeded, Charge: "pi_1", Amount: 300, Currency: "EUR", Reference: "rf_1"}, found)

	_, err = matchRefund(append(others, refund("re_1", "rf_1", "pending")), "rf_1")
	require.ErrorIs(t, err, psp.ErrUnknownOutcome)
	require.Equal(t, "re_1", psp.ProviderIDOf(err), "the match's id, for a strong retrieve next time")

	_, err = matchRefund(append(others, refund("re_1", "rf_1", "succeeded"), refund("re_2", "rf_1", "failed")), "rf_1")
	require.ErrorIs(t, err, psp.ErrUnknownOutcome)
	require.Equal(t, "multiple_matches", psp.ReasonOf(err))
	require.Empty(t, psp.ProviderIDOf(err), "never a pick")
	require.ErrorContains(t, err, "re_1, re_2")
	require.NotContains(t, err.Error(), "rf_1", "an error never quotes the metadata")
}

// An intent created to be captured later, and its capture and cancel:
// each state is a value, Stripe's refusals for the intent's state or the
// amount are a refusal, everything else follows a charge's rules.
func TestClassifyCaptureLater(t *testing.T) {
	t.Parallel()

	manual := func(status stripego.PaymentIntentStatus, received int64) *stripego.PaymentIntent {
		return &stripego.PaymentIntent{ID: "pi_1", Status: status, Amount: 1000, Currency: "eur", AmountReceived: received,
			CaptureMethod: stripego.PaymentIntentCaptureMethodManual, Metadata: map[string]string{MetadataKey: "ch_1"}}
	}
	ok := func(o op, pi *stripego.PaymentIntent) attempt {
		a := sent(o)
		a.status, a.intent = 200, pi
		return a
	}
	charge := func(status psp.Status, captured int64) psp.Charge {
		return psp.Charge{ID: "pi_1", Status: status, Amount: 1000, Currency: "EUR", Reference: "ch_1", AmountCaptured: captured}
	}
	refusal := func(code string) psp.Charge { return psp.Charge{Status: psp.StatusFailed, DeclineCode: code} }

	tests := []struct {
		name    string
		attempt attempt
		want    want
	}{
		{"authorized", ok(opCharge, manual("requires_capture", 0)), want{charge: charge(psp.StatusRequiresCapture, 0)}},
		{"retrieved held", ok(opRetrieve, manual("requires_capture", 0)), want{charge: charge(psp.StatusRequiresCapture, 0)}},
		{"retrieved captured in part", ok(opRetrieve, manual("succeeded", 600)), want{charge: charge(psp.StatusSucceeded, 600)}},
		{"retrieved released", ok(opRetrieve, manual("canceled", 0)), want{charge: charge(psp.StatusCanceled, 0)}},
		{"captured", ok(opCapture, manual("succeeded", 600)), want{charge: charge(psp.StatusSucceeded, 600)}},
		{"canceled", ok(opCancel, manual("canceled", 0)), want{charge: charge(psp.StatusCanceled, 0)}},
		{"replayed capture is the same capture", replayed(ok(opCapture, manual("succeeded", 600))), want{charge: charge(psp.StatusSucceeded, 600)}},
		{"a declined authorization is a decline", ok(opCharge, func() *stripego.PaymentIntent {
			pi := manual("requires_payment_method", 0)
			pi.LastPaymentError = &stripego.Error{Type: stripego.ErrorTypeCard, Code: "card_declined", DeclineCode: "insufficient_funds"}
			return pi
		}()), want{charge: psp.Charge{ID: "pi_1", Status: psp.StatusFailed, Amount: 1000, Currency: "EUR", Reference: "ch_1", DeclineCode: "insufficient_funds"}}},

		{"capture of an intent not held", stripeErr(opCapture, 400, stripego.ErrorTypeInvalidRequest, stripego.ErrorCodePaymentIntentUnexpectedState,
			withIntent(manual("canceled", 0))), want{charge: refusal("payment_intent_unexpected_state")}},
		{"capture of an intent whose hold expired", stripeErr(opCapture, 400, stripego.ErrorTypeInvalidRequest, stripego.ErrorCodePaymentIntentUnexpectedState,
			withIntent(func() *stripego.PaymentIntent {
				pi := manual("canceled", 0)
				pi.CancellationReason = stripego.PaymentIntentCancellationReasonAutomatic
				return pi
			}())), want{charge: refusal(psp.CodeHoldExpired)}},
		{"capture of a charge expired for capture", stripeErr(opCapture, 400, stripego.ErrorTypeInvalidRequest, stripego.ErrorCodeChargeExpiredForCapture),
			want{charge: refusal(psp.CodeHoldExpired)}},
		{"cancel of an intent captured", stripeErr(opCancel, 400, stripego.ErrorTypeInvalidRequest, stripego.ErrorCodePaymentIntentUnexpectedState,
			withIntent(manual("succeeded", 1000))), want{charge: refusal("payment_intent_unexpected_state")}},
		{"capture of more than is capturable", stripeErr(opCapture, 400, stripego.ErrorTypeInvalidRequest, stripego.ErrorCodeAmountTooLarge),
			want{charge: refusal("amount_too_large")}},
		{"a replayed refusal is the same refusal", replayed(stripeErr(opCapture, 400, stripego.ErrorTypeInvalidRequest, stripego.ErrorCodePaymentIntentUnexpectedState)),
			want{charge: refusal("payment_intent_unexpected_state")}},

		{"capture of no such intent", stripeErr(opCapture, 404, stripego.ErrorTypeInvalidRequest, "resource_missing"),
			want{kind: psp.ErrNotApplied, reason: "invalid_request", providerCode: "resource_missing"}},
		{"capture with a parameter refused", stripeErr(opCapture, 400, stripego.ErrorTypeInvalidRequest, "parameter_unknown"),
			want{kind: psp.ErrNotApplied, reason: "invalid_request", providerCode: "parameter_unknown"}},
		{"capture rate limited", stripeErr(opCapture, 429, stripego.ErrorTypeInvalidRequest, "rate_limit"),
			want{kind: psp.ErrNotApplied, reason: "rate_limited", providerCode: "rate_limit"}},
		{"cancel key reused", stripeErr(opCancel, 400, stripego.ErrorTypeIdempotency, ""), want{kind: psp.ErrUnknownOutcome, reason: "idempotency_key_reused"}},
		{"cancel 500", stripeErr(opCancel, 500, stripego.ErrorTypeAPI, ""), want{kind: psp.ErrUnknownOutcome, reason: "status_500"}},
		{"capture reset after sending", attempt{op: opCapture, gotConn: true, wroteRequest: true, err: reset}, want{kind: psp.ErrUnknownOutcome, reason: "reset_after_send", wraps: syscall.ECONNRESET}},
		{"capture connection refused", attempt{op: opCapture, err: refused}, want{kind: psp.ErrNotApplied, reason: "connection_refused", wraps: syscall.ECONNREFUSED}},
		{"a refund's refusal code means nothing to a charge", stripeErr(opCharge, 400, stripego.ErrorTypeInvalidRequest, stripego.ErrorCodeAmountTooLarge),
			want{kind: psp.ErrNotApplied, reason: "invalid_request", providerCode: "amount_too_large"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			requireClassified(t, tc.attempt, tc.want)
		})
	}
	require.Equal(t, psp.OpCapture, opCapture.pspOp())
	require.Equal(t, psp.OpCancel, opCancel.pspOp())
}
