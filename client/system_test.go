package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/client"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/tenant"
)

// system is the real chargeflow a test's client talks to: the API built by
// internal/app as the command builds it (its pool, its insert-only River
// client), on a fresh migrated database, with the bundled fake provider,
// served on loopback; and, when a test asks, the outbox worker.
type system struct {
	url      string
	pool     *pgxpool.Pool
	tenantID string
	apiKey   string
	dbURL    string
	opts     app.Options
}

// start starts the API; opts may change what it is built from.
func start(t *testing.T, opts ...func(*app.Options)) *system {
	t.Helper()
	ctx := context.Background()
	provider := fakepsptest.Start(t, fakepsp.Config{})
	o := app.Options{
		DatabaseURL: dbtest.URL(t),
		Provider:    psp.Config{BaseURL: provider.URL, Timeout: 2 * time.Second},
		APIPool:     app.Pool{MaxConns: 8},
		Worker:      app.Worker{Concurrency: 2},
	}
	for _, opt := range opts {
		opt(&o)
	}
	a, err := app.NewAPI(ctx, o)
	require.NoError(t, err)
	t.Cleanup(a.Close)
	server := httptest.NewServer(a.Server.Handler())
	t.Cleanup(server.Close)
	merchant, key, err := tenant.Create(ctx, a.Pool, "merchant")
	require.NoError(t, err)
	return &system{url: server.URL, pool: a.Pool, tenantID: merchant.ID, apiKey: key, dbURL: o.DatabaseURL, opts: o}
}

// runWorker starts the outbox worker, which carries charges and refunds to
// the fake provider, until the test ends.
func (s *system) runWorker(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	pool, err := app.WorkerPool(ctx, s.opts)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	worker, err := app.NewWorker(pool, s.opts)
	require.NoError(t, err)
	require.NoError(t, worker.Start(ctx))
	t.Cleanup(func() { require.NoError(t, app.StopRiver(ctx, worker)) })
}

// stored counts what the database holds: the proof that a refusal stored
// nothing and that retries made one charge.
type stored struct {
	Charges, Refunds, Operations, IdempotencyKeys, Jobs int
}

