package opsplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/internal/lockedbuf"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/tenant"
)

// opsFuzz is what FuzzOperatorRoutes works on: a server, a signed-in
// admin's session on the page, a charge in review and one unknown, a
// working key of tenant B and an operator to revoke, made again whenever an
// accepted action moves them on.
type opsFuzz struct {
	b       *testBundle
	cookie  *http.Cookie
	csrf    string
	review  string
	unknown string
	key     string
	target  string
	targets int
}

// fuzzTarget is the placeholder in a revoke form that names z.target.
const fuzzTarget = "TARGET"

// workingKey is the id of a key of tenant B that works now, minting one
// when none does.
func (z *opsFuzz) workingKey(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	keys, err := tenant.Keys(ctx, z.b.Pool, z.b.TenantB.ID)
	require.NoError(t, err)
	for _, k := range keys {
		if k.Active(time.Now()) {
			return k.ID
		}
	}
	_, err = tenant.NewKey(ctx, z.b.Pool, z.b.TenantB.ID)
	require.NoError(t, err)
	return z.workingKey(t)
}

// newTarget makes an operator for the revoke form to name.
func (z *opsFuzz) newTarget(t testing.TB) {
	t.Helper()
	z.targets++
	o, _, err := operator.Create(context.Background(), z.b.Pool, fmt.Sprintf("fuzz-target-%d", z.targets), operator.RoleViewer)
	require.NoError(t, err)
	z.target = o.Name
}

// active reports whether an operator called name is active.
func (z *opsFuzz) active(t testing.TB, name string) bool {
	t.Helper()
	var active bool
	require.NoError(t, z.b.Pool.QueryRow(context.Background(),
		`SELECT EXISTS (SELECT 1 FROM operators WHERE name = $1 AND revoked_at IS NULL)`, name).Scan(&active))
	return active
}

// opsFuzzCharge writes a charge of tenant A, through states, as the worker
// and the reconciler would.
func (z *opsFuzz) charge(t testing.TB, states ...intent.State) string {
	t.Helper()
	c := dbtest.PendingCharge(t, z.b.Pool, dbtest.Charge{TenantID: z.b.TenantA.ID})
	from := intent.StatePending
	for _, to := range states {
		m := intent.Move{TenantID: c.TenantID, ChargeID: c.ID, From: from, To: to, Actor: "test", Reason: "test", CountAttempt: to == intent.StateSubmitting}
		if to == intent.StateNeedsReview {
			m.ReviewReason = "lookup_unavailable"
		}
		_, err := intent.MoveCharge(context.Background(), z.b.Pool, m)
		require.NoError(t, err)
		from = to
	}
	return c.ID
}

func (z *opsFuzz) state(t testing.TB, id string) intent.State {
	t.Helper()
	var state intent.State
	require.NoError(t, z.b.Pool.QueryRow(context.Background(), `SELECT state FROM charges WHERE id = $1`, id).Scan(&state))
	return state
}

