package adyen

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/psp"
)

// The transport errors below are shaped the way net/http returns them.
func urlErr(err error) error {
	return &url.Error{Op: "Post", URL: "https://checkout-test.adyen.com/v71/payments", Err: err}
}

func opErr(op string, err error) error { return urlErr(&net.OpError{Op: op, Net: "tcp", Err: err}) }

var (
	refused     = opErr("dial", os.NewSyscallError("connect", syscall.ECONNREFUSED))
	ctxDeadline = urlErr(context.DeadlineExceeded)
	reset       = opErr("read", os.NewSyscallError("read", syscall.ECONNRESET))
)

// answered is an attempt of op that got a.
func answered(op psp.Op, a answer) psp.Attempt {
	return psp.Attempt{Op: op, GotConn: true, WroteRequest: true, StatusCode: a.status, Body: []byte(a.body)}
}

// ok is a 200 answering a charge with body.
func ok(body string) psp.Attempt {
	return answered(psp.OpCharge, answer{status: http.StatusOK, body: body})
}

// want is what classify must make of an attempt: a charge when kind is
// nil, else an error of kind.
type want struct {
	charge       psp.Charge
	kind         error
	reason       string
	providerCode string
	providerID   string
	wraps        error
}

func requireClassified(t *testing.T, a psp.Attempt, w want) {
	t.Helper()
	got, err := classify(a)
	if w.kind == nil {
		require.NoError(t, err)
		require.Equal(t, w.charge, got)
		return
	}
	require.ErrorIs(t, err, w.kind)
	require.Zero(t, got)
	var pspErr *psp.Error
	require.ErrorAs(t, err, &pspErr)
	require.Equal(t, w.reason, pspErr.Reason, "error: %v", err)
	require.Equal(t, w.providerCode, pspErr.ProviderCode)
	require.Equal(t, w.providerID, pspErr.ProviderID)
	if w.wraps != nil {
		require.ErrorIs(t, err, w.wraps)
	}
	require.NotContains(t, err.Error(), "pm_canary", "an error never quotes Adyen's free text")
	require.NotContains(t, err.Error(), "message")
}

