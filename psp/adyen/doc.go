// Package adyen is the psp.Provider, psp.Refunder and psp.Capturer for
// Adyen's Checkout API v71, written with net/http and encoding/json against Adyen's
// published description of the API (psp/adyen/checkoutspec holds it, and
// the tests hold every request the adapter sends to it): Adyen's own Go
// library is not served by the module proxy this project builds from.
// Import it as pspadyen where the name would be ambiguous.
//
// A charge is one POST /payments of a stored card (paymentMethod "scheme"
// with its storedPaymentMethodId), charged as an unscheduled card-on-file
// payment without a shopper present (shopperInteraction ContAuth,
// recurringProcessingModel UnscheduledCardOnFile), with the provider key
// as Idempotency-Key, our charge id as reference and the tenant as
// shopperReference and in metadata. Adyen identifies the payment by its
// pspReference and answers with a resultCode; classify, one pure function,
// turns every answer into the four classes of package psp with a stable
// reason (docs/provider.md, "The Adyen adapter", has the table). The rule
// behind it: only what Adyen refused before processing (authentication, a
// request it could not read, a validation error, rate limiting) or what
// never reached it is "not applied"; a request still in flight under the
// same key (errorCode 704), any 5xx, a timeout once connected, an answer
// that is not final or cannot be read is an unknown outcome.
//
// # No lookup: the re-send and the notification
//
// The Checkout API can neither retrieve a payment nor find one by our
// reference. A lost answer is learned in one of two ways: by sending the
// same request with the same key again inside the key window, which Adyen
// answers with the first request's result (or refuses with 704 while the
// first is still being processed), or from Adyen's signed AUTHORISATION
// notification (ParseNotifications). So Capabilities declares
// psp.LookupByResend, and Find and FindRefund answer an unknown outcome
// (no_lookup) without sending anything, never psp.ErrNotFound; the caller
// makes the re-send through Charge, Refund, Capture or Cancel with the
// row's own request. The key window declared is seven days (DefaultKeyWindow), the minimum
// Adyen has documented; its documentation now promises 31.
//
// # Refunds
//
// A refund is one POST /payments/{pspReference}/refunds. Adyen answers 201
// with status "received" and settles the refund later, in a REFUND
// notification; so a received refund is an unknown outcome naming the
// refund's pspReference (refund_received), never a refund, and a refund
// that failed at Adyen arrives as a REFUND notification whose success is
// "false".
//
// # Authorise now, capture later
//
// A charge sent with CaptureLater asks for manual capture (additionalData
// manualCapture "true"), and its Authorised is psp.StatusRequiresCapture.
// Capture is one POST /payments/{pspReference}/captures of the amount,
// Cancel one POST /payments/{pspReference}/cancels, each with the
// operation's key and our operation's id as reference. Adyen acknowledges
// both as it does a refund (201, status "received"), so a received one is
// an unknown outcome naming the modification's pspReference
// (capture_received, cancel_received). Its outcome comes only in a CAPTURE
// (or CAPTURE_FAILED) or CANCELLATION notification: a re-send under the
// same key is acknowledged again and applies nothing more. An
// AUTHORISATION does not say whether its payment was captured with it, so
// its notification is marked psp.Notification.Authorization, which the
// settler reads for the charge it is about (AnswerFor). The hold window
// declared is seven days (DefaultHoldWindow), the card schemes' shortest
// for such a payment, not Adyen's own 28.
//
// # Exactly one attempt, nothing after the timeout
//
// Each call is one request through psp.RoundTrip (GetBody cleared, so
// net/http cannot re-send it on a broken keep-alive connection), on a
// client that never follows a redirect (psp.NewHTTPClient) and, by
// default, on psp.NewTransport: HTTP/1.1 only, every connection lingering
// 0, so a call that timed out is aborted and none of its bytes reach Adyen
// later. The call is bounded by Timeout through its context.
//
// Telemetry is psp's own (psp.Telemetry): a "psp.charge", "psp.refund",
// "psp.capture" or "psp.cancel" span per call and
// chargeflow.provider.call.duration, labelled with what the answer
// proved. Neither they nor any error carry the API key, the payment
// method, the metadata, or Adyen's free text (a refusalReason, an error's
// message, a notification's reason).
package adyen
