package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/app"
)

// After Drain, /readyz answers 503 draining (GET and HEAD) before it asks
// the database anything, and every other route still serves.
func TestDrain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	server, err := app.NewServer(b.Config)
	require.NoError(t, err)
	srv := httptest.NewServer(server.Handler())
	t.Cleanup(srv.Close)

	get := func(method, path, key string) (*http.Response, map[string]any) {
		req, err := http.NewRequest(method, srv.URL+path, nil)
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp, body
	}

	resp, _ := get(http.MethodGet, "/readyz", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)

	server.Drain()
	resp, body := get(http.MethodGet, "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	require.Equal(t, string(api.CodeDraining), body["code"])
	resp, _ = get(http.MethodHead, "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	resp, _ = get(http.MethodGet, "/healthz", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "alive while draining")
	resp, _ = get(http.MethodGet, "/v1/charges", b.TenantA.Key)
	require.Equal(t, http.StatusOK, resp.StatusCode, "still serving while draining")
}
