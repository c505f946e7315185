package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/psp"
)

// countingProvider is the real provider client of a test API, counting the
// calls made through it: a refusal must make none.
type countingProvider struct {
	psp.Provider
	calls atomic.Int64
}

func (p *countingProvider) Charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error) {
	p.calls.Add(1)
	return p.Provider.Charge(ctx, req)
}

func (p *countingProvider) Find(ctx context.Context, q psp.LookupRequest) (psp.Charge, error) {
	p.calls.Add(1)
	return p.Provider.Find(ctx, q)
}

// setupCounting is setup with the provider client counted.
func setupCounting(t testing.TB) (*testBundle, *countingProvider) {
	t.Helper()
	counting := &countingProvider{}
	b := setup(t, func(o *setupOpts) {
		o.Server = func(c *app.ServerConfig) {
			counting.Provider = c.Provider
			c.Provider = counting
		}
	})
	return b, counting
}

// An admin's resolve goes through the same check of stored text as a
// merchant's charge (internal/text): a NUL or invalid UTF-8 in any member,
// or evidence longer than its limit, is a 400 naming the member, before the
// provider is asked and before anything is written — no move, no event, no
// job, the charge still in review. Ids and query parameters of the
// operator's routes are held to their patterns before any query.
func TestOpsRefusesTextTheDatabaseCannotStore(t *testing.T) {
	t.Parallel()
	b, provider := setupCounting(t)
	id := b.InReview(t, "ops-text-key-000001")
	before := b.Stored(t)

	const evidence = `"evidence": "provider report for 2026-11-30 has no such charge"`
	for _, tc := range []struct {
		name, body string
		code       api.Code
		field      string
	}{
		{"NULInEvidence", `{"status": "failed", "evidence": "provider report\u0000 has no such charge"}`, api.CodeInvalidField, "evidence"},
		{"OnlyNULsAsEvidence", `{"status": "failed", "evidence": "` + strings.Repeat(`\u0000`, 12) + `"}`, api.CodeInvalidField, "evidence"},
		{"NULInStatus", `{"status": "failed\u0000", ` + evidence + `}`, api.CodeInvalidField, "status"},
		{"NULInProviderChargeID", `{"status": "succeeded", "provider_charge_id": "py_\u0000", ` + evidence + `}`, api.CodeInvalidField, "provider_charge_id"},
		{"NULInFailureCode", `{"status": "failed", "failure_code": "declined\u0000", ` + evidence + `}`, api.CodeInvalidField, "failure_code"},
		{"InvalidUTF8InEvidence", "{\"status\": \"failed\", \"evidence\": \"caf\xe9 report has no such charge\"}", api.CodeInvalidUTF8, "evidence"},
		{"SurrogateInEvidence", `{"status": "failed", "evidence": "provider report \ud800 has no such charge"}`, api.CodeInvalidUTF8, "evidence"},
		{"EvidenceTooLong", `{"status": "failed", "evidence": "` + strings.Repeat("é", 2001) + `"}`, api.CodeInvalidField, "evidence"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := apitest.RequireProblem(t, b.Resolve(t, b.Admin.Token, id, tc.body), http.StatusBadRequest, tc.code)
			require.Equal(t, tc.field, p["field"])
		})
	}

	for _, tc := range []struct {
		method, path string
		status       int
		code         api.Code
	}{
		{http.MethodPost, "/charges/ch_%00/reconcile", http.StatusNotFound, api.CodeNotFound},
		{http.MethodPost, "/charges/" + id + "%00/resolve", http.StatusNotFound, api.CodeNotFound},
		{http.MethodGet, "/charges/%FF", http.StatusNotFound, api.CodeNotFound},
		{http.MethodGet, "/charges?tenant=tn_%00", http.StatusBadRequest, api.CodeInvalidParameter},
		{http.MethodGet, "/charges?starting_after=%FF", http.StatusBadRequest, api.CodeInvalidParameter},
		{http.MethodGet, "/charges?status=%00", http.StatusBadRequest, api.CodeInvalidParameter},
		{http.MethodGet, "/charges?%00=1", http.StatusBadRequest, api.CodeInvalidParameter},
	} {
		apitest.RequireProblem(t, b.Ops(t, b.Admin.Token, tc.method, tc.path, ""), tc.status, tc.code)
	}

	require.Equal(t, before, b.Stored(t), "no move, event or job")
	require.Zero(t, provider.calls.Load(), "the provider was not asked")
	charge, _ := b.OpsCharge(t, id)
	require.Equal(t, string(intent.StateNeedsReview), charge["status"])

	// The same resolve with storable text asks the provider and moves the
	// charge: the counts above could see it.
	resp := b.Resolve(t, b.Admin.Token, id, `{"status": "failed", `+evidence+`}`)
	require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
	require.Equal(t, int64(1), provider.calls.Load())
	require.Equal(t, before.Events+1, b.Stored(t).Events)
}

