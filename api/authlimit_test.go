package api_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/apitest"
)

// Failed authentications are limited per client address, so guessing keys
// is slow: past the limit an address gets 429 too_many_auth_failures with
// Retry-After, without its key being looked at, until its bucket refills.
// Successes never count; keys this process verified recently still pass
// from a refused address (a merchant behind the same NAT goes on); other
// addresses are not affected; X-Forwarded-For does not change who asks.
func TestAuthFailuresAreRateLimited(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	b := setup(t, func(o *setupOpts) {
		o.API = func(c *api.Config) {
			c.AuthFailureLimit = 3 // a failure back every 20 s
			c.Now = func() time.Time { return time.Unix(0, now.Load()) }
		}
	})
	wrong := testTenant{ID: b.TenantA.ID, Key: b.TenantA.Key[:len(b.TenantA.Key)-4] + "aaaa"}

	for range 10 {
		require.Equal(t, http.StatusOK, b.Get(t, b.TenantA, "/v1/charges").Status, "successes do not count")
	}
	for range 3 {
		apitest.RequireProblem(t, b.Get(t, wrong, "/v1/charges"), http.StatusUnauthorized, api.CodeUnauthorized)
	}
	limited := b.Get(t, wrong, "/v1/charges")
	apitest.RequireProblem(t, limited, http.StatusTooManyRequests, api.CodeTooManyAuthFailures)
	require.Equal(t, "20", limited.Header.Get("Retry-After"))
	apitest.RequireProblem(t, b.Request(t, http.MethodGet, "/v1/charges", ""), http.StatusTooManyRequests, api.CodeTooManyAuthFailures)
	apitest.RequireProblem(t, b.Request(t, http.MethodGet, "/v1/charges", "", "Authorization", "Bearer "+wrong.Key, "X-Forwarded-For", "203.0.113.7"),
		http.StatusTooManyRequests, api.CodeTooManyAuthFailures)
	apitest.RequireProblem(t, b.Post(t, wrong, "auth-limit-key-000001", apitest.ValidBody), http.StatusTooManyRequests, api.CodeTooManyAuthFailures)

	// A key verified a moment ago still works; one never seen is not
	// looked at, or the 429 would answer whether it is right.
	require.Equal(t, http.StatusOK, b.Get(t, b.TenantA, "/v1/charges").Status)
	apitest.RequireProblem(t, b.Get(t, b.TenantB, "/v1/charges"), http.StatusTooManyRequests, api.CodeTooManyAuthFailures)

	// Another address has its own bucket.
	other := requestFrom(t, "127.0.0.2", b.URL+"/v1/charges", "Bearer "+b.TenantB.Key)
	require.Equal(t, http.StatusOK, other, "another address is not limited")

	// A failure comes back every 20 s.
	now.Add(int64(20 * time.Second))
	apitest.RequireProblem(t, b.Get(t, wrong, "/v1/charges"), http.StatusUnauthorized, api.CodeUnauthorized)
	apitest.RequireProblem(t, b.Get(t, wrong, "/v1/charges"), http.StatusTooManyRequests, api.CodeTooManyAuthFailures)

	require.Equal(t, stored{}, b.Stored(t))
	require.Contains(t, b.Logs.String(), `"problem":"too_many_auth_failures"`)
	require.NotContains(t, b.Logs.String(), wrong.Key)
}

// requestFrom GETs url from a given loopback address and returns the status.
func requestFrom(t *testing.T, localIP, url, authorization string) int {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(localIP)}}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", authorization)
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// A tenant's 429 is logged with the tenant's id, like its other requests,
// so an operator can see who is over the rate.
func TestRateLimitLogsTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) {
		o.API = func(c *api.Config) {
			c.RateLimit, c.RateBurst = 1, 1
			c.Now = func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
		}
	})
	require.Equal(t, http.StatusOK, b.Get(t, b.TenantA, "/v1/charges").Status)
	apitest.RequireProblem(t, b.Get(t, b.TenantA, "/v1/charges"), http.StatusTooManyRequests, api.CodeRateLimited)
	apitest.RequireProblem(t, b.Post(t, b.TenantA, "rate-limit-log-key-01", apitest.ValidBody), http.StatusTooManyRequests, api.CodeRateLimited)

	limited := 0
	scanner := bufio.NewScanner(strings.NewReader(b.Logs.String()))
	for scanner.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(scanner.Bytes(), &line))
		if line["problem"] == string(api.CodeRateLimited) {
			limited++
			require.Equal(t, b.TenantA.ID, line["tenant_id"], "line: %s", scanner.Text())
		}
	}
	require.Equal(t, 2, limited)
	require.Equal(t, stored{}, b.Stored(t))
}
