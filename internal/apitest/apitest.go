// Package apitest starts the HTTP server — the merchant API with the
// operator plane mounted on it, built by app.NewServer as the command builds
// it — on a database cloned from the migrated template, for the tests of
// package api and package opsplane, which drive it over loopback HTTP.
// The provider it checks resolutions against is the caller's (the tests
// start the laboratory's fake provider; no product package imports it).
package apitest

import (
	"context"
	"encoding/json"
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

// Options is how Setup builds the server; a test's options edit it.
type Options struct {
	// API edits the API's configuration (EditAPI), Server the whole
	// server's, after API.
	API    func(*api.Config)
	Server func(*app.ServerConfig)
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
	// ProviderURL is the provider the server checks resolutions against.
	ProviderURL string
}

// Setup starts a server on a fresh database, checking resolutions against
// the provider at providerURL.
func Setup(t testing.TB, providerURL string, opts ...func(*Options)) *Bundle {
	t.Helper()
	var o Options
	for _, opt := range opts {
		opt(&o)
	}
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

	b := &Bundle{DBURL: dbURL, Pool: pool, Logs: &lockedbuf.Buffer{}, ProviderURL: providerURL}
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

	cfg := Config(t, pool, o.Jobs, providerURL)
	cfg.Logger = slog.New(slog.NewJSONHandler(b.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	EditAPI(&cfg, o.API)
	if o.Server != nil {
		o.Server(&cfg)
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

// CookieOf returns the session cookie an answer sets, or nil.
func CookieOf(resp Response) *http.Cookie {
	for _, c := range (&http.Response{Header: resp.Header}).Cookies() {
		if c.Name == "chargeflow_ops" {
			return c
		}
	}
	return nil
}

// CSRFField finds the CSRF token in a page.
var CSRFField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// PageSession is a signed-in browser, as plain HTTP: its cookie and the
// CSRF token its pages carry.
type PageSession struct {
	URL    string
	Cookie *http.Cookie
	CSRF   string
}

// SignIn signs in to the page at baseURL with an operator token.
func SignIn(t testing.TB, baseURL, token string) PageSession {
	t.Helper()
	resp := PageRequest(t, baseURL, nil, http.MethodPost, "/ops/sign-in", url.Values{"token": {token}})
	require.Equal(t, http.StatusSeeOther, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "/ops/", resp.Header.Get("Location"))
	cookie := CookieOf(resp)
	require.NotNil(t, cookie)
	home := PageRequest(t, baseURL, cookie, http.MethodGet, "/ops/", nil)
	require.Equal(t, http.StatusOK, home.Status, "body: %s", home.Body)
	m := CSRFField.FindSubmatch(home.Body)
	require.NotNil(t, m, "every page has the sign-out form and its token")
	return PageSession{URL: baseURL, Cookie: cookie, CSRF: html.UnescapeString(string(m[1]))}
}

// Get requests a page as the session.
func (s PageSession) Get(t testing.TB, path string) Response {
	t.Helper()
	return PageRequest(t, s.URL, s.Cookie, http.MethodGet, path, nil)
}

// Post sends a form with the session's CSRF token, unless the form has
// its own csrf field.
func (s PageSession) Post(t testing.TB, path string, form url.Values, headers ...string) Response {
	t.Helper()
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", s.CSRF)
	}
	return PageRequest(t, s.URL, s.Cookie, http.MethodPost, path, form, headers...)
}

// RequirePage checks an HTML answer of the page and its security headers.
func RequirePage(t testing.TB, resp Response, status int, contains ...string) {
	t.Helper()
	require.Equal(t, status, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "text/html; charset=UTF-8", resp.Header.Get("Content-Type"))
	require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
	require.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"))
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.NotContains(t, resp.Header.Get("Content-Security-Policy"), "script-src")
	for _, s := range contains {
		require.Contains(t, string(resp.Body), s)
	}
}

// Walk moves a charge of tenantID along the given states, as the worker
// and the reconciler would.
func Walk(t testing.TB, pool *pgxpool.Pool, tenantID, id string, states ...intent.State) {
	t.Helper()
	dbtest.Walk(t, pool, intent.Charge{TenantID: tenantID, ID: id, State: intent.StatePending}, "py_"+id, states...)
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

// ValidBody is a charge request every test may send.
const ValidBody = `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "Order A-1", "metadata": {"order": "A-1"}}`

// Serve starts another server with cfg on loopback and returns its URL.
func (b *Bundle) Serve(t testing.TB, cfg app.ServerConfig) string {
	t.Helper()
	return Serve(t, cfg)
}

// Request is one HTTP call to the bundle's server.
func (b *Bundle) Request(t testing.TB, method, path, body string, headers ...string) Response {
	t.Helper()
	return Request(t, b.URL, method, path, body, headers...)
}

// Post sends POST /v1/charges as tenant tt with an idempotency key (none
// when key is empty).
func (b *Bundle) Post(t testing.TB, tt Tenant, key, body string, headers ...string) Response {
	t.Helper()
	h := append([]string{"Authorization", "Bearer " + tt.Key, "Content-Type", "application/json"}, headers...)
	if key != "" {
		h = append(h, "Idempotency-Key", key)
	}
	return b.Request(t, http.MethodPost, "/v1/charges", body, h...)
}

// Refund sends POST /v1/refunds as tenant tt to the API at baseURL.
func (b *Bundle) Refund(t testing.TB, baseURL string, tt Tenant, key, body string) Response {
	t.Helper()
	headers := []string{"Authorization", "Bearer " + tt.Key, "Content-Type", "application/json"}
	if key != "" {
		headers = append(headers, "Idempotency-Key", key)
	}
	return Request(t, baseURL, http.MethodPost, "/v1/refunds", body, headers...)
}

// Get reads path as tenant tt.
func (b *Bundle) Get(t testing.TB, tt Tenant, path string) Response {
	t.Helper()
	return b.Request(t, http.MethodGet, path, "", "Authorization", "Bearer "+tt.Key)
}

// Decode reads a JSON object answer.
func Decode(t testing.TB, resp Response) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(resp.Body, &v), "body: %s", resp.Body)
	return v
}

// Stored counts what the database holds: the proof that a rejection
// changed nothing.
type Stored struct {
	Charges, IdempotencyKeys, Events, Jobs int
}

// Stored counts the bundle's database.
func (b *Bundle) Stored(t testing.TB) Stored {
	t.Helper()
	var s Stored
	err := b.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM charges), (SELECT count(*) FROM idempotency_keys),
		(SELECT count(*) FROM charge_audit), (SELECT count(*) FROM river_job)`).
		Scan(&s.Charges, &s.IdempotencyKeys, &s.Events, &s.Jobs)
	require.NoError(t, err)
	return s
}

// Sessions counts the operator page's sessions.
func (b *Bundle) Sessions(t testing.TB) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(context.Background(), `SELECT count(*) FROM operator_sessions`).Scan(&n))
	return n
}

// JobsFor counts the charge.submit jobs whose args name a charge.
func (b *Bundle) JobsFor(t testing.TB, chargeID string) int {
	t.Helper()
	var n int
	err := b.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM river_job WHERE kind = 'charge.submit' AND args->>'charge_id' = $1`, chargeID).Scan(&n)
	require.NoError(t, err)
	return n
}

// RequireProblem checks a problem+json answer and returns it.
func RequireProblem(t testing.TB, resp Response, status int, code api.Code) map[string]any {
	t.Helper()
	require.Equal(t, status, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var p map[string]any
	require.NoError(t, json.Unmarshal(resp.Body, &p))
	require.Equal(t, string(code), p["code"], "body: %s", resp.Body)
	require.EqualValues(t, status, p["status"])
	return p
}

// SlogJSON is a JSON logger writing to w.
func SlogJSON(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

// Walk moves a charge of tenant tt along the given states.
func (b *Bundle) Walk(t testing.TB, tt Tenant, id string, states ...intent.State) {
	t.Helper()
	Walk(t, b.Pool, tt.ID, id, states...)
}

// NewCharge accepts ValidBody as tenant tt and returns the charge's id.
func (b *Bundle) NewCharge(t testing.TB, tt Tenant, key string) string {
	t.Helper()
	resp := b.Post(t, tt, key, ValidBody)
	require.Equal(t, http.StatusCreated, resp.Status)
	return strings.TrimPrefix(resp.Header.Get("Location"), "/v1/charges/")
}

// InReview makes a charge of tenant A that is in needs_review.
func (b *Bundle) InReview(t testing.TB, key string) string {
	t.Helper()
	id := b.NewCharge(t, b.TenantA, key)
	b.Walk(t, b.TenantA, id, intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)
	return id
}

// ChargeAtProvider applies a charge at the bundle's provider under the
// charge's provider key, as a lost call would have, and returns the
// provider's charge id.
func (b *Bundle) ChargeAtProvider(t testing.TB, id string, amount int64, currency string) string {
	t.Helper()
	return ChargeAtProvider(t, b.ProviderURL, id, amount, currency)
}

// Ops calls an /ops/v1 route with a bearer credential (none when empty).
func (b *Bundle) Ops(t testing.TB, credential, method, path, body string) Response {
	t.Helper()
	headers := []string{"Content-Type", "application/json"}
	if credential != "" {
		headers = append(headers, "Authorization", "Bearer "+credential)
	}
	return b.Request(t, method, "/ops/v1"+path, body, headers...)
}

// Resolve posts a resolution of charge id.
func (b *Bundle) Resolve(t testing.TB, credential, id, body string) Response {
	t.Helper()
	return b.Ops(t, credential, http.MethodPost, "/charges/"+id+"/resolve", body)
}

// OpsCharge reads a charge as an operator, with its events.
func (b *Bundle) OpsCharge(t testing.TB, id string) (charge map[string]any, events []map[string]any) {
	t.Helper()
	resp := b.Ops(t, b.Viewer.Token, http.MethodGet, "/charges/"+id, "")
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	var view struct {
		Events []map[string]any `json:"events"`
	}
	require.NoError(t, json.Unmarshal(resp.Body, &charge))
	require.NoError(t, json.Unmarshal(resp.Body, &view))
	return charge, view.Events
}

// LastEvent is the newest event of a charge, as an operator reads it.
func (b *Bundle) LastEvent(t testing.TB, id string) map[string]any {
	t.Helper()
	_, events := b.OpsCharge(t, id)
	return events[len(events)-1]
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
