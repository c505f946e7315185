package fakepsp

import (
	"encoding/json"
	"time"

	"github.com/chargeflow/chargeflow/psp"
)

// This file is the Stripe protocol's notifications: Stripe's event object,
// signed in Stripe-Signature (docs/notifications.md, "Stripe's events").
// The queue, the retries and the faults are the shared ones (notify.go).

// StripeSignatureHeader carries the signature of a Stripe event.
const StripeSignatureHeader = "Stripe-Signature"

// StripeAPIVersion is the API version the fake's events say their objects
// are rendered in: stripe-go v82's (stripe.APIVersion), whose
// webhook.ConstructEvent refuses an event of another release train.
const StripeAPIVersion = "2025-08-27.basil"

// The event types the fake sends, Stripe's (stripe/openapi; docs.stripe.com
// "Types of events").
const (
	stripeEventIntentSucceeded  = "payment_intent.succeeded"
	stripeEventIntentFailed     = "payment_intent.payment_failed"
	stripeEventIntentCapturable = "payment_intent.amount_capturable_updated"
	stripeEventIntentCanceled   = "payment_intent.canceled"
	stripeEventRefundCreated    = "refund.created"
)

// stripeEvent is Stripe's event object, with the fields the fake has
// values for.
type stripeEvent struct {
	ID              string             `json:"id"`
	Object          string             `json:"object"`
	APIVersion      string             `json:"api_version"`
	Created         int64              `json:"created"`
	Data            stripeEventData    `json:"data"`
	Livemode        bool               `json:"livemode"`
	PendingWebhooks int                `json:"pending_webhooks"`
	Request         stripeEventRequest `json:"request"`
	Type            string             `json:"type"`
}

// stripeEventData is an event's data: the object as it was when the event
// happened.
type stripeEventData struct {
	Object any `json:"object"`
}

// stripeEventRequest is the API request that caused an event. The fake
// keeps no request ids, so id is null; the idempotency key is the one the
// charge or refund was created with.
type stripeEventRequest struct {
	ID             *string `json:"id"`
	IdempotencyKey string  `json:"idempotency_key"`
}

// stripeNotification words a notification as Stripe's event: a
// PaymentIntent that succeeded (payment_intent.succeeded), was authorized
// to be captured later (payment_intent.amount_capturable_updated) or
// whose confirmation was declined (payment_intent.payment_failed, the
// intent left in requires_payment_method with the decline as its
// last_payment_error); one captured (payment_intent.succeeded) or
// released by a cancel (payment_intent.canceled), under the capture's or
// cancel's key, the request that caused it; or a refund created
// (refund.created, succeeded at once, as the fake's refunds are). The
// object is the one every read of that state shows (stripeIntent,
// stripeRefundObject). A hold that expires is not notified.
func stripeNotification(c *record, id string, created time.Time, _ func([]byte) string) (event, bool, error) {
	var typ string
	var object any
	switch {
	case c.isCharge() && c.Status == psp.StatusSucceeded:
		typ, object = stripeEventIntentSucceeded, stripeIntent(c, holdState{status: c.Status})
	case c.isCharge() && c.Status == psp.StatusRequiresCapture:
		typ, object = stripeEventIntentCapturable, stripeIntent(c, holdState{status: c.Status})
	case c.isCharge():
		typ, object = stripeEventIntentFailed, stripeIntent(c, holdState{status: c.Status})
	case c.Kind == kindCapture:
		typ, object = stripeEventIntentSucceeded, stripeIntent(c.charge, c.leftHeld())
	case c.Kind == kindCancel:
		typ, object = stripeEventIntentCanceled, stripeIntent(c.charge, c.leftHeld())
	case c.isRefund():
		typ, object = stripeEventRefundCreated, stripeRefundObject(c)
	default:
		return event{}, false, nil
	}
	body, err := json.Marshal(stripeEvent{
		ID:              id,
		Object:          "event",
		APIVersion:      StripeAPIVersion,
		Created:         created.Unix(),
		Data:            stripeEventData{Object: object},
		PendingWebhooks: 1,
		Request:         stripeEventRequest{IdempotencyKey: c.IdempotencyKey},
		Type:            typ,
	})
	return event{typ: typ, body: body}, true, err
}
