// Package stripe is the psp.Provider, psp.Refunder and psp.Capturer for
// Stripe, built on
// stripe-go: a charge is one PaymentIntent created and confirmed in one
// request, and a lookup retrieves a PaymentIntent by id or finds it by our
// reference in its metadata; a refund is one Refund of a PaymentIntent,
// and its lookup retrieves the Refund by id or finds it by our reference
// among the intent's refunds. Import it as pspstripe; the package name
// clashes with stripe-go's.
//
// Every answer, a charge's or a refund's, is classified by one pure
// function, classify, into the four classes of package psp (a charge or a
// refund, a decline or a failed refund, ErrNotApplied, ErrUnknownOutcome),
// with a stable snake_case reason; docs/provider.md ("The Stripe adapter")
// has the tables. Two rules carry the weight. An
// answer is "not applied" only when Stripe refused the request before
// executing it (authentication, validation, rate limiting, a lock timeout):
// Stripe saves an idempotency key's answer once execution begins, so those
// are the answers a re-send with the same key can turn into a charge
// without charging twice. Everything after execution may have begun (a
// timeout once connected, any 5xx, a reused key, a key still in flight, an
// answer we cannot read) is an unknown outcome that only a lookup settles.
//
// Exactly one attempt per call: stripe-go's own retries are off
// (MaxNetworkRetries 0), and the HTTP client under it cannot replay a
// request either (net/http silently re-sends a POST carrying an
// Idempotency-Key on a broken reused connection unless GetBody is nil; the
// adapter's transport clears it, as psp.Client does). Each call is bounded
// by Timeout through its context, never by a retry budget. stripe-go's
// logger is silenced: it would log error bodies, which quote the
// PaymentIntent and its payment method.
//
// # What a lookup proves
//
// The adapter declares a strongly consistent lookup by reference, and that
// is honest because of which Stripe endpoint proves a not-found. Stripe's
// search (GET /v1/payment_intents/search) can query metadata directly but
// is eventually consistent: Stripe documents that new data is usually
// searchable within a minute and can lag by an hour in outages. So a search
// hit proves the intent exists (its state is then read by a retrieve, which
// is consistent), and a search miss proves nothing. Only then does Find
// scan: the list endpoint (GET /v1/payment_intents) reads the same store as
// a retrieve and is consistent, but cannot filter by metadata, so Find
// lists every PaymentIntent created in [FirstSent − ClockSkew, LastSent +
// Timeout + ApplyDelay + ClockSkew], page by page with starting_after, and
// matches the metadata key chargeflow_charge itself. Only a complete scan,
// every page read and decoded, with no match is psp.ErrNotFound; two
// matches, in the search or in the scan, would be a double charge and are
// an unknown outcome (multiple_matches) for a person, never a pick.
// Searching first keeps a lookup's cost from growing with the account's
// charge rate: a scan reads every intent created in its window.
//
// What would break the promise is a created-time window that misses the
// intent: Stripe stamps created when it executes the request, on its own
// clock, while FirstSent and LastSent are ours. Stripe cannot execute a
// send before we make it, and executes the last one within the call
// timeout and the apply delay the reconciler assumes (--max-apply-delay,
// which internal/app passes as ApplyDelay); ClockSkew, ten seconds by
// default (--stripe-clock-skew), covers the clocks: two NTP-disciplined
// clocks are milliseconds apart. Too small a skew can turn a charge into a
// false not-found, which inside the key window costs a re-send Stripe
// answers with the original intent; too large a one makes every scan read
// more intents. A scan longer than MaxPages pages (5,000 intents in one
// window: about 160 charges a second with the defaults), or one that runs
// out of time, is an unknown outcome rather than a not-found.
// When an earlier answer named the PaymentIntent's id, Find retrieves it by
// that id instead, which is strongly consistent on its own.
//
// The key window is 24 hours: Stripe documents that it may prune an
// idempotency key once it is at least 24 hours old, so that is all it
// promises.
//
// # Refunds
//
// Refund creates one Refund (POST /v1/refunds) of the PaymentIntent the
// charge made, with the refund's provider key as its Idempotency-Key and
// our refund id in its metadata (chargeflow_refund), under the same
// one-attempt transport. Stripe's succeeded is a refund; failed and
// canceled are a failed refund with Stripe's failure_reason; pending and
// requires_action are unknown outcomes naming the refund. A refund Stripe
// refuses for the state of the charge (already refunded, more than is
// left, disputed, an intent that did not succeed: refundRefusals) is a
// failed refund with Stripe's code, not "not applied": docs/refunds.md
// says why and what the codes rest on. FindRefund retrieves the refund by
// id when an answer named it, else lists the intent's refunds
// (GET /v1/refunds?payment_intent=…, consistent like a retrieve; a charge
// has few refunds), every page, and matches our reference: none is a
// not-found, two are a double refund for a person.
//
// # Captures
//
// A charge to capture later is the same PaymentIntent created with
// capture_method=manual, authorized and held (requires_capture). Capture
// is POST /v1/payment_intents/{id}/capture with amount_to_capture, Cancel
// POST /v1/payment_intents/{id}/cancel, each with the operation's provider
// key as its Idempotency-Key; their answer, and a lookup's, is the intent
// read by chargeOf: for a manual intent requires_capture is held,
// succeeded captured (amount_received), canceled released, by a cancel or
// when the seven-day authorization expired. Stripe's refusal for the
// intent's state (payment_intent_unexpected_state) or the amount
// (amount_too_large) is psp.OperationRequest.Refused with Stripe's code;
// one that shows the hold expired (the intent canceled automatic, or
// charge_expired_for_capture) with psp.CodeHoldExpired, as every provider's.
//
// # Events
//
// ParseNotification verifies a Stripe event with stripe-go's webhook
// package (the Stripe-Signature, and the event's api_version, which must be
// of stripe-go's release train) and reads it through chargeOf and refundOf,
// the mapping of an answer, into a psp.Notification: a PaymentIntent's
// events and a Refund's, by the object's status; anything else, or an
// object not final or not ours, is nothing to do (docs/notifications.md).
//
// Telemetry is psp's own (psp.Telemetry): a "psp.charge", "psp.lookup",
// "psp.refund", "psp.refund_lookup", "psp.capture" or "psp.cancel" span
// per call (a lookup's pages are
// one span) and chargeflow.provider.call.duration, labelled with what the
// answer proved. Neither they nor any error carry the payment method, the
// API key, the metadata or Stripe's error messages (which can quote a
// payment method or a parameter).
package stripe
