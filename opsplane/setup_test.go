package opsplane_test

// The harness every test of this package shares: a server started by
// internal/apitest, under the names the tests use. package api's
// tests name it alike (setup_test.go there).

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/lockedbuf"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/submit"
)

// testBundle is what a test works with: a real server on loopback
// (internal/apitest), a real database cloned from the migrated template,
// and two tenants.
type testBundle struct {
	url     string
	dbURL   string
	pool    *pgxpool.Pool
	tenantA testTenant
	tenantB testTenant
	// admin and viewer are operator tokens.
	admin  testOperator
	viewer testOperator
	// psp is the real fake provider the server checks resolutions against.
	psp  *fakepsptest.Provider
	logs *lockedbuf.Buffer
	// cfg is the server's configuration, to start another API process
	// on the same database.
	cfg app.ServerConfig
}

type testOperator = apitest.Operator

type testTenant = apitest.Tenant

type setupOpts struct {
	// config edits the API's configuration, server the whole server's.
	config      func(*api.Config)
	server      func(*app.ServerConfig)
	jobs        submit.Config
	lockTimeout string
}

func setup(t testing.TB, opts ...func(*setupOpts)) *testBundle {
	t.Helper()
	var o setupOpts
	for _, opt := range opts {
		opt(&o)
	}
	provider := fakepsptest.Start(t, fakepsp.Config{})
	edit := func(sc *app.ServerConfig) {
		apitest.EditAPI(sc, o.config)
		if o.server != nil {
			o.server(sc)
		}
	}
	a := apitest.Setup(t, apitest.Options{ProviderURL: provider.URL, Config: edit, Jobs: o.jobs, LockTimeout: o.lockTimeout})
	return &testBundle{url: a.URL, dbURL: a.DBURL, pool: a.Pool, tenantA: a.TenantA, tenantB: a.TenantB,
		admin: a.Admin, viewer: a.Viewer, psp: provider, logs: a.Logs, cfg: a.Config}
}

// serve starts a server with cfg on loopback and returns its URL.
func (b *testBundle) serve(t testing.TB, cfg app.ServerConfig) string {
	t.Helper()
	return apitest.Serve(t, cfg)
}

// newQueue makes the submit queue of a server under test.
func newQueue(t testing.TB, pool *pgxpool.Pool, cfg submit.Config) *submit.Queue {
	t.Helper()
	return apitest.NewQueue(t, pool, cfg)
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func responseOf(r apitest.Response) response {
	return response{status: r.Status, header: r.Header, body: r.Body}
}

// request is one HTTP call; headers are name/value pairs, a name may repeat.
func (b *testBundle) request(t *testing.T, method, path, body string, headers ...string) response {
	t.Helper()
	return requestAt(t, b.url, method, path, body, headers...)
}

// requestAt is request to the server at url.
func requestAt(t *testing.T, url, method, path, body string, headers ...string) response {
	t.Helper()
	return responseOf(apitest.Request(t, url, method, path, body, headers...))
}

const validBody = `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "Order A-1", "metadata": {"order": "A-1"}}`

// post sends POST /v1/charges as tenant tt with an idempotency key.
func (b *testBundle) post(t *testing.T, tt testTenant, key, body string, headers ...string) response {
	t.Helper()
	h := append([]string{"Authorization", "Bearer " + tt.Key, "Content-Type", "application/json"}, headers...)
	if key != "" {
		h = append(h, "Idempotency-Key", key)
	}
	return b.request(t, http.MethodPost, "/v1/charges", body, h...)
}

// refund sends POST /v1/refunds as tenant tt to the API at url.
func (b *testBundle) refund(t *testing.T, url string, tt testTenant, key, body string) response {
	t.Helper()
	headers := []string{"Authorization", "Bearer " + tt.Key, "Content-Type", "application/json"}
	if key != "" {
		headers = append(headers, "Idempotency-Key", key)
	}
	return requestAt(t, url, http.MethodPost, "/v1/refunds", body, headers...)
}

func decode(t *testing.T, resp response) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(resp.body, &v), "body: %s", resp.body)
	return v
}

func (b *testBundle) get(t *testing.T, tt testTenant, path string) response {
	t.Helper()
	return b.request(t, http.MethodGet, path, "", "Authorization", "Bearer "+tt.Key)
}

// stored counts what the database holds: the proof that a rejection changed
// nothing.
type stored struct {
	Charges, IdempotencyKeys, Events, Jobs int
}

func (b *testBundle) stored(t *testing.T) stored {
	t.Helper()
	var s stored
	err := b.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM charges), (SELECT count(*) FROM idempotency_keys),
		(SELECT count(*) FROM charge_events), (SELECT count(*) FROM river_job)`).
		Scan(&s.Charges, &s.IdempotencyKeys, &s.Events, &s.Jobs)
	require.NoError(t, err)
	return s
}

// sessions counts the operator page's sessions.
func (b *testBundle) sessions(t testing.TB) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM operator_sessions`).Scan(&n))
	return n
}

