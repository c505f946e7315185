package client

import "context"

// Exchange is one HTTP exchange of a call, as an observer sees it: a call
// makes one per attempt (docs/client.md, "What is retried").
type Exchange struct {
	// Method and Path are the request's ("POST", "/v1/charges").
	Method, Path string
	// Attempt counts the call's attempts from 1.
	Attempt int
	// Status is the answer's HTTP status; 0 when no whole answer came (Err
	// says why: the request failed, or the answer was cut short).
	Status int
	// Replayed is the answer's Idempotent-Replayed: true, the stored
	// answer to an earlier request with the idempotency key.
	Replayed bool
	// Body is the answer's body exactly as received, nil without one. It
	// is the observer's to read during the call, not to keep: copy what
	// must outlive it. A charge's body holds its description and metadata,
	// which a merchant may not want in its logs.
	Body []byte
	// Err is the network error of an exchange without an answer.
	Err error
}

type observerKey struct{}

// WithExchangeObserver returns a context under which every call of the
// client reports each of its exchanges to observe, once the answer is read
// (or failed to come) and before the client decides whether to retry: to
// count attempts and statuses in a merchant's metrics, log retries, or keep
// the API's answer byte for byte (the body a replay must repeat). observe
// runs on the calling goroutine and must not block; it cannot change what
// the call does. Like net/http/httptrace's hooks, it is per call, carried
// by the context, so calls made with other contexts are not observed.
func WithExchangeObserver(ctx context.Context, observe func(Exchange)) context.Context {
	return context.WithValue(ctx, observerKey{}, observe)
}

// observe reports e to the context's observer, if any.
func observe(ctx context.Context, e Exchange) {
	if fn, ok := ctx.Value(observerKey{}).(func(Exchange)); ok && fn != nil {
		fn(e)
	}
}
