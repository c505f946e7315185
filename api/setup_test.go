package api_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/internal/lockedbuf"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/submit"
	"github.com/chargeflow/chargeflow/tenant"
)

// testBundle is what an API test works with: a real server on loopback, a
// real database cloned from the migrated template, and two tenants.
type testBundle struct {
	url     string
	dbURL   string
	pool    *pgxpool.Pool
	tenantA testTenant
	tenantB testTenant
	// admin and viewer are operator tokens.
	admin  testOperator
	viewer testOperator
	// psp is the real fake provider the API checks resolutions against.
	psp  *fakepsptest.Provider
	logs *lockedbuf.Buffer
	// cfg is the server's configuration, to start another API process
	// on the same database.
	cfg api.Config
}

type testOperator struct {
	Name  string
	Token string
}

type testTenant struct {
	ID  string
	Key string
}

type setupOpts struct {
	config      func(*api.Config)
	jobs        submit.Config
	lockTimeout string
}

func setup(t testing.TB, opts ...func(*setupOpts)) *testBundle {
	t.Helper()
	o := setupOpts{lockTimeout: "2s"}
	for _, opt := range opts {
		opt(&o)
	}
	ctx := context.Background()
	dbURL := dbtest.URL(t)

	poolCfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	poolCfg.MaxConns = 8
	poolCfg.ConnConfig.RuntimeParams["lock_timeout"] = o.lockTimeout
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	jobs := newQueue(t, pool, o.jobs)

	b := &testBundle{dbURL: dbURL, pool: pool, logs: &lockedbuf.Buffer{}}
	for name, tt := range map[string]*testTenant{"tenant-a": &b.tenantA, "tenant-b": &b.tenantB} {
		created, key, err := tenant.Create(ctx, pool, name)
		require.NoError(t, err)
		tt.ID, tt.Key = created.ID, key
	}

	for _, op := range []struct {
		into *testOperator
		name string
		role operator.Role
	}{{&b.admin, "alice", operator.RoleAdmin}, {&b.viewer, "victor", operator.RoleViewer}} {
		_, token, err := operator.Create(ctx, pool, op.name, op.role)
		require.NoError(t, err)
		*op.into = testOperator{Name: op.name, Token: token}
	}
	b.psp = fakepsptest.Start(t, fakepsp.Config{})

	cfg := api.Config{
		DB:                pool,
		Jobs:              jobs,
		ProviderClient:    psp.NewClient(psp.Config{BaseURL: b.psp.URL, Timeout: 2 * time.Second}),
		ProviderKeyWindow: 23 * time.Hour,
		Logger:            slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if o.config != nil {
		o.config(&cfg)
	}
	b.cfg = cfg
	b.url = b.serve(t, cfg)
	return b
}

// serve starts an API process with cfg on loopback and returns its URL.
func (b *testBundle) serve(t testing.TB, cfg api.Config) string {
	t.Helper()
	server, err := api.New(cfg)
	require.NoError(t, err)
	httpServer := httptest.NewServer(server.Handler())
	t.Cleanup(httpServer.Close)
	return httpServer.URL
}

// newQueue makes the submit queue of an API under test, on an insert-only
// River client with our middleware, as the command builds it.
func newQueue(t testing.TB, pool *pgxpool.Pool, cfg submit.Config) *submit.Queue {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: submit.Middleware()})
	require.NoError(t, err)
	cfg.River = client
	jobs, err := submit.NewQueue(cfg)
	require.NoError(t, err)
	return jobs
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// request is one HTTP call; headers are name/value pairs, a name may repeat.
func (b *testBundle) request(t *testing.T, method, path, body string, headers ...string) response {
	t.Helper()
	return requestAt(t, b.url, method, path, body, headers...)
}

// requestAt is request to the API process at url.
func requestAt(t *testing.T, url, method, path, body string, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url+path, strings.NewReader(body))
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
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