// jobsFor returns the charge.submit jobs whose args name a charge.
func (b *testBundle) jobsFor(t *testing.T, chargeID string) int {
	t.Helper()
	var n int
	err := b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM river_job WHERE kind = 'charge.submit' AND args->>'charge_id' = $1`, chargeID).Scan(&n)
	require.NoError(t, err)
	return n
}

// requireProblem checks a problem+json answer.
func requireProblem(t *testing.T, resp response, status int, code api.Code) map[string]any {
	t.Helper()
	require.Equal(t, status, resp.status, "body: %s", resp.body)
	require.Equal(t, "application/problem+json", resp.header.Get("Content-Type"))
	var p map[string]any
	require.NoError(t, json.Unmarshal(resp.body, &p))
	require.Equal(t, string(code), p["code"], "body: %s", resp.body)
	require.EqualValues(t, status, p["status"])
	return p
}

func slogJSON(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }

// walk moves a charge along the given states, as the worker and the
// reconciler would.
func (b *testBundle) walk(t *testing.T, tt testTenant, id string, states ...intent.State) {
	t.Helper()
	apitest.Walk(t, b.pool, tt.ID, id, states...)
}

func (b *testBundle) newCharge(t *testing.T, tt testTenant, key string) string {
	t.Helper()
	resp := b.post(t, tt, key, validBody)
	require.Equal(t, http.StatusCreated, resp.status)
	return strings.TrimPrefix(resp.header.Get("Location"), "/v1/charges/")
}

// inReview makes a charge of tenant A that is in needs_review.
func (b *testBundle) inReview(t *testing.T, key string) string {
	t.Helper()
	id := b.newCharge(t, b.tenantA, key)
	b.walk(t, b.tenantA, id, intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)
	return id
}

// chargeAtProvider applies a charge at the fake provider under the
// charge's provider key, as a lost call would have, and returns the
// provider's charge id.
func (b *testBundle) chargeAtProvider(t *testing.T, id string, amount int64, currency string) string {
	t.Helper()
	return apitest.ChargeAtProvider(t, b.psp.URL, id, amount, currency)
}

// ops calls an /ops/v1 route with a bearer credential.
func (b *testBundle) ops(t *testing.T, credential, method, path, body string) response {
	t.Helper()
	headers := []string{"Content-Type", "application/json"}
	if credential != "" {
		headers = append(headers, "Authorization", "Bearer "+credential)
	}
	return b.request(t, method, "/ops/v1"+path, body, headers...)
}

func (b *testBundle) resolve(t *testing.T, credential, id, body string) response {
	t.Helper()
	return b.ops(t, credential, http.MethodPost, "/charges/"+id+"/resolve", body)
}

// opsCharge reads a charge as an operator.
func (b *testBundle) opsCharge(t *testing.T, id string) (charge map[string]any, events []map[string]any) {
	t.Helper()
	resp := b.ops(t, b.viewer.Token, http.MethodGet, "/charges/"+id, "")
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	var view struct {
		Events []map[string]any `json:"events"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &charge))
	require.NoError(t, json.Unmarshal(resp.body, &view))
	return charge, view.Events
}

func (b *testBundle) lastEvent(t *testing.T, id string) map[string]any {
	t.Helper()
	_, events := b.opsCharge(t, id)
	return events[len(events)-1]
}

// ledger counts what the fake provider applied: charges and lookups are
// not both here, but a refused resolution must never have sent a charge.
func (b *testBundle) ledger(t *testing.T) int {
	t.Helper()
	entries, err := fakepsp.FetchLedger(context.Background(), b.psp.URL, true)
	require.NoError(t, err)
	return len(entries)
}

// noRedirects is a client that shows the page's redirects instead of
// following them.
var noRedirects = apitest.NoRedirects

// pageRequest is one request to the operator's page at baseURL, with a
// session cookie (or none) and a form body (or none).
func pageRequest(t *testing.T, baseURL string, cookie *http.Cookie, method, path string, form url.Values, headers ...string) response {
	t.Helper()
	return responseOf(apitest.PageRequest(t, baseURL, cookie, method, path, form, headers...))
}

// cookieOf returns the session cookie a response sets, or nil.
func cookieOf(resp response) *http.Cookie { return apitest.SessionCookie(resp.header) }

var csrfField = apitest.CSRFField

// pageSession is a signed-in browser, as plain HTTP: its cookie and the
// CSRF token its pages carry.
type pageSession struct {
	url    string
	cookie *http.Cookie
	csrf   string
}

// signIn signs in to the page at baseURL with an operator token.
func signIn(t *testing.T, baseURL, token string) pageSession {
	t.Helper()
	cookie, csrf := apitest.SignIn(t, baseURL, token)
	return pageSession{url: baseURL, cookie: cookie, csrf: csrf}
}

func (s pageSession) get(t *testing.T, path string) response {
	t.Helper()
	return pageRequest(t, s.url, s.cookie, http.MethodGet, path, nil)
}

// post sends a form with the session's CSRF token, unless the form has
// its own csrf field.
func (s pageSession) post(t *testing.T, path string, form url.Values, headers ...string) response {
	t.Helper()
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", s.csrf)
	}
	return pageRequest(t, s.url, s.cookie, http.MethodPost, path, form, headers...)
}

// requirePage checks an HTML answer of the page and its security headers.
func requirePage(t *testing.T, resp response, status int, contains ...string) {
	t.Helper()
	require.Equal(t, status, resp.status, "body: %s", resp.body)
	require.Equal(t, "text/html; charset=UTF-8", resp.header.Get("Content-Type"))
	require.Equal(t, "DENY", resp.header.Get("X-Frame-Options"))
	require.Equal(t, "no-referrer", resp.header.Get("Referrer-Policy"))
	require.Contains(t, resp.header.Get("Content-Security-Policy"), "default-src 'none'")
	require.Contains(t, resp.header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.NotContains(t, resp.header.Get("Content-Security-Policy"), "script-src")
	for _, s := range contains {
		require.Contains(t, string(resp.body), s)
	}
}