func TestClassifyCharge(t *testing.T) {
	t.Parallel()

	succeeded := psp.Charge{ID: testPSP, Status: psp.StatusSucceeded, Amount: 1000, Currency: "EUR", Reference: "ch_1"}
	declined := func(code string) psp.Charge {
		c := succeeded
		c.Status, c.DeclineCode = psp.StatusFailed, code
		return c
	}
	unknown := func(reason string) want {
		return want{kind: psp.ErrUnknownOutcome, reason: reason, providerID: testPSP}
	}
	bare := func(result string) string {
		return fmt.Sprintf(`{"pspReference":%q,"resultCode":%q,"merchantReference":"ch_1"}`, testPSP, result)
	}

	for _, tc := range []struct {
		name string
		a    psp.Attempt
		want want
	}{
		// 200, final result codes.
		{"Authorised is a charge", answered(psp.OpCharge, answerAuthorised), want{charge: succeeded}},
		{"Refused 12 is insufficient_funds", answered(psp.OpCharge, answerRefused), want{charge: declined("insufficient_funds")}},
		{"Refused 2 is generic_decline", ok(refusedJSON("Refused", "2", "Refused")), want{charge: declined("generic_decline")}},
		{"Refused 6 is expired_card", ok(refusedJSON("Refused", "6", "Expired Card")), want{charge: declined("expired_card")}},
		{"Refused 24 is incorrect_cvc", ok(refusedJSON("Refused", "24", "CVC Declined")), want{charge: declined("incorrect_cvc")}},
		{"Refused with another code keeps the code", answered(psp.OpCharge, answerRefusedOther), want{charge: declined("adyen_refusal_20")}},
		{"Refused without a code", ok(paymentJSON("Refused", `"refusalReason":"Refused pm_canary"`)), want{charge: declined("adyen_refusal")}},
		{"Refused with a code that is not a numeral", ok(refusedJSON("Refused", "9x y", "Odd")), want{charge: declined("adyen_refusal")}},
		{"Cancelled is a decline", answered(psp.OpCharge, answerCancelled), want{charge: declined("canceled")}},
		{"Error is a final decline", answered(psp.OpCharge, answerError), want{charge: declined("processing_error")}},

		// 200, not final: the payment is named.
		{"Pending", answered(psp.OpCharge, answerPending), unknown("result_pending")},
		{"Received", answered(psp.OpCharge, answerReceived), unknown("result_received")},
		{"PresentToShopper", ok(bare("PresentToShopper")), unknown("result_present_to_shopper")},
		{"RedirectShopper", ok(bare("RedirectShopper")), unknown("result_redirect_shopper")},
		{"IdentifyShopper", ok(bare("IdentifyShopper")), unknown("result_identify_shopper")},
		{"ChallengeShopper", answered(psp.OpCharge, answerChallenge), unknown("result_challenge_shopper")},
		{"AuthenticationFinished", ok(bare("AuthenticationFinished")), unknown("result_authentication_finished")},
		{"AuthenticationNotRequired", ok(bare("AuthenticationNotRequired")), unknown("result_authentication_not_required")},
		{"PartiallyAuthorised", ok(paymentJSON("PartiallyAuthorised", "")), unknown("result_partially_authorised")},
		{"Success", ok(bare("Success")), unknown("result_success")},
		{"a result code the description does not list", ok(bare("Charged")), unknown("unknown_status")},

		// 200, malformed: unknown, the payment named when it is.
		{"Authorised without an amount", answered(psp.OpCharge, answerNoAmount), unknown("malformed_body")},
		{"Authorised without a currency", ok(fmt.Sprintf(`{"pspReference":%q,"resultCode":"Authorised","merchantReference":"ch_1","amount":{"value":1000}}`, testPSP)),
			unknown("malformed_body")},
		{"Authorised without a value", ok(fmt.Sprintf(`{"pspReference":%q,"resultCode":"Authorised","merchantReference":"ch_1","amount":{"currency":"EUR"}}`, testPSP)),
			unknown("malformed_body")},
		{"Refused without an amount", ok(fmt.Sprintf(`{"pspReference":%q,"resultCode":"Refused","merchantReference":"ch_1","refusalReasonCode":"2"}`, testPSP)),
			unknown("malformed_body")},
		{"Authorised without a merchantReference", ok(fmt.Sprintf(`{"pspReference":%q,"resultCode":"Authorised","amount":{"currency":"EUR","value":1000}}`, testPSP)),
			unknown("malformed_body")},
		{"Authorised without a pspReference", ok(`{"resultCode":"Authorised","merchantReference":"ch_1","amount":{"currency":"EUR","value":1000}}`),
			want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"no resultCode", ok(fmt.Sprintf(`{"pspReference":%q}`, testPSP)), unknown("malformed_body")},
		{"not JSON", ok(answerAuthorised.body[:40]), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"a body cut off by the timeout", psp.Attempt{Op: psp.OpCharge, GotConn: true, WroteRequest: true, StatusCode: 200, Err: ctxDeadline},
			want{kind: psp.ErrUnknownOutcome, reason: "timeout", wraps: context.DeadlineExceeded}},
		{"a body cut off by a reset", psp.Attempt{Op: psp.OpCharge, GotConn: true, WroteRequest: true, StatusCode: 200, Err: reset},
			want{kind: psp.ErrUnknownOutcome, reason: "body_read_failed"}},

		// Errors refused before processing: not applied.
		{"400", answered(psp.OpCharge, answer400), want{kind: psp.ErrNotApplied, reason: "invalid_request", providerCode: "702"}},
		{"400 from a proxy", answered(psp.OpCharge, answer{400, "<html>bad request</html>", false}), want{kind: psp.ErrNotApplied, reason: "invalid_request"}},
		{"401", answered(psp.OpCharge, answer401), want{kind: psp.ErrNotApplied, reason: "authentication_failed", providerCode: "000"}},
		{"403", answered(psp.OpCharge, answer403), want{kind: psp.ErrNotApplied, reason: "permission_denied", providerCode: "901"}},
		{"429", answered(psp.OpCharge, answer429), want{kind: psp.ErrNotApplied, reason: "rate_limited", providerCode: "100"}},
		{"422 validation", answered(psp.OpCharge, answer422Validation), want{kind: psp.ErrNotApplied, reason: "validation", providerCode: "14_030"}},

		// Errors after which the payment may exist: unknown, never naming
		// the error's pspReference as the payment's.
		{"422 704, a request with the key in flight", answered(psp.OpCharge, answer422InProgress),
			want{kind: psp.ErrUnknownOutcome, reason: "idempotency_key_in_use", providerCode: "704"}},
		{"409 704", answered(psp.OpCharge, answer409InProgress), want{kind: psp.ErrUnknownOutcome, reason: "idempotency_key_in_use", providerCode: "704"}},
		{"400 704", answered(psp.OpCharge, answer{400, errorJSON(400, "704", "validation"), false}),
			want{kind: psp.ErrUnknownOutcome, reason: "idempotency_key_in_use", providerCode: "704"}},
		{"422 of another type", answered(psp.OpCharge, answer422Other), want{kind: psp.ErrUnknownOutcome, reason: "status_422", providerCode: "905_1"}},
		{"422 that is not Adyen's", answered(psp.OpCharge, answer{422, "unprocessable", false}), want{kind: psp.ErrUnknownOutcome, reason: "status_422"}},
		{"422 cut off", psp.Attempt{Op: psp.OpCharge, GotConn: true, WroteRequest: true, StatusCode: 422, Body: []byte(`{"status":422,"errorType":"valid`), Err: reset},
			want{kind: psp.ErrUnknownOutcome, reason: "status_422"}},
		{"500", answered(psp.OpCharge, answer500), want{kind: psp.ErrUnknownOutcome, reason: "status_500", providerCode: "905"}},
		{"503", answered(psp.OpCharge, answer{503, errorJSON(503, "", "internal"), false}), want{kind: psp.ErrUnknownOutcome, reason: "status_503"}},
		{"502 from a proxy", answered(psp.OpCharge, answer502Proxy), want{kind: psp.ErrUnknownOutcome, reason: "status_502"}},
		{"503 703, Adyen's store of keys unavailable", answered(psp.OpCharge, answer{503, errorJSON(503, "703", "internal"), false}),
			want{kind: psp.ErrUnknownOutcome, reason: "status_503", providerCode: "703"}},
		{"404", answered(psp.OpCharge, answer{404, `{"status":404,"errorCode":"000","errorType":"validation"}`, false}),
			want{kind: psp.ErrUnknownOutcome, reason: "status_404", providerCode: "000"}},
		{"409 without 704", answered(psp.OpCharge, answer{409, errorJSON(409, "999", "validation"), false}),
			want{kind: psp.ErrUnknownOutcome, reason: "status_409", providerCode: "999"}},
		{"302", answered(psp.OpCharge, answer{302, "", false}), want{kind: psp.ErrUnknownOutcome, reason: "status_302"}},

		// No answer: psp.Classify's transport rules.
		{"connection refused", psp.Attempt{Op: psp.OpCharge, Err: refused}, want{kind: psp.ErrNotApplied, reason: "connection_refused"}},
		{"timeout once connected", psp.Attempt{Op: psp.OpCharge, GotConn: true, WroteRequest: true, Err: ctxDeadline},
			want{kind: psp.ErrUnknownOutcome, reason: "timeout", wraps: context.DeadlineExceeded}},
		{"reset after sending", psp.Attempt{Op: psp.OpCharge, GotConn: true, WroteRequest: true, Err: reset},
			want{kind: psp.ErrUnknownOutcome, reason: "reset_after_send"}},
		{"EOF after sending", psp.Attempt{Op: psp.OpCharge, GotConn: true, WroteRequest: true, Err: urlErr(io.EOF)},
			want{kind: psp.ErrUnknownOutcome, reason: "reset_after_send"}},
		{"a failed write", psp.Attempt{Op: psp.OpCharge, GotConn: true, Err: opErr("write", os.NewSyscallError("write", syscall.EPIPE))},
			want{kind: psp.ErrUnknownOutcome, reason: "write_failed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			requireClassified(t, tc.a, tc.want)
		})
	}
}

