package settle

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/psp"
)

// This file settles captures and cancels (docs/capture.md). Each is a row
// of its own whose parent is a charge held at its provider
// (requires_capture). Its call is the provider's capture or cancel of that
// charge, and its answer — to the call or to a lookup — is the charge as
// the provider holds it now: captured (and by how much), released, still
// held, or the operation refused. OperationMoves reads it; the database
// moves the parent when the operation succeeds (operations_account).

// sendOperation makes capture or cancel c's one call. A parent that cannot
// be read, or a provider that cannot capture, sends nothing: not applied,
// and the job retries. An answer that the charge is still held says the
// operation is not (yet) reflected, which proves nothing either way.
func sendOperation(ctx context.Context, db intent.DB, p psp.Provider, c intent.Charge) (psp.Charge, error) {
	capturer, req, err := operationOf(ctx, db, p, c, psp.ErrNotApplied)
	if err != nil {
		return psp.Charge{}, err
	}
	call := capturer.Capture
	if c.Kind == intent.KindCancel {
		call = capturer.Cancel
	}
	answer, err := call(ctx, req.OperationRequest)
	if err == nil && answer.Status == psp.StatusRequiresCapture {
		return psp.Charge{}, &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "operation_not_reflected", ProviderID: answer.ID,
			Err: fmt.Errorf("the provider answered the %s with the charge still held", c.Kind)}
	}
	return answer, err
}

// findOperation looks capture or cancel c up as its parent charge's state
// at the provider, by the provider's id of the charge. A charge still held
// proves the operation was not applied: ErrNotFound, whose proof the
// reconciler weighs like a charge's (ProofWindow).
func findOperation(ctx context.Context, db intent.DB, p psp.Provider, c intent.Charge) (psp.Charge, error) {
	_, req, err := operationOf(ctx, db, p, c, psp.ErrUnknownOutcome)
	if err != nil {
		return psp.Charge{}, err
	}
	answer, err := p.Find(ctx, psp.LookupRequest{Key: req.chargeKey, Reference: req.ChargeReference, ProviderID: req.Charge})
	if err == nil && answer.Status == psp.StatusRequiresCapture {
		return psp.Charge{}, fmt.Errorf("%s %s: its charge %s is still held: %w", c.Kind, c.ID, req.Charge, psp.ErrNotFound)
	}
	return answer, err
}

// operation is a capture's or cancel's request, and the provider key of
// the charge it acts on, which a lookup of it asks for.
type operation struct {
	psp.OperationRequest
	chargeKey string
}

// operationOf returns the provider as a Capturer and capture or cancel
// c's request. Its errors are *psp.Error of kind.
func operationOf(ctx context.Context, db intent.DB, p psp.Provider, c intent.Charge, kind error) (psp.Capturer, operation, error) {
	capturer, ok := p.(psp.Capturer)
	if !ok || !p.Capabilities().SeparateCapture {
		return nil, operation{}, &psp.Error{Kind: kind, Reason: "provider_cannot_capture",
			Err: fmt.Errorf("provider %s does not capture separately", p.Capabilities().Name)}
	}
	parent, err := intent.Get(ctx, db, c.TenantID, c.ParentID)
	if err == nil && parent.ProviderChargeID == "" {
		err = errors.New("it has no provider id")
	}
	if err != nil {
		return nil, operation{}, &psp.Error{Kind: kind, Reason: "held_charge_unreadable",
			Err: fmt.Errorf("%s %s: read its charge %s: %w", c.Kind, c.ID, c.ParentID, err)}
	}
	return capturer, operation{OperationRequest: psp.OperationRequest{Key: c.ProviderKey, Charge: parent.ProviderChargeID,
		Amount: c.Amount, Currency: c.Currency, Reference: c.ID, ChargeReference: parent.ID, Tag: c.TenantID},
		chargeKey: parent.ProviderKey}, nil
}

// OperationMoves is Moves for a capture or cancel op (its Kind says which),
// from answer: the held charge as the provider reports it. A capture
// succeeds when the charge is captured by exactly op's amount; a cancel
// when it is released. The charge released under a capture, or captured
// under a cancel, refuses the operation (failed: nothing more moved); a
// charge captured by another amount, or not the charge held, is a
// person's to look at.
func OperationMoves(base intent.Move, op intent.Charge, answer psp.Charge, src Source) ([]intent.Move, Outcome) {
	evidence := fmt.Sprintf("provider charge %s %s", answer.ID, answer.Status)
	if answer.AmountCaptured > 0 {
		evidence += fmt.Sprintf(", %d %s captured", answer.AmountCaptured, answer.Currency)
	}
	move := base
	fail := func(code string) ([]intent.Move, Outcome) {
		move.To, move.Reason, move.Evidence, move.FailureCode = intent.StateFailed, string(src)+"_refused", evidence, code
		return []intent.Move{move}, Declined
	}
	captured := answer.Status == psp.StatusSucceeded
	switch {
	case answer.Currency != "" && answer.Currency != op.Currency:
		// Not the money this operation is about.
	case answer.Status == psp.StatusFailed:
		return fail(cmp.Or(answer.DeclineCode, "refused"))
	case op.Kind == intent.KindCapture && captured && answer.AmountCaptured == op.Amount,
		op.Kind == intent.KindCancel && answer.Status == psp.StatusCanceled:
		move.To, move.Reason, move.Evidence, move.ProviderChargeID = intent.StateSucceeded, string(src)+"_succeeded", evidence, answer.ID
		return []intent.Move{move}, Succeeded
	case op.Kind == intent.KindCapture && answer.Status == psp.StatusCanceled:
		return fail(psp.CodeHoldExpired)
	case op.Kind == intent.KindCancel && captured:
		return fail("already_captured")
	}
	return review(base, evidence, fmt.Sprintf("the provider reports its charge %s %s with %d %s captured; this %s is of %d %s",
		answer.ID, answer.Status, answer.AmountCaptured, answer.Currency, op.Kind, op.Amount, op.Currency))
}
