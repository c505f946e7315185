package psp

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

const (
	// DefaultBaseURL is where the bundled fake provider listens by default.
	DefaultBaseURL = "http://127.0.0.1:9090"

	// DefaultTimeout bounds one provider call when Config.Timeout is zero.
	// It is the call timeout of the whole system: the worker's job timeout
	// and the reconciler's apply window and staleness are derived from the
	// client's Timeout, never configured beside it.
	DefaultTimeout = 10 * time.Second

	// DefaultKeyWindow is the key window a Client declares unless told
	// otherwise: what the bundled fake promises (it remembers keys for as
	// long as its ledger lives, unless its key_expiry fault says less), and
	// what the large providers document.
	DefaultKeyWindow = 24 * time.Hour

	// maxBodyBytes bounds how much of a response is read; a provider answer
	// is a few hundred bytes, and a larger one is not a charge.
	maxBodyBytes = 1 << 20
)

// Config configures a Client. The zero value talks to DefaultBaseURL.
type Config struct {
	// BaseURL is the provider's base URL, such as "http://127.0.0.1:9090".
	// Defaults to DefaultBaseURL.
	BaseURL string

	// Timeout bounds each call, from dialing to the last byte of the body.
	// It is applied through the call's context, never as a retry budget.
	// Defaults to DefaultTimeout.
	Timeout time.Duration

	// Capabilities are what this provider promises; see Provider. Name
	// defaults to "fakepsp", Lookup to LookupByKey, Consistency to Strong
	// and KeyWindow to DefaultKeyWindow, which is what the bundled fake
	// offers. Refunds is always true: the Client is a Refunder; so is
	// Notifications: the protocol has them (ParseNotification); and so is
	// SeparateCapture: the Client is a Capturer. HoldWindow is the
	// provider's (the fake's --hold-window); zero means DefaultHoldWindow,
	// the fake's default.
	Capabilities Capabilities

	// HTTPClient makes the calls; wrap its Transport for transport-level
	// instrumentation beyond the call spans below. The Client uses a
	// shallow copy that never follows redirects, since a redirected POST
	// would be re-sent as a GET. Defaults to a client with its own
	// connection pool and no proxy.
	HTTPClient *http.Client

	// TracerProvider makes one client span per call, "psp.charge",
	// "psp.lookup", "psp.refund", "psp.refund_lookup", "psp.capture" or
	// "psp.cancel", that records what
	// the answer proved (see Outcome), and
	// the call sends the W3C traceparent header so a provider that traces
	// joins the caller's trace. Nil means no spans.
	TracerProvider trace.TracerProvider

	// MeterProvider records MetricCallDuration. Nil means no metrics.
	MeterProvider metric.MeterProvider
}

// Client calls a provider that speaks the wire protocol of docs/provider.md.
// It is safe for concurrent use.
type Client struct {
	baseURL      string
	timeout      time.Duration
	capabilities Capabilities
	httpClient   *http.Client
	telemetry    telemetry
}

// NewClient returns a Client for cfg, with zero fields set to their defaults.
func NewClient(cfg Config) *Client {
	baseURL := strings.TrimRight(cmp.Or(cfg.BaseURL, DefaultBaseURL), "/")
	caps := cfg.Capabilities
	caps.Name = cmp.Or(caps.Name, "fakepsp")
	caps.Lookup = cmp.Or(caps.Lookup, LookupByKey)
	caps.Consistency = cmp.Or(caps.Consistency, Strong)
	caps.KeyWindow = cmp.Or(caps.KeyWindow, DefaultKeyWindow)
	// The protocol has refunds (docs/refunds.md), so the adapter can refund,
	// and notifications (docs/notifications.md), which ParseNotification
	// reads.
	caps.Refunds = true
	caps.Notifications = true
	// It authorizes now and captures later (Capture, Cancel).
	caps.SeparateCapture = true
	return &Client{
		baseURL:      baseURL,
		capabilities: caps,
		timeout:      cmp.Or(cfg.Timeout, DefaultTimeout),
		httpClient:   NewHTTPClient(cfg.HTTPClient),
		telemetry:    newTelemetry(cfg, baseURL),
	}
}

// Timeout is how long one call may take: the system's call timeout.
func (c *Client) Timeout() time.Duration { return c.timeout }

// Capabilities are what the provider behind this client promises.
func (c *Client) Capabilities() Capabilities { return c.capabilities }