func TestClassifyRefund(t *testing.T) {
	t.Parallel()

	refund := func(a answer) psp.Attempt { return answered(psp.OpRefund, a) }
	for _, tc := range []struct {
		name string
		a    psp.Attempt
		want want
	}{
		{"201 received is acknowledged, not settled", refund(answerRefundReceived),
			want{kind: psp.ErrUnknownOutcome, reason: "refund_received", providerID: testRefundPSP}},
		{"201 of a status the description does not allow", refund(answer{201, fmt.Sprintf(`{"pspReference":%q,"status":"refunded"}`, testRefundPSP), false}),
			want{kind: psp.ErrUnknownOutcome, reason: "unknown_status", providerID: testRefundPSP}},
		{"201 without a pspReference", refund(answer{201, `{"status":"received"}`, false}),
			want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"a payment's answer is not a refund's", refund(answerAuthorised),
			want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"201 not JSON", refund(answer{201, "received", false}), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"201 cut off", psp.Attempt{Op: psp.OpRefund, GotConn: true, WroteRequest: true, StatusCode: 201, Err: ctxDeadline},
			want{kind: psp.ErrUnknownOutcome, reason: "timeout"}},
		{"400", refund(answer400), want{kind: psp.ErrNotApplied, reason: "invalid_request", providerCode: "702"}},
		{"401", refund(answer401), want{kind: psp.ErrNotApplied, reason: "authentication_failed", providerCode: "000"}},
		{"403", refund(answer403), want{kind: psp.ErrNotApplied, reason: "permission_denied", providerCode: "901"}},
		{"429", refund(answer429), want{kind: psp.ErrNotApplied, reason: "rate_limited", providerCode: "100"}},
		{"422 validation", refund(answer422Validation), want{kind: psp.ErrNotApplied, reason: "validation", providerCode: "14_030"}},
		{"422 704", refund(answer422InProgress), want{kind: psp.ErrUnknownOutcome, reason: "idempotency_key_in_use", providerCode: "704"}},
		{"409 704", refund(answer409InProgress), want{kind: psp.ErrUnknownOutcome, reason: "idempotency_key_in_use", providerCode: "704"}},
		{"422 of another type", refund(answer422Other), want{kind: psp.ErrUnknownOutcome, reason: "status_422", providerCode: "905_1"}},
		{"500", refund(answer500), want{kind: psp.ErrUnknownOutcome, reason: "status_500", providerCode: "905"}},
		{"502 from a proxy", refund(answer502Proxy), want{kind: psp.ErrUnknownOutcome, reason: "status_502"}},
		{"connection refused", psp.Attempt{Op: psp.OpRefund, Err: refused}, want{kind: psp.ErrNotApplied, reason: "connection_refused"}},
		{"timeout once connected", psp.Attempt{Op: psp.OpRefund, GotConn: true, WroteRequest: true, Err: ctxDeadline},
			want{kind: psp.ErrUnknownOutcome, reason: "timeout"}},
		{"reset after sending", psp.Attempt{Op: psp.OpRefund, GotConn: true, WroteRequest: true, Err: reset},
			want{kind: psp.ErrUnknownOutcome, reason: "reset_after_send"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			requireClassified(t, tc.a, tc.want)
		})
	}
}

