package psp

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// This file is the receiving side of the provider's notifications
// (docs/notifications.md): what a notification of the fake protocol looks
// like on the wire, how its signature is verified, and what it proves once
// verified. psp/stripe does the same for Stripe's events.

// NotificationSignatureHeader carries the fake protocol's signature:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + body)>", the
// scheme Stripe's Stripe-Signature uses. More than one v1 may be given (a
// secret being rotated); one that verifies is enough.
const NotificationSignatureHeader = "PSP-Signature"

// The fake protocol's notification types: what the provider applied.
const (
	// EventChargeSucceeded: a charge moved money; data is the charge.
	EventChargeSucceeded = "charge.succeeded"

	// EventChargeFailed: a charge was declined; data is the charge, with
	// its decline code.
	EventChargeFailed = "charge.failed"

	// EventRefundSucceeded: a refund moved money back; data is the refund.
	EventRefundSucceeded = "refund.succeeded"

	// EventChargeAuthorized: a charge sent to be captured later was
	// authorized; data is the charge, requires_capture.
	EventChargeAuthorized = "charge.authorized"

	// EventChargeCaptured and EventChargeCanceled: a capture or a cancel
	// applied (data: an OperationNotification, the charge as it left it,
	// succeeded with amount_captured or canceled). A hold the provider
	// releases itself when it expires is not notified.
	EventChargeCaptured = "charge.captured"
	EventChargeCanceled = "charge.canceled"
)

// DefaultNotificationTolerance is how far a notification's signature time
// may be from the receiver's clock, either way, when the caller gives no
// tolerance: five minutes, Stripe's own default. A signature older than
// that is a replay, however genuine.
const DefaultNotificationTolerance = 5 * time.Minute

// NotificationEnvelope is the body of a fake-protocol notification. Data
// is a ChargeNotification or a RefundNotification, as Type says.
type NotificationEnvelope struct {
	// ID is the event's id ("evt_…"): every delivery of one event, a
	// retry or a duplicate, carries the same.
	ID string `json:"id"`

	// Type is one of the Event constants.
	Type string `json:"type"`

	// CreatedAt is when the provider made the event.
	CreatedAt time.Time `json:"created_at"`

	// Data is the object the event is about.
	Data json.RawMessage `json:"data"`
}

// ChargeNotification is the data of a charge's notification: the charge's
// wire format, as a lookup answers it, and the idempotency key it was sent
// with.
type ChargeNotification struct {
	Charge
	IdempotencyKey string `json:"idempotency_key"`
}

// RefundNotification is the data of a refund's notification: the refund's
// wire format and the idempotency key it was sent with.
type RefundNotification struct {
	Refund
	IdempotencyKey string `json:"idempotency_key"`
}

// OperationNotification is the data of a capture's or a cancel's
// notification: the authorized charge's wire format as the operation left
// it, and the operation's own idempotency key and reference (our "cp_…",
// "cx_…"), which the notification is about (NotificationCapture,
// NotificationCancel).
type OperationNotification struct {
	Charge
	IdempotencyKey     string `json:"idempotency_key"`
	OperationReference string `json:"operation_reference"`
}

// NotificationKind says what a verified notification is evidence of.
type NotificationKind string

const (
	// NotificationCharge: a charge's final answer, in Notification.Charge.
	NotificationCharge NotificationKind = "charge"

	// NotificationRefund: a refund's final answer, in Notification.Refund.
	NotificationRefund NotificationKind = "refund"

	// NotificationCapture and NotificationCancel: a capture's or a
	// cancel's final answer (capture.go), in Notification.Charge: the
	// authorized charge as the operation left it, or the operation's
	// refusal (StatusFailed with a DeclineCode). Notification.Reference
	// is the operation's id ("cp_…", "cx_…").
	NotificationCapture NotificationKind = "capture"
	NotificationCancel  NotificationKind = "cancel"

	// NotificationIgnored: nothing to do. The notification is genuine, but
	// of a type we do not act on, about an object that is not final yet
	// (a PaymentIntent processing, a refund pending), or about an object
	// that carries none of our references; Notification.Reason says which.
	NotificationIgnored NotificationKind = "ignored"
)

