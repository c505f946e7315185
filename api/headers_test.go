package api_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/apitest"
)

func gzipped(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, err := w.Write([]byte(s))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return buf.String()
}

// The API decodes no content coding. A request that declares one other than
// identity is 415 unsupported_content_encoding with Accept-Encoding:
// identity, on every route, before authentication, whatever its body: a
// compressed body read as it came would be refused for its bytes, or taken
// for what they happen to spell. Nothing is stored, nobody is signed in,
// and the provider is not asked. identity, in any case, is no coding.
func TestContentEncodingIsRefused(t *testing.T) {
	t.Parallel()
	b, provider := setupCounting(t)
	review := b.InReview(t, "encoding-review-key-01")
	charge := b.succeededCharge(t, b.TenantA, 1000)
	s := apitest.SignIn(t, b.URL, b.Admin.Token)
	before, sessions := b.Stored(t), b.Sessions(t)

	merchant := []string{"Authorization", "Bearer " + b.TenantA.Key, "Content-Type", "application/json"}
	admin := []string{"Authorization", "Bearer " + b.Admin.Token, "Content-Type", "application/json"}
	form := []string{"Content-Type", "application/x-www-form-urlencoded", "Cookie", s.Cookie.String()}
	resolveForm := url.Values{"csrf": {s.CSRF}, "status": {"failed"}, "evidence": {"provider report has no such charge"}}.Encode()
	routes := []struct {
		method, path, body string
		headers            []string
	}{
		{http.MethodPost, "/v1/charges", apitest.ValidBody, append([]string{"Idempotency-Key", "encoding-charge-key-01"}, merchant...)},
		{http.MethodPost, "/v1/refunds", `{"charge": "` + charge + `"}`, append([]string{"Idempotency-Key", "encoding-refund-key-01"}, merchant...)},
		{http.MethodPost, "/v1/charges/" + charge + "/capture", `{}`, append([]string{"Idempotency-Key", "encoding-capture-key1"}, merchant...)},
		{http.MethodPost, "/v1/charges/" + charge + "/cancel", `{}`, append([]string{"Idempotency-Key", "encoding-cancel-key-1"}, merchant...)},
		{http.MethodPost, "/v1/webhook_endpoints", `{"url": "https://example.com/hooks", "events": ["*"]}`, merchant},
		{http.MethodGet, "/v1/charges", "", merchant},
		{http.MethodPost, "/v1/charges", apitest.ValidBody, []string{"Idempotency-Key", "encoding-charge-key-02", "Content-Type", "application/json"}},
		{http.MethodPost, "/v1/provider_webhooks/fakepsp", `{"type": "charge.succeeded"}`, []string{"Content-Type", "application/json"}},
		{http.MethodPost, "/ops/v1/charges/" + review + "/resolve", `{"status": "failed", "evidence": "provider report has no such charge"}`, admin},
		{http.MethodPost, "/ops/v1/charges/" + review + "/reconcile", "", admin},
		{http.MethodPost, "/ops/sign-in", url.Values{"token": {b.Admin.Token}}.Encode(), []string{"Content-Type", "application/x-www-form-urlencoded"}},
		{http.MethodPost, "/ops/charges/" + review + "/resolve", resolveForm, form},
		{http.MethodPost, "/ops/sign-out", url.Values{"csrf": {s.CSRF}}.Encode(), form},
	}
	encodings := map[string][]string{
		"Gzip":              {"Content-Encoding", "gzip"},
		"Brotli":            {"Content-Encoding", "br"},
		"Unknown":           {"Content-Encoding", "x-chargeflow"},
		"IdentityThenGzip":  {"Content-Encoding", "identity, gzip"},
		"TwoLines":          {"Content-Encoding", "identity", "Content-Encoding", "deflate"},
		"GzipInAnyCase":     {"Content-Encoding", "GZip"},
		"EmptyThenCompress": {"Content-Encoding", ", compress"},
	}
	for name, encoding := range encodings {
		for _, r := range routes {
			body := r.body
			if name == "Gzip" && body != "" {
				body = gzipped(t, body) // as a client that compresses would send it
			}
			resp := b.Request(t, r.method, r.path, body, append(append([]string{}, r.headers...), encoding...)...)
			apitest.RequireProblem(t, resp, http.StatusUnsupportedMediaType, api.CodeUnsupportedEncoding)
			require.Equal(t, "identity", resp.Header.Get("Accept-Encoding"), "%s %s %s", name, r.method, r.path)
			require.Nil(t, apitest.CookieOf(resp))
		}
	}
	require.Equal(t, before, b.Stored(t), "no charge, refund, record, event or job")
	require.Equal(t, sessions, b.Sessions(t), "no session started or ended")
	require.Zero(t, provider.calls.Load(), "the provider was not asked")
	var endpoints int
	require.NoError(t, b.Pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_endpoints`).Scan(&endpoints))
	require.Zero(t, endpoints)

	// identity is no coding at all, however it is spelled.
	for i, identity := range []string{"identity", "IDENTITY", "identity, Identity"} {
		resp := b.Post(t, b.TenantA, "encoding-identity-key-0"+string(rune('1'+i)), apitest.ValidBody, "Content-Encoding", identity)
		require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	}
	require.Equal(t, before.Charges+3, b.Stored(t).Charges)
}

// A proxy may join two Idempotency-Key lines into one value, "a, b" (RFC
// 9110, 5.3), so a key with a comma, bare or quoted, could be two keys: it
// is refused as idempotency_key_invalid like two header lines are, on every
// route that takes a key, and nothing is stored. Each key alone is accepted.
func TestIdempotencyKeyWithACommaIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	charge := b.succeededCharge(t, b.TenantA, 1000)
	before := b.Stored(t)

	const first, second = "first-key-0000000001", "second-key-000000001"
	send := map[string]func(headers ...string) response{
		"charge": func(headers ...string) response {
			return b.Request(t, http.MethodPost, "/v1/charges", apitest.ValidBody,
				append([]string{"Authorization", "Bearer " + b.TenantA.Key, "Content-Type", "application/json"}, headers...)...)
		},
		"refund": func(headers ...string) response {
			return b.Request(t, http.MethodPost, "/v1/refunds", `{"charge": "`+charge+`", "amount": 100}`,
				append([]string{"Authorization", "Bearer " + b.TenantA.Key, "Content-Type", "application/json"}, headers...)...)
		},
		"webhook endpoint": func(headers ...string) response {
			return b.Request(t, http.MethodPost, "/v1/webhook_endpoints", `{"url": "https://93.184.215.14/hooks", "events": ["*"]}`,
				append([]string{"Authorization", "Bearer " + b.TenantA.Key, "Content-Type", "application/json"}, headers...)...)
		},
	}
	for route, post := range send {
		for _, headers := range [][]string{
			{"Idempotency-Key", first + ", " + second},
			{"Idempotency-Key", first + "," + second},
			{"Idempotency-Key", `"` + first + `", "` + second + `"`},
			{"Idempotency-Key", `"` + first + `,` + second + `"`},
			{"Idempotency-Key", first + ","},
			{"Idempotency-Key", first, "Idempotency-Key", second},
		} {
			p := apitest.RequireProblem(t, post(headers...), http.StatusBadRequest, api.CodeIdempotencyKeyInvalid)
			require.NotContains(t, p["detail"], first, "the key is not echoed")
			require.Equal(t, before, b.Stored(t), "%s %q", route, headers)
		}
	}
	for route, post := range send {
		for _, key := range []string{first, second} {
			resp := post("Idempotency-Key", route+"-"+key)
			require.Equal(t, http.StatusCreated, resp.Status, "%s: %s", route, resp.Body)
		}
	}
}
