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

	"chargeflow/psp"
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
			require.ErrorIs(t, err, tt.want.kind)
			if tt.want.kind == psp.ErrNotFound {
				require.NotErrorIs(t, err, psp.ErrUnknownOutcome)
				return
			}
			requireKindExclusive(t, err, tt.want.kind)

			var pspErr *psp.Error
			require.ErrorAs(t, err, &pspErr)
			require.Equal(t, tt.want.reason, pspErr.Reason)
			require.Equal(t, tt.attempt.StatusCode, pspErr.StatusCode)
			require.Equal(t, tt.want.providerCode, pspErr.ProviderCode)
			if tt.want.wraps != nil {
				require.ErrorIs(t, err, tt.want.wraps)
			}
		})
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
