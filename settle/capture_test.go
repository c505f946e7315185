package settle_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/settle"
)

// A charge captured later reads the provider's hold, its release and
// anything else as the table of docs/capture.md says; a charge captured at
// once never settles on a hold.
func TestMovesOfAChargeCapturedLater(t *testing.T) {
	t.Parallel()
	later := intent.Charge{TenantID: "tn_1", ID: "ch_1", Amount: 1000, Currency: "USD", CaptureLater: true}
	atOnce := later
	atOnce.CaptureLater = false
	answer := func(status psp.Status) psp.Charge {
		return psp.Charge{ID: "py_1", Status: status, Amount: 1000, Currency: "USD", Reference: "ch_1"}
	}
	for _, tc := range []struct {
		name    string
		charge  intent.Charge
		answer  psp.Charge
		outcome settle.Outcome
		to      intent.State
	}{
		{"Held", later, answer(psp.StatusRequiresCapture), settle.Authorized, intent.StateRequiresCapture},
		{"Released", later, answer(psp.StatusCanceled), settle.Released, intent.StateCanceled},
		{"Declined", later, answer(psp.StatusFailed), settle.Declined, intent.StateFailed},
		{"CapturedUnasked", later, answer(psp.StatusSucceeded), settle.Mismatch, intent.StateNeedsReview},
		{"HeldUnasked", atOnce, answer(psp.StatusRequiresCapture), settle.Mismatch, intent.StateNeedsReview},
		{"ReleasedUnasked", atOnce, answer(psp.StatusCanceled), settle.Mismatch, intent.StateNeedsReview},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := intent.Move{TenantID: "tn_1", ChargeID: "ch_1", From: intent.StateUnknown, Actor: "me"}
			moves, outcome := settle.Moves(base, tc.charge, tc.answer, settle.Lookup)
			require.Equal(t, tc.outcome, outcome)
			require.Len(t, moves, 1)
			require.Equal(t, tc.to, moves[0].To)
			require.True(t, intent.CanMove(moves[0].From, moves[0].To))
			if tc.to == intent.StateRequiresCapture || tc.to == intent.StateCanceled {
				require.Equal(t, "py_1", moves[0].ProviderChargeID, "a hold is named by the provider")
			}
		})
	}
}

// A capture or cancel settles on what the provider says of the held
// charge: exactly the operation done, the operation refused, or a person's
// to look at.
func TestOperationMoves(t *testing.T) {
	t.Parallel()
	capture := intent.Charge{TenantID: "tn_1", ID: "cp_1", Kind: intent.KindCapture, ParentID: "ch_1", Amount: 600, Currency: "USD"}
	cancel := intent.Charge{TenantID: "tn_1", ID: "cx_1", Kind: intent.KindCancel, ParentID: "ch_1", Amount: 1000, Currency: "USD"}
	held := func(status psp.Status, captured int64, code string) psp.Charge {
		return psp.Charge{ID: "py_1", Status: status, Amount: 1000, AmountCaptured: captured, Currency: "USD",
			Reference: "ch_1", DeclineCode: code}
	}
	for _, tc := range []struct {
		name    string
		op      intent.Charge
		answer  psp.Charge
		outcome settle.Outcome
		to      intent.State
		code    string
	}{
		{"CaptureTaken", capture, held(psp.StatusSucceeded, 600, ""), settle.Succeeded, intent.StateSucceeded, ""},
		{"CaptureOfAnotherAmount", capture, held(psp.StatusSucceeded, 1000, ""), settle.Mismatch, intent.StateNeedsReview, ""},
		{"CaptureOfAReleasedHold", capture, held(psp.StatusCanceled, 0, ""), settle.Declined, intent.StateFailed, psp.CodeHoldExpired},
		{"CaptureRefused", capture, held(psp.StatusFailed, 0, "charge_expired_for_capture"), settle.Declined, intent.StateFailed, "charge_expired_for_capture"},
		{"CaptureRefusedWithoutCode", capture, held(psp.StatusFailed, 0, ""), settle.Declined, intent.StateFailed, "refused"},
		{"CaptureInAnotherCurrency", capture, func() psp.Charge { a := held(psp.StatusSucceeded, 600, ""); a.Currency = "EUR"; return a }(),
			settle.Mismatch, intent.StateNeedsReview, ""},
		{"CancelDone", cancel, held(psp.StatusCanceled, 0, ""), settle.Succeeded, intent.StateSucceeded, ""},
		{"CancelOfACapturedCharge", cancel, held(psp.StatusSucceeded, 1000, ""), settle.Declined, intent.StateFailed, "already_captured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := intent.Move{TenantID: "tn_1", ChargeID: tc.op.ID, From: intent.StateSubmitting, Actor: "me"}
			moves, outcome := settle.Moves(base, tc.op, tc.answer, settle.Call)
			require.Equal(t, tc.outcome, outcome)
			last := moves[len(moves)-1]
			require.Equal(t, tc.to, last.To)
			require.Equal(t, tc.code, last.FailureCode)
			for _, m := range moves {
				require.True(t, intent.CanMove(m.From, m.To), "%s → %s", m.From, m.To)
			}
			if tc.to == intent.StateNeedsReview {
				require.Len(t, moves, 2, "from submitting a doubt goes through unknown")
				require.NotEmpty(t, last.ReviewReason)
			}
		})
	}
}