// Find looks the charge up by its provider key (see Lookup), the lookup
// of an authorized charge's capture or cancel too: it answers the charge
// as it stands now, requires_capture, succeeded with AmountCaptured, or
// canceled.
func (c *Client) Find(ctx context.Context, q LookupRequest) (Charge, error) {
	return c.Lookup(ctx, q.Key)
}

// Client is a Provider.
var _ Provider = (*Client)(nil)

// NewHTTPClient returns the HTTP client an adapter makes its calls with: a
// shallow copy of base, or, when base is nil, a client on NewTransport; it
// never follows a redirect. A 3xx is classified as an unknown outcome
// rather than followed: net/http would turn a redirected POST into a GET,
// and a provider has no reason to redirect a charge.
func NewHTTPClient(base *http.Client) *http.Client {
	httpClient := &http.Client{Transport: NewTransport()}
	if base != nil {
		copied := *base
		httpClient = &copied
	}
	httpClient.CheckRedirect = func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}
	return httpClient
}

// MaxIdleConns is how many idle connections NewTransport keeps to a
// provider: at least as many as a worker may have calls in flight by
// default (the default concurrency is capped at it), so that every call's
// connection is kept for the next one and a slow provider, which keeps
// more calls in flight, costs no new handshakes. An idle connection is
// closed after 90 s.
const MaxIdleConns = 8192

// NewTransport returns the transport every adapter uses by default: its own
// pool sized for a worker that talks to one provider at high concurrency
// (MaxIdleConns), and no proxy, since only cmd reads the environment.
//
// A call that times out is aborted, not abandoned, so that nothing it sent
// reaches the provider after its timeout (ApplyWindow in package reconciler
// counts on it). A socket closed the usual way keeps sending what it holds
// until TCP gives up, minutes later: across a partition a request the
// worker gave up on arrives at the heal, after the reconciler proved it
// absent. So every connection lingers 0 (its close is a reset, and the
// kernel drops what it had not sent), and calls go over HTTP/1.1, where a
// cancelled call closes its connection; an HTTP/2 stream reset would leave
// the request's bytes queued on a connection that lives on.
func NewTransport() *http.Transport {
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if tcp, ok := conn.(*net.TCPConn); ok {
				if err := tcp.SetLinger(0); err != nil {
					conn.Close()
					return nil, fmt.Errorf("provider connection: linger 0: %w", err)
				}
			}
			return conn, nil
		},
		ForceAttemptHTTP2:     false,
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
		MaxIdleConns:          MaxIdleConns,
		MaxIdleConnsPerHost:   MaxIdleConns,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// chargeBody is the JSON body of POST /v1/charges. Capture is sent, false,
// only for a charge to be captured later.
type chargeBody struct {
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	Reference     string `json:"reference"`
	Capture       *bool  `json:"capture,omitempty"`
}

// Charge asks the provider to charge req once and classifies the answer (see
// Classify). A decline is returned as a Charge with StatusFailed and a nil
// error. Every error is an *Error whose Kind is ErrNotApplied or
// ErrUnknownOutcome.
//
// Charge makes exactly one attempt. Retrying is the caller's decision, made
// after it has recorded that the previous attempt's outcome is known.
func (c *Client) Charge(ctx context.Context, req ChargeRequest) (Charge, error) {
	if req.Key == "" {
		return Charge{}, &Error{Kind: ErrNotApplied, Reason: "invalid_request", Err: errors.New("empty idempotency key")}
	}
	body := chargeBody{
		Amount:        req.Amount,
		Currency:      req.Currency,
		PaymentMethod: req.PaymentMethod,
		Reference:     req.Reference,
	}
	if req.CaptureLater {
		capture := false
		body.Capture = &capture
	}
	return call(ctx, c, OpCharge, c.post("/v1/charges", req.Key, req.Tag, body), Classify)
}

// Lookup asks the provider for the charge it holds under the provider
// idempotency key. It returns ErrNotFound only when the provider proved that
// no charge exists for key; every other failure is an *Error of kind
// ErrUnknownOutcome, because a failed lookup proves nothing either way.
func (c *Client) Lookup(ctx context.Context, key string) (Charge, error) {
	if key == "" {
		return Charge{}, &Error{Kind: ErrUnknownOutcome, Reason: "invalid_request", Err: errors.New("empty idempotency key")}
	}
	return call(ctx, c, OpLookup, c.get("/v1/charges/by-key/"+url.PathEscape(key)), Classify)
}

// refundBody is the JSON body of POST /v1/refunds.
type refundBody struct {
	Charge    string `json:"charge"`
	Amount    int64  `json:"amount"`
	Reference string `json:"reference"`
	Reason    string `json:"reason,omitempty"`
}

