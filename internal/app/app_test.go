package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/psp"
)

// The API that NewAPI builds serves River's real job UI, its page and its
// JSON API, at /ops/jobs/ to a signed-in operator, and to nobody else.
func TestAPIServesJobsUI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, err := app.NewAPI(ctx, app.Options{DatabaseURL: dbtest.URL(t), Provider: psp.Config{BaseURL: "http://127.0.0.1:1"}})
	require.NoError(t, err)
	t.Cleanup(a.Close)
	_, token, err := operator.Create(ctx, a.Pool, "victor", operator.RoleViewer)
	require.NoError(t, err)
	server := httptest.NewServer(a.Server.Handler())
	t.Cleanup(server.Close)

	get := func(client *http.Client, path string) (*http.Response, string) {
		t.Helper()
		resp, err := client.Get(server.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(body)
	}

	// Not signed in: the sign-in form, never the job UI.
	resp, body := get(http.DefaultClient, app.JobsUIPrefix+"/api/jobs?state=available")
	require.Equal(t, "/ops/sign-in", resp.Request.URL.Path)
	require.Contains(t, body, `name="token"`)

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar}
	resp, err = browser.PostForm(server.URL+"/ops/sign-in", url.Values{"token": {token}})
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "/ops/", resp.Request.URL.Path)

	resp, body = get(browser, app.JobsUIPrefix+"/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `<div id="root"`, "River's page")
	require.Contains(t, body, app.JobsUIPrefix+"/assets/", "its scripts under our prefix")
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")

	resp, body = get(browser, app.JobsUIPrefix+"/api/jobs?state=available")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var jobs struct {
		Data []json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &jobs), body)
}

// Every role's sessions run without JIT compilation, unless the database
// URL asks for it: the statements are index reads of a few rows, which the
// planner can price past jit_above_cost on a large table (NoJIT).
func TestPoolSessionsRunWithoutJIT(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	for _, c := range []struct{ url, want string }{{url, "off"}, {url + "&jit=on", "on"}} {
		pool, err := app.OpenPool(ctx, c.url, "test", app.Pool{MaxConns: 1})
		require.NoError(t, err)
		var jit string
		require.NoError(t, pool.QueryRow(ctx, `SHOW jit`).Scan(&jit))
		pool.Close()
		require.Equal(t, c.want, jit, "with %s", c.url)
	}
}

// The worker's default jobs in flight grow with the machine, and never
// past the idle connections the provider transport keeps: past them, a
// slow provider's calls would close and re-dial connections.
func TestWorkerConcurrency(t *testing.T) {
	t.Parallel()
	require.Equal(t, 2048, app.WorkerConcurrency(0), "no CPU count reads as one")
	require.Equal(t, 2048, app.WorkerConcurrency(1))
	require.Equal(t, 4096, app.WorkerConcurrency(2))
	for cpus := 1; cpus <= 64; cpus++ {
		require.LessOrEqual(t, app.WorkerConcurrency(cpus), psp.MaxIdleConns, "%d CPUs", cpus)
		require.GreaterOrEqual(t, app.WorkerConcurrency(cpus), app.WorkerConcurrency(cpus-1), "%d CPUs", cpus)
	}
	require.Equal(t, app.WorkerConcurrency(runtime.GOMAXPROCS(0)), app.Defaults().Worker.Concurrency)
}
