package scenario_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/scenario"
	"github.com/chargeflow/chargeflow/psp"
)

// The checker of held charges against the provider's ledger: a clean run of
// every way a hold ends passes, and each way one goes wrong is caught by
// the invariant that names it.
func TestCheckHolds(t *testing.T) {
	t.Parallel()

	authorizedAt := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	expiresAt := authorizedAt.Add(7 * 24 * time.Hour)

	// held is charge id authorized for 1000 and, in the database, in state
	// with captured taken.
	held := func(id, state string, captured int64) scenario.ChargeRow {
		return scenario.ChargeRow{ID: id, Kind: "charge", State: state, Amount: 1000, Currency: "EUR", CaptureLater: true,
			AmountCaptured: captured, ProviderKey: "cf_" + id, ProviderChargeID: "py_" + id}
	}
	// op is a capture (cp_…) or cancel (cx_…) row of charge parent.
	op := func(kind, id, parent, state string, amount int64) scenario.ChargeRow {
		r := scenario.ChargeRow{ID: id, Kind: kind, ParentID: parent, State: state, Amount: amount, Currency: "EUR", ProviderKey: "cf_" + id}
		if state == "succeeded" {
			r.ProviderChargeID = "py_" + parent
		}
		return r
	}
	// authorization is the provider's charge of row c, in status with its
	// operations.
	authorization := func(c scenario.ChargeRow, status string, captured int64, ops ...fakepsp.OperationEntry) fakepsp.LedgerEntry {
		return fakepsp.LedgerEntry{ID: "py_" + c.ID, Reference: c.ID, IdempotencyKey: c.ProviderKey, Amount: c.Amount, Currency: c.Currency,
			Status: psp.Status(status), CreatedAt: authorizedAt, CaptureLater: true, HoldExpiresAt: expiresAt, AmountCaptured: captured, Operations: ops}
	}
	// applied is the provider's capture or cancel of row o, at after the
	// authorization.
	applied := func(o scenario.ChargeRow, after time.Duration) fakepsp.OperationEntry {
		status := "succeeded"
		if o.Kind == "cancel" {
			status = "canceled"
		}
		return fakepsp.OperationEntry{ID: o.Kind[:3] + "_" + o.ID, Type: o.Kind, IdempotencyKey: o.ProviderKey, Reference: o.ID, Charge: "py_" + o.ParentID,
			Amount: o.Amount, Currency: o.Currency, Status: psp.Status(status), CreatedAt: authorizedAt.Add(after)}
	}
	inReview := func(r scenario.ChargeRow) scenario.ChargeRow {
		r.ReviewReason = "amount_mismatch"
		return r
	}
	invariants := func(violations []scenario.Violation) []string {
		var out []string
		for _, v := range violations {
			out = append(out, v.Invariant)
		}
		return out
	}

	captured, capture := held("a", "succeeded", 600), op("capture", "cp_a", "a", "succeeded", 600)
	canceled, cancel := held("b", "canceled", 0), op("cancel", "cx_b", "b", "succeeded", 1000)
	expired := held("c", "canceled", 0)
	stillHeld, failedCapture := held("d", "requires_capture", 0), op("capture", "cp_d", "d", "failed", 1000)
	refused := op("capture", "cp_b", "b", "failed", 1000) // after the cancel: charge_not_capturable

	clean := []scenario.ChargeRow{captured, capture, canceled, cancel, refused, expired, stillHeld, failedCapture}
	cleanLedger := func() []fakepsp.LedgerEntry {
		e := authorization(expired, "canceled", 0)
		e.CanceledReason = "hold_expired"
		return []fakepsp.LedgerEntry{
			authorization(captured, "succeeded", 600, applied(capture, time.Hour)),
			authorization(canceled, "canceled", 0, applied(cancel, time.Hour)),
			e,
			authorization(stillHeld, "requires_capture", 0),
		}
	}

	t.Run("EveryEnd", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, scenario.CheckLedger(clean, cleanLedger()))
	})

	// The Stripe protocol carries no reference on a capture or cancel: its
	// key names it.
	t.Run("OperationNamedByItsKey", func(t *testing.T) {
		t.Parallel()
		ledger := cleanLedger()
		ledger[0].Operations[0].Reference = ""
		require.Empty(t, scenario.CheckLedger(clean, ledger))
	})

	for name, tt := range map[string]struct {
		rows       []scenario.ChargeRow
		ledger     []fakepsp.LedgerEntry
		invariants []string
	}{
		// What the negative control does: the capture sent again with its
		// key, and applied again by a provider that captures in parts.
		"CapturedTwice": {[]scenario.ChargeRow{held("a", "requires_capture", 0), inReview(op("capture", "cp_a", "a", "needs_review", 300))},
			[]fakepsp.LedgerEntry{authorization(captured, "succeeded", 600,
				applied(op("capture", "cp_a", "a", "", 300), time.Hour), applied(op("capture", "cp_a", "a", "", 300), 2*time.Hour))},
			[]string{scenario.InvariantAtMostOnce, scenario.InvariantCapturedOnce, scenario.InvariantHoldMatches}},
		"TwoCapturesSucceeded": {[]scenario.ChargeRow{captured, capture, op("capture", "cp_a2", "a", "succeeded", 600)},
			[]fakepsp.LedgerEntry{authorization(captured, "succeeded", 600, applied(capture, time.Hour))},
			[]string{scenario.InvariantCapturedOnce, scenario.InvariantSucceededCharged}},
		"BeyondTheAuthorization": {[]scenario.ChargeRow{held("a", "succeeded", 1200), op("capture", "cp_a", "a", "succeeded", 1200)},
			[]fakepsp.LedgerEntry{authorization(captured, "succeeded", 1200, applied(op("capture", "cp_a", "a", "", 1200), time.Hour))},
			[]string{scenario.InvariantCaptureWithinAuth, scenario.InvariantCaptureWithinAuth, scenario.InvariantCaptureWithinAuth}},
		"CapturedAfterTheHoldExpired": {[]scenario.ChargeRow{captured, capture},
			[]fakepsp.LedgerEntry{authorization(captured, "succeeded", 600, applied(capture, 8*24*time.Hour))},
			[]string{scenario.InvariantNoCaptureAfterRelease}},
		"CapturedAfterTheCancel": {[]scenario.ChargeRow{canceled, cancel},
			[]fakepsp.LedgerEntry{authorization(canceled, "canceled", 0, applied(cancel, time.Hour), applied(op("capture", "cp_b", "b", "", 1000), 2*time.Hour))},
			[]string{scenario.InvariantNoCaptureAfterRelease, scenario.InvariantNoOrphans}},
		"CaptureSucceededOfAReleasedCharge": {[]scenario.ChargeRow{canceled, op("capture", "cp_b", "b", "succeeded", 1000)},
			[]fakepsp.LedgerEntry{authorization(canceled, "canceled", 0, applied(op("capture", "cp_b", "b", "", 1000), time.Hour))},
			[]string{scenario.InvariantNoCaptureAfterRelease}},
		"HeldButReleasedThere": {[]scenario.ChargeRow{stillHeld},
			[]fakepsp.LedgerEntry{authorization(stillHeld, "canceled", 0)},
			[]string{scenario.InvariantHoldMatches}},
		"ReleasedButHeldThere": {[]scenario.ChargeRow{canceled},
			[]fakepsp.LedgerEntry{authorization(canceled, "requires_capture", 0)},
			[]string{scenario.InvariantHoldMatches}},
		"CapturedOtherwiseThere": {[]scenario.ChargeRow{captured, capture},
			[]fakepsp.LedgerEntry{authorization(captured, "succeeded", 1000, applied(op("capture", "cp_a", "a", "", 1000), time.Hour))},
			[]string{scenario.InvariantHoldMatches, scenario.InvariantSucceededCharged}},
		"FailedCaptureApplied": {[]scenario.ChargeRow{held("d", "requires_capture", 0), failedCapture},
			[]fakepsp.LedgerEntry{authorization(stillHeld, "succeeded", 1000, applied(failedCapture, time.Hour))},
			[]string{scenario.InvariantHoldMatches, scenario.InvariantFailedUncharged}},
		"SucceededCaptureNotApplied": {[]scenario.ChargeRow{captured, capture},
			[]fakepsp.LedgerEntry{authorization(captured, "requires_capture", 0)},
			[]string{scenario.InvariantHoldMatches, scenario.InvariantSucceededCharged}},
		"OrphanCancel": {[]scenario.ChargeRow{stillHeld},
			[]fakepsp.LedgerEntry{authorization(stillHeld, "canceled", 0, applied(op("cancel", "cx_z", "d", "", 1000), time.Hour))},
			[]string{scenario.InvariantHoldMatches, scenario.InvariantNoOrphans}},
		"AuthorizedTwice": {[]scenario.ChargeRow{stillHeld},
			[]fakepsp.LedgerEntry{authorization(stillHeld, "requires_capture", 0), authorization(stillHeld, "requires_capture", 0)},
			[]string{scenario.InvariantAtMostOnce, scenario.InvariantHoldMatches}},
		"DeclinedButHeld": {[]scenario.ChargeRow{held("d", "failed", 0)},
			[]fakepsp.LedgerEntry{authorization(stillHeld, "requires_capture", 0)},
			[]string{scenario.InvariantFailedUncharged}},
		"SucceededCancelOfAHeldCharge": {[]scenario.ChargeRow{held("b", "requires_capture", 0), cancel},
			[]fakepsp.LedgerEntry{authorization(canceled, "requires_capture", 0)},
			[]string{scenario.InvariantHoldMatches, scenario.InvariantSucceededCharged}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			violations := scenario.CheckLedger(tt.rows, tt.ledger)
			require.ElementsMatch(t, tt.invariants, invariants(violations), "%v", violations)
		})
	}
}