// Refund asks the provider to refund req once, with req.Key as its
// Idempotency-Key and req.Tag as its X-Tenant-Tag, and classifies the answer
// (ClassifyRefund): a Refund, succeeded or failed (a 409
// refund_exceeds_charge or charge_not_refundable is a failed Refund without
// an ID, see RefundRequest.Refused), or an *Error of kind ErrNotApplied or
// ErrUnknownOutcome. Exactly one request is sent, as for Charge.
func (c *Client) Refund(ctx context.Context, req RefundRequest) (Refund, error) {
	if err := checkRefund(req); err != nil {
		return Refund{}, &Error{Kind: ErrNotApplied, Reason: "invalid_request", Err: err}
	}
	refund, err := call(ctx, c, OpRefund, c.post("/v1/refunds", req.Key, req.Tag, refundBody{
		Charge:    req.Charge,
		Amount:    req.Amount,
		Reference: req.Reference,
		Reason:    req.Reason,
	}), ClassifyRefund)
	if err == nil && refund.ID == "" {
		refund = req.Refused(refund.FailureCode)
	}
	return refund, err
}

// checkRefund refuses a refund request that must not be sent: without a
// key it could be applied twice, and without a charge or a positive amount
// it names no money to give back.
func checkRefund(req RefundRequest) error {
	switch {
	case req.Key == "":
		return errors.New("empty idempotency key")
	case req.Charge == "":
		return errors.New("no charge to refund")
	case req.Amount <= 0:
		return errors.New("refund amount not positive")
	default:
		return nil
	}
}

// FindRefund looks the refund up by its provider key, the one refund lookup
// this protocol has: GET /v1/refunds/by-key/{key}. It returns ErrNotFound
// only on the provider's 404 refund_not_found; every other failure is an
// *Error of kind ErrUnknownOutcome.
func (c *Client) FindRefund(ctx context.Context, q LookupRequest) (Refund, error) {
	if q.Key == "" {
		return Refund{}, &Error{Kind: ErrUnknownOutcome, Reason: "invalid_request", Err: errors.New("empty idempotency key")}
	}
	return call(ctx, c, OpRefundLookup, c.get("/v1/refunds/by-key/"+url.PathEscape(q.Key)), ClassifyRefund)
}

// Client is a Refunder.
var _ Refunder = (*Client)(nil)

// captureBody is the JSON body of POST /v1/charges/{id}/capture, and
// without an amount of /cancel.
type captureBody struct {
	Amount    int64  `json:"amount,omitempty"`
	Reference string `json:"reference"`
}

// Capture asks the provider to capture req.Amount of the authorized charge
// req.Charge once, with req.Key as its Idempotency-Key, and classifies the
// answer (ClassifyOperation): the charge as the capture left it
// (succeeded, AmountCaptured), a refusal (req.Refused: the hold expired,
// the charge was captured or released already, or the amount is more than
// was authorized), or an *Error of kind ErrNotApplied or
// ErrUnknownOutcome. Exactly one request is sent, as for Charge.
func (c *Client) Capture(ctx context.Context, req OperationRequest) (Charge, error) {
	if err := checkOperation(req, true); err != nil {
		return Charge{}, &Error{Kind: ErrNotApplied, Reason: "invalid_request", Err: err}
	}
	return c.operate(ctx, OpCapture, req, captureBody{Amount: req.Amount, Reference: req.Reference})
}

// Cancel asks the provider to release the authorized charge req.Charge
// once, with req.Key as its Idempotency-Key, and classifies the answer as
// Capture does: the charge canceled, a refusal, or an *Error.
func (c *Client) Cancel(ctx context.Context, req OperationRequest) (Charge, error) {
	if err := checkOperation(req, false); err != nil {
		return Charge{}, &Error{Kind: ErrNotApplied, Reason: "invalid_request", Err: err}
	}
	return c.operate(ctx, OpCancel, req, captureBody{Reference: req.Reference})
}

// operate makes the one call of a capture or a cancel (op) of req with
// body; a refusal answers with what req asked for.
func (c *Client) operate(ctx context.Context, op Op, req OperationRequest, body captureBody) (Charge, error) {
	path := "/v1/charges/" + url.PathEscape(req.Charge) + "/" + string(op)
	charge, err := call(ctx, c, op, c.post(path, req.Key, req.Tag, body), ClassifyOperation)
	if err == nil && charge.ID == "" {
		charge = req.Refused(charge.DeclineCode)
	}
	return charge, err
}

