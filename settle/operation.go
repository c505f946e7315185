package settle

import (
	"context"
	"errors"
	"fmt"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/psp"
)

// This file is where a row's kind decides the provider call. A job, a
// lookup or an operator's check names a row of charges; the row says
// whether it is a charge, a refund, a capture or a cancel (docs/refunds.md,
// "Where refunds live"; docs/capture.md), and Send and Find make the one
// call that kind needs. Every answer
// comes back as a psp.Charge, so Moves reads a refund's answer by the same
// rule as a charge's: the same money and reference, or a person looks.

// Send makes the one provider attempt c needs, with its fixed provider key:
// a charge (authorized only when c is captured later), a refund of c's
// parent charge, or a capture or cancel of it (capture.go).
func Send(ctx context.Context, db intent.DB, p psp.Provider, c intent.Charge) (psp.Charge, error) {
	switch c.Kind {
	case intent.KindRefund:
	case intent.KindCapture, intent.KindCancel:
		return sendOperation(ctx, db, p, c)
	default:
		return p.Charge(ctx, psp.ChargeRequest{Key: c.ProviderKey, Amount: c.Amount, Currency: c.Currency,
			PaymentMethod: c.PaymentMethod, Reference: c.ID, Tag: c.TenantID, CaptureLater: c.CaptureLater})
	}
	// Nothing is sent unless the refund can be: a failure here is "not
	// applied", and the job retries.
	refunder, parent, err := refundOf(ctx, db, p, c, psp.ErrNotApplied)
	if err != nil {
		return psp.Charge{}, err
	}
	r, err := refunder.Refund(ctx, psp.RefundRequest{Key: c.ProviderKey, Charge: parent, Amount: c.Amount,
		Currency: c.Currency, Reference: c.ID, Reason: c.Reason, Tag: c.TenantID})
	return AnswerOf(r), err
}

// Find looks c up at the provider (LookupOf says with what): a charge, a
// refund among its parent charge's, or a capture or cancel as the state of
// its parent charge (capture.go). A provider whose lookup is a re-send
// (psp.LookupByResend) is sent c's own request again with its own key,
// which it answers with the first request's result: an answer that proved
// nothing applied proves nothing about the first request, so it is an
// unknown outcome here, never a not-found. The caller sends it only inside
// the key window (the reconciler's beforeResend).
func Find(ctx context.Context, db intent.DB, p psp.Provider, c intent.Charge) (psp.Charge, error) {
	if p.Capabilities().Lookup == psp.LookupByResend {
		answer, err := Send(ctx, db, p, c)
		if errors.Is(err, psp.ErrNotApplied) {
			err = &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "resend_" + psp.ReasonOf(err), Err: err}
		}
		return answer, err
	}
	if c.Kind.Operation() {
		return findOperation(ctx, db, p, c)
	}
	q, err := LookupOf(ctx, db, c)
	if err != nil {
		return psp.Charge{}, err
	}
	if c.Kind != intent.KindRefund {
		return p.Find(ctx, q)
	}
	// A lookup that could not be made proves nothing.
	refunder, parent, err := refundOf(ctx, db, p, c, psp.ErrUnknownOutcome)
	if err != nil {
		return psp.Charge{}, err
	}
	q.Charge = parent
	r, err := refunder.FindRefund(ctx, q)
	return AnswerOf(r), err
}

// AnswerOf reads a refund's answer as Moves reads a charge's: its id,
// status, money and reference, and its failure code in place of a decline
// code.
func AnswerOf(r psp.Refund) psp.Charge {
	return psp.Charge{ID: r.ID, Status: r.Status, Amount: r.Amount, Currency: r.Currency,
		Reference: r.Reference, DeclineCode: r.FailureCode}
}

// refundOf returns the provider as a Refunder and the provider's id of the
// charge that refund c refunds. Its errors are *psp.Error of kind.
func refundOf(ctx context.Context, db intent.DB, p psp.Provider, c intent.Charge, kind error) (psp.Refunder, string, error) {
	refunder, ok := p.(psp.Refunder)
	if !ok || !p.Capabilities().Refunds {
		return nil, "", &psp.Error{Kind: kind, Reason: "provider_cannot_refund",
			Err: fmt.Errorf("provider %s does not refund", p.Capabilities().Name)}
	}
	parent, err := intent.Get(ctx, db, c.TenantID, c.ParentID)
	if err == nil && parent.ProviderChargeID == "" {
		err = errors.New("it has no provider id")
	}
	if err != nil {
		return nil, "", &psp.Error{Kind: kind, Reason: "refunded_charge_unreadable",
			Err: fmt.Errorf("refund %s: read its charge %s: %w", c.ID, c.ParentID, err)}
	}
	return refunder, parent.ProviderChargeID, nil
}
