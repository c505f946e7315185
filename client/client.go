package client

import (
	"bytes"
	"cmp"
	"context"
	cryptorand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The defaults of the options.
const (
	// DefaultMaxElapsed is how long one call keeps retrying.
	DefaultMaxElapsed = 30 * time.Second
	// DefaultBackoffBase and DefaultBackoffCap shape the waits between
	// attempts: attempt n waits a random time up to base·2^(n-1), at most
	// the cap.
	DefaultBackoffBase = 100 * time.Millisecond
	DefaultBackoffCap  = 5 * time.Second
	// DefaultTimeout is the timeout of the *http.Client the client makes
	// when given none: one attempt's bound.
	DefaultTimeout = 30 * time.Second
)

// maxResponseBytes bounds what one answer may take: a page of 100 charges
// with full metadata is about 2.5 MB.
const maxResponseBytes = 16 << 20

// Client calls chargeflow's API for one merchant (one API key). It is safe
// for concurrent use; make one and share it.
type Client struct {
	base        *url.URL
	apiKey      string
	http        *http.Client
	maxElapsed  time.Duration
	backoffBase time.Duration
	backoffCap  time.Duration
	clock       Clock
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sends every request through hc. Give it a Timeout (one
// attempt's bound) or a Transport with one; the default client's is
// DefaultTimeout.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.http = hc }
}

// WithMaxElapsed bounds how long one call keeps retrying, from its first
// attempt: no wait is begun that would end past it (default
// DefaultMaxElapsed; zero makes one attempt and no retry). A context
// deadline bounds the call too, whichever comes first.
func WithMaxElapsed(d time.Duration) Option {
	return func(c *Client) { c.maxElapsed = d }
}

// WithBackoff sets the base and the cap of the waits between attempts
// (defaults DefaultBackoffBase, DefaultBackoffCap). Attempt n waits a random
// time from zero to min(cap, base·2^(n-1)) ("full jitter"), and never less
// than the Retry-After the API sent.
func WithBackoff(base, cap time.Duration) Option {
	return func(c *Client) { c.backoffBase, c.backoffCap = base, cap }
}

// Clock is the time the client reads and the way it waits between attempts.
// Tests give a Clock that records the waits and returns at once; the default
// is the real clock.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done, and then returns ctx's error.
	Sleep(ctx context.Context, d time.Duration) error
}

// WithClock replaces the real clock, for tests.
func WithClock(clock Clock) Option {
	return func(c *Client) { c.clock = clock }
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// New makes a client of the API at baseURL (for instance
// "https://chargeflow.example.com") with a tenant's API key (cfk_…).
//
// The client never logs. Its errors carry statuses, problem codes and
// details, never the API key, an idempotency key or a body.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	base, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("chargeflow: base URL %q is not an http or https URL", baseURL)
	}
	if apiKey == "" {
		return nil, errors.New("chargeflow: no API key")
	}
	c := &Client{
		base: base, apiKey: apiKey,
		maxElapsed: DefaultMaxElapsed, backoffBase: DefaultBackoffBase, backoffCap: DefaultBackoffCap,
		clock: realClock{},
	}
	for _, opt := range opts {
		opt(c)
	}
	if c.http == nil {
		c.http = &http.Client{Timeout: DefaultTimeout}
	}
	if c.backoffBase <= 0 || c.backoffCap < c.backoffBase || c.maxElapsed < 0 {
		return nil, fmt.Errorf("chargeflow: backoff base %s and cap %s must be positive, the cap not below the base, and max elapsed %s not negative",
			c.backoffBase, c.backoffCap, c.maxElapsed)
	}
	return c, nil
}

// NewIdempotencyKey returns a fresh idempotency key: 130 random bits in 26
// base32 characters. Make one per order (or refund) and store it with the
// order before the first call, so that every later call for that order,
// from any process, carries it.
func NewIdempotencyKey() string {
	return cryptorand.Text()
}

// request is one call to the API, sent as many times as it takes.
type request struct {
	method string
	path   string
	query  url.Values
	// body is marshalled once, so every attempt sends the same bytes.
	body []byte
	// key is the Idempotency-Key; set for creates only.
	key string
}

// create posts v, marshalled once, to path with the idempotency key (a new
// one when key is empty) and decodes the answer into out. It reports whether
// the answer was a replay.
func (c *Client) create(ctx context.Context, path string, v any, key string, out any) (bool, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	return c.do(ctx, request{method: http.MethodPost, path: path, body: body, key: cmp.Or(key, NewIdempotencyKey())}, out)
}

// get reads path into out.
func (c *Client) get(ctx context.Context, path string, query url.Values, out any) error {
	_, err := c.do(ctx, request{method: http.MethodGet, path: path, query: query}, out)
	return err
}

