package stripe

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	stripego "github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/chargeflow/chargeflow/psp"
)

// This file is the receiving side of Stripe's events (docs/notifications.md,
// "Stripe's events"): verified by stripe-go's webhook package, read into
// the evidence a lookup gives (psp.Notification) through the same mapping
// as an answer (chargeOf, refundOf).

// SignatureHeader carries Stripe's signature of an event:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + body)>".
const SignatureHeader = "Stripe-Signature"

// The event types that carry a charge's PaymentIntent. Its status decides
// what the event proves, as in an answer (chargeOf): succeeded and a
// failed confirmation are final; processing and requires_action are not;
// an intent to be captured later is held (amount_capturable_updated),
// captured (succeeded) or released (canceled).
var intentEvents = map[stripego.EventType]bool{
	stripego.EventTypePaymentIntentSucceeded:               true,
	stripego.EventTypePaymentIntentAmountCapturableUpdated: true,
	stripego.EventTypePaymentIntentPaymentFailed:           true,
	stripego.EventTypePaymentIntentCanceled:                true,
	stripego.EventTypePaymentIntentProcessing:              true,
	stripego.EventTypePaymentIntentRequiresAction:          true,
}

// The event types that carry a Refund. Since API version 2024-10-28 Stripe
// sends them for every refund; charge.refunded carries the Charge, whose
// refunds are not expanded, so it names no refund of ours and is ignored.
var refundEvents = map[stripego.EventType]bool{
	stripego.EventTypeRefundCreated: true,
	stripego.EventTypeRefundUpdated: true,
	stripego.EventTypeRefundFailed:  true,
}

// ParseNotification verifies a Stripe event and reads what it proves, as
// psp.ParseNotification does for the fake protocol. The signature
// (Stripe-Signature) is verified by stripe-go's webhook package with
// secret, the endpoint's signing secret ("whsec_…"), over the exact body
// received; its time must be within tolerance of now, either way
// (psp.CheckNotificationTime: psp.DefaultNotificationTolerance when
// tolerance is not positive). The event must be of stripe-go's API release
// train (stripego.APIVersion: webhook.ConstructEvent's own check), or it is
// malformed, reason api_version_mismatch: its objects may not read as
// stripe-go reads them.
//
// A refusal is a *psp.NotificationError. A genuine event of a type we do
// not act on, about an object that is not final (a PaymentIntent
// processing or requiring action, a refund pending), or about an object
// without our reference in its metadata, is a psp.Notification of kind
// psp.NotificationIgnored.
func ParseNotification(secret string, header http.Header, body []byte, now time.Time, tolerance time.Duration) (psp.Notification, error) {
	if secret == "" {
		return psp.Notification{}, psp.ErrNoNotificationSecret
	}
	values := header.Values(SignatureHeader)
	switch len(values) {
	case 0:
		return psp.Notification{}, &psp.NotificationError{Kind: psp.ErrNotificationForged, Reason: "signature_missing", Err: webhook.ErrNotSigned}
	case 1:
	default:
		return psp.Notification{}, &psp.NotificationError{Kind: psp.ErrNotificationMalformed, Reason: "signature_header_invalid",
			Err: errors.New("more than one " + SignatureHeader + " header")}
	}

	// The signature first, by stripe-go. Its own check of the time reads
	// the process's clock; the time is checked against now below, once the
	// signature proved it genuine.
	if err := webhook.ValidatePayloadIgnoringTolerance(body, values[0], secret); err != nil {
		return psp.Notification{}, signatureRefusal(err)
	}
	signedAt, err := psp.SignatureTime(values[0])
	if err != nil {
		return psp.Notification{}, err
	}
	if err := psp.CheckNotificationTime(signedAt, now, tolerance); err != nil {
		return psp.Notification{}, err
	}

	event, err := webhook.ConstructEventWithOptions(body, values[0], secret, webhook.ConstructEventOptions{IgnoreTolerance: true})
	if err != nil {
		// The signature verified above, so what failed is the body: JSON
		// stripe-go cannot read, or an API version it refuses, which only
		// reading it without that check tells apart.
		if _, lenient := webhook.ConstructEventWithOptions(body, values[0], secret,
			webhook.ConstructEventOptions{IgnoreTolerance: true, IgnoreAPIVersionMismatch: true}); lenient == nil {
			return psp.Notification{}, &psp.NotificationError{Kind: psp.ErrNotificationMalformed, Reason: "api_version_mismatch", Err: err}
		}
		return psp.Notification{}, &psp.NotificationError{Kind: psp.ErrNotificationMalformed, Reason: "body_invalid", Err: err}
	}
	n, err := notificationOf(event)
	if err != nil {
		return psp.Notification{}, err
	}
	n.SignedAt = signedAt
	return n, nil
}

