package psp

import (
	"errors"
	"strconv"
	"strings"
)

// Status is the final state of a charge as the provider reports it.
type Status string

const (
	// StatusSucceeded means the provider moved the money.
	StatusSucceeded Status = "succeeded"

	// StatusFailed means the provider declined the charge; the reason is in
	// Charge.DeclineCode. No money moved.
	StatusFailed Status = "failed"
)

// Charge is a charge as the provider reports it, both in answer to a charge
// request and to a lookup. It is also the wire format of the provider's charge
// object.
type Charge struct {
	// ID is the provider's own identifier, such as "py_…".
	ID string `json:"id"`

	// Status is StatusSucceeded or StatusFailed; for a charge sent to be
	// captured later, StatusRequiresCapture or StatusCanceled too
	// (capture.go). No adapter returns any other.
	Status Status `json:"status"`

	// Amount is in the currency's minor unit, as the provider recorded it.
	// Callers compare it with what they asked for.
	Amount int64 `json:"amount"`

	// Currency is the ISO 4217 code the provider recorded.
	Currency string `json:"currency"`

	// Reference is the caller's reference (chargeflow's charge id) echoed
	// back by the provider.
	Reference string `json:"reference"`

	// DeclineCode says why a failed charge was declined, such as
	// "insufficient_funds". It is empty for a succeeded charge.
	DeclineCode string `json:"decline_code,omitempty"`
	// AmountCaptured is, for a charge authorized to be captured later,
	// what a capture took (Status succeeded); zero before.
	AmountCaptured int64 `json:"amount_captured,omitempty"`
}

// ChargeRequest is one charge call to the provider.
type ChargeRequest struct {
	// Key is the provider idempotency key, sent as the Idempotency-Key
	// header. It must be the same on every attempt for the same charge.
	Key string

	// Amount is in the currency's minor unit.
	Amount int64

	// Currency is an ISO 4217 code in upper case.
	Currency string

	// PaymentMethod is the provider's payment method token. It is sent to
	// the provider and never appears in errors.
	PaymentMethod string

	// Reference is the caller's own identifier for the charge.
	Reference string

	// Tag is an optional tenant tag sent as the X-Tenant-Tag header. The
	// fake provider totals charges per tag in its audit; real providers
	// ignore it.
	Tag string
	// CaptureLater asks the provider to authorize only: the answer is
	// StatusRequiresCapture, and a Capturer captures or releases it later
	// (capture.go). Only for a provider with Capabilities.SeparateCapture.
	CaptureLater bool
}

// CodeChargeNotFound is the error code in the provider's JSON error body that
// proves no charge exists for a key. A 404 without it proves nothing.
const CodeChargeNotFound = "charge_not_found"

// Op names the provider call an Attempt belongs to; the same status can mean
// different things for a charge and a lookup. It also names the call's span
// ("psp.<op>") and labels MetricCallDuration.
type Op string

const (
	// OpCharge is POST /v1/charges.
	OpCharge Op = "charge"

	// OpLookup is GET /v1/charges/by-key/{key}.
	OpLookup Op = "lookup"

	// OpRefund is POST /v1/refunds: a call that moves money, classified by
	// the rules of a charge.
	OpRefund Op = "refund"

	// OpRefundLookup is GET /v1/refunds/by-key/{key}: a lookup, classified
	// by the rules of a charge's lookup.
	OpRefundLookup Op = "refund_lookup"

	// OpCapture and OpCancel are POST /v1/charges/{id}/capture and
	// /cancel: calls that move (or release) money, classified by the
	// rules of a charge (ClassifyOperation).
	OpCapture Op = "capture"
	OpCancel  Op = "cancel"
)

// Applies reports whether op asks the provider to move money (a charge, a
// refund, a capture or a cancel). Only such a call can be "not applied": a
// lookup that could not be made proves nothing either way.
func (op Op) Applies() bool {
	return op == OpCharge || op == OpRefund || op == OpCapture || op == OpCancel
}

