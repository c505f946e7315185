// Package settle turns what a provider says about a charge into the state
// moves that answer proves. The outbox worker (the answer to its own call)
// and the reconciler (what a lookup by provider key found) both settle
// charges through Moves, so the integrity check, the evidence written and
// the decline code are one rule wherever the answer comes from
// (docs/architecture.md, "Settling on a provider's answer"). Both ask a
// lookup through LookupOf, so the reconciler and an operator's
// verification ask the provider the same question; and both hold an answer
// to Matches and a new attempt to ResendCovered (rules.go).
package settle

import (
	"cmp"
	"context"
	"fmt"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/psp"
)

// Source is where an answer came from; it names the move's reason.
type Source string

const (
	// Call is the provider's answer to the worker's own call.
	Call Source = "provider"
	// Lookup is what the reconciler's lookup by provider key found.
	Lookup Source = "lookup_found"
	// Notification is what the provider's own notification said, verified
	// (docs/notifications.md): evidence exactly like a lookup's.
	Notification Source = "notification"
)

// Outcome is what an answer proved.
type Outcome string

const (
	// Succeeded means the provider holds a successful charge for exactly
	// this charge's money and reference.
	Succeeded Outcome = "succeeded"
	// Declined means the provider declined it: a value, not an error.
	Declined Outcome = "declined"
	// Mismatch means the provider holds a charge under this key whose
	// amount, currency or reference is not this charge's. That is never
	// success: a person must look (needs_review, amount_mismatch).
	Mismatch Outcome = "mismatch"
	// Authorized means the provider holds the money of a charge sent to be
	// captured later (requires_capture).
	Authorized Outcome = "authorized"
	// Released means the provider released an authorized charge, by a
	// cancel or its hold's expiry (canceled): no money moved.
	Released Outcome = "released"
)

// Moves returns the moves answer proves for charge, and what it proved.
// base names the charge and carries From (submitting or unknown), Actor and,
// for the reconciler, LeaseToken; every returned move keeps them. A mismatch
// from submitting is two moves, submitting → unknown → needs_review, since
// the state machine routes every doubt through unknown; the caller applies
// them in one transaction. A capture's or cancel's answer is read by
// OperationMoves.
func Moves(base intent.Move, charge intent.Charge, answer psp.Charge, src Source) ([]intent.Move, Outcome) {
	if charge.Kind.Operation() {
		return OperationMoves(base, charge, answer, src)
	}
	evidence := "provider " + string(cmp.Or(charge.Kind, intent.KindCharge)) + " " + answer.ID
	if !Matches(charge, answer) {
		return review(base, evidence, fmt.Sprintf("provider holds %d %s for reference %q under this key; the charge is %d %s",
			answer.Amount, answer.Currency, answer.Reference, charge.Amount, charge.Currency))
	}
	move := base
	switch {
	case answer.Status == psp.StatusFailed:
		move.To, move.Reason, move.Evidence = intent.StateFailed, string(src)+"_declined", evidence
		move.FailureCode = cmp.Or(answer.DeclineCode, "declined")
		return []intent.Move{move}, Declined
	case answer.Status == psp.StatusSucceeded && !charge.CaptureLater:
		move.To, move.Reason, move.ProviderChargeID = intent.StateSucceeded, string(src)+"_succeeded", answer.ID
		return []intent.Move{move}, Succeeded
	case answer.Status == psp.StatusRequiresCapture && charge.CaptureLater:
		move.To, move.Reason, move.ProviderChargeID = intent.StateRequiresCapture, string(src)+"_authorized", answer.ID
		return []intent.Move{move}, Authorized
	case answer.Status == psp.StatusCanceled && charge.CaptureLater:
		move.To, move.Reason, move.Evidence, move.ProviderChargeID = intent.StateCanceled, string(src)+"_released", evidence, answer.ID
		return []intent.Move{move}, Released
	}
	later := map[bool]string{true: "to be captured later", false: "to be captured at once"}[charge.CaptureLater]
	return review(base, evidence, fmt.Sprintf("provider reports the charge %s; it was sent %s", answer.Status, later))
}

// review is the moves of an answer a person must look at: needs_review
// with why, through unknown from submitting.
func review(base intent.Move, evidence, why string) ([]intent.Move, Outcome) {
	move := base
	move.To, move.Reason, move.Evidence, move.ReviewReason = intent.StateNeedsReview, "amount_mismatch", evidence, why
	if base.From != intent.StateSubmitting {
		return []intent.Move{move}, Mismatch
	}
	toUnknown := base
	toUnknown.To, toUnknown.Reason = intent.StateUnknown, "provider_answer_mismatch"
	move.From = intent.StateUnknown
	return []intent.Move{toUnknown, move}, Mismatch
}

// LookupOf is what a lookup of c asks the provider: the key every attempt
// was sent with, our reference, the provider's id when an answer named
// one, and when each attempt was sent, so that a lookup by reference
// searches around those times only (docs/provider.md, "The window").
func LookupOf(ctx context.Context, db intent.DB, c intent.Charge) (psp.LookupRequest, error) {
	sends, err := intent.SendTimes(ctx, db, c.TenantID, c.ID)
	if err != nil {
		return psp.LookupRequest{}, err
	}
	q := psp.LookupRequest{Key: c.ProviderKey, Reference: c.ID, ProviderID: c.ProviderChargeID,
		FirstSent: c.CreatedAt, LastSent: c.CreatedAt, Sends: sends}
	if c.FirstAttemptAt != nil {
		q.FirstSent = *c.FirstAttemptAt
	}
	if c.LastAttemptAt != nil {
		q.LastSent = *c.LastAttemptAt
	}
	return q, nil
}
