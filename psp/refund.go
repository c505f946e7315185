package psp

import "context"

// Refunder is a Provider that can refund a charge it made; an adapter
// whose Capabilities.Refunds is true implements it. Its answers fall in
// the same four classes as a charge's (see the package doc): a Refund with
// StatusSucceeded, a refused refund (a Refund with StatusFailed and a
// FailureCode: no money moved), ErrNotApplied or ErrUnknownOutcome, with
// ErrNotFound from FindRefund when the provider proved that no refund
// exists. What a lookup proves follows the provider's Capabilities, as for
// charges (docs/refunds.md).
type Refunder interface {
	// Refund makes exactly one attempt with req.Key as the provider's
	// idempotency key.
	Refund(ctx context.Context, req RefundRequest) (Refund, error)
	// FindRefund looks a refund up: by q.ProviderID when an earlier answer
	// named it, else by q.Key or q.Reference among the refunds of the
	// provider's charge q.Charge, as the adapter can.
	FindRefund(ctx context.Context, q LookupRequest) (Refund, error)
}

// RefundRequest is one refund call to the provider.
type RefundRequest struct {
	// Key is the provider idempotency key. It must be the same on every
	// attempt for the same refund.
	Key string

	// Charge is the provider's id of the charge refunded ("py_…", "pi_…").
	Charge string

	// Amount is in the currency's minor unit, at most what is left of the
	// charge; Currency is the charge's ISO 4217 code in upper case.
	Amount   int64
	Currency string

	// Reference is the caller's own identifier for the refund (our "re_…").
	Reference string

	// Reason is "", "requested_by_customer", "duplicate" or "fraudulent".
	Reason string

	// Tag is the tenant tag, as for a charge.
	Tag string
}

// Refund is a refund as the provider reports it, in answer to a refund
// request and to a lookup. It is also the wire format of the fake
// protocol's refund object. A refund the provider refused outright has no
// ID (see RefundRequest.Refused).
type Refund struct {
	// ID is the provider's own identifier, such as "rf_…" or "re_…".
	ID string `json:"id"`

	// Status is StatusSucceeded or StatusFailed: an adapter never returns
	// a Refund in any other state (a refund still pending at the provider
	// is an unknown outcome naming its ID).
	Status Status `json:"status"`

	// Charge is the provider's id of the charge refunded.
	Charge string `json:"charge"`

	// Amount and Currency are what the provider recorded; callers compare
	// them with what they asked for.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`

	// Reference is the caller's reference echoed back.
	Reference string `json:"reference"`

	// FailureCode says why a failed refund failed, empty otherwise.
	FailureCode string `json:"failure_code,omitempty"`
}

// The fake protocol's refund error codes (docs/refunds.md), in the
// provider's JSON error body {"error": {"code": …}}.
const (
	// CodeRefundNotFound, on a 404 answering GET /v1/refunds/by-key/{key},
	// proves that no refund exists for the key. A 404 without it proves
	// nothing, as for CodeChargeNotFound.
	CodeRefundNotFound = "refund_not_found"

	// CodeRefundExceedsCharge, on a 409 answering POST /v1/refunds, is the
	// provider's refusal of a refund larger than what is left of the charge.
	CodeRefundExceedsCharge = "refund_exceeds_charge"

	// CodeChargeNotRefundable, on a 409 answering POST /v1/refunds, is the
	// provider's refusal of a refund of a charge it does not hold or that
	// did not succeed.
	CodeChargeNotRefundable = "charge_not_refundable"
)

// Refused is the failed Refund an adapter returns when the provider refused
// req outright with code: no money moved, and no refund object exists, so
// the Refund has no ID and carries what req asked for (the charge, amount,
// currency and reference), for a caller comparing it with its request to
// find it equal. Why a refusal is a failed refund and not ErrNotApplied is
// in docs/refunds.md ("A refusal is a failed refund").
func (req RefundRequest) Refused(code string) Refund {
	return Refund{
		Status:      StatusFailed,
		Charge:      req.Charge,
		Amount:      req.Amount,
		Currency:    req.Currency,
		Reference:   req.Reference,
		FailureCode: code,
	}
}
