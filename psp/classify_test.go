package psp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/psp"
)

func TestClassify(t *testing.T) {
	t.Parallel()

	// The errors below are shaped the way net/http returns them: wrapped in
	// *url.Error and, for socket errors, *net.OpError.
	urlErr := func(err error) error { return &url.Error{Op: "Post", URL: "http://psp/v1/charges", Err: err} }
	opErr := func(op string, err error) error { return urlErr(&net.OpError{Op: op, Net: "tcp", Err: err}) }

	var (
		refused       = opErr("dial", os.NewSyscallError("connect", syscall.ECONNREFUSED))
		dnsFailed     = opErr("dial", &net.DNSError{Err: "no such host", Name: "psp.invalid", IsNotFound: true})
		dialTimeout   = opErr("dial", os.ErrDeadlineExceeded)
		ctxDeadline   = urlErr(context.DeadlineExceeded)
		ctxCanceled   = urlErr(context.Canceled)
		unreachable   = opErr("dial", os.NewSyscallError("connect", syscall.EHOSTUNREACH))
		reset         = opErr("read", os.NewSyscallError("read", syscall.ECONNRESET))
		eof           = urlErr(io.EOF)
		closedIdle    = urlErr(errors.New("http: server closed idle connection"))
		brokenPipe    = opErr("write", os.NewSyscallError("write", syscall.EPIPE))
		readTimeout   = opErr("read", os.ErrDeadlineExceeded)
		unexpectedEOF = io.ErrUnexpectedEOF
	)

	const (
		okBody       = `{"id":"py_1","status":"succeeded","amount":1000,"currency":"USD","reference":"ch_1"}`
		declineBody  = `{"id":"py_2","status":"failed","amount":1000,"currency":"USD","reference":"ch_1","decline_code":"insufficient_funds"}`
		notFoundBody = `{"error":{"code":"charge_not_found","message":"no charge for this key"}}`
		reusedBody   = `{"error":{"code":"idempotency_key_reused"}}`
	)

	type want struct {
		charge       psp.Charge
		kind         error // nil for a charge; ErrNotApplied, ErrUnknownOutcome or ErrNotFound
		reason       string
		providerCode string
		wraps        error // an underlying error errors.Is must still find
	}

	sent := func(a psp.Attempt) psp.Attempt { a.GotConn, a.WroteRequest = true, true; return a }
	answered := func(op psp.Op, status int, body string) psp.Attempt {
		return sent(psp.Attempt{Op: op, StatusCode: status, Body: []byte(body)})
	}

	tests := []struct {
		name    string
		attempt psp.Attempt
		want    want
	}{
		// A decline is a value.
		{"charge succeeded", answered(psp.OpCharge, 200, okBody), want{charge: psp.Charge{ID: "py_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "USD", Reference: "ch_1"}}},
		{"charge declined is a value", answered(psp.OpCharge, 200, declineBody), want{charge: psp.Charge{ID: "py_2", Status: psp.StatusFailed, Amount: 1000, Currency: "USD", Reference: "ch_1", DeclineCode: "insufficient_funds"}}},
		{"charge 201 with a charge", answered(psp.OpCharge, 201, okBody), want{charge: psp.Charge{ID: "py_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "USD", Reference: "ch_1"}}},
		{"lookup found", answered(psp.OpLookup, 200, okBody), want{charge: psp.Charge{ID: "py_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "USD", Reference: "ch_1"}}},
		{"lookup found a decline", answered(psp.OpLookup, 200, declineBody), want{charge: psp.Charge{ID: "py_2", Status: psp.StatusFailed, Amount: 1000, Currency: "USD", Reference: "ch_1", DeclineCode: "insufficient_funds"}}},

		// Provably not applied: no connection was ever obtained.
		{"connection refused", psp.Attempt{Op: psp.OpCharge, Err: refused}, want{kind: psp.ErrNotApplied, reason: "connection_refused", wraps: syscall.ECONNREFUSED}},
		{"dns failure", psp.Attempt{Op: psp.OpCharge, Err: dnsFailed}, want{kind: psp.ErrNotApplied, reason: "dns_failed"}},
		{"dial timeout", psp.Attempt{Op: psp.OpCharge, Err: dialTimeout}, want{kind: psp.ErrNotApplied, reason: "dial_timeout", wraps: os.ErrDeadlineExceeded}},
		{"deadline while dialing", psp.Attempt{Op: psp.OpCharge, Err: ctxDeadline}, want{kind: psp.ErrNotApplied, reason: "dial_timeout", wraps: context.DeadlineExceeded}},
		{"canceled while dialing", psp.Attempt{Op: psp.OpCharge, Err: ctxCanceled}, want{kind: psp.ErrNotApplied, reason: "canceled", wraps: context.Canceled}},
		{"host unreachable", psp.Attempt{Op: psp.OpCharge, Err: unreachable}, want{kind: psp.ErrNotApplied, reason: "dial_failed", wraps: syscall.EHOSTUNREACH}},

		// Provably not applied: the provider refused before processing.
		{"charge 429", answered(psp.OpCharge, 429, `{"error":{"code":"rate_limited"}}`), want{kind: psp.ErrNotApplied, reason: "status_429", providerCode: "rate_limited"}},
		{"charge 400", answered(psp.OpCharge, 400, `{"error":{"code":"parameter_invalid"}}`), want{kind: psp.ErrNotApplied, reason: "status_400", providerCode: "parameter_invalid"}},
		{"charge 401", answered(psp.OpCharge, 401, ``), want{kind: psp.ErrNotApplied, reason: "status_401"}},
		{"charge 403", answered(psp.OpCharge, 403, ``), want{kind: psp.ErrNotApplied, reason: "status_403"}},
		{"charge 404", answered(psp.OpCharge, 404, `404 page not found`), want{kind: psp.ErrNotApplied, reason: "status_404"}},
		{"charge 405", answered(psp.OpCharge, 405, ``), want{kind: psp.ErrNotApplied, reason: "status_405"}},
		{"charge 413", answered(psp.OpCharge, 413, ``), want{kind: psp.ErrNotApplied, reason: "status_413"}},
		{"charge 415", answered(psp.OpCharge, 415, ``), want{kind: psp.ErrNotApplied, reason: "status_415"}},
		{"charge 429 with unreadable body", func() psp.Attempt {
			a := answered(psp.OpCharge, 429, ``)
			a.Err = unexpectedEOF
			return a
		}(), want{kind: psp.ErrNotApplied, reason: "status_429", wraps: io.ErrUnexpectedEOF}},

		// Unknown: the connection was obtained, then no answer.
		{"timeout after connecting", psp.Attempt{Op: psp.OpCharge, GotConn: true, Err: ctxDeadline}, want{kind: psp.ErrUnknownOutcome, reason: "timeout", wraps: context.DeadlineExceeded}},
		{"timeout after sending", sent(psp.Attempt{Op: psp.OpCharge, Err: ctxDeadline}), want{kind: psp.ErrUnknownOutcome, reason: "timeout", wraps: context.DeadlineExceeded}},
		{"read deadline after sending", sent(psp.Attempt{Op: psp.OpCharge, Err: readTimeout}), want{kind: psp.ErrUnknownOutcome, reason: "timeout"}},
		{"canceled after sending", sent(psp.Attempt{Op: psp.OpCharge, Err: ctxCanceled}), want{kind: psp.ErrUnknownOutcome, reason: "canceled", wraps: context.Canceled}},
		{"reset after sending", sent(psp.Attempt{Op: psp.OpCharge, Err: reset}), want{kind: psp.ErrUnknownOutcome, reason: "reset_after_send", wraps: syscall.ECONNRESET}},
		{"eof after sending", sent(psp.Attempt{Op: psp.OpCharge, Err: eof}), want{kind: psp.ErrUnknownOutcome, reason: "reset_after_send", wraps: io.EOF}},
		{"server closed idle connection after sending", sent(psp.Attempt{Op: psp.OpCharge, Err: closedIdle}), want{kind: psp.ErrUnknownOutcome, reason: "reset_after_send"}},
		{"write failed on an obtained connection", psp.Attempt{Op: psp.OpCharge, GotConn: true, Err: brokenPipe}, want{kind: psp.ErrUnknownOutcome, reason: "write_failed", wraps: syscall.EPIPE}},

		// Unknown: the provider answered, but not with a charge.
		{"charge 500", answered(psp.OpCharge, 500, `{"error":{"code":"internal_error"}}`), want{kind: psp.ErrUnknownOutcome, reason: "status_500", providerCode: "internal_error"}},
		{"charge 502", answered(psp.OpCharge, 502, `bad gateway`), want{kind: psp.ErrUnknownOutcome, reason: "status_502"}},
		{"charge 503", answered(psp.OpCharge, 503, ``), want{kind: psp.ErrUnknownOutcome, reason: "status_503"}},
		{"charge 504", answered(psp.OpCharge, 504, ``), want{kind: psp.ErrUnknownOutcome, reason: "status_504"}},
		{"charge 408", answered(psp.OpCharge, 408, ``), want{kind: psp.ErrUnknownOutcome, reason: "status_408"}},
		{"charge 409 key conflict", answered(psp.OpCharge, 409, reusedBody), want{kind: psp.ErrUnknownOutcome, reason: "status_409", providerCode: "idempotency_key_reused"}},
		{"charge 422 key conflict", answered(psp.OpCharge, 422, reusedBody), want{kind: psp.ErrUnknownOutcome, reason: "status_422", providerCode: "idempotency_key_reused"}},
		{"charge 402 unlisted 4xx", answered(psp.OpCharge, 402, ``), want{kind: psp.ErrUnknownOutcome, reason: "status_402"}},
		{"charge 302 redirect", answered(psp.OpCharge, 302, ``), want{kind: psp.ErrUnknownOutcome, reason: "status_302"}},
		{"charge 200 not json", answered(psp.OpCharge, 200, `<html>ok</html>`), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"charge 200 empty body", answered(psp.OpCharge, 200, ``), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"charge 200 truncated json", answered(psp.OpCharge, 200, okBody[:30]), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"charge 200 without id", answered(psp.OpCharge, 200, `{"status":"succeeded","amount":1000}`), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"charge 200 without status", answered(psp.OpCharge, 200, `{"id":"py_1","amount":1000}`), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"charge 200 unknown status", answered(psp.OpCharge, 200, `{"id":"py_1","status":"pending"}`), want{kind: psp.ErrUnknownOutcome, reason: "unknown_status"}},
		{"charge 200 body cut off", func() psp.Attempt {
			a := answered(psp.OpCharge, 200, okBody[:30])
			a.Err = unexpectedEOF
			return a
		}(), want{kind: psp.ErrUnknownOutcome, reason: "body_read_failed", wraps: io.ErrUnexpectedEOF}},
		{"charge 200 body timed out", func() psp.Attempt {
			a := answered(psp.OpCharge, 200, okBody[:30])
			a.Err = ctxDeadline
			return a
		}(), want{kind: psp.ErrUnknownOutcome, reason: "timeout", wraps: context.DeadlineExceeded}},

		// Lookup: ErrNotFound only on proof; never ErrNotApplied.
		{"lookup 404 charge_not_found", answered(psp.OpLookup, 404, notFoundBody), want{kind: psp.ErrNotFound}},
		{"lookup bare 404", answered(psp.OpLookup, 404, `404 page not found`), want{kind: psp.ErrUnknownOutcome, reason: "status_404"}},
		{"lookup 404 other code", answered(psp.OpLookup, 404, `{"error":{"code":"route_not_found"}}`), want{kind: psp.ErrUnknownOutcome, reason: "status_404", providerCode: "route_not_found"}},
		{"lookup 404 body cut off", func() psp.Attempt {
			a := answered(psp.OpLookup, 404, notFoundBody)
			a.Err = unexpectedEOF
			return a
		}(), want{kind: psp.ErrUnknownOutcome, reason: "status_404", providerCode: psp.CodeChargeNotFound, wraps: io.ErrUnexpectedEOF}},
		{"lookup 500", answered(psp.OpLookup, 500, ``), want{kind: psp.ErrUnknownOutcome, reason: "status_500"}},
		{"lookup 503", answered(psp.OpLookup, 503, `{"error":{"code":"service_unavailable"}}`), want{kind: psp.ErrUnknownOutcome, reason: "status_503", providerCode: "service_unavailable"}},
		{"lookup 429", answered(psp.OpLookup, 429, ``), want{kind: psp.ErrUnknownOutcome, reason: "status_429"}},
		{"lookup 400", answered(psp.OpLookup, 400, ``), want{kind: psp.ErrUnknownOutcome, reason: "status_400"}},
		{"lookup connection refused", psp.Attempt{Op: psp.OpLookup, Err: refused}, want{kind: psp.ErrUnknownOutcome, reason: "connection_refused", wraps: syscall.ECONNREFUSED}},
		{"lookup timeout", sent(psp.Attempt{Op: psp.OpLookup, Err: ctxDeadline}), want{kind: psp.ErrUnknownOutcome, reason: "timeout"}},
		{"lookup malformed body", answered(psp.OpLookup, 200, `{}`), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			charge, err := psp.Classify(tt.attempt)
			if tt.want.kind == nil {
				require.NoError(t, err)
				require.Equal(t, tt.want.charge, charge)
				return
			}

			require.Equal(t, psp.Charge{}, charge)
			requireClassifiedError(t, tt.attempt, err, tt.want.kind, tt.want.reason, tt.want.providerCode, tt.want.wraps)
		})
	}
}

// requireClassifiedError checks the error a classifier made of a: a bare
// ErrNotFound, or an *Error of exactly kind with reason, a's status,
// providerCode and, when set, wrapping wraps.
func requireClassifiedError(t *testing.T, a psp.Attempt, err, kind error, reason, providerCode string, wraps error) {
	t.Helper()

	require.ErrorIs(t, err, kind)
	if kind == psp.ErrNotFound {
		require.Equal(t, psp.ErrNotFound, err, "a bare ErrNotFound")
		return
	}
	requireKindExclusive(t, err, kind)

	var pspErr *psp.Error
	require.ErrorAs(t, err, &pspErr)
	require.Equal(t, reason, pspErr.Reason)
	require.Equal(t, a.StatusCode, pspErr.StatusCode)
	require.Equal(t, providerCode, pspErr.ProviderCode)
	if wraps != nil {
		require.ErrorIs(t, err, wraps)
	}
}

// requireKindExclusive checks that err is of exactly one kind: a caller that
// asks "was it applied?" must never get two answers.
func requireKindExclusive(t *testing.T, err error, kind error) {
	t.Helper()

	for _, other := range []error{psp.ErrNotApplied, psp.ErrUnknownOutcome, psp.ErrNotFound} {
		if other != kind {
			require.NotErrorIs(t, err, other)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	t.Parallel()

	err := &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "status_409", StatusCode: 409, ProviderCode: "idempotency_key_reused"}
	require.Equal(t, "psp: outcome unknown (status_409, code idempotency_key_reused)", err.Error())

	err = &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "malformed_body", StatusCode: 200, Err: fmt.Errorf("unexpected end of JSON input")}
	require.Equal(t, "psp: outcome unknown (malformed_body, status 200): unexpected end of JSON input", err.Error())

	err = &psp.Error{Kind: psp.ErrNotApplied, Reason: "connection_refused", Err: syscall.ECONNREFUSED}
	require.Equal(t, "psp: request not applied (connection_refused): connection refused", err.Error())
}

// A refund is classified by a charge's rules, with one more: the fake's 409
// refund_exceeds_charge and charge_not_refundable are a failed refund.
func TestClassifyRefund(t *testing.T) {
	t.Parallel()

	urlErr := func(err error) error { return &url.Error{Op: "Post", URL: "http://psp/v1/refunds", Err: err} }
	var (
		refused     = urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
		ctxDeadline = urlErr(context.DeadlineExceeded)
		reset       = urlErr(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)})
	)
	const (
		okBody       = `{"id":"rf_1","status":"succeeded","charge":"py_1","amount":500,"currency":"USD","reference":"re_1","created_at":"2030-01-01T00:00:00Z"}`
		failedBody   = `{"id":"rf_2","status":"failed","charge":"py_1","amount":500,"currency":"USD","reference":"re_1","failure_code":"expired_or_canceled_card"}`
		exceedsBody  = `{"error":{"code":"refund_exceeds_charge","message":"refund exceeds what is left of the charge"}}`
		notRefBody   = `{"error":{"code":"charge_not_refundable","message":"no such charge"}}`
		notFoundBody = `{"error":{"code":"refund_not_found","message":"no refund for this key"}}`
	)
	succeeded := psp.Refund{ID: "rf_1", Status: psp.StatusSucceeded, Charge: "py_1", Amount: 500, Currency: "USD", Reference: "re_1"}
	failed := psp.Refund{ID: "rf_2", Status: psp.StatusFailed, Charge: "py_1", Amount: 500, Currency: "USD", Reference: "re_1", FailureCode: "expired_or_canceled_card"}

	sent := func(a psp.Attempt) psp.Attempt { a.GotConn, a.WroteRequest = true, true; return a }
	answered := func(op psp.Op, status int, body string) psp.Attempt {
		return sent(psp.Attempt{Op: op, StatusCode: status, Body: []byte(body)})
	}
	cutOff := func(a psp.Attempt) psp.Attempt { a.Err = io.ErrUnexpectedEOF; return a }

	type want struct {
		refund       psp.Refund
		kind         error
		reason       string
		providerCode string
	}
	tests := []struct {
		name    string
		attempt psp.Attempt
		want    want
	}{
		// Values: a refund, succeeded or failed; a refusal is a failed refund.
		{"refund succeeded", answered(psp.OpRefund, 200, okBody), want{refund: succeeded}},
		{"refund failed is a value", answered(psp.OpRefund, 200, failedBody), want{refund: failed}},
		{"409 refund_exceeds_charge is a refusal", answered(psp.OpRefund, 409, exceedsBody), want{refund: psp.Refund{Status: psp.StatusFailed, FailureCode: "refund_exceeds_charge"}}},
		{"409 charge_not_refundable is a refusal", answered(psp.OpRefund, 409, notRefBody), want{refund: psp.Refund{Status: psp.StatusFailed, FailureCode: "charge_not_refundable"}}},
		{"lookup found", answered(psp.OpRefundLookup, 200, okBody), want{refund: succeeded}},
		{"lookup found a failed refund", answered(psp.OpRefundLookup, 200, failedBody), want{refund: failed}},

		// Not applied: nothing reached the provider, or it refused first.
		{"connection refused", psp.Attempt{Op: psp.OpRefund, Err: refused}, want{kind: psp.ErrNotApplied, reason: "connection_refused"}},
		{"deadline while dialing", psp.Attempt{Op: psp.OpRefund, Err: ctxDeadline}, want{kind: psp.ErrNotApplied, reason: "dial_timeout"}},
		{"429", answered(psp.OpRefund, 429, `{"error":{"code":"rate_limited"}}`), want{kind: psp.ErrNotApplied, reason: "status_429", providerCode: "rate_limited"}},
		{"400", answered(psp.OpRefund, 400, `{"error":{"code":"parameter_invalid"}}`), want{kind: psp.ErrNotApplied, reason: "status_400", providerCode: "parameter_invalid"}},
		{"401", answered(psp.OpRefund, 401, ``), want{kind: psp.ErrNotApplied, reason: "status_401"}},
		{"403", answered(psp.OpRefund, 403, ``), want{kind: psp.ErrNotApplied, reason: "status_403"}},
		{"404 a route the provider lacks", answered(psp.OpRefund, 404, `404 page not found`), want{kind: psp.ErrNotApplied, reason: "status_404"}},
		{"405", answered(psp.OpRefund, 405, ``), want{kind: psp.ErrNotApplied, reason: "status_405"}},
		{"413", answered(psp.OpRefund, 413, ``), want{kind: psp.ErrNotApplied, reason: "status_413"}},
		{"415", answered(psp.OpRefund, 415, ``), want{kind: psp.ErrNotApplied, reason: "status_415"}},

		// Unknown: the provider may have refunded.
		{"timeout after sending", sent(psp.Attempt{Op: psp.OpRefund, Err: ctxDeadline}), want{kind: psp.ErrUnknownOutcome, reason: "timeout"}},
		{"reset after sending", sent(psp.Attempt{Op: psp.OpRefund, Err: reset}), want{kind: psp.ErrUnknownOutcome, reason: "reset_after_send"}},
		{"409 key reused", answered(psp.OpRefund, 409, `{"error":{"code":"idempotency_key_reused"}}`), want{kind: psp.ErrUnknownOutcome, reason: "status_409", providerCode: "idempotency_key_reused"}},
		{"409 key in use", answered(psp.OpRefund, 409, `{"error":{"code":"idempotency_key_in_use"}}`), want{kind: psp.ErrUnknownOutcome, reason: "status_409", providerCode: "idempotency_key_in_use"}},
		{"bare 409", answered(psp.OpRefund, 409, ``), want{kind: psp.ErrUnknownOutcome, reason: "status_409"}},
		{"409 refusal code outside the error object proves nothing", answered(psp.OpRefund, 409, `{"code":"refund_exceeds_charge"}`), want{kind: psp.ErrUnknownOutcome, reason: "status_409"}},
		{"409 refusal cut off proves nothing", cutOff(answered(psp.OpRefund, 409, exceedsBody)), want{kind: psp.ErrUnknownOutcome, reason: "status_409", providerCode: "refund_exceeds_charge"}},
		{"422 with a refusal code", answered(psp.OpRefund, 422, exceedsBody), want{kind: psp.ErrUnknownOutcome, reason: "status_422", providerCode: "refund_exceeds_charge"}},
		{"500", answered(psp.OpRefund, 500, `{"error":{"code":"internal_error"}}`), want{kind: psp.ErrUnknownOutcome, reason: "status_500", providerCode: "internal_error"}},
		{"503", answered(psp.OpRefund, 503, ``), want{kind: psp.ErrUnknownOutcome, reason: "status_503"}},
		{"302", answered(psp.OpRefund, 302, ``), want{kind: psp.ErrUnknownOutcome, reason: "status_302"}},
		{"200 pending", answered(psp.OpRefund, 200, `{"id":"rf_1","status":"pending"}`), want{kind: psp.ErrUnknownOutcome, reason: "unknown_status"}},
		{"200 without id", answered(psp.OpRefund, 200, `{"status":"succeeded"}`), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"200 not json", answered(psp.OpRefund, 200, `<html>ok</html>`), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
		{"200 body cut off", cutOff(answered(psp.OpRefund, 200, okBody[:30])), want{kind: psp.ErrUnknownOutcome, reason: "body_read_failed"}},

		// A lookup: not found only on refund_not_found; never not applied.
		{"lookup 404 refund_not_found", answered(psp.OpRefundLookup, 404, notFoundBody), want{kind: psp.ErrNotFound}},
		{"lookup 404 charge_not_found proves nothing of a refund", answered(psp.OpRefundLookup, 404, `{"error":{"code":"charge_not_found"}}`), want{kind: psp.ErrUnknownOutcome, reason: "status_404", providerCode: "charge_not_found"}},
		{"lookup bare 404", answered(psp.OpRefundLookup, 404, `404 page not found`), want{kind: psp.ErrUnknownOutcome, reason: "status_404"}},
		{"lookup 404 cut off", cutOff(answered(psp.OpRefundLookup, 404, notFoundBody)), want{kind: psp.ErrUnknownOutcome, reason: "status_404", providerCode: "refund_not_found"}},
		{"lookup 409 refusal code is no refusal", answered(psp.OpRefundLookup, 409, exceedsBody), want{kind: psp.ErrUnknownOutcome, reason: "status_409", providerCode: "refund_exceeds_charge"}},
		{"lookup 429", answered(psp.OpRefundLookup, 429, ``), want{kind: psp.ErrUnknownOutcome, reason: "status_429"}},
		{"lookup 400", answered(psp.OpRefundLookup, 400, ``), want{kind: psp.ErrUnknownOutcome, reason: "status_400"}},
		{"lookup 500", answered(psp.OpRefundLookup, 500, ``), want{kind: psp.ErrUnknownOutcome, reason: "status_500"}},
		{"lookup connection refused", psp.Attempt{Op: psp.OpRefundLookup, Err: refused}, want{kind: psp.ErrUnknownOutcome, reason: "connection_refused"}},
		{"lookup malformed body", answered(psp.OpRefundLookup, 200, `{}`), want{kind: psp.ErrUnknownOutcome, reason: "malformed_body"}},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			refund, err := psp.ClassifyRefund(tt.attempt)
			if tt.want.kind == nil {
				require.NoError(t, err)
				require.Equal(t, tt.want.refund, refund)
				return
			}

			require.Equal(t, psp.Refund{}, refund)
			requireClassifiedError(t, tt.attempt, err, tt.want.kind, tt.want.reason, tt.want.providerCode, nil)
		})
	}
}

// A charge's lookup is not settled by a refund's not-found code, nor a
// charge by a refusal code: each op reads its own codes.
func TestClassifyKeepsChargesAndRefundsApart(t *testing.T) {
	t.Parallel()

	lookup := psp.Attempt{Op: psp.OpLookup, GotConn: true, WroteRequest: true, StatusCode: 404, Body: []byte(`{"error":{"code":"refund_not_found"}}`)}
	_, err := psp.Classify(lookup)
	require.ErrorIs(t, err, psp.ErrUnknownOutcome)

	charge := psp.Attempt{Op: psp.OpCharge, GotConn: true, WroteRequest: true, StatusCode: 409, Body: []byte(`{"error":{"code":"refund_exceeds_charge"}}`)}
	_, err = psp.Classify(charge)
	require.ErrorIs(t, err, psp.ErrUnknownOutcome)

	require.True(t, psp.OpCharge.Applies())
	require.True(t, psp.OpRefund.Applies())
	require.False(t, psp.OpLookup.Applies())
	require.False(t, psp.OpRefundLookup.Applies())
}

func TestRefusedEchoesTheRequest(t *testing.T) {
	t.Parallel()

	req := psp.RefundRequest{Key: "rk_1", Charge: "py_1", Amount: 500, Currency: "EUR", Reference: "re_1", Reason: "duplicate", Tag: "tn_1"}
	require.Equal(t, psp.Refund{Status: psp.StatusFailed, Charge: "py_1", Amount: 500, Currency: "EUR", Reference: "re_1", FailureCode: "refund_exceeds_charge"},
		req.Refused("refund_exceeds_charge"))
}
