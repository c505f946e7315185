package psp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

const (
	// DefaultBaseURL is where the bundled fake provider listens by default.
	DefaultBaseURL = "http://127.0.0.1:9090"

	// DefaultTimeout bounds one provider call when Config.Timeout is zero.
	// It is the call timeout of the whole system: the worker's job timeout
	// and the reconciler's settle window and staleness are derived from the
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
	// offers.
	Capabilities Capabilities

	// HTTPClient makes the calls; wrap its Transport for transport-level
	// instrumentation beyond the call spans below. The Client uses a
	// shallow copy that never follows redirects, since a redirected POST
	// would be re-sent as a GET. Defaults to a client with its own
	// connection pool and no proxy.
	HTTPClient *http.Client

	// TracerProvider makes one client span per call, "psp.charge" or
	// "psp.lookup", that records what the answer proved (see Outcome), and
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
	httpClient := &http.Client{Transport: NewTransport()}
	if cfg.HTTPClient != nil {
		copied := *cfg.HTTPClient
		httpClient = &copied
	}
	// A 3xx is classified as an unknown outcome rather than followed: net/http
	// would turn a redirected POST into a GET, and a provider has no reason to
	// redirect a charge.
	httpClient.CheckRedirect = func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}

	baseURL := strings.TrimRight(cmp.Or(cfg.BaseURL, DefaultBaseURL), "/")
	caps := cfg.Capabilities
	caps.Name = cmp.Or(caps.Name, "fakepsp")
	caps.Lookup = cmp.Or(caps.Lookup, LookupByKey)
	caps.Consistency = cmp.Or(caps.Consistency, Strong)
	caps.KeyWindow = cmp.Or(caps.KeyWindow, DefaultKeyWindow)
	return &Client{
		baseURL:      baseURL,
		capabilities: caps,
		timeout:      cmp.Or(cfg.Timeout, DefaultTimeout),
		httpClient:   httpClient,
		telemetry:    newTelemetry(cfg, baseURL),
	}
}

// Timeout is how long one call may take: the system's call timeout.
func (c *Client) Timeout() time.Duration { return c.timeout }

// Capabilities are what the provider behind this client promises.
func (c *Client) Capabilities() Capabilities { return c.capabilities }

// Find looks the charge up by its provider key, the one lookup this
// protocol has (see Lookup).
func (c *Client) Find(ctx context.Context, q LookupRequest) (Charge, error) {
	return c.Lookup(ctx, q.Key)
}

// Client is a Provider.
var _ Provider = (*Client)(nil)

// NewTransport returns the transport every adapter uses by default: its own
// pool sized for a worker that talks to one provider at high concurrency,
// and no proxy, since only cmd reads the environment.
func NewTransport() *http.Transport {
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// chargeBody is the JSON body of POST /v1/charges.
type chargeBody struct {
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method"`
	Reference     string `json:"reference"`
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

	body, err := json.Marshal(chargeBody{
		Amount:        req.Amount,
		Currency:      req.Currency,
		PaymentMethod: req.PaymentMethod,
		Reference:     req.Reference,
	})
	if err != nil {
		return Charge{}, &Error{Kind: ErrNotApplied, Reason: "invalid_request", Err: err}
	}

	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return Charge{}, &Error{Kind: ErrNotApplied, Reason: "invalid_request", Err: err}
	}
	// net/http treats a POST carrying an Idempotency-Key header as replayable
	// (Request.isReplayable) and, when a reused keep-alive connection breaks,
	// silently sends it again on a new connection, using GetBody to rewind the
	// body. That second send would be invisible here: the caller recorded one
	// attempt, the provider saw two, and the classification below would
	// describe only the last one. Without GetBody the request is not
	// replayable, so the transport makes exactly one attempt and reports the
	// broken connection to us as an unknown outcome.
	httpReq.GetBody = nil
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Idempotency-Key", req.Key)
	if req.Tag != "" {
		httpReq.Header.Set("X-Tenant-Tag", req.Tag)
	}

	return c.do(httpReq, OpCharge)
}

// Lookup asks the provider for the charge it holds under the provider
// idempotency key. It returns ErrNotFound only when the provider proved that
// no charge exists for key; every other failure is an *Error of kind
// ErrUnknownOutcome, because a failed lookup proves nothing either way.
func (c *Client) Lookup(ctx context.Context, key string) (Charge, error) {
	if key == "" {
		return Charge{}, &Error{Kind: ErrUnknownOutcome, Reason: "invalid_request", Err: errors.New("empty idempotency key")}
	}

	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	httpReq, err := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL+"/v1/charges/by-key/"+url.PathEscape(key), nil)
	if err != nil {
		return Charge{}, &Error{Kind: ErrUnknownOutcome, Reason: "invalid_request", Err: err}
	}

	return c.do(httpReq, OpLookup)
}

// do sends httpReq inside the call's span, reads the answer, classifies it,
// and records what it proved (span attributes and the latency histogram).
func (c *Client) do(httpReq *http.Request, op Op) (Charge, error) {
	start := time.Now()
	ctx, span := c.telemetry.start(httpReq.Context(), op, httpReq.Header)
	answer, err := c.roundTrip(httpReq.WithContext(ctx), op)
	c.telemetry.end(ctx, span, op, start, answer, err)
	return answer, err
}

// roundTrip sends httpReq, recording through httptrace whether a connection
// was obtained and the request written, reads the answer and classifies it.
func (c *Client) roundTrip(httpReq *http.Request, op Op) (Charge, error) {
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
	httpReq.Header.Set("Accept", "application/json")
	httpReq.Header.Set("User-Agent", "chargeflow-psp/1")

	resp, err := c.httpClient.Do(httpReq)
	if err != nil {
		return Classify(Attempt{Op: op, Err: err, GotConn: gotConn.Load(), WroteRequest: wroteRequest.Load()})
	}
	defer resp.Body.Close()

	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	return Classify(Attempt{
		Op:           op,
		Err:          err,
		GotConn:      true,
		WroteRequest: true,
		StatusCode:   resp.StatusCode,
		Body:         body,
	})
}