func TestDeclineCodeOf(t *testing.T) {
	t.Parallel()

	for code, want := range map[string]string{
		"2": "generic_decline", "6": "expired_card", "12": "insufficient_funds", "24": "incorrect_cvc",
		"5": "adyen_refusal_5", "20": "adyen_refusal_20", "": "adyen_refusal", "12345": "adyen_refusal",
		"Not enough balance": "adyen_refusal", "1 2": "adyen_refusal", "-1": "adyen_refusal",
	} {
		require.Equal(t, want, declineCodeOf(code), code)
	}
}

func TestAPIErrorNeverQuotesTheMessage(t *testing.T) {
	t.Parallel()

	err := classifyError(answered(psp.OpCharge, answer422Validation))
	require.EqualError(t, err, "psp: request not applied (validation, status 422, code 14_030): adyen: 422 validation (code 14_030, psp reference 8516091485743033)")
}

// A capture's and a cancel's answers are classified as a refund's: the
// acknowledgement is an unknown outcome naming the modification, errors
// are a charge's, and one that never reached Adyen applied nothing.
func TestClassifyCaptureAndCancel(t *testing.T) {
	t.Parallel()

	for _, m := range []struct {
		op       psp.Op
		received answer
		id       string
	}{{psp.OpCapture, answerCaptureReceived, testCapturePSP}, {psp.OpCancel, answerCancelReceived, testCancelPSP}} {
		for _, tc := range []struct {
			name string
			a    psp.Attempt
			want want
		}{
			{"201 received is acknowledged, not settled", answered(m.op, m.received),
				want{kind: psp.ErrUnknownOutcome, reason: string(m.op) + "_received", providerID: m.id}},
			{"201 of a status the description does not allow", answered(m.op, answer{201, fmt.Sprintf(`{"pspReference":%q,"status":"captured"}`, m.id), false}),
				want{kind: psp.ErrUnknownOutcome, reason: "unknown_status", providerID: m.id}},
			{"201 without a pspReference", answered(m.op, answer{201, `{"status":"received"}`, false}),
				want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
			{"a payment's answer is not a modification's", answered(m.op, answerAuthorised),
				want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
			{"422 validation", answered(m.op, answer422Validation), want{kind: psp.ErrNotApplied, reason: "validation", providerCode: "14_030"}},
			{"422 704", answered(m.op, answer422InProgress), want{kind: psp.ErrUnknownOutcome, reason: "idempotency_key_in_use", providerCode: "704"}},
			{"500", answered(m.op, answer500), want{kind: psp.ErrUnknownOutcome, reason: "status_500", providerCode: "905"}},
			{"connection refused", psp.Attempt{Op: m.op, Err: refused}, want{kind: psp.ErrNotApplied, reason: "connection_refused"}},
			{"timeout once connected", psp.Attempt{Op: m.op, GotConn: true, WroteRequest: true, Err: ctxDeadline},
				want{kind: psp.ErrUnknownOutcome, reason: "timeout", wraps: context.DeadlineExceeded}},
			{"201 cut off", psp.Attempt{Op: m.op, GotConn: true, WroteRequest: true, StatusCode: 201, Err: reset},
				want{kind: psp.ErrUnknownOutcome, reason: "body_read_failed"}},
		} {
			t.Run(string(m.op)+" "+tc.name, func(t *testing.T) {
				t.Parallel()
				requireClassified(t, tc.a, tc.want)
			})
		}
	}
}
