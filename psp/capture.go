package psp

import (
	"context"
	"time"
)

// Authorize now, capture later (docs/capture.md). A charge sent with
// ChargeRequest.CaptureLater is only authorized: the provider holds the
// money (StatusRequiresCapture) until a capture takes some or all of it or
// a cancel releases it, or until the hold expires at the provider
// (Capabilities.HoldWindow), which releases it too (StatusCanceled).
//
// A capture and a cancel are operations on the authorized charge, each a
// call that moves money with its own idempotency key, classified in the
// same four classes as a charge: an answer, ErrNotApplied or
// ErrUnknownOutcome. Their answer is the authorized charge as the
// operation left it, a Charge whose Status says what it is now; a
// lookup of an operation is a lookup of that charge by its provider id
// (Provider.Find with LookupRequest.ProviderID), whose answer is read by
// the same rule (settle.OperationMoves):
//
//	status            a capture            a cancel
//	succeeded         captured (AmountCaptured) refused: already captured
//	canceled          refused: released    canceled
//	requires_capture  not applied yet      not applied yet
//	failed            refused (DeclineCode)  refused (DeclineCode)
//
// A provider that refuses the operation outright (the hold expired, the
// charge was captured or released already) answers a Charge with
// StatusFailed and the provider's reason in DeclineCode
// (OperationRequest.Refused): no money moved, as with a refused refund.
const (
	// StatusRequiresCapture means the provider authorized the charge and
	// holds the money until it is captured or released.
	StatusRequiresCapture Status = "requires_capture"
	// StatusCanceled means an authorized charge was released, by a cancel
	// or because its hold expired: no money moved, and none will.
	StatusCanceled Status = "canceled"
)

// Capturer is a Provider that authorizes now and captures later; an
// adapter whose Capabilities.SeparateCapture is true implements it.
type Capturer interface {
	// Capture makes exactly one attempt to capture req.Amount of the
	// authorized charge req.Charge, with req.Key as the idempotency key.
	// Whatever is not captured is released.
	Capture(ctx context.Context, req OperationRequest) (Charge, error)
	// Cancel makes exactly one attempt to release the authorized charge
	// req.Charge, with req.Key as the idempotency key.
	Cancel(ctx context.Context, req OperationRequest) (Charge, error)
}

// OperationRequest is one capture or cancel call to the provider.
type OperationRequest struct {
	// Key is the operation's provider idempotency key, the same on every
	// attempt of the operation and never the charge's own.
	Key string
	// Charge is the provider's id of the authorized charge.
	Charge string
	// Amount is, for a capture, what to capture, at most the authorized
	// amount; for a cancel, the authorized amount. Currency is the
	// charge's ISO 4217 code in upper case.
	Amount   int64
	Currency string
	// Reference is our operation's id ("cp_…", "cx_…"); ChargeReference
	// is our charge's ("ch_…"), which the provider holds with the charge.
	Reference       string
	ChargeReference string
	// Tag is the tenant tag, as for a charge.
	Tag string
}

// Refused is the answer an adapter returns when the provider refused req
// outright with code: nothing moved, and the charge stays as it was.
func (req OperationRequest) Refused(code string) Charge {
	return Charge{Status: StatusFailed, Amount: req.Amount, Currency: req.Currency,
		Reference: req.ChargeReference, DeclineCode: code}
}

// The fake protocol's codes of a refused capture or cancel (docs/capture.md),
// in the provider's JSON error body {"error": {"code": …}} on a 409.
const (
	// CodeChargeNotCapturable: the charge is not authorized and held (it
	// was captured or released, its hold expired, or it was never
	// authorized for a later capture).
	CodeChargeNotCapturable = "charge_not_capturable"
	// CodeCaptureExceedsAuthorization: the capture asks for more than
	// was authorized.
	CodeCaptureExceedsAuthorization = "capture_exceeds_authorization"
	// CodeHoldExpired: the hold expired before the operation, which
	// released it.
	CodeHoldExpired = "hold_expired"
)

// DefaultHoldWindow is how long a provider that names no other holds an
// authorization: Stripe's seven days for card payments.
const DefaultHoldWindow = 7 * 24 * time.Hour
