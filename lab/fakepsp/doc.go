// Package fakepsp is a fake payment service provider that behaves like a real
// one where it matters for an orchestrator: it de-duplicates by idempotency
// key, keeps a durable ledger that survives restarts, and fails in every way
// a network and a provider can fail, on demand and reproducibly.
//
// It serves one of three wire protocols (Config.Protocol) from the same
// ledger, faults and admin endpoints. ProtocolFake is the protocol of
// docs/provider.md, the one chargeflow/psp speaks:
//
//	POST /v1/charges                  create a charge (Idempotency-Key required); "capture": false authorizes only
//	GET  /v1/charges/by-key/{key}     look a charge up by its idempotency key
//	GET  /v1/charges/{id}             look a charge up by its id
//	POST /v1/charges/{id}/capture     capture an authorized charge, in part or in full
//	POST /v1/charges/{id}/cancel      release an authorized charge
//	POST /v1/refunds                  refund a charge, in part or in full
//	GET  /v1/refunds/by-key/{key}     look a refund up by its idempotency key
//
// ProtocolStripe is the subset of Stripe's API that docs/provider.md ("The
// Stripe protocol") lists, good enough for stripe-go pointed at the fake:
//
//	POST /v1/payment_intents          create and confirm a PaymentIntent (form-encoded); capture_method=manual authorizes only
//	GET  /v1/payment_intents/{id}     retrieve one, strongly consistent
//	POST /v1/payment_intents/{id}/capture  capture an authorized one, amount_to_capture or all
//	POST /v1/payment_intents/{id}/cancel   release an authorized one
//	GET  /v1/payment_intents/search   search by metadata, eventually consistent
//	GET  /v1/payment_intents          list newest first, strongly consistent
//	POST /v1/refunds                  refund a PaymentIntent (form-encoded)
//	GET  /v1/refunds/{id}             retrieve a refund, strongly consistent
//	GET  /v1/refunds                  list refunds newest first, of one PaymentIntent or all
//
// ProtocolAdyen is the part of Adyen's Checkout API v71 that docs/provider.md
// ("The Adyen protocol") lists, every answer one that Adyen's published
// description allows but a 404 and not_processed's 429, which it lists
// for no route:
//
//	POST /v71/payments                              a payment with a stored card (JSON)
//	POST /v71/payments/{paymentPspReference}/refunds a refund, acknowledged 201, told by notification
//
// Every protocol shares the admin endpoints:
//
//	GET  /_admin/ledger[?all=true]    the ground truth: charges that moved money, with their refunds, captures and cancels
//	GET  /_admin/audit                charges per key, refunds per reference, holds, totals per tenant tag and currency
//	GET  /_admin/faults               the fault schedule and how often each fault fired
//	POST /_admin/faults               replace the fault schedule
//	GET  /_admin/notifications        notifications made, sent, failed, pending, and per fault
//
// # Charges
//
// The test payment method decides the outcome: PaymentMethodVisa and
// PaymentMethodMastercard succeed, the PaymentMethodDeclined family declines
// with its decline code, and any other method declines with
// invalid_payment_method. A decline is a 200 with status "failed". A known key
// answers its original result (with Idempotent-Replayed: true); a known key
// with different parameters is 409 idempotency_key_reused. Errors are JSON
// {"error":{"code","message","param"?}}.
//
// # Refunds
//
// A refund goes through the pipeline a charge goes through, with its own
// fault rules ("on": "refund"): the same faults, key rules and ledger. It is
// decided under the lock every refund of the charge is decided under, so a
// charge is never refunded beyond its amount, however many refunds race. A
// refund beyond what is left of the charge, or of a charge the provider does
// not hold or that was declined, is refused: nothing is applied, and the
// refusal is the key's saved answer (409 refund_exceeds_charge,
// charge_not_refundable; Stripe's own errors under the Stripe protocol;
// under Adyen's the 201 that acknowledges every refund, the refusal told
// by a REFUND notification). docs/refunds.md is the contract.
//
// # Authorize now, capture later
//
// A charge asked to be captured later that the payment method lets
// through is only authorized: it is held (requires_capture) until a
// capture takes some or all of it, the rest released, or a cancel
// releases it, each an operation with its own key through the pipeline of
// a charge (its own fault rules, "on": "capture" and "cancel"), decided
// under the lock every operation on the charge is decided under, so only
// one of any number racing settles the hold. A hold is kept for
// Config.HoldWindow (chargeflow fakepsp --hold-window, seven days by
// default) from the authorization, a time its ledger line records: past
// it the provider has released the hold itself. Nothing is written then:
// every read and every operation works the state out from the clock, so a
// lookup after the window says canceled (hold_expired) and a capture is
// refused. A refused capture or cancel (the hold expired, the charge is
// not held, more than was authorized) applies nothing and is the key's
// saved answer, as a refused refund is; refunds apply to what was
// captured. Each protocol words the states and refusals its own way:
// psp's codes in the fake protocol, Stripe's PaymentIntent statuses and
// errors in Stripe's.
//
// # Ledger
//
// Every processed charge, succeeded, held or declined, and every refund,
// capture and cancel is appended to the ledger file as one JSON line and
// fsynced before anyone sees it: before the answer, a replay, a lookup or
// the admin ledger. A refund, a capture and a cancel are lines of their
// own after their charge's, so the file stays append-only. Concurrent requests share fsyncs (group commit). New replays
// the file, so charges, holds, refunds, captures, cancels, keys, key
// expiries, refusals and replayed errors survive a restart; a torn last line left by a crash is cut off and
// ignored. One Server must own a ledger file at a time.
//
// # Faults
//
// A Schedule lists rules; for each call the matching rules are checked in
// order, each draws once from a random source seeded by Schedule.Seed, and the
// first that fires applies. The Fault constants document what each fault
// does. The schedule is set with Config.Faults or POST /_admin/faults, and
// "dedupe": false switches the provider's own key de-duplication off, so that
// only the orchestrator can prevent a double charge.
//
// Faults are drawn before the key is looked at, so a sequential stream of
// calls fires the same faults whatever the ledger holds. For a key the
// provider already knows, a fault that applies a charge applies nothing new:
// the original charge stands and the fault only changes how the answer is
// delivered (apply_then_timeout holds and drops, apply_then_reset resets,
// error_after_apply answers 500 this once, key_expiry leaves the key's window
// as it was). The faults that act before applying (drop_before_apply,
// error_before_apply, not_processed, delayed_apply) act for a known key too,
// and apply nothing.
//
// # Notifications
//
// With Config.Notifications (chargeflow fakepsp --webhook-url) the provider
// POSTs a signed notification of every charge it applies, authorizes or
// declines, every capture and cancel it applies, and every refund it
// applies (under Adyen's protocol, or refuses), in its
// protocol's words: the fake protocol's events (PSP-Signature), Stripe's
// (Stripe-Signature) or Adyen's standard webhook (its HMAC in the item). They are queued in
// memory and sent by one sender, never on the way of an answer, and retried
// with backoff for a bounded time; a provider that closes loses what it had
// not sent. Rules "on": "notification" duplicate, reorder, delay, drop or
// forge them, and GET /_admin/notifications counts them
// (docs/notifications.md).
//
// # Stripe's key rules
//
// Under the Stripe protocol a key counts from the moment its request starts
// executing, as Stripe's idempotency layer does: a concurrent request with
// the key gets 409 instead of waiting, the first answer is saved even when
// it is error_before_apply's 500 (a saved error survives a restart like a
// charge), and a known key is answered from its saved answer before
// anything executes, so only latency and the faults on the way back
// (apply_then_timeout, apply_then_reset) act on it. A request refused before
// execution (validation, not_processed, drop_before_apply) saves nothing.
//
// # Adyen's key rules
//
// Under the Adyen protocol a key is locked from the start of execution too,
// refused 422 704 to a concurrent request, and the result of an execution
// is saved and answered to every later request with the key, whatever its
// body: Adyen does not document comparing bodies. error_before_apply's 500
// comes in front of execution, saving nothing, and a replay carries no
// marker. Adyen has no lookup, so lookup faults have nothing to act on.
//
// Logs name keys, references and faults, never payment methods,
// descriptions, metadata, API keys or notification secrets.
package fakepsp
