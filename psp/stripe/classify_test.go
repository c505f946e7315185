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

	"chargeflow/psp"
)

func TestClassify(t *testing.T) {
	t.Parallel()

	urlErr := func(err error) error {
		return &url.Error{Op: "Post", URL: "https://api.stripe.com/v1/payment_intents", Err: err}
	}
	opErr := func(op string, err error) error { return urlErr(&net.OpError{Op: op, Net: "tcp", Err: err}) }
	var (
		refused     = opErr("dial", os.NewSyscallError("connect", syscall.ECONNREFUSED))
		dialTimeout = opErr("dial", os.ErrDeadlineExceeded)
		ctxDeadline = urlErr(context.DeadlineExceeded)
		reset       = opErr("read", os.NewSyscallError("read", syscall.ECONNRESET))
		// stripe-go's decoding error quotes the body it could not decode.
		undecodable = errors.New(`Couldn't deserialize JSON (response status: 200, body sample: '{"id":"pi_1","payment_method":"pm_canary'): unexpected end of JSON input`)
	)

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

	sent := func(o op) attempt { return attempt{op: o, gotConn: true, wroteRequest: true} }
	ok := func(o op, pi *stripego.PaymentIntent) attempt {
		a := sent(o)
		a.status, a.intent = 200, pi
		return a
	}
	page := func(hasMore bool, intents ...*stripego.PaymentIntent) attempt {
		a := sent(opList)
		a.status = 200
		a.page = &intentPage{Object: "list", Data: intents}
		a.page.HasMore = hasMore
		return a
	}
	searchPage := func(intents ...*stripego.PaymentIntent) attempt {
		a := sent(opSearch)
		a.status = 200
		a.page = &intentPage{Object: "search_result", Data: intents}
		return a
	}
	// stripeErr is an answer stripe-go decoded into a *stripego.Error.
	stripeErr := func(o op, status int, typ stripego.ErrorType, code stripego.ErrorCode, edit ...func(*stripego.Error)) attempt {
		e := &stripego.Error{Type: typ, Code: code, HTTPStatusCode: status, RequestID: "req_1",
			Msg: "No such PaymentMethod: 'pm_canary'"}
		for _, f := range edit {
			f(e)
		}
		a := sent(o)
		a.status, a.err = status, e
		return a
	}
	withIntent := func(pi *stripego.PaymentIntent) func(*stripego.Error) {
		return func(e *stripego.Error) { e.PaymentIntent = pi }
	}
	withDecline := func(code stripego.DeclineCode) func(*stripego.Error) {
		return func(e *stripego.Error) { e.DeclineCode = code }
	}
	replayed := func(a attempt) attempt { a.replayed = true; return a }
	// garbled is an answer stripe-go could not decode.
	garbled := func(o op, status int, bodyErr error) attempt {
		a := sent(o)
		a.status, a.err, a.bodyErr = status, undecodable, bodyErr
		if bodyErr != nil {
			a.err = bodyErr
		}
		return a
	}

	type want struct {
		charge       psp.Charge
		kind         error // nil for a charge; ErrNotApplied, ErrUnknownOutcome or ErrNotFound
		reason       string
		providerCode string
		providerID   string
		wraps        error
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
		{"page that is not a list", func() attempt { a := page(false); a.page.Object = ""; return a }(), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"empty page with more", page(true), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"page with an intent without id", page(false, &stripego.PaymentIntent{}), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"list 404 resource_missing proves nothing", stripeErr(opList, 404, stripego.ErrorTypeInvalidRequest, "resource_missing"), want{kind: psp.ErrUnknownOutcome, reason: "status_404", providerCode: "resource_missing"}},
		{"list 500", stripeErr(opList, 500, stripego.ErrorTypeAPI, ""), want{kind: psp.ErrUnknownOutcome, reason: "status_500"}},
		{"list 400", stripeErr(opList, 400, stripego.ErrorTypeInvalidRequest, "parameter_invalid_integer"), want{kind: psp.ErrUnknownOutcome, reason: "status_400", providerCode: "parameter_invalid_integer"}},
		{"list not json", garbled(opList, 200, nil), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},

		// A search page: the same rules, but a search_result.
		{"search page", searchPage(intent("succeeded")), want{}},
		{"search answered with a list", func() attempt { a := searchPage(); a.page.Object = "list"; return a }(), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"search 400 is not a not-applied", stripeErr(opSearch, 400, stripego.ErrorTypeInvalidRequest, "parameter_invalid"), want{kind: psp.ErrUnknownOutcome, reason: "status_400", providerCode: "parameter_invalid"}},
		{"search 429", stripeErr(opSearch, 429, stripego.ErrorTypeInvalidRequest, "rate_limit"), want{kind: psp.ErrUnknownOutcome, reason: "status_429", providerCode: "rate_limit"}},
	}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			charge, err := classify(tc.attempt)
			if tc.want.kind == nil {
				require.NoError(t, err)
				require.Equal(t, tc.want.charge, charge)
				return
			}
			require.ErrorIs(t, err, tc.want.kind)
			require.Zero(t, charge)
			if tc.want.kind == psp.ErrNotFound {
				require.Equal(t, psp.ErrNotFound, err, "a bare ErrNotFound, as Lookup returns it")
				return
			}
			var pspErr *psp.Error
			require.ErrorAs(t, err, &pspErr)
			require.Equal(t, tc.want.reason, pspErr.Reason)
			require.Equal(t, tc.want.providerCode, pspErr.ProviderCode)
			require.Equal(t, tc.want.providerID, pspErr.ProviderID)
			if tc.want.wraps != nil {
				require.ErrorIs(t, err, tc.want.wraps)
			}
			require.NotContains(t, err.Error(), "pm_canary", "an error never quotes the payment method")
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