// notFoundCode is the provider error code that, on a 404, proves that op's
// lookup found nothing; "" for a call that is not a lookup.
func (op Op) notFoundCode() string {
	switch op {
	case OpLookup:
		return CodeChargeNotFound
	case OpRefundLookup:
		return CodeRefundNotFound
	default:
		return ""
	}
}

var (
	// ErrNotApplied is the Kind of an *Error proving that the provider did not
	// apply the request: sending it again with the same key cannot charge
	// twice.
	ErrNotApplied = errors.New("psp: request not applied")

	// ErrUnknownOutcome is the Kind of an *Error after which the request may
	// or may not have been applied. Only a lookup by key can tell.
	ErrUnknownOutcome = errors.New("psp: outcome unknown")

	// ErrNotFound is returned by a lookup (Lookup, Find, FindRefund), and
	// only by a lookup, when the provider proved that no charge (or, from
	// FindRefund, no refund) exists for the key.
	ErrNotFound = errors.New("psp: no charge exists for the key")
)

// Error is a provider call that did not produce a charge. Kind says what the
// caller may conclude (ErrNotApplied or ErrUnknownOutcome) and Reason says
// why, in a stable snake_case word suitable for metrics and the audit trail.
// errors.Is matches both Kind and the underlying Err.
type Error struct {
	// Kind is ErrNotApplied or ErrUnknownOutcome.
	Kind error

	// Reason is a stable snake_case cause: connection_refused, dns_failed,
	// dial_timeout, dial_failed, timeout, canceled, write_failed,
	// reset_after_send, body_read_failed, status_NNN, malformed_body,
	// unknown_status, invalid_request or no_response.
	Reason string

	// StatusCode is the HTTP status of the provider's answer, or 0 when no
	// answer arrived.
	StatusCode int

	// ProviderCode is the code from the provider's JSON error body, such as
	// "idempotency_key_reused", when there was one.
	ProviderCode string

	// ProviderID is the provider's id for the charge when its answer named
	// one without settling it (a charge still processing, say). The caller
	// keeps it: a later lookup by that id is strongly consistent.
	ProviderID string

	// Err is the underlying transport or decoding error, if any.
	Err error
}

// Error describes the error as "psp: outcome unknown (timeout): …".
func (e *Error) Error() string {
	var b strings.Builder
	if e.Kind != nil {
		b.WriteString(e.Kind.Error())
	} else {
		b.WriteString("psp: error")
	}
	b.WriteString(" (")
	b.WriteString(e.Reason)
	if e.StatusCode != 0 && !strings.HasPrefix(e.Reason, "status_") {
		b.WriteString(", status ")
		b.WriteString(strconv.Itoa(e.StatusCode))
	}
	if e.ProviderCode != "" {
		b.WriteString(", code ")
		b.WriteString(e.ProviderCode)
	}
	b.WriteString(")")
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns Kind and Err so that errors.Is(err, ErrUnknownOutcome) and
// errors.Is(err, context.DeadlineExceeded) both hold for a timeout.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// ProviderIDOf returns the provider's charge id an unsettled answer named,
// or "".
func ProviderIDOf(err error) string {
	var pspErr *Error
	if errors.As(err, &pspErr) {
		return pspErr.ProviderID
	}
	return ""
}

// ReasonOf returns the stable Reason of a provider error, for events and
// metrics, or "error" for any other error.
func ReasonOf(err error) string {
	var pspErr *Error
	if errors.As(err, &pspErr) && pspErr.Reason != "" {
		return pspErr.Reason
	}
	return "error"
}

// ErrorText is how an adapter describes a provider's error answer, as
// "<provider>: <status> <type> (<name> <value>, …)": the type "error" when
// the answer had none, and pairs (name, value) with an empty value left
// out. It never quotes the provider's message, which can quote the request.
func ErrorText(provider string, status int, typ string, pairs ...string) string {
	if typ == "" {
		typ = "error"
	}
	text := provider + ": " + strconv.Itoa(status) + " " + typ
	var details []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			details = append(details, pairs[i]+" "+pairs[i+1])
		}
	}
	if len(details) > 0 {
		text += " (" + strings.Join(details, ", ") + ")"
	}
	return text
}
