// Package apitest starts the HTTP server — the merchant API with the
// operator plane mounted on it, built by app.NewServer as the command builds
// it — on a database cloned from the migrated template, for the tests of
// package api and package opsplane, which drive it over loopback HTTP.
// The provider it checks resolutions against is the caller's (the tests
// start the laboratory's fake provider; no product package imports it).
package apitest

import (
	"context"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/internal/lockedbuf"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/submit"
	"github.com/chargeflow/chargeflow/tenant"
)

// Options is how Setup builds the server.
type Options struct {
	// ProviderURL is the provider the server checks resolutions against.
	ProviderURL string
	// Config edits the server's configuration before it starts.
	Config func(*app.ServerConfig)
	// Jobs configures the submit queue.
	Jobs submit.Config
	// LockTimeout is the pool's lock_timeout. Default 2 s.
	LockTimeout string
}

// Tenant is a tenant and its API key.
type Tenant struct {
	ID  string
	Key string
}

// Operator is an operator's name and token.
type Operator struct {
	Name  string
	Token string
}

// Bundle is what a test works with: a real server on loopback, a real
// database, two tenants, an admin and a viewer.
type Bundle struct {
	URL              string
	DBURL            string
	Pool             *pgxpool.Pool
	TenantA, TenantB Tenant
	Admin, Viewer    Operator
	// Logs receives the server's log lines, as JSON.
	Logs *lockedbuf.Buffer
	// Config is the server's configuration, to start another API process
	// on the same database.
	Config app.ServerConfig
}

// Setup starts a server on a fresh database.
func Setup(t testing.TB, o Options) *Bundle {
	t.Helper()
	if o.LockTimeout == "" {
		o.LockTimeout = "2s"
	}
	ctx := context.Background()
	dbURL := dbtest.URL(t)

	poolCfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	poolCfg.MaxConns = 8
	poolCfg.ConnConfig.RuntimeParams["lock_timeout"] = o.LockTimeout
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	b := &Bundle{DBURL: dbURL, Pool: pool, Logs: &lockedbuf.Buffer{}}
	for name, tt := range map[string]*Tenant{"tenant-a": &b.TenantA, "tenant-b": &b.TenantB} {
		created, key, err := tenant.Create(ctx, pool, name)
		require.NoError(t, err)
		tt.ID, tt.Key = created.ID, key
	}
	for _, op := range []struct {
		into *Operator
		name string
		role operator.Role
	}{{&b.Admin, "alice", operator.RoleAdmin}, {&b.Viewer, "victor", operator.RoleViewer}} {
		_, token, err := operator.Create(ctx, pool, op.name, op.role)
		require.NoError(t, err)
		*op.into = Operator{Name: op.name, Token: token}
	}

	cfg := Config(t, pool, o.Jobs, o.ProviderURL)
	cfg.Logger = slog.New(slog.NewJSONHandler(b.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if o.Config != nil {
		o.Config(&cfg)
	}
	b.Config = cfg
	b.URL = Serve(t, cfg)
	return b
}

// Config is a server's configuration on pool, with the provider at
// providerURL and a key window of 23 hours.
func Config(t testing.TB, pool *pgxpool.Pool, jobs submit.Config, providerURL string) app.ServerConfig {
	t.Helper()
	cfg := app.ServerConfig{
		DB:       pool,
		Jobs:     NewQueue(t, pool, jobs),
		Provider: psp.NewClient(psp.Config{BaseURL: providerURL, Timeout: 2 * time.Second}),
	}
	cfg.Resolve.ResendWindow = 23 * time.Hour
	return cfg
}

// Serve starts a server with cfg on loopback and returns its URL.
func Serve(t testing.TB, cfg app.ServerConfig) string {
	t.Helper()
	server, err := app.NewServer(cfg)
	require.NoError(t, err)
	httpServer := httptest.NewServer(server.Handler())
	t.Cleanup(httpServer.Close)
	return httpServer.URL
}

// NewQueue makes the submit queue of a server under test, on an
// insert-only River client with our middleware, as the command builds it.
func NewQueue(t testing.TB, pool *pgxpool.Pool, cfg submit.Config) *submit.Queue {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: submit.Middleware()})
	require.NoError(t, err)
	cfg.River = client
	jobs, err := submit.NewQueue(cfg)
	require.NoError(t, err)
	return jobs
}