// Notification is a verified notification: evidence exactly like a
// lookup's answer, and no more (docs/notifications.md, "What a
// notification proves").
type Notification struct {
	// EventID is the provider's event id; every delivery of one event
	// carries the same, so a receiver can tell a duplicate.
	EventID string

	// EventType is the provider's event type, as sent.
	EventType string

	// Created is when the provider made the event.
	Created time.Time

	// SignedAt is the signature's time, within the tolerance of now.
	SignedAt time.Time

	// Kind is what the notification is evidence of; NotificationIgnored
	// means nothing to do.
	Kind NotificationKind

	// Reason says why a notification is NotificationIgnored: unhandled_type,
	// no_reference, or the object's state as a lookup would name it
	// (intent_processing, refund_pending, …). Empty otherwise.
	Reason string

	// Reference is our reference (chargeflow's charge or refund id) the
	// object carries; empty when it carries none.
	Reference string

	// ProviderID is the provider's id of the charge or refund, when the
	// notification is about one (an ignored one too, when its object is
	// ours but not final).
	ProviderID string

	// ProviderKey is the idempotency key the charge or refund was sent
	// with, when the notification carries it.
	ProviderKey string

	// Charge is the charge's answer when Kind is NotificationCharge: a
	// StatusSucceeded charge or a StatusFailed one with its DeclineCode,
	// as a lookup returns it. When Kind is NotificationCapture or
	// NotificationCancel it is the operation's answer, with what the
	// notification tells of the authorized charge: its provider id, and
	// for a capture AmountCaptured; a provider whose notification is about
	// the operation alone (Adyen's) leaves the charge's Amount (for a
	// capture) and Reference zero.
	Charge Charge

	// Authorization says Charge is what a notification of an
	// authorization tells (Adyen's AUTHORISATION), which does not say
	// whether the charge was captured with it: StatusSucceeded there means
	// authorized, so a charge sent with ChargeRequest.CaptureLater is
	// held, not captured. AnswerFor reads it.
	Authorization bool

	// Refund is the refund's answer when Kind is NotificationRefund.
	Refund Refund
}

// Actionable reports whether n carries a final answer about a charge, a
// refund, a capture or a cancel; otherwise there is nothing to do.
func (n Notification) Actionable() bool {
	switch n.Kind {
	case NotificationCharge, NotificationRefund, NotificationCapture, NotificationCancel:
		return true
	default:
		return false
	}
}

// AnswerFor is n.Charge as the answer about a charge sent with
// captureLater: an Authorization's succeeded charge sent to be captured
// later is StatusRequiresCapture, its money held. Any other is n.Charge.
func (n Notification) AnswerFor(captureLater bool) Charge {
	answer := n.Charge
	if n.Authorization && captureLater && answer.Status == StatusSucceeded {
		answer.Status = StatusRequiresCapture
	}
	return answer
}

// The kinds of a *NotificationError: why a notification was refused. Each
// is a reason to answer the sender 400, never to act.
var (
	// ErrNotificationForged: the notification is unsigned, or no
	// signature on it verifies with the secret (a wrong secret, or a body
	// altered after signing).
	ErrNotificationForged = errors.New("psp: notification signature does not verify")

	// ErrNotificationExpired: the signature verifies, but its time is
	// further from now than the tolerance: a replay, or a clock far off.
	ErrNotificationExpired = errors.New("psp: notification signed outside the tolerance")

	// ErrNotificationMalformed: the signature header cannot be read, or
	// the verified body is not a notification we can read (not JSON, a
	// required field missing, a type its object contradicts, an API
	// version we cannot read).
	ErrNotificationMalformed = errors.New("psp: notification malformed")
)

// ErrNoNotificationSecret is returned when the receiver has no secret to
// verify with: the receiver's misconfiguration, not the sender's fault.
var ErrNoNotificationSecret = errors.New("psp: no notification secret configured")