func (s *system) stored(t *testing.T) stored {
	t.Helper()
	var n stored
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM charges WHERE kind = 'charge'), (SELECT count(*) FROM charges WHERE kind = 'refund'),
		(SELECT count(*) FROM charges WHERE kind IN ('capture', 'cancel')),
		(SELECT count(*) FROM idempotency_keys), (SELECT count(*) FROM river_job WHERE kind <> 'idempotency.cleanup')`).
		Scan(&n.Charges, &n.Refunds, &n.Operations, &n.IdempotencyKeys, &n.Jobs))
	return n
}

// newClient is a client of s's API at url (s.url unless a proxy stands
// between), its requests seen by an observer.
func (s *system) newClient(t *testing.T, url string, opts ...client.Option) (*client.Client, *observer) {
	t.Helper()
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	seen := &observer{next: transport}
	c, err := client.New(url, s.apiKey, append([]client.Option{client.WithHTTPClient(&http.Client{Transport: seen, Timeout: 10 * time.Second})}, opts...)...)
	require.NoError(t, err)
	return c, seen
}

// observer is the client's transport as seen from the outside: every
// request and what came back. It changes nothing.
type observer struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen []exchange
}

// exchange is one request: the status (0 for a network error), the
// problem's code and the Retry-After of its answer, and the key it carried.
type exchange struct {
	status     int
	code       client.Code
	retryAfter time.Duration
	key        string
}

func (o *observer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := o.next.RoundTrip(req)
	e := exchange{key: req.Header.Get("Idempotency-Key")}
	if err == nil {
		e.status = resp.StatusCode
		if seconds := resp.Header.Get("Retry-After"); seconds != "" {
			d, parseErr := time.ParseDuration(seconds + "s")
			if parseErr == nil {
				e.retryAfter = d
			}
		}
		if resp.Header.Get("Content-Type") == "application/problem+json" {
			// Read the code, and give the client the same bytes.
			data, readErr := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(data))
			var problem struct {
				Code client.Code `json:"code"`
			}
			if readErr == nil && json.Unmarshal(data, &problem) == nil {
				e.code = problem.Code
			}
		}
	}
	o.mu.Lock()
	o.seen = append(o.seen, e)
	o.mu.Unlock()
	return resp, err
}

func (o *observer) exchanges() []exchange {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]exchange(nil), o.seen...)
}

func (o *observer) statuses() []int {
	var statuses []int
	for _, e := range o.exchanges() {
		statuses = append(statuses, e.status)
	}
	return statuses
}

// testClock is the client's clock in a test: it records every wait the
// client asks for, and waits for real at most realWait (zero: not at all).
// With fake set it is a fake clock that a wait moves forward, which the API
// can read too (api.Config.Now); otherwise it reads the real time.
// onSleep, when set, runs at the nth wait (1-based) before it returns.
type testClock struct {
	realWait time.Duration
	onSleep  func(n int)

	mu     sync.Mutex
	fake   bool
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *testClock {
	return &testClock{fake: true, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fake {
		return c.now
	}
	return time.Now()
}

func (c *testClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	n := len(c.sleeps)
	if c.fake {
		c.now = c.now.Add(d)
	}
	c.mu.Unlock()
	if c.onSleep != nil {
		c.onSleep(n)
	}
	if wait := min(d, c.realWait); wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	return ctx.Err()
}

func (c *testClock) waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// proxy stands between a client and the API as a load balancer would, and
// fails the way a dying API looks from outside: while down, its listener is
// closed (connections refused); once up, plan says what befalls each new
// connection (the first is 1).
type proxy struct {
	t        *testing.T
	addr     string
	upstream string
	plan     func(n int) fate

	mu    sync.Mutex
	ln    net.Listener
	conns int
}

type fate int

const (
	// pass forwards both ways.
	pass fate = iota
	// resetAtOnce resets the connection before anything is forwarded: the
	// request never reaches the API.
	resetAtOnce
	// resetAfterAnswer forwards the request, waits until the API's answer
	// begins — the API has done the work and committed — and then resets
	// the client's connection: the answer is lost.
	resetAfterAnswer
)

func newProxy(t *testing.T, upstreamURL string) *proxy {
	t.Helper()
	p := &proxy{t: t, upstream: strings.TrimPrefix(upstreamURL, "http://"), plan: func(int) fate { return pass }}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.down)
	return p
}

func (p *proxy) url() string { return "http://" + p.addr }

// down closes the listener: new connections are refused.
func (p *proxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
}

// up listens again on the same address, with a new plan for the
// connections from now on.
func (p *proxy) up(plan func(n int) fate) {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Errorf("proxy: listen again on %s: %v", p.addr, err)
		return
	}
	p.mu.Lock()
	p.plan, p.conns = plan, 0
	p.mu.Unlock()
	p.serve(ln)
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns++
			f := p.plan(p.conns)
			p.mu.Unlock()
			go p.handle(conn.(*net.TCPConn), f)
		}
	}()
}

func (p *proxy) handle(conn *net.TCPConn, f fate) {
	reset := func() {
		_ = conn.SetLinger(0) // close with RST, as a killed process's kernel does
		_ = conn.Close()
	}
	if f == resetAtOnce {
		reset()
		return
	}
	upstream, err := net.Dial("tcp", p.upstream)
	if err != nil {
		reset()
		return
	}
	defer upstream.Close()
	go func() {
		_, _ = io.Copy(upstream, conn)
		_ = upstream.Close()
	}()
	if f == resetAfterAnswer {
		first := make([]byte, 1)
		_, _ = upstream.Read(first)
		reset()
		return
	}
	_, _ = io.Copy(conn, upstream)
	_ = conn.Close()
}

func slogJSON(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

// requireNoSecrets checks that an error's text carries neither key.
func requireNoSecrets(t *testing.T, err error, secrets ...string) {
	t.Helper()
	for _, secret := range secrets {
		require.NotContains(t, err.Error(), secret, "an error's text carries a secret")
	}
}

// requireRefused checks a definitive refusal: an *Error with the status and
// code, errors.Is on the code, and not an unknown outcome.
func requireRefused(t *testing.T, err error, status int, code client.Code) *client.Error {
	t.Helper()
	require.Error(t, err)
	var apiErr *client.Error
	require.True(t, errors.As(err, &apiErr), "%T: %v", err, err)
	require.Equal(t, status, apiErr.Status, "%v", err)
	require.Equal(t, code, apiErr.Code, "%v", err)
	require.ErrorIs(t, err, code)
	require.NotErrorIs(t, err, client.ErrOutcomeUnknown)
	return apiErr
}
