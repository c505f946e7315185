package stripe

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"

	"github.com/chargeflow/chargeflow/psp"
)

// observation is what the transport saw of one request beneath stripe-go,
// which reports a connection error, a timeout and an unreadable body alike
// as a bare error, and keeps no status for an answer it cannot decode.
type observation struct {
	// header is added to the request: the trace context.
	header http.Header

	// gotConn and wroteRequest are set by httptrace's hooks, which run on
	// the transport's goroutines.
	gotConn, wroteRequest atomic.Bool

	mu       sync.Mutex
	status   int
	replayed bool
	bodyErr  error
}

// observationKey is the context key of a request's observation.
type observationKey struct{}

// observe returns ctx carrying a new observation of the one request made
// under it, with header added to that request.
func observe(ctx context.Context, header http.Header) (context.Context, *observation) {
	obs := &observation{header: header}
	trace := &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { obs.gotConn.Store(true) },
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				obs.wroteRequest.Store(true)
			}
		},
	}
	ctx = httptrace.WithClientTrace(ctx, trace)
	return context.WithValue(ctx, observationKey{}, obs), obs
}

// attempt returns what was observed as an attempt of op whose stripe-go
// call returned err.
func (o *observation) attempt(op op, err error) attempt {
	o.mu.Lock()
	defer o.mu.Unlock()
	return attempt{
		op:           op,
		gotConn:      o.gotConn.Load(),
		wroteRequest: o.wroteRequest.Load(),
		status:       o.status,
		replayed:     o.replayed,
		bodyErr:      o.bodyErr,
		err:          err,
	}
}

// answered records the answer's status and whether Stripe replayed it.
func (o *observation) answered(resp *http.Response) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.status = resp.StatusCode
	o.replayed = resp.Header.Get("Idempotent-Replayed") == "true"
}

// readFailed records the first error of reading the answer's body.
func (o *observation) readFailed(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bodyErr == nil {
		o.bodyErr = err
	}
}

// oneAttempt is the transport under stripe-go. It makes sure net/http sends
// each request at most once and records what it observed.
type oneAttempt struct {
	next http.RoundTripper
}

// RoundTrip sends a copy of req without GetBody. stripe-go sets GetBody on
// every request with a body, and net/http treats a POST that carries an
// Idempotency-Key header as replayable (Request.isReplayable): when a
// reused keep-alive connection breaks, the transport would silently send
// it again on a new one. That second send would be invisible to the
// caller, who recorded one attempt. Without GetBody the request is not
// replayable, and a broken connection reaches classify as an unknown
// outcome.
func (t oneAttempt) RoundTrip(req *http.Request) (*http.Response, error) {
	obs, _ := req.Context().Value(observationKey{}).(*observation)
	sent := *req
	sent.GetBody = nil
	if obs != nil && len(obs.header) > 0 {
		sent.Header = req.Header.Clone()
		for k, vs := range obs.header {
			sent.Header[k] = vs
		}
	}
	resp, err := t.next.RoundTrip(&sent)
	if err != nil || obs == nil {
		return resp, err
	}
	obs.answered(resp)
	resp.Body = observedBody{ReadCloser: resp.Body, obs: obs}
	return resp, nil
}

// observedBody records the error of reading an answer's body, which
// stripe-go returns bare.
type observedBody struct {
	io.ReadCloser
	obs *observation
}

func (b observedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.obs.readFailed(err)
	}
	return n, err
}

// newHTTPClient returns the HTTP client stripe-go is given: psp's
// (psp.NewHTTPClient: a shallow copy of base, or a client with its own
// pool, that never follows a redirect) with oneAttempt as its transport.
func newHTTPClient(base *http.Client) *http.Client {
	client := psp.NewHTTPClient(base)
	next := client.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	client.Transport = oneAttempt{next: next}
	return client
}
