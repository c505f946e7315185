package fakepsp

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/chargeflow/chargeflow/psp"
)

// This file is a refund: the operation both protocols share (refundParams,
// decided under the server's mutex like a charge) and the fake protocol's
// POST /v1/refunds and GET /v1/refunds/by-key/{key} (docs/refunds.md, "The
// fake protocol"). A refund goes through the same pipeline as a charge
// (execute.go): the same faults, under "on": "refund", the same key rules,
// the same ledger.

// Why the provider refuses a refund, in the fake protocol's words, which
// are psp's (the contract, docs/refunds.md). A refusal applies nothing and
// is the key's saved answer (FailureCode on a kindSavedError record); each
// protocol words it its own way.
const (
	// refundExceedsCharge: the amount asked is more than what is left of
	// the charge, the sum of its refunds taken off; a charge refunded in
	// full has nothing left.
	refundExceedsCharge = psp.CodeRefundExceedsCharge

	// chargeNotRefundable: the ledger holds no charge with the id, or the
	// charge moved no money: it was declined, or authorized to be
	// captured later and not captured (yet).
	chargeNotRefundable = psp.CodeChargeNotRefundable
)

// The reasons a refund may give, the same under both protocols (they are
// Stripe's).
var refundReasons = []string{"requested_by_customer", "duplicate", "fraudulent"}

// refundParams are the validated parameters of a refund request, whatever
// protocol carried it.
type refundParams struct {
	// Charge is the provider's id of the charge refunded: "py_…", or a
	// PaymentIntent's "pi_…".
	Charge string

	// Amount is in the charge's minor unit; 0 asks for what is left of the
	// charge (Stripe's default; the fake protocol requires an amount).
	Amount int64

	// Reference is the caller's own id for the refund (our "re_…").
	Reference string

	// Reason is "" or one of refundReasons.
	Reason string

	// Metadata is a Stripe refund's, kept so that reads show it.
	Metadata map[string]string

	// MerchantAccount is an Adyen refund's.
	MerchantAccount string

	// Acknowledged says the protocol answers the request with the id it
	// makes whatever the decision (Adyen's 201 "received"), so a refusal
	// keeps that id: a replay and the refusal's notification name it.
	Acknowledged bool
}

// on makes refundParams an operation: a refund draws the refund rules.
func (refundParams) on() string {
	return OnRefund
}

// fillLocked decides a refund. It runs under s.mu, where every refund of
// the charge is decided, so what is left of the charge is exact: refunds
// racing one another are decided one at a time, and together never refund
// more than the charge. A refund refused applies nothing: c becomes the
// key's saved answer, with the failure code and what was left.
func (p refundParams) fillLocked(s *Server, c *record) {
	c.Charge, c.Reason, c.Metadata, c.MerchantAccount = p.Charge, p.Reason, p.Metadata, p.MerchantAccount
	charge := s.findLocked(kindCharge, p.Charge)
	var moved int64
	if charge != nil {
		c.Currency = charge.Currency
		moved = charge.report(charge.holdAt(s.now(), true)).Moved()
	}
	if moved == 0 {
		p.refuse(c, chargeNotRefundable, 0)
		return
	}
	// What a charge captured later moved is what was captured. Never below
	// zero, even for a ledger that over-refunded a charge (the audit's
	// over_refunded): nothing is left of it.
	left := max(moved-charge.refunded, 0)
	amount := cmp.Or(p.Amount, left)
	if amount == 0 || amount > left {
		p.refuse(c, refundExceedsCharge, left)
		return
	}
	c.Kind, c.Amount, c.Status, c.charge = kindRefund, amount, psp.StatusSucceeded, charge
}

// refuse makes c a refused refund: no money, only the key's answer, with
// the amount asked and what was left. It keeps its id only when the
// request was acknowledged with it.
func (p refundParams) refuse(c *record, code string, left int64) {
	c.Kind, c.FailureCode, c.Amount, c.Refundable = kindSavedError, code, p.Amount, left
	if !p.Acknowledged {
		c.ID = ""
	}
}

// refundEntry is a refund as the admin ledger reports it.
func (c *record) refundEntry() RefundEntry {
	return RefundEntry{
		ID:             c.ID,
		IdempotencyKey: c.IdempotencyKey,
		Reference:      c.Reference,
		Charge:         c.Charge,
		Amount:         c.Amount,
		Currency:       c.Currency,
		Status:         c.Status,
		Reason:         c.Reason,
		TenantTag:      c.TenantTag,
		CreatedAt:      c.CreatedAt,
	}
}