// checkOperation refuses a capture or cancel request that must not be
// sent: without a key it could be applied twice, without a charge it
// names no hold, and a capture without a positive amount names no money.
func checkOperation(req OperationRequest, capture bool) error {
	switch {
	case req.Key == "":
		return errors.New("empty idempotency key")
	case req.Charge == "":
		return errors.New("no authorized charge")
	case capture && req.Amount <= 0:
		return errors.New("capture amount not positive")
	default:
		return nil
	}
}

// Client is a Capturer.
var _ Capturer = (*Client)(nil)

// answer is what a call of the protocol answers: a charge or a refund, and
// what its span records of it.
type answer interface {
	Charge | Refund
	spanAttributes() []attribute.KeyValue
}

// call makes op's one request, built by build under the call's timeout,
// inside op's span, and classifies what the transport observed with
// classify; the span and the latency histogram record what it proved.
func call[T answer](ctx context.Context, c *Client, op Op, build func(context.Context) (*http.Request, error), classify func(Attempt) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	httpReq, err := build(ctx)
	if err != nil {
		// Nothing was sent.
		kind := ErrUnknownOutcome
		if op.Applies() {
			kind = ErrNotApplied
		}
		var none T
		return none, &Error{Kind: kind, Reason: "invalid_request", Err: err}
	}

	start := time.Now()
	ctx, span := c.telemetry.start(ctx, op, httpReq.Header)
	got, err := classify(c.roundTrip(httpReq.WithContext(ctx), op))
	c.telemetry.end(ctx, span, op, start, got.spanAttributes(), err)
	return got, err
}

// post builds the POST of body, as JSON, to path, with key as its
// Idempotency-Key and tag, when set, as its X-Tenant-Tag.
func (c *Client) post(path, key, tag string, body any) func(context.Context) (*http.Request, error) {
	return func(ctx context.Context) (*http.Request, error) {
		payload, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+path, bytes.NewReader(payload))
		if err != nil {
			return nil, err
		}
		httpReq.Header.Set("Content-Type", "application/json")
		httpReq.Header.Set("Idempotency-Key", key)
		if tag != "" {
			httpReq.Header.Set("X-Tenant-Tag", tag)
		}
		return httpReq, nil
	}
}

// get builds the GET of path.
func (c *Client) get(path string) func(context.Context) (*http.Request, error) {
	return func(ctx context.Context) (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL+path, nil)
	}
}

// roundTrip sends httpReq once (RoundTrip) with the protocol's Accept and
// User-Agent.
func (c *Client) roundTrip(httpReq *http.Request, op Op) Attempt {
	httpReq.Header.Set("Accept", "application/json")
	httpReq.Header.Set("User-Agent", "chargeflow-psp/1")
	return RoundTrip(c.httpClient, httpReq, op)
}

// RoundTrip sends httpReq through httpClient exactly once, recording
// through httptrace whether a connection was obtained and the request
// written, and reads the answer (at most 1 MiB): the Attempt of op a
// classifier decides on. Adapters that speak their provider's protocol
// with net/http (psp/adyen) send through it too.
//
// net/http treats a POST carrying an Idempotency-Key header as replayable
// (Request.isReplayable) and, when a reused keep-alive connection breaks,
// silently sends it again on a new connection, using GetBody to rewind the
// body. That second send would be invisible here: the caller recorded one
// attempt, the provider saw two, and the classification would describe only
// the last one. RoundTrip clears GetBody, so the request is not replayable:
// the transport makes exactly one attempt and reports the broken connection
// as an unknown outcome.
func RoundTrip(httpClient *http.Client, httpReq *http.Request, op Op) Attempt {
	httpReq.GetBody = nil
	// The trace hooks run on the transport's goroutines, hence the atomics.
	var gotConn, wroteRequest atomic.Bool
	trace := &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { gotConn.Store(true) },
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wroteRequest.Store(true)
			}
		},
	}
	httpReq = httpReq.WithContext(httptrace.WithClientTrace(httpReq.Context(), trace))

	resp, err := httpClient.Do(httpReq)
	if err != nil {
		return Attempt{Op: op, Err: err, GotConn: gotConn.Load(), WroteRequest: wroteRequest.Load()}
	}
	defer resp.Body.Close()

	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	return Attempt{
		Op:           op,
		Err:          err,
		GotConn:      true,
		WroteRequest: true,
		StatusCode:   resp.StatusCode,
		Body:         body,
	}
}