// signIn signs the admin in on the page, as a browser would.
func (z *opsFuzz) signIn(t testing.TB) {
	t.Helper()
	resp, err := apitest.NoRedirects.PostForm(z.b.URL+"/ops/sign-in", url.Values{"token": {z.b.Admin.Token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	for _, c := range resp.Cookies() {
		if c.Name == "chargeflow_ops" {
			z.cookie = c
		}
	}
	require.NotNil(t, z.cookie)
	req, err := http.NewRequest(http.MethodGet, z.b.URL+"/ops/", nil)
	require.NoError(t, err)
	req.AddCookie(z.cookie)
	resp, err = apitest.NoRedirects.Do(req)
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	m := apitest.CSRFField.FindSubmatch(page)
	require.NotNil(t, m)
	z.csrf = html.UnescapeString(string(m[1]))
}

// FuzzOperatorRoutes drives the operator plane as FuzzCreateCharge drives
// the merchant's: the /ops/v1 JSON routes (resolve, reconcile, the listing's
// query) and the page's forms (sign-in, resolve, reconcile, and the
// administration page's rotate-key, revoke-key and revoke-operator) and
// pages, over
// HTTP against a real database, with a fuzzed body or query, Content-Type,
// Content-Encoding and credential, and holds every answer to docs/api.md:
//
//   - no byte sequence is a 5xx;
//   - a refusal (4xx) stores nothing: charges, idempotency records, events,
//     River jobs, page sessions, the admin audit, every API key's end and
//     every operator's revocation are compared before and after;
//   - every refusal of /ops/v1 is problem+json with a code;
//   - no answer or log line holds a card number, and no log line an
//     operator token, a session id or an API key (a rotation's new key
//     included, which only its answer shows).
//
// Signing out is left out: it would end the session the other inputs use.
// `make test` runs it briefly (FUZZTIME_HTTP); its seeds run with every
// `go test`. One database serves the whole run.
func FuzzOperatorRoutes(f *testing.F) {
	logs := &lockedbuf.Buffer{}
	b := setup(f, func(o *setupOpts) {
		o.API = func(c *api.Config) {
			c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			c.AuthFailureLimit = 1 << 30 // fuzzed credentials fail often
		}
	})
	z := &opsFuzz{b: b}
	z.signIn(f)
	z.review = z.charge(f, intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)
	z.unknown = z.charge(f, intent.StateSubmitting, intent.StateUnknown)
	z.key = z.workingKey(f)
	z.newTarget(f)

	const (
		routeResolve = iota
		routeReconcile
		routeList
		routePageSignIn
		routePageResolve
		routePageReconcile
		routePageHome
		routePageCharge
		routePageAdmin
		routePageRotateKey
		routePageRevokeKey
		routePageRevokeOperator
		routes
	)
	const evidence = "provider report for 2026-11-30 has no such charge"
	for _, seed := range []struct {
		route       uint8
		body        string
		contentType string
		encoding    string
		auth        uint8
	}{
		{routeResolve, `{"status": "failed", "evidence": "provider report\u0000 has no such charge"}`, "", "", 0},
		{routeResolve, `{"status": "failed", "evidence": "` + strings.Repeat(`\u0000`, 10) + `"}`, "", "", 0},
		{routeResolve, `{"status": "succeeded", "provider_charge_id": "py_\u0000", "evidence": "` + evidence + `"}`, "", "", 0},
		{routeResolve, `{"status": "failed", "failure_code": "x\u0000", "evidence": "` + evidence + `"}`, "", "", 0},
		{routeResolve, "{\"status\": \"failed\", \"evidence\": \"caf\xe9 report has no such charge\"}", "", "", 0},
		{routeResolve, `{"status": "failed", "evidence": "4111 1111 1111 1111 was charged"}`, "", "", 0},
		{routeResolve, `{"status": "succeeded", "provider_charge_id": "py_x", "evidence": "` + evidence + `"}`, "", "", 0},
		{routeResolve, `{"status": "failed", "evidence": "` + evidence + `"}`, "", "gzip", 0},
		{routeResolve, `{"status": "failed", "evidence": "` + evidence + `"}`, "text/plain", "", 0},
		{routeResolve, `{"status": "failed", "evidence": "` + evidence + `"}`, "", "", 1},
		{routeResolve, `{"status": "failed", "evidence": "` + evidence + `"}`, "", "", 2},
		{routeReconcile, "", "", "", 0},
		{routeReconcile, "\x00", "", "br", 0},
		{routeList, "tenant=tn_%00&limit=5", "", "", 0},
		{routeList, "starting_after=%FF&status=needs_review", "", "", 1},
		{routeList, "%00=%00", "", "", 0},
		{routePageSignIn, "token=cfo_%00", "", "", 2},
		{routePageSignIn, "token=%FF%FE&token=x", "", "", 2},
		{routePageSignIn, "token=4111111111111111", "", "", 2},
		{routePageResolve, "status=failed&evidence=provider+report%00+has+no+such+charge", "", "", 0},
		{routePageResolve, "status=failed&evidence=caf%E9+report+has+no+such+charge", "", "", 0},
		{routePageResolve, "status=%00&evidence=" + url.QueryEscape(evidence), "", "", 0},
		{routePageResolve, "status=succeeded&provider_charge_id=py_%00&evidence=" + url.QueryEscape(evidence), "", "", 0},
		{routePageResolve, "status=failed&failure_code=%C0%80&evidence=" + url.QueryEscape(evidence), "", "", 0},
		{routePageResolve, "status=failed&evidence=" + url.QueryEscape(evidence) + "&evidence=%00", "", "", 0},
		{routePageResolve, "status=failed&evidence=%zz", "", "", 0},
		{routePageResolve, "status=failed&evidence=" + url.QueryEscape(evidence), "", "deflate", 0},
		{routePageResolve, "status=failed&evidence=" + url.QueryEscape(evidence), "", "", 1},
		{routePageReconcile, "x=%00", "", "", 0},
		{routePageReconcile, "", "application/json", "", 0},
		{routePageHome, "status=%00", "", "", 0},
		{routePageHome, "tenant=%FF&limit=0", "", "", 0},
		{routePageCharge, "", "", "", 0},
		{routePageAdmin, "done=key_revoked", "", "", 0},
		{routePageAdmin, "done=%00&done=%FF", "", "", 2},
		{routePageRotateKey, "overlap=1h", "", "", 0},
		{routePageRotateKey, "overlap=0s", "", "", 1},
		{routePageRotateKey, "overlap=-1h", "", "", 0},
		{routePageRotateKey, "overlap=721h", "", "", 0},
		{routePageRotateKey, "overlap=1h%00", "", "", 0},
		{routePageRotateKey, "overlap=1h&overlap=2h", "", "", 0},
		{routePageRotateKey, "overlap=9223372036854775807ns", "", "", 0},
		{routePageRotateKey, "overlap=1%C2%B5s", "", "", 0},
		{routePageRotateKey, "overlap=1.5h", "", "", 0},
		{routePageRotateKey, "overlap=1h", "", "", 2},
		{routePageRotateKey, "overlap=1h", "", "gzip", 0},
		{routePageRevokeKey, "", "", "", 0},
		{routePageRevokeKey, "x=%00", "text/plain", "", 0},
		{routePageRevokeKey, "", "", "", 2},
		{routePageRevokeOperator, "name=" + fuzzTarget, "", "", 0},
		{routePageRevokeOperator, "name=" + fuzzTarget, "", "", 2},
		{routePageRevokeOperator, "name=alice", "", "", 0},
		{routePageRevokeOperator, "name=%00", "", "", 0},
		{routePageRevokeOperator, "name=%FF" + fuzzTarget, "", "", 0},
		{routePageRevokeOperator, "name=" + fuzzTarget + "&name=" + fuzzTarget, "", "", 0},
		{routePageRevokeOperator, "name=4111111111111111", "", "", 0},
	} {
		f.Add(seed.route, []byte(seed.body), seed.contentType, seed.encoding, seed.auth)
	}

	f.Fuzz(func(t *testing.T, route uint8, body []byte, contentType, encoding string, auth uint8) {
		contentType, encoding = apitest.Sendable(contentType), apitest.Sendable(encoding)
		route %= routes
		page := route >= routePageSignIn
		var method, path string
		switch route {
		case routeResolve:
			method, path = http.MethodPost, "/ops/v1/charges/"+z.review+"/resolve"
		case routeReconcile:
			method, path = http.MethodPost, "/ops/v1/charges/"+z.unknown+"/reconcile"
		case routeList:
			method, path = http.MethodGet, "/ops/v1/charges?"+queryOf(body)
		case routePageSignIn:
			method, path = http.MethodPost, "/ops/sign-in"
		case routePageResolve:
			method, path = http.MethodPost, "/ops/charges/"+z.review+"/resolve"
		case routePageReconcile:
			method, path = http.MethodPost, "/ops/charges/"+z.unknown+"/reconcile"
		case routePageHome:
			method, path = http.MethodGet, "/ops/?"+queryOf(body)
		case routePageCharge:
			method, path = http.MethodGet, "/ops/charges/"+z.review+"?"+queryOf(body)
		case routePageAdmin:
			method, path = http.MethodGet, "/ops/admin?"+queryOf(body)
		case routePageRotateKey:
			method, path = http.MethodPost, "/ops/admin/tenants/"+z.b.TenantB.ID+"/rotate-key"
		case routePageRevokeKey:
			method, path = http.MethodPost, "/ops/admin/tenants/"+z.b.TenantB.ID+"/keys/"+z.key+"/revoke"
		case routePageRevokeOperator:
			method, path = http.MethodPost, "/ops/admin/operators/revoke"
			body = bytes.ReplaceAll(body, []byte(fuzzTarget), []byte(url.QueryEscape(z.target)))
		}
		var reqBody io.Reader
		if method == http.MethodPost {
			if route != routePageSignIn {
				// The form carries the session's token, unless the
				// credential byte says otherwise, so the fuzzed fields
				// reach the resolve.
				if auth%3 != 2 {
					body = append([]byte("csrf="+url.QueryEscape(z.csrf)+"&"), body...)
				}
			}
			reqBody = bytes.NewReader(body)
		}
		req, err := http.NewRequest(method, z.b.URL+path, reqBody)
		if err != nil {
			return // a query net/url cannot parse: no client can send it, so there is nothing to answer
		}
		if contentType == "" && method == http.MethodPost {
			contentType = map[bool]string{true: "application/x-www-form-urlencoded", false: "application/json"}[page]
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		switch {
		case !page && auth%3 == 0:
			req.Header.Set("Authorization", "Bearer "+z.b.Admin.Token)
		case !page && auth%3 == 1:
			req.Header.Set("Authorization", "Bearer "+z.b.Viewer.Token)
		case page && auth%3 != 2 && route != routePageSignIn:
			req.AddCookie(z.cookie)
		}

		before, sessions, administered := z.b.Stored(t), z.b.Sessions(t), z.b.adminState(t)
		resp, err := apitest.NoRedirects.Do(req)
		require.NoError(t, err, "the server hung up instead of answering")
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)

		require.Less(t, resp.StatusCode, 500, "an operator's bytes made a server error: %s", answer)
		if resp.StatusCode >= 400 {
			require.Equal(t, before, z.b.Stored(t), "status %d stored something: %s", resp.StatusCode, answer)
			require.Equal(t, sessions, z.b.Sessions(t), "status %d started or ended a session", resp.StatusCode)
			require.Equal(t, administered, z.b.adminState(t), "status %d changed a key, an operator or the admin audit", resp.StatusCode)
			if !page || resp.Header.Get("Content-Type") == "application/problem+json" {
				require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), "%s", answer)
				var p struct{ Code string }
				require.NoError(t, json.Unmarshal(answer, &p))
				require.NotEmpty(t, p.Code)
			}
		}
		apitest.RequireNoCardNumbers(t, "the answer", answer)

		logged := logs.Take()
		apitest.RequireNoCardNumbers(t, "the logs", logged)
		secrets := []string{z.b.Admin.Token, z.b.Viewer.Token, z.b.TenantA.Key, z.b.TenantB.Key, z.cookie.Value}
		for _, m := range newKeyOnPage.FindAllSubmatch(answer, -1) {
			require.Equal(t, routePageRotateKey, int(route), "only a rotation's answer shows a key")
			secrets = append(secrets, string(m[1]))
		}
		for _, secret := range secrets {
			require.NotContains(t, string(logged), secret)
		}
		require.NotContains(t, string(answer), z.b.TenantA.Key)
		require.NotContains(t, string(answer), z.b.TenantB.Key)

		// An accepted action moves the charges on; make new ones so the
		// next inputs reach the same code.
		if z.state(t, z.review) != intent.StateNeedsReview {
			z.review = z.charge(t, intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)
		}
		if z.state(t, z.unknown) != intent.StateUnknown {
			z.unknown = z.charge(t, intent.StateSubmitting, intent.StateUnknown)
		}
		z.key = z.workingKey(t)
		if !z.active(t, z.target) {
			z.newTarget(t)
		}
	})
}

// queryOf is body as a query a client can put on its request line: the
// bytes that would end or break the line (space, controls, non-ASCII, "#")
// percent-encoded, which the server decodes back into the same bytes; the
// rest as it is, stray "%" included. A raw space would split the request
// line, and net/http answers that itself, in plain text, before any handler
// (docs/api.md, "Protocol").
func queryOf(body []byte) string {
	var b strings.Builder
	for _, c := range body {
		if c <= ' ' || c >= 0x7f || c == '#' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
