// Package psp is the payment service provider as the orchestrator needs it: one
// charge call that makes exactly one attempt, one lookup by provider idempotency
// key, and one function, Classify, that turns whatever came back into an answer
// the orchestrator can act on.
//
// Every answer falls into exactly one of four classes:
//
//   - A Charge with StatusSucceeded: the provider moved money.
//   - A Charge with StatusFailed and a DeclineCode: the provider declined. A
//     decline is a value, not an error; it is as final as a success.
//   - An *Error whose Kind is ErrNotApplied: it is proven that the provider did
//     not apply the request (the connection was never established, or the
//     provider answered with a status that means "refused before processing",
//     such as 429). Sending again with the same key is safe and cannot double
//     charge.
//   - An *Error whose Kind is ErrUnknownOutcome: the request may or may not have
//     been applied (a timeout once a connection was obtained, a reset after the
//     request was sent, any 5xx, a malformed success body, ...). Only a lookup
//     by key can settle it.
//
// Lookup adds a fifth answer, ErrNotFound, returned only when the provider
// itself proved that no charge exists for the key (a 404 carrying the
// provider's charge_not_found error code). A bare 404, for example from a
// wrong route or a proxy, proves nothing and is reported as ErrUnknownOutcome.
// Lookup never returns ErrNotApplied: a lookup that could not be made says
// nothing about the charge.
//
// The client never retries: retries belong to the caller (River in
// chargeflow), which records the state it is in before each attempt. To keep
// that promise it also switches off the silent re-send that net/http performs
// for requests carrying an Idempotency-Key header; see RoundTrip.
//
// Client is also a Refunder (docs/refunds.md): Refund is one POST
// /v1/refunds and FindRefund a lookup by key, classified by ClassifyRefund,
// which applies Classify's rules to refunds with one more: a 409
// refund_exceeds_charge or charge_not_refundable is a failed refund, the
// provider's decisive refusal, not an error.
//
// Given a TracerProvider and a MeterProvider in Config, every call is one
// client span ("psp.charge", "psp.lookup", "psp.refund",
// "psp.refund_lookup") and one sample of MetricCallDuration, both labelled
// with the call's Outcome; the call sends the W3C traceparent header.
// Neither carries the request's payment method, reference or key.
//
// ParseNotification is the receiving side of the provider's notifications
// (docs/notifications.md): it verifies a notification's PSP-Signature over
// the exact body and its time against the caller's clock, and reads it into
// a Notification, evidence exactly like a lookup's answer. A refusal is a
// *NotificationError of kind ErrNotificationForged, ErrNotificationExpired
// or ErrNotificationMalformed; a genuine notification we do not act on is
// a Notification of kind NotificationIgnored, not an error.
//
// The wire protocol is the one served by chargeflow/fakepsp and described in
// docs/provider.md:
//
//	POST /v1/charges                 Idempotency-Key: <key>, X-Tenant-Tag: <tag>
//	     {"amount","currency","payment_method","reference"}
//	  -> 200 {"id","status","amount","currency","reference","decline_code"?}
//	GET  /v1/charges/by-key/{key}
//	  -> 200 the same object, or 404 {"error":{"code":"charge_not_found"}}
//	POST /v1/refunds                 Idempotency-Key: <key>, X-Tenant-Tag: <tag>
//	     {"charge","amount","reference","reason"?}
//	  -> 200 {"id","status","charge","amount","currency","reference","failure_code"?},
//	     or 409 {"error":{"code":"refund_exceeds_charge"|"charge_not_refundable"}}
//	GET  /v1/refunds/by-key/{key}
//	  -> 200 the same refund, or 404 {"error":{"code":"refund_not_found"}}
package psp
