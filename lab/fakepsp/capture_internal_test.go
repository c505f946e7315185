package fakepsp

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/psp"
)

// coreClock is a clock the core's tests move by hand: nanoseconds since
// the epoch.
type coreClock struct{ unixNano atomic.Int64 }

func newCoreClock() *coreClock {
	c := &coreClock{}
	c.unixNano.Store(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *coreClock) Now() time.Time          { return time.Unix(0, c.unixNano.Load()).UTC() }
func (c *coreClock) Advance(d time.Duration) { c.unixNano.Add(int64(d)) }

// coreServer opens a server on path whose clock is clock.
func coreServer(t *testing.T, path string, clock *coreClock, window time.Duration) *Server {
	t.Helper()
	s, err := New(Config{LedgerPath: path, Now: clock.Now, HoldWindow: window})
	require.NoError(t, err)
	return s
}

// authorize applies a charge of amount to be captured later under key.
func authorize(t *testing.T, s *Server, key string, amount int64) *record {
	t.Helper()
	params := chargeParams{Amount: amount, Currency: "EUR", PaymentMethod: PaymentMethodVisa, Reference: "ch_" + key, CaptureLater: true}
	c, _, err := s.apply(request{key: key, reference: params.Reference, op: params, hash: "charge " + key, idPrefix: "py_"}, applyOptions{dedupe: true})
	require.NoError(t, err)
	return c
}

// settle applies a capture or cancel of charge under key; the hash is the
// request's fingerprint.
func settle(s *Server, key, hash string, params holdParams) (*record, bool, error) {
	return s.apply(request{key: key, reference: params.Reference, op: params, hash: hash, idPrefix: "op_"}, applyOptions{dedupe: true})
}

func TestHoldCapturedOnceReplayedAndDurable(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	clock := newCoreClock()
	s := coreServer(t, path, clock, time.Hour)

	charge := authorize(t, s, "pk_1", 1000)
	require.Equal(t, psp.StatusRequiresCapture, charge.Status)
	require.Equal(t, clock.Now().Add(time.Hour), charge.HoldExpiresAt)
	require.Equal(t, holdState{status: psp.StatusRequiresCapture, capturable: 1000}, charge.holdAt(clock.Now(), false))

	// Not refundable while held.
	refusal, _, err := s.apply(request{key: "rk_1", op: refundParams{Charge: charge.ID, Amount: 100, Reference: "re_1"}, hash: "r", idPrefix: "rf_"}, applyOptions{dedupe: true})
	require.NoError(t, err)
	require.Equal(t, chargeNotRefundable, refusal.FailureCode)

	capture := holdParams{Kind: kindCapture, Charge: charge.ID, Amount: 600, Reference: "cp_1"}
	captured, replayed, err := settle(s, "ck_1", "capture 600", capture)
	require.NoError(t, err)
	require.False(t, replayed)
	require.Equal(t, kindCapture, captured.Kind)
	require.Equal(t, holdState{status: psp.StatusSucceeded, captured: 600, settled: captured}, captured.leftHeld())

	// The same request again answers the first result; another body under
	// the key is refused; another key is refused as not capturable.
	again, replayed, err := settle(s, "ck_1", "capture 600", capture)
	require.NoError(t, err)
	require.True(t, replayed)
	require.Same(t, captured, again)
	_, _, err = settle(s, "ck_1", "capture 700", holdParams{Kind: kindCapture, Charge: charge.ID, Amount: 700})
	require.ErrorIs(t, err, errKeyReused)
	second, _, err := settle(s, "xk_1", "cancel", holdParams{Kind: kindCancel, Charge: charge.ID, Reference: "cx_1"})
	require.NoError(t, err)
	require.Equal(t, kindSavedError, second.Kind)
	require.Equal(t, chargeNotCapturable, second.FailureCode)
	require.Equal(t, kindCancel, second.Refused)
	require.Equal(t, psp.StatusSucceeded, second.HeldStatus)

	// A refund applies to what was captured.
	over, _, err := s.apply(request{key: "rk_2", op: refundParams{Charge: charge.ID, Amount: 601, Reference: "re_2"}, hash: "r2", idPrefix: "rf_"}, applyOptions{dedupe: true})
	require.NoError(t, err)
	require.Equal(t, refundExceedsCharge, over.FailureCode)
	require.Equal(t, int64(600), over.Refundable)

	// Past the window a captured charge stays captured.
	clock.Advance(2 * time.Hour)
	entries := s.Ledger(false)
	require.Len(t, entries, 1)
	require.Equal(t, psp.StatusSucceeded, entries[0].Status)
	require.Equal(t, int64(600), entries[0].AmountCaptured)
	require.Equal(t, int64(600), entries[0].Moved())
	require.Equal(t, []OperationEntry{captured.operationEntry()}, entries[0].Operations)
	audit := s.Audit()
	require.Equal(t, 1, audit.Captures)
	require.Equal(t, int64(600), audit.Totals[0].Amount)
	require.NoError(t, s.Close())

	// A restart reads the capture back, and its key's answer.
	reopened := coreServer(t, path, clock, 5*time.Hour)
	t.Cleanup(func() { require.NoError(t, reopened.Close()) })
	require.Equal(t, entries, reopened.Ledger(false))
	again, replayed, err = settle(reopened, "ck_1", "capture 600", capture)
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, captured.ID, again.ID)
	refused, replayed, err := settle(reopened, "xk_1", "cancel", holdParams{Kind: kindCancel, Charge: charge.ID, Reference: "cx_1"})
	require.NoError(t, err)
	require.True(t, replayed)
	require.Equal(t, chargeNotCapturable, refused.FailureCode)
}