// Response is an answer, read in full.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Do sends req with client and reads the answer.
func Do(t testing.TB, client *http.Client, req *http.Request) Response {
	t.Helper()
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// Request is one HTTP call to the server at baseURL; headers are
// name/value pairs, a name may repeat.
func Request(t testing.TB, baseURL, method, path, body string, headers ...string) Response {
	t.Helper()
	req, err := http.NewRequest(method, baseURL+path, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	return Do(t, http.DefaultClient, req)
}

// NoRedirects is a client that shows the page's redirects instead of
// following them.
var NoRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// PageRequest is one request to the operator's page at baseURL, with a
// session cookie (or none) and a form body (or none).
func PageRequest(t testing.TB, baseURL string, cookie *http.Cookie, method, path string, form url.Values, headers ...string) Response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, baseURL+path, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	return Do(t, NoRedirects, req)
}

// SessionCookie returns the session cookie an answer sets, or nil.
func SessionCookie(h http.Header) *http.Cookie {
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == "chargeflow_ops" {
			return c
		}
	}
	return nil
}

// CSRFField finds the CSRF token in a page.
var CSRFField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// SignIn signs in to the page at baseURL with an operator token and
// returns the session's cookie and the CSRF token its pages carry.
func SignIn(t testing.TB, baseURL, token string) (*http.Cookie, string) {
	t.Helper()
	resp := PageRequest(t, baseURL, nil, http.MethodPost, "/ops/sign-in", url.Values{"token": {token}})
	require.Equal(t, http.StatusSeeOther, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "/ops/", resp.Header.Get("Location"))
	cookie := SessionCookie(resp.Header)
	require.NotNil(t, cookie)
	home := PageRequest(t, baseURL, cookie, http.MethodGet, "/ops/", nil)
	require.Equal(t, http.StatusOK, home.Status, "body: %s", home.Body)
	m := CSRFField.FindSubmatch(home.Body)
	require.NotNil(t, m, "every page has the sign-out form and its token")
	return cookie, html.UnescapeString(string(m[1]))
}

// Walk moves a charge of tenantID along the given states, as the worker
// and the reconciler would.
func Walk(t testing.TB, pool *pgxpool.Pool, tenantID, id string, states ...intent.State) {
	t.Helper()
	from := intent.StatePending
	for _, to := range states {
		m := intent.Move{TenantID: tenantID, ChargeID: id, From: from, To: to, Actor: "test", Reason: "test", CountAttempt: to == intent.StateSubmitting}
		if to == intent.StateNeedsReview {
			m.ReviewReason = "lookup_unavailable"
		}
		_, err := intent.MoveCharge(context.Background(), pool, m)
		require.NoError(t, err)
		from = to
	}
}

// ChargeAtProvider applies a charge at the provider at providerURL under
// the charge's provider key, as a lost call would have, and returns the
// provider's charge id.
func ChargeAtProvider(t testing.TB, providerURL, id string, amount int64, currency string) string {
	t.Helper()
	answer, err := psp.NewClient(psp.Config{BaseURL: providerURL}).Charge(context.Background(), psp.ChargeRequest{Key: intent.ProviderKeyFor(id), Amount: amount,
		Currency: currency, PaymentMethod: "pm_card_visa", Reference: id})
	require.NoError(t, err)
	return answer.ID
}

// EditAPI applies edit to sc's API configuration, and makes what it sets
// that every part shares — the logger, crash points and telemetry — every
// part's, as a test that configures the API means.
func EditAPI(sc *app.ServerConfig, edit func(*api.Config)) {
	if edit == nil {
		return
	}
	edit(&sc.API)
	if sc.API.Logger != nil {
		sc.Logger = sc.API.Logger
	}
	if sc.API.CrashPoints != nil {
		sc.CrashPoints = sc.API.CrashPoints
	}
	if sc.API.TracerProvider != nil {
		sc.TracerProvider = sc.API.TracerProvider
	}
	if sc.API.MeterProvider != nil {
		sc.MeterProvider = sc.API.MeterProvider
	}
}