// NotificationError is a notification refused. Kind is
// ErrNotificationForged, ErrNotificationExpired or
// ErrNotificationMalformed; Reason is a stable snake_case cause for logs
// and metrics (signature_missing, signature_mismatch,
// signature_header_invalid, timestamp_too_old, timestamp_in_future,
// body_invalid, field_missing, type_mismatch, api_version_mismatch).
// Neither it nor Err ever quotes the secret or a signature.
type NotificationError struct {
	Kind   error
	Reason string
	Err    error
}

// Error describes the refusal as "psp: notification malformed
// (field_missing): data.reference is missing".
func (e *NotificationError) Error() string {
	message := "psp: notification refused"
	if e.Kind != nil {
		message = e.Kind.Error()
	}
	message += " (" + e.Reason + ")"
	if e.Err != nil {
		message += ": " + e.Err.Error()
	}
	return message
}

// Unwrap returns Kind and Err, so that errors.Is matches either.
func (e *NotificationError) Unwrap() []error {
	errs := make([]error, 0, 2)
	for _, err := range []error{e.Kind, e.Err} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// refuse is a *NotificationError of kind for reason.
func refuse(kind error, reason, detail string) error {
	e := &NotificationError{Kind: kind, Reason: reason}
	if detail != "" {
		e.Err = errors.New(detail)
	}
	return e
}

// ParseNotification verifies a notification of the fake protocol and
// reads what it proves. The signature (NotificationSignatureHeader) must
// verify with secret over the exact body received, and its time must be
// within tolerance of now (DefaultNotificationTolerance when tolerance is
// not positive; now is time.Now() when zero); only then is the body read.
// A refusal is a *NotificationError (ErrNotificationForged,
// ErrNotificationExpired, ErrNotificationMalformed); a genuine
// notification of a type we do not act on is a Notification of kind
// NotificationIgnored, not an error.
func ParseNotification(secret string, header http.Header, body []byte, now time.Time, tolerance time.Duration) (Notification, error) {
	if secret == "" {
		return Notification{}, ErrNoNotificationSecret
	}
	values := header.Values(NotificationSignatureHeader)
	switch len(values) {
	case 0:
		return Notification{}, refuse(ErrNotificationForged, "signature_missing", "no "+NotificationSignatureHeader+" header")
	case 1:
	default:
		return Notification{}, refuse(ErrNotificationMalformed, "signature_header_invalid", "more than one "+NotificationSignatureHeader+" header")
	}
	signedAt, err := verifySignature(secret, values[0], body)
	if err != nil {
		return Notification{}, err
	}
	if err := CheckNotificationTime(signedAt, now, tolerance); err != nil {
		return Notification{}, err
	}
	n, err := readNotification(body)
	if err != nil {
		return Notification{}, err
	}
	n.SignedAt = signedAt
	return n, nil
}

// CheckNotificationTime refuses a signature time further than tolerance
// from now, either way, with an ErrNotificationExpired *NotificationError:
// older is a replay; newer is a clock far off, which the tolerance is
// there to bound too. A tolerance that is not positive is
// DefaultNotificationTolerance, and a zero now is time.Now(). Each
// protocol's parser calls it once the signature verified.
func CheckNotificationTime(signedAt, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultNotificationTolerance
	}
	if now.IsZero() {
		now = time.Now()
	}
	switch age := now.Sub(signedAt); {
	case age > tolerance:
		return refuse(ErrNotificationExpired, "timestamp_too_old", fmt.Sprintf("signed %s ago, more than the tolerance of %s", age.Round(time.Second), tolerance))
	case -age > tolerance:
		return refuse(ErrNotificationExpired, "timestamp_in_future", fmt.Sprintf("signed %s ahead of now, more than the tolerance of %s", (-age).Round(time.Second), tolerance))
	}
	return nil
}