// do sends req until it has a definitive answer and decodes a 2xx answer
// into out, reporting whether it was a replay. It retries network errors and
// the answers that decided nothing (*Error.retryable); any other answer is
// returned as an *Error at once.
func (c *Client) do(ctx context.Context, req request, out any) (bool, error) {
	start := c.clock.Now()
	// mayHaveApplied: an earlier attempt may have done the work — its answer
	// was lost, or was a failure that does not say nothing was stored.
	mayHaveApplied := false
	for attempt := 1; ; attempt++ {
		replayed, err := c.send(ctx, req, attempt, out)
		if err == nil {
			return replayed, nil
		}
		var undecodable *decodeError
		if errors.As(err, &undecodable) {
			// A whole 2xx answer the client cannot read will read no
			// better next time; for a create it was still a success.
			if req.key != "" {
				return false, c.stopped(req, attempt, err)
			}
			return false, err
		}
		var apiErr *Error
		isAPIErr := errors.As(err, &apiErr)
		if isAPIErr && !apiErr.retryable() {
			// A refusal before the API looks the key up (the credential)
			// says nothing of what an earlier attempt did.
			if mayHaveApplied && req.key != "" && apiErr.beforeKeyLookup() {
				return false, c.stopped(req, attempt, err)
			}
			return false, err
		}
		mayHaveApplied = mayHaveApplied || !isAPIErr || apiErr.Status >= 500 || apiErr.Code == CodeRequestInProgress
		if ctx.Err() != nil {
			return false, c.stopped(req, attempt, err)
		}
		wait := c.backoff(attempt)
		if isAPIErr {
			wait = max(wait, apiErr.RetryAfter)
		}
		if c.maxElapsed == 0 || c.clock.Now().Add(wait).Sub(start) > c.maxElapsed {
			return false, c.stopped(req, attempt, err)
		}
		if sleepErr := c.clock.Sleep(ctx, wait); sleepErr != nil {
			return false, c.stopped(req, attempt, errors.Join(sleepErr, err))
		}
	}
}

// stopped is the error of a call that gave up without a definitive answer
// after attempts attempts, the last of which failed with last.
func (c *Client) stopped(req request, attempts int, last error) error {
	if req.key != "" {
		return fmt.Errorf("%w: %s %s stopped after %s: %w", ErrOutcomeUnknown, req.method, req.path, count(attempts), last)
	}
	return fmt.Errorf("chargeflow: %s %s stopped after %s: %w", req.method, req.path, count(attempts), last)
}

func count(attempts int) string {
	if attempts == 1 {
		return "1 attempt"
	}
	return strconv.Itoa(attempts) + " attempts"
}

// backoff is the wait after attempt (1-based): a uniformly random time up
// to min(cap, base·2^(attempt-1)).
func (c *Client) backoff(attempt int) time.Duration {
	ceiling := c.backoffCap
	if shift := attempt - 1; shift < 62 && c.backoffBase <= c.backoffCap>>shift {
		ceiling = c.backoffBase << shift
	}
	return rand.N(ceiling + 1)
}

// send is one attempt, reported to the context's observer
// (WithExchangeObserver). A network error, including one while the answer
// was read, is returned as is; an answer other than 2xx as an *Error.
func (c *Client) send(ctx context.Context, req request, attempt int, out any) (bool, error) {
	u := *c.base
	u.Path += req.path
	u.RawQuery = req.query.Encode()
	var body io.Reader
	if req.body != nil {
		body = bytes.NewReader(req.body)
	}
	httpReq, err := http.NewRequestWithContext(ctx, req.method, u.String(), body)
	if err != nil {
		return false, err
	}
	httpReq.Header.Set("Authorization", "Bearer "+c.apiKey)
	httpReq.Header.Set("Accept", "application/json")
	httpReq.Header.Set("User-Agent", "chargeflow-go")
	if req.body != nil {
		httpReq.Header.Set("Content-Type", "application/json")
	}
	if req.key != "" {
		httpReq.Header.Set("Idempotency-Key", req.key)
	}
	exchange := Exchange{Method: req.method, Path: req.path, Attempt: attempt}
	httpResp, err := c.http.Do(httpReq)
	if err != nil {
		exchange.Err = err
		observe(ctx, exchange)
		return false, err
	}
	defer httpResp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(httpResp.Body, maxResponseBytes))
	if err != nil {
		exchange.Err = err
		observe(ctx, exchange)
		return false, fmt.Errorf("chargeflow: read the answer to %s %s: %w", req.method, req.path, err)
	}
	exchange.Status, exchange.Body = httpResp.StatusCode, data
	exchange.Replayed = httpResp.Header.Get("Idempotent-Replayed") == "true"
	observe(ctx, exchange)
	if httpResp.StatusCode < 200 || httpResp.StatusCode > 299 {
		return false, c.problemOf(httpResp, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return false, &decodeError{fmt.Errorf("chargeflow: decode the answer to %s %s: %w", req.method, req.path, err)}
	}
	return exchange.Replayed, nil
}

// decodeError is a 2xx answer that is not what the client expects: a
// server or a proxy in front of it that speaks another version.
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

// problemOf reads a non-2xx answer into an *Error.
func (c *Client) problemOf(resp *http.Response, data []byte) *Error {
	e := &Error{Status: resp.StatusCode, RetryAfter: c.retryAfter(resp.Header.Get("Retry-After"))}
	mediaType, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mediaType == "application/problem+json" {
		var p struct {
			Type   string `json:"type"`
			Title  string `json:"title"`
			Code   Code   `json:"code"`
			Detail string `json:"detail"`
			Field  string `json:"field"`
		}
		if json.Unmarshal(data, &p) == nil {
			e.Type, e.Title, e.Code, e.Detail, e.Field = p.Type, p.Title, p.Code, p.Detail, p.Field
		}
	}
	return e
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func (c *Client) retryAfter(value string) time.Duration {
	if value == "" {
		return 0
	}
	if seconds, err := strconv.ParseInt(value, 10, 32); err == nil {
		return max(time.Duration(seconds)*time.Second, 0)
	}
	if at, err := http.ParseTime(value); err == nil {
		return max(at.Sub(c.clock.Now()), 0)
	}
	return 0
}