func TestHoldExpiresAndRefusesCapture(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	clock := newCoreClock()
	s := coreServer(t, path, clock, time.Hour)

	charge := authorize(t, s, "pk_1", 1000)
	held := authorize(t, s, "pk_2", 500)
	_, _, err := settle(s, "xk_2", "cancel", holdParams{Kind: kindCancel, Charge: held.ID})
	require.NoError(t, err)

	clock.Advance(time.Hour - time.Nanosecond)
	require.Equal(t, psp.StatusRequiresCapture, charge.holdAt(clock.Now(), false).status)
	tooMuch, _, err := settle(s, "ck_0", "capture 1001", holdParams{Kind: kindCapture, Charge: charge.ID, Amount: 1001})
	require.NoError(t, err)
	require.Equal(t, captureExceedsAuthorization, tooMuch.FailureCode)
	require.Equal(t, int64(1000), tooMuch.Capturable)

	clock.Advance(time.Nanosecond)
	require.Equal(t, holdState{status: psp.StatusCanceled, canceledReason: canceledHoldExpired}, charge.holdAt(clock.Now(), false))
	late, _, err := settle(s, "ck_1", "capture", holdParams{Kind: kindCapture, Charge: charge.ID})
	require.NoError(t, err)
	require.Equal(t, kindSavedError, late.Kind)
	require.Equal(t, holdExpired, late.FailureCode)
	require.Equal(t, psp.StatusCanceled, late.HeldStatus)

	require.Empty(t, s.Ledger(false), "neither moved money")
	all := s.Ledger(true)
	require.Len(t, all, 2)
	require.Equal(t, canceledHoldExpired, all[0].CanceledReason)
	require.Equal(t, psp.StatusCanceled, all[1].Status)
	require.Equal(t, canceledRequested, all[1].CanceledReason)
	require.Equal(t, "cancel", all[1].Operations[0].Type)
	require.Equal(t, int64(500), all[1].Operations[0].Amount)
	audit := s.Audit()
	require.Equal(t, 1, audit.HoldsExpired)
	require.Equal(t, 1, audit.Cancels)
	require.Zero(t, audit.Held)
	require.Zero(t, audit.Charges)
	require.NoError(t, s.Close())

	// A restart under a longer window keeps each hold's own expiry.
	reopened := coreServer(t, path, clock, 24*time.Hour)
	t.Cleanup(func() { require.NoError(t, reopened.Close()) })
	require.Equal(t, all, reopened.Ledger(true))
}

// The ledger refuses a capture or cancel it could not have written.
func TestLedgerRefusesImpossibleOperations(t *testing.T) {
	t.Parallel()

	created := `{"id":"py_1","idempotency_key":"pk_1","reference":"ch_1","amount":100,"currency":"EUR","status":"requires_capture","tenant_tag":"","created_at":"2025-03-01T12:00:00Z","capture_later":true,"hold_expires_at":"2025-03-08T12:00:00Z","request_hash":"h"}`
	capture := `{"id":"op_1","idempotency_key":"ck_1","reference":"cp_1","amount":100,"currency":"EUR","status":"succeeded","tenant_tag":"","created_at":"2025-03-01T12:00:01Z","kind":"capture","charge":"py_1","request_hash":"h"}`
	for name, lines := range map[string][]string{
		"CaptureOfNoCharge":     {capture},
		"SecondCapture":         {created, capture, capture},
		"HeldWithoutExpiry":     {`{"id":"py_1","idempotency_key":"pk_1","amount":100,"currency":"EUR","status":"requires_capture","capture_later":true,"request_hash":"h"}`},
		"CapturedWithinCharge":  {`{"id":"py_1","idempotency_key":"pk_1","amount":100,"currency":"EUR","status":"succeeded","amount_captured":100,"request_hash":"h"}`},
		"CancelWithoutCanceled": {created, `{"id":"op_2","idempotency_key":"xk_1","status":"succeeded","kind":"cancel","charge":"py_1","request_hash":"h"}`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "ledger.jsonl")
			var data []byte
			for _, line := range lines {
				data = append(data, line+"\n"...)
			}
			require.NoError(t, os.WriteFile(path, data, 0o644))
			_, err := New(Config{LedgerPath: path})
			require.ErrorIs(t, err, ErrCorruptLedger)
		})
	}

	// The same lines, in order and once, read back.
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(created+"\n"+capture+"\n"), 0o644))
	s, err := New(Config{LedgerPath: path})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	entries := s.Ledger(false)
	require.Len(t, entries, 1)
	require.Equal(t, int64(100), entries[0].AmountCaptured)
}
