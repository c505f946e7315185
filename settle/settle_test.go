package settle_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/settle"
)

func TestMoves(t *testing.T) {
	t.Parallel()
	charge := intent.Charge{TenantID: "tn_1", ID: "ch_1", Amount: 1000, Currency: "USD"}
	base := func(from intent.State) intent.Move {
		return intent.Move{TenantID: "tn_1", ChargeID: "ch_1", From: from, Actor: "me", LeaseToken: 7}
	}
	answer := func(edit func(*psp.Charge)) psp.Charge {
		a := psp.Charge{ID: "py_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "USD", Reference: "ch_1"}
		if edit != nil {
			edit(&a)
		}
		return a
	}
	// want is a move with only what differs from base filled in.
	type want struct {
		from, to                                       intent.State
		reason, providerID, failure, evidence, inquiry string
	}
	for _, tc := range []struct {
		name    string
		from    intent.State
		src     settle.Source
		answer  psp.Charge
		outcome settle.Outcome
		moves   []want
	}{
		{"CallSucceeded", intent.StateSubmitting, settle.Call, answer(nil), settle.Succeeded,
			[]want{{from: intent.StateSubmitting, to: intent.StateSucceeded, reason: "provider_succeeded", providerID: "py_1"}}},
		{"LookupSucceeded", intent.StateUnknown, settle.Lookup, answer(nil), settle.Succeeded,
			[]want{{from: intent.StateUnknown, to: intent.StateSucceeded, reason: "lookup_found_succeeded", providerID: "py_1"}}},
		{"DeclinedWithCode", intent.StateSubmitting, settle.Call,
			answer(func(a *psp.Charge) { a.Status, a.DeclineCode = psp.StatusFailed, "insufficient_funds" }), settle.Declined,
			[]want{{from: intent.StateSubmitting, to: intent.StateFailed, reason: "provider_declined", failure: "insufficient_funds", evidence: "provider charge py_1"}}},
		{"DeclinedWithoutCode", intent.StateUnknown, settle.Lookup,
			answer(func(a *psp.Charge) { a.Status = psp.StatusFailed }), settle.Declined,
			[]want{{from: intent.StateUnknown, to: intent.StateFailed, reason: "lookup_found_declined", failure: "declined", evidence: "provider charge py_1"}}},
		{"AmountFromSubmittingGoesThroughUnknown", intent.StateSubmitting, settle.Call,
			answer(func(a *psp.Charge) { a.Amount = 999 }), settle.Mismatch,
			[]want{
				{from: intent.StateSubmitting, to: intent.StateUnknown, reason: "provider_answer_mismatch"},
				{from: intent.StateUnknown, to: intent.StateNeedsReview, reason: "amount_mismatch", evidence: "provider charge py_1",
					inquiry: `provider holds 999 USD for reference "ch_1" under this key; the charge is 1000 USD`},
			}},
		{"CurrencyFromUnknown", intent.StateUnknown, settle.Lookup,
			answer(func(a *psp.Charge) { a.Currency = "EUR" }), settle.Mismatch,
			[]want{{from: intent.StateUnknown, to: intent.StateNeedsReview, reason: "amount_mismatch", evidence: "provider charge py_1",
				inquiry: `provider holds 1000 EUR for reference "ch_1" under this key; the charge is 1000 USD`}}},
		{"ReferenceEvenWhenDeclined", intent.StateUnknown, settle.Lookup,
			answer(func(a *psp.Charge) { a.Reference, a.Status = "ch_2", psp.StatusFailed }), settle.Mismatch,
			[]want{{from: intent.StateUnknown, to: intent.StateNeedsReview, reason: "amount_mismatch", evidence: "provider charge py_1",
				inquiry: `provider holds 1000 USD for reference "ch_2" under this key; the charge is 1000 USD`}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			moves, outcome := settle.Moves(base(tc.from), charge, tc.answer, tc.src)
			require.Equal(t, tc.outcome, outcome)
			var expected []intent.Move
			for _, w := range tc.moves {
				m := base(w.from)
				m.To, m.Reason, m.ProviderChargeID, m.FailureCode, m.Evidence, m.ReviewReason =
					w.to, w.reason, w.providerID, w.failure, w.evidence, w.inquiry
				expected = append(expected, m)
			}
			require.Equal(t, expected, moves)
			for _, m := range moves {
				require.True(t, intent.CanMove(m.From, m.To), "%s → %s is not a legal move", m.From, m.To)
			}
		})
	}
}