// The page's forms reach the database through the same check: each field
// of the resolve form with a NUL or invalid UTF-8 is refused with the
// problem's status and code on the page, before the provider is asked and
// before anything is written; the sign-in and sign-out forms, whose values
// are never stored, refuse such bytes as any wrong token.
func TestOpsPageRefusesTextTheDatabaseCannotStore(t *testing.T) {
	t.Parallel()
	b, provider := setupCounting(t)
	id := b.InReview(t, "ops-page-text-key-01")
	s := apitest.SignIn(t, b.URL, b.Admin.Token)
	before, sessions := b.Stored(t), b.Sessions(t)

	const evidence = "provider report for 2026-11-30 has no such charge"
	for _, tc := range []struct {
		name string
		form url.Values
		code api.Code
	}{
		{"NULInEvidence", url.Values{"status": {"failed"}, "evidence": {"provider report\x00 has no such charge"}}, api.CodeInvalidField},
		{"InvalidUTF8InEvidence", url.Values{"status": {"failed"}, "evidence": {"caf\xe9 report has no such charge"}}, api.CodeInvalidUTF8},
		{"SurrogateInEvidence", url.Values{"status": {"failed"}, "evidence": {"report \xed\xa0\x80 has no such charge"}}, api.CodeInvalidUTF8},
		{"NULInStatus", url.Values{"status": {"failed\x00"}, "evidence": {evidence}}, api.CodeInvalidField},
		{"InvalidUTF8InStatus", url.Values{"status": {"\xff"}, "evidence": {evidence}}, api.CodeInvalidUTF8},
		{"NULInProviderChargeID", url.Values{"status": {"succeeded"}, "provider_charge_id": {"py_\x00"}, "evidence": {evidence}}, api.CodeInvalidField},
		{"InvalidUTF8InFailureCode", url.Values{"status": {"failed"}, "failure_code": {"\xc0\x80"}, "evidence": {evidence}}, api.CodeInvalidUTF8},
		{"EvidenceTooLong", url.Values{"status": {"failed"}, "evidence": {strings.Repeat("é", 2001)}}, api.CodeInvalidField},
		{"EvidenceTwiceOneWithNUL", url.Values{"status": {"failed"}, "evidence": {evidence, "\x00"}}, api.CodeDuplicateMember},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := s.Post(t, "/ops/charges/"+id+"/resolve", tc.form)
			apitest.RequirePage(t, resp, http.StatusBadRequest, "<code>"+string(tc.code)+"</code>")
		})
	}

	// Sign-in and sign-out: no session started or ended, no cookie.
	for _, token := range []string{"cfo_\x00", b.Admin.Token + "\x00", "\xff" + b.Admin.Token, "cfo_" + strings.Repeat("\xc3", 60)} {
		resp := apitest.PageRequest(t, b.URL, nil, http.MethodPost, "/ops/sign-in", url.Values{"token": {token}})
		apitest.RequirePage(t, resp, http.StatusUnauthorized, "not a valid operator token")
		require.Nil(t, apitest.CookieOf(resp))
	}
	for _, csrf := range []string{s.CSRF + "\x00", "\xff"} {
		apitest.RequirePage(t, s.Post(t, "/ops/sign-out", url.Values{"csrf": {csrf}}), http.StatusForbidden, "<code>forbidden</code>")
		apitest.RequirePage(t, s.Post(t, "/ops/charges/"+id+"/reconcile", url.Values{"csrf": {csrf}}), http.StatusForbidden, "<code>forbidden</code>")
	}

	require.Equal(t, before, b.Stored(t), "no move, event or job")
	require.Equal(t, sessions, b.Sessions(t), "no session started or ended")
	require.Zero(t, provider.calls.Load(), "the provider was not asked")
	charge, _ := b.OpsCharge(t, id)
	require.Equal(t, string(intent.StateNeedsReview), charge["status"])
	apitest.RequirePage(t, s.Get(t, "/ops/"), http.StatusOK)
}

// A merchant's other texts go through the same check as a charge's: a
// refund's metadata and a webhook endpoint's URL.
func TestMerchantTextTheDatabaseCannotStore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	chargeID := b.succeededCharge(t, b.TenantA, 1000)
	before := b.Stored(t)

	for i, tc := range []struct {
		body  string
		code  api.Code
		field string
	}{
		{`{"charge": "` + chargeID + `", "metadata": {"k": "a\u0000"}}`, api.CodeInvalidField, "metadata.k"},
		{`{"charge": "` + chargeID + `", "metadata": {"\u0000": "v"}}`, api.CodeInvalidField, "metadata"},
		{`{"charge": "` + chargeID + `", "metadata": {"k": "` + strings.Repeat("é", 501) + `"}}`, api.CodeInvalidField, "metadata.k"},
	} {
		p := apitest.RequireProblem(t, b.Refund(t, b.URL, b.TenantA, "refund-text-key-0000"+string(rune('a'+i)), tc.body), http.StatusBadRequest, tc.code)
		require.Equal(t, tc.field, p["field"])
	}

	for i, body := range []string{
		`{"url": "https://example.com/\u0000", "events": ["*"]}`,
		`{"url": "https://example.com/a\u0000b", "events": ["*"]}`,
	} {
		p := apitest.RequireProblem(t, b.createEndpoint(t, b.TenantA, fmt.Sprintf("endpoint-text-key-%04d", i), body), http.StatusBadRequest, api.CodeInvalidField)
		require.Equal(t, "url", p["field"])
	}
	p := apitest.RequireProblem(t, b.createEndpoint(t, b.TenantA, "endpoint-text-key-utf8",
		"{\"url\": \"https://example.com/caf\xe9\", \"events\": [\"*\"]}"), http.StatusBadRequest, api.CodeInvalidUTF8)
	require.Equal(t, "url", p["field"])

	require.Equal(t, before, b.Stored(t))
	var endpoints int
	require.NoError(t, b.Pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_endpoints`).Scan(&endpoints))
	require.Zero(t, endpoints)
}