// SignatureTime reads the time of a signature header of the scheme both
// protocols share ("t=<unix seconds>,v1=…"): psp/stripe, which leaves the
// signature itself to stripe-go, checks it with CheckNotificationTime.
func SignatureTime(value string) (time.Time, error) {
	signedAt, _, err := parseSignatureHeader(value)
	return signedAt, err
}

// parseSignatureHeader reads "t=<unix>,v1=<hex>[,v1=<hex>…]": exactly one
// t, and every v1 that is well-formed hex. Other schemes (v0, …) are
// ignored, as Stripe's libraries ignore them; an element that is not
// key=value, or a t that is missing, repeated or not a number, is
// malformed. No v1 at all is an unsigned notification.
func parseSignatureHeader(value string) (time.Time, [][]byte, error) {
	var signedAt time.Time
	var haveTime bool
	var signatures [][]byte
	for element := range strings.SplitSeq(value, ",") {
		key, val, ok := strings.Cut(element, "=")
		if !ok || key == "" || val == "" {
			return time.Time{}, nil, refuse(ErrNotificationMalformed, "signature_header_invalid", "an element of the signature header is not key=value")
		}
		switch key {
		case "t":
			seconds, err := strconv.ParseInt(val, 10, 64)
			if err != nil || haveTime {
				return time.Time{}, nil, refuse(ErrNotificationMalformed, "signature_header_invalid", "the signature header's t is not one number of seconds")
			}
			signedAt, haveTime = time.Unix(seconds, 0), true
		case "v1":
			if signature, err := hex.DecodeString(val); err == nil {
				signatures = append(signatures, signature)
			}
		}
	}
	if !haveTime {
		return time.Time{}, nil, refuse(ErrNotificationMalformed, "signature_header_invalid", "the signature header has no t")
	}
	if len(signatures) == 0 {
		return time.Time{}, nil, refuse(ErrNotificationForged, "signature_missing", "the signature header has no v1 signature")
	}
	return signedAt, signatures, nil
}

// verifySignature checks the header's v1 signatures against
// HMAC-SHA256(secret, t + "." + body), in constant time, and returns the
// signature's time.
func verifySignature(secret, value string, body []byte) (time.Time, error) {
	signedAt, signatures, err := parseSignatureHeader(value)
	if err != nil {
		return time.Time{}, err
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(strconv.FormatInt(signedAt.Unix(), 10)))
	mac.Write([]byte("."))
	mac.Write(body)
	expected := mac.Sum(nil)
	for _, signature := range signatures {
		if hmac.Equal(expected, signature) {
			return signedAt, nil
		}
	}
	return time.Time{}, refuse(ErrNotificationForged, "signature_mismatch", "no signature verifies with the secret over this body")
}