// fakeRefund is the fake protocol's refund object: psp.Refund's wire format
// and when the refund was applied.
type fakeRefund struct {
	psp.Refund
	CreatedAt time.Time `json:"created_at"`
}

// refundWire is a refund in the fake protocol.
func (c *record) refundWire() fakeRefund {
	return fakeRefund{
		Refund: psp.Refund{
			ID:        c.ID,
			Status:    c.Status,
			Charge:    c.Charge,
			Amount:    c.Amount,
			Currency:  c.Currency,
			Reference: c.Reference,
		},
		CreatedAt: c.CreatedAt,
	}
}

// hash fingerprints a refund request of the fake protocol. It starts with
// the operation, so that a charge's key reused for a refund is a reuse with
// other parameters, refused, as at Stripe, where keys are one namespace for
// every endpoint.
func (p refundParams) hash() string {
	return fingerprint("refund\x00%s\x00%d\x00%s\x00%s", p.Charge, p.Amount, p.Reference, p.Reason)
}

// handleRefund serves POST /v1/refunds.
func (s *Server) handleRefund(w http.ResponseWriter, r *http.Request) {
	s.serveFakePost(w, r, fakeRefundAnswers{}, func() (request, bool) {
		params, ok := decodeRefundParams(w, r)
		return request{reference: params.Reference, op: params, hash: params.hash(), idPrefix: "rf_"}, ok
	})
}

// decodeRefundParams reads and validates the body of a refund request,
// answering 400 or 413 when it is not acceptable.
func decodeRefundParams(w http.ResponseWriter, r *http.Request) (refundParams, bool) {
	var body struct {
		Charge    string          `json:"charge"`
		Amount    json.RawMessage `json:"amount"`
		Reference string          `json:"reference"`
		Reason    string          `json:"reason"`
	}
	if !readJSONBody(w, r, &body, "refund") {
		return refundParams{}, false
	}

	amount, ok := parseAmount(body.Amount)
	switch {
	case body.Charge == "":
		writeParamError(w, "charge", "charge is required: the provider's id of the charge to refund")
		return refundParams{}, false
	case !ok:
		writeParamError(w, "amount", "amount must be a positive integer in the charge's minor unit")
		return refundParams{}, false
	case body.Reference == "":
		writeParamError(w, "reference", "reference is required")
		return refundParams{}, false
	case !validRefundReason(body.Reason):
		writeParamError(w, "reason", "reason must be requested_by_customer, duplicate or fraudulent")
		return refundParams{}, false
	}
	return refundParams{Charge: body.Charge, Amount: amount, Reference: body.Reference, Reason: body.Reason}, true
}

// validRefundReason reports whether reason is absent or one a refund may
// give.
func validRefundReason(reason string) bool {
	return reason == "" || slices.Contains(refundReasons, reason)
}

// fakeRefundAnswers words a refund's answers in the fake protocol.
type fakeRefundAnswers struct{}

// result answers with the refund, or with the refusal the key saved: 409,
// the code saying why (docs/refunds.md).
func (fakeRefundAnswers) result(w http.ResponseWriter, c *record) {
	switch {
	case c.isRefund():
		writeJSON(w, http.StatusOK, c.refundWire())
	case c.FailureCode == chargeNotRefundable:
		writeError(w, http.StatusConflict, chargeNotRefundable, "the provider holds no succeeded charge with this id: nothing was refunded")
	default:
		writeError(w, http.StatusConflict, refundExceedsCharge, "the amount is more than what is left of the charge: nothing was refunded")
	}
}

func (fakeRefundAnswers) failure(w http.ResponseWriter, f failure) {
	writeFakeFailure(w, f, "refund")
}

// handleRefundLookup serves GET /v1/refunds/by-key/{key}: the refund the
// key made, or 404 refund_not_found, the proof that none exists for it (a
// refused refund made none).
func (s *Server) handleRefundLookup(w http.ResponseWriter, r *http.Request) {
	s.lookupByKey(w, r, byKeyLookup{
		kind: kindRefund, name: "refund", notFoundCode: psp.CodeRefundNotFound, notFound: "no refund exists for this idempotency key",
		show: func(c *record) any { return c.refundWire() },
	})
}
