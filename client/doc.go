// Package client is the Go client of chargeflow's HTTP API, for merchants:
// create charges and refunds exactly once, capture or cancel the charges
// authorized to be captured later, read them, wait for their outcome, and
// verify the webhooks that announce it. It imports only the standard
// library.
//
// docs/client.md in chargeflow's repository says the same at more length;
// docs/api.md is the HTTP contract underneath.
//
// # A charge, once
//
//	c, err := client.New("https://chargeflow.example.com", os.Getenv("CHARGEFLOW_API_KEY"))
//	if err != nil { … }
//
//	// Make the key once, with the order, and store it before calling.
//	order.ChargeKey = client.NewIdempotencyKey()
//	db.Save(order)
//
//	charge, err := c.CreateCharge(ctx, client.ChargeParams{
//		Amount: 1000, Currency: "USD", PaymentMethod: token,
//		Metadata:       map[string]string{"order": order.ID},
//		IdempotencyKey: order.ChargeKey,
//	})
//	switch {
//	case errors.Is(err, client.ErrOutcomeUnknown):
//		// No answer (timeout, outage): it may have been charged. Call
//		// again later with the same key; never with a new one.
//	case errors.Is(err, client.CodeInvalidField):
//		// A definitive refusal: nothing was stored.
//	case err != nil:
//		…
//	}
//	// charge.Status is pending: the provider is called after the answer.
//	charge, err = c.WaitForOutcome(ctx, charge.ID) // or wait for the webhook
//
// # Authorize now, capture later
//
// A charge created with ChargeParams.CaptureLater is only authorized: the
// provider holds the money and WaitForOutcome returns it in
// StatusRequiresCapture. CaptureCharge then takes all of it or part (the
// rest is released), or CancelCharge releases it all; each is a request of
// its own with its own idempotency key (CaptureParams, CancelParams),
// answered pending, whose outcome WaitForCapture or WaitForCancel waits
// for. When it succeeds the charge is succeeded, with AmountCaptured, or
// canceled. A provider releases a hold it has kept too long (Stripe's
// last 7 days), and a capture after that fails.
//
//	charge, err := c.CreateCharge(ctx, client.ChargeParams{…, CaptureLater: true})
//	charge, err = c.WaitForOutcome(ctx, charge.ID) // requires_capture
//	capture, err := c.CaptureCharge(ctx, charge.ID, client.CaptureParams{
//		Amount: 600, IdempotencyKey: order.CaptureKey,
//	})
//	capture, err = c.WaitForCapture(ctx, capture.ID) // succeeded
//
// # Why the idempotency key is made once
//
// Every POST carries an Idempotency-Key. The API stores the first request
// with a key together with the charge it made, in one transaction, and
// answers every later request with that key with the same charge (a replay,
// Charge.Replayed) — so a request sent twice charges once. That only works
// if the retry carries the same key: a new key is a new charge.
//
// The client therefore makes the key once per CreateCharge call (or takes
// ChargeParams.IdempotencyKey) and sends it, with the same bytes, on every
// attempt until it has a definitive answer. That covers the failures inside
// one call. It cannot cover the merchant's own process dying mid-call: the
// key lived in its memory, and a restarted process that charges the order
// again with a new key may charge twice. So make the key with
// NewIdempotencyKey when the order is made, store it with the order, and
// pass it on every call for that order; after a crash, or after an error
// wrapping ErrOutcomeUnknown, the call with the stored key returns the
// charge if one was made and makes it if not. Keys are remembered for 24
// hours by default; retry within that. The same holds for refunds
// (RefundParams.IdempotencyKey), captures and cancels.
//
// # What is retried, and what is not
//
// Retried, with the same key and body, until a definitive answer or until
// WithMaxElapsed (default 30 s) or the context ends:
//
//   - network errors: a refused or reset connection, a timeout, and a
//     connection lost after the request was sent, whose outcome is unknown
//     — safe, because the retry with the same key gets the charge if the
//     first attempt made it;
//   - 409 request_in_progress: another request with the key is still in its
//     transaction; the retry gets its answer;
//   - 429 (rate_limited, too_many_auth_failures) and 503
//     (database_unavailable): nothing was stored;
//   - every other 5xx, and answers that are not problem documents with a 5xx
//     status (a proxy's 502).
//
// The waits grow exponentially with full jitter: attempt n waits a random
// time from zero to min(cap, base·2^(n-1)) (WithBackoff; defaults 100 ms and
// 5 s), so that clients failing together do not come back together; a
// Retry-After the API sent is a floor under that wait. No wait is begun that
// would end after the max elapsed time.
//
// Not retried: every other 4xx. It is returned at once as an *Error carrying
// the problem's Status, Code, Detail and Field, and for a create it is
// definitive — the API stored nothing (docs/api.md), and the same request
// would be refused again. One exception: a 401 or 403 after an attempt whose
// answer was lost. The API checks the credential before it looks the key
// up, so that answer says nothing of what the lost attempt did, and the
// create returns it wrapped in ErrOutcomeUnknown.
//
// # Errors
//
// Every problem code of the API is a constant of type Code, and a Code is an
// error: errors.Is(err, client.CodeRefundExceedsCharge) tests a code through
// any wrapping, and errors.As(err, &apiErr) with apiErr of type *Error reads
// the details. One set of names serves both, where separate sentinel errors
// would double the list, and a helper such as IsCode would only repeat
// errors.Is. A create that stopped without an answer wraps
// ErrOutcomeUnknown and the last attempt's error (for instance an *Error
// with CodeDatabaseUnavailable), so both tests work on it.
//
// The client never logs. Its errors carry statuses, codes, the API's
// details (which never quote a request's values) and paths, never the API
// key, an idempotency key or a body. To watch the attempts of a call — for
// metrics, to log retries, or to keep the API's answer byte for byte — give
// it a context made with WithExchangeObserver.
//
// # Webhooks
//
// chargeflow signs each delivery with the endpoint's secret ("whsec_…") by
// the Standard Webhooks scheme. Verify it before anything else, on the body
// exactly as received:
//
//	func receive(w http.ResponseWriter, r *http.Request) {
//		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
//		if err != nil { … }
//		if err := client.VerifyWebhook(secret, r.Header, body, 5*time.Minute); err != nil {
//			http.Error(w, "invalid signature", http.StatusBadRequest)
//			return
//		}
//		var event client.Event
//		if err := json.Unmarshal(body, &event); err != nil { … }
//		// Act on event.ID once: a delivery may come more than once.
//		w.WriteHeader(http.StatusNoContent)
//	}
//
// examples/merchant in chargeflow's repository is a small merchant server
// that charges through this client and receives its webhooks.
package client