// signatureRefusal words the webhook package's refusal of a signature.
func signatureRefusal(err error) error {
	switch {
	case errors.Is(err, webhook.ErrNotSigned):
		return &psp.NotificationError{Kind: psp.ErrNotificationForged, Reason: "signature_missing", Err: err}
	case errors.Is(err, webhook.ErrNoValidSignature):
		// No v1 in the header, or none that verifies.
		return &psp.NotificationError{Kind: psp.ErrNotificationForged, Reason: "signature_mismatch", Err: err}
	default:
		return &psp.NotificationError{Kind: psp.ErrNotificationMalformed, Reason: "signature_header_invalid", Err: err}
	}
}

// notificationOf reads a verified event: a PaymentIntent's events through
// chargeOf, a Refund's through refundOf, exactly as an answer or a lookup
// reads them; the object's status, not the event's type, decides.
func notificationOf(event stripego.Event) (psp.Notification, error) {
	switch {
	case event.ID == "":
		return psp.Notification{}, missingField("id")
	case event.Type == "":
		return psp.Notification{}, missingField("type")
	case event.Created == 0:
		return psp.Notification{}, missingField("created")
	}
	n := psp.Notification{EventID: event.ID, EventType: string(event.Type), Created: time.Unix(event.Created, 0)}
	if event.Request != nil {
		n.ProviderKey = event.Request.IdempotencyKey
	}
	if !intentEvents[event.Type] && !refundEvents[event.Type] {
		n.Kind, n.Reason = psp.NotificationIgnored, "unhandled_type"
		return n, nil
	}
	if event.Data == nil || len(event.Data.Raw) == 0 || string(event.Data.Raw) == "null" {
		return psp.Notification{}, missingField("data.object")
	}

	if intentEvents[event.Type] {
		var intent stripego.PaymentIntent
		if err := readObject(event.Data.Raw, "payment_intent", &intent, &intent.Object, &intent.ID); err != nil {
			return psp.Notification{}, err
		}
		n.ProviderID, n.Reference = intent.ID, intent.Metadata[MetadataKey]
		var err error
		n.Charge, err = chargeOf(&intent, "")
		return settled(n, psp.NotificationCharge, err)
	}

	var refund stripego.Refund
	if err := readObject(event.Data.Raw, "refund", &refund, &refund.Object, &refund.ID); err != nil {
		return psp.Notification{}, err
	}
	n.ProviderID, n.Reference = refund.ID, refund.Metadata[MetadataRefundKey]
	var err error
	n.Refund, err = refundOf(&refund)
	return settled(n, psp.NotificationRefund, err)
}

// readObject decodes an event's data.object into v, which must be the
// Stripe object named object and have an id.
func readObject(raw json.RawMessage, object string, v any, gotObject, id *string) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return &psp.NotificationError{Kind: psp.ErrNotificationMalformed, Reason: "body_invalid", Err: err}
	}
	switch {
	case *gotObject != object:
		return &psp.NotificationError{Kind: psp.ErrNotificationMalformed, Reason: "type_mismatch",
			Err: errors.New("data.object is not a " + object)}
	case *id == "":
		return missingField("data.object.id")
	}
	return nil
}

// settled finishes n, whose answer chargeOf or refundOf gave with err. An
// object without a status is malformed. One without our reference is
// nothing to do, and so is one whose state a lookup would not call final
// (err is then an unknown outcome naming the state); otherwise n is
// evidence of kind, its answer already set.
func settled(n psp.Notification, kind psp.NotificationKind, err error) (psp.Notification, error) {
	var pspErr *psp.Error
	switch {
	case errors.As(err, &pspErr) && pspErr.Reason == "malformed_body":
		return psp.Notification{}, missingField("data.object.status")
	case err != nil && pspErr == nil:
		return psp.Notification{}, &psp.NotificationError{Kind: psp.ErrNotificationMalformed, Reason: "body_invalid", Err: err}
	case n.Reference == "":
		n.Kind, n.Reason = psp.NotificationIgnored, "no_reference"
	case err != nil:
		n.Kind, n.Reason = psp.NotificationIgnored, pspErr.Reason
	default:
		n.Kind = kind
		return n, nil
	}
	n.Charge, n.Refund = psp.Charge{}, psp.Refund{}
	return n, nil
}

// missingField is the refusal of an event without field.
func missingField(field string) error {
	return &psp.NotificationError{Kind: psp.ErrNotificationMalformed, Reason: "field_missing", Err: errors.New(field + " is missing")}
}