// readNotification reads a verified body of the fake protocol.
func readNotification(body []byte) (Notification, error) {
	var envelope NotificationEnvelope
	if err := json.Unmarshal(body, &envelope); err != nil {
		return Notification{}, &NotificationError{Kind: ErrNotificationMalformed, Reason: "body_invalid", Err: err}
	}
	switch {
	case envelope.ID == "":
		return Notification{}, missing("id")
	case envelope.Type == "":
		return Notification{}, missing("type")
	case envelope.CreatedAt.IsZero():
		return Notification{}, missing("created_at")
	case len(bytes.TrimSpace(envelope.Data)) == 0 || bytes.Equal(bytes.TrimSpace(envelope.Data), []byte("null")):
		return Notification{}, missing("data")
	}
	n := Notification{EventID: envelope.ID, EventType: envelope.Type, Created: envelope.CreatedAt}

	switch envelope.Type {
	case EventChargeCaptured, EventChargeCanceled:
		var data OperationNotification
		if err := json.Unmarshal(envelope.Data, &data); err != nil {
			return Notification{}, &NotificationError{Kind: ErrNotificationMalformed, Reason: "body_invalid", Err: err}
		}
		if err := checkChargeData(envelope.Type, data.Charge); err != nil {
			return Notification{}, err
		}
		if data.OperationReference == "" {
			return Notification{}, missing("data.operation_reference")
		}
		n.Kind, n.Charge = NotificationCapture, data.Charge
		if envelope.Type == EventChargeCanceled {
			n.Kind = NotificationCancel
		}
		n.Reference, n.ProviderID, n.ProviderKey = data.OperationReference, data.ID, data.IdempotencyKey
	case EventChargeSucceeded, EventChargeFailed, EventChargeAuthorized:
		var data ChargeNotification
		if err := json.Unmarshal(envelope.Data, &data); err != nil {
			return Notification{}, &NotificationError{Kind: ErrNotificationMalformed, Reason: "body_invalid", Err: err}
		}
		if err := checkChargeData(envelope.Type, data.Charge); err != nil {
			return Notification{}, err
		}
		n.Kind, n.Charge = NotificationCharge, data.Charge
		n.Reference, n.ProviderID, n.ProviderKey = data.Reference, data.ID, data.IdempotencyKey
	case EventRefundSucceeded:
		var data RefundNotification
		if err := json.Unmarshal(envelope.Data, &data); err != nil {
			return Notification{}, &NotificationError{Kind: ErrNotificationMalformed, Reason: "body_invalid", Err: err}
		}
		if err := checkRefundData(data.Refund); err != nil {
			return Notification{}, err
		}
		n.Kind, n.Refund = NotificationRefund, data.Refund
		n.Reference, n.ProviderID, n.ProviderKey = data.Reference, data.ID, data.IdempotencyKey
	default:
		n.Kind, n.Reason = NotificationIgnored, "unhandled_type"
	}
	return n, nil
}

// checkChargeData refuses a charge's data that lacks what a lookup's answer
// has, or whose status contradicts the event type.
func checkChargeData(eventType string, c Charge) error {
	switch {
	case c.ID == "":
		return missing("data.id")
	case c.Reference == "":
		return missing("data.reference")
	case c.Amount <= 0:
		return missing("data.amount")
	case c.Currency == "":
		return missing("data.currency")
	case eventType == EventChargeSucceeded && (c.Status != StatusSucceeded || c.DeclineCode != ""):
		return refuse(ErrNotificationMalformed, "type_mismatch", "a "+eventType+" whose charge is not succeeded")
	case eventType == EventChargeFailed && c.Status != StatusFailed:
		return refuse(ErrNotificationMalformed, "type_mismatch", "a "+eventType+" whose charge is not failed")
	case eventType == EventChargeFailed && c.DeclineCode == "":
		return missing("data.decline_code")
	case eventType == EventChargeAuthorized && c.Status != StatusRequiresCapture:
		return refuse(ErrNotificationMalformed, "type_mismatch", "a "+eventType+" whose charge is not requires_capture")
	case eventType == EventChargeCaptured && (c.Status != StatusSucceeded || c.AmountCaptured <= 0):
		return refuse(ErrNotificationMalformed, "type_mismatch", "a "+eventType+" whose charge is not succeeded with an amount captured")
	case eventType == EventChargeCanceled && c.Status != StatusCanceled:
		return refuse(ErrNotificationMalformed, "type_mismatch", "a "+eventType+" whose charge is not canceled")
	}
	return nil
}

// checkRefundData refuses a refund's data that lacks what a lookup's answer
// has, or that is not succeeded.
func checkRefundData(r Refund) error {
	switch {
	case r.ID == "":
		return missing("data.id")
	case r.Reference == "":
		return missing("data.reference")
	case r.Charge == "":
		return missing("data.charge")
	case r.Amount <= 0:
		return missing("data.amount")
	case r.Currency == "":
		return missing("data.currency")
	case r.Status != StatusSucceeded || r.FailureCode != "":
		return refuse(ErrNotificationMalformed, "type_mismatch", "a "+EventRefundSucceeded+" whose refund is not succeeded")
	}
	return nil
}

// missing is the refusal of a body without field.
func missing(field string) error {
	return refuse(ErrNotificationMalformed, "field_missing", field+" is missing")
}
