package client

import (
	"errors"
	"net/http"
	"strconv"
	"time"
)

// Code is the stable, machine-readable name of a problem the API answers
// with (docs/api.md lists what each one guarantees). Branch on codes, never
// on titles or details, which are written for people and may change.
//
// A Code is also an error, so that each constant below is the sentinel for
// its problem: errors.Is(err, client.CodeRefundExceedsCharge) is true when
// err is, or wraps, an *Error with that code.
type Code string

// Error makes a Code usable as an errors.Is target.
func (c Code) Error() string { return "chargeflow: " + string(c) }

// The problem codes, one for every code the API has. A test holds this list
// to the server's, so a code added there fails the client's tests until it
// is added here.
const (
	CodeBodyTooLarge                Code = "body_too_large"
	CodeCaptureExceedsAuthorization Code = "capture_exceeds_authorization"
	CodeCaptureNotSupported         Code = "capture_not_supported"
	CodeCardNumberDetected          Code = "card_number_detected"
	CodeChargeNotCapturable         Code = "charge_not_capturable"
	CodeChargeNotInReview           Code = "charge_not_in_review"
	CodeChargeNotRefundable         Code = "charge_not_refundable"
	CodeChargeNotUnknown            Code = "charge_not_unknown"
	CodeDatabaseUnavailable         Code = "database_unavailable"
	CodeDraining                    Code = "draining"
	CodeDuplicateMember             Code = "duplicate_member"
	CodeEndpointLimitReached        Code = "endpoint_limit_reached"
	CodeEvidenceMismatch            Code = "evidence_mismatch"
	CodeForbidden                   Code = "forbidden"
	CodeHeadersTooLarge             Code = "headers_too_large"
	CodeIdempotencyKeyInvalid       Code = "idempotency_key_invalid"
	CodeIdempotencyKeyMissing       Code = "idempotency_key_missing"
	CodeIdempotencyKeyReused        Code = "idempotency_key_reused"
	CodeIncompleteBody              Code = "incomplete_body"
	CodeInternal                    Code = "internal_error"
	CodeInvalidField                Code = "invalid_field"
	CodeInvalidJSON                 Code = "invalid_json"
	CodeInvalidParameter            Code = "invalid_parameter"
	CodeInvalidSignature            Code = "invalid_signature"
	CodeInvalidUTF8                 Code = "invalid_utf8"
	CodeKeyWindowPassed             Code = "key_window_passed"
	CodeMethodNotAllowed            Code = "method_not_allowed"
	CodeMissingField                Code = "missing_field"
	CodeNoRoute                     Code = "no_route"
	CodeNotFound                    Code = "not_found"
	CodeNotReady                    Code = "not_ready"
	CodeOperationInProgress         Code = "operation_in_progress"
	CodeProviderUnavailable         Code = "provider_unavailable"
	CodeRateLimited                 Code = "rate_limited"
	CodeReconcileTooSoon            Code = "reconcile_too_soon"
	CodeRefundExceedsCharge         Code = "refund_exceeds_charge"
	CodeRequestInProgress           Code = "request_in_progress"
	CodeTooManyAuthFailures         Code = "too_many_auth_failures"
	CodeUnauthorized                Code = "unauthorized"
	CodeUnknownField                Code = "unknown_field"
	CodeUnsupportedEncoding         Code = "unsupported_content_encoding"
	CodeUnsupportedMediaType        Code = "unsupported_media_type"
)

// Error is an answer of the API that is not a success: its RFC 9457
// problem document. For a create, an *Error the client returns directly
// (not wrapped in ErrOutcomeUnknown) is definitive: the API refused the
// request and stored nothing. (A 401 that follows a lost answer is the
// exception: the API refused the credential before it looked the key up,
// so the create wraps it in ErrOutcomeUnknown.)
//
// An answer that is not a problem document (a proxy's 502 page) is an
// *Error too, with the status and an empty Code.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is the problem's stable code; empty when the answer was not a
	// problem document.
	Code Code
	// Title and Detail are for people. The API never quotes a request's
	// values in them.
	Title  string
	Detail string
	// Field names the offending member ("metadata.order"), query parameter
	// or header ("Idempotency-Key"), when there is one.
	Field string
	// Type is the problem's type URI.
	Type string
	// RetryAfter is the wait the API asked for (Retry-After), or zero.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	s := "chargeflow: " + strconv.Itoa(e.Status)
	if e.Code != "" {
		s += " " + string(e.Code)
	} else {
		s += " " + http.StatusText(e.Status)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Field != "" {
		s += " (field " + e.Field + ")"
	}
	return s
}

// Is makes errors.Is(err, code) true for an *Error carrying that code.
func (e *Error) Is(target error) bool {
	code, ok := target.(Code)
	return ok && e.Code != "" && code == e.Code
}

// retryable reports whether the answer says nothing was decided: the key is
// held by a request still in its transaction, the API is refusing for now
// (rate limits), or the server or something in front of it failed.
func (e *Error) retryable() bool {
	switch {
	case e.Status == http.StatusConflict:
		return e.Code == CodeRequestInProgress
	case e.Status == http.StatusTooManyRequests:
		return true
	default:
		return e.Status >= 500
	}
}

// beforeKeyLookup reports whether the API refuses this way before it looks
// the idempotency key up (docs/api.md, "Accepting a charge", its order of work): a credential that
// no longer works. The answer is then no news of a charge an earlier attempt
// of the same call may have made.
func (e *Error) beforeKeyLookup() bool {
	return e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden
}

// ErrOutcomeUnknown is wrapped by the error a create (CreateCharge,
// CreateRefund, CaptureCharge, CancelCharge) returns when it stopped
// without a definitive answer: its context ended, or its retries ran out
// of time (WithMaxElapsed). The request may have been applied. Call again
// with the same params and the same idempotency key: the answer is then
// what it made (created or replayed) or a definitive refusal. The error
// also wraps the last attempt's error (an *Error, a network error, the
// context's error).
var ErrOutcomeUnknown = errors.New("chargeflow: outcome unknown, call again with the same idempotency key")
