package opsplane_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/admin"
	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/route"
	"github.com/chargeflow/chargeflow/tenant"
)

// adminState is what an administrator's action changes: the admin audit,
// every key with its end, the active operators, the page's sessions, the
// provider accounts and the routes. Equal before and after is the proof
// that a refusal changed nothing.
type adminState struct {
	Audit     int
	Keys      string
	Operators string
	Sessions  int
	Accounts  string
	Routes    string
}

func (b *testBundle) adminState(t testing.TB) adminState {
	t.Helper()
	var s adminState
	err := b.Pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM admin_audit),
		(SELECT coalesce(string_agg(id || ':' || coalesce(revoked_at::text, '-'), ',' ORDER BY id), '') FROM api_keys),
		(SELECT coalesce(string_agg(id || ':' || coalesce(revoked_at::text, '-'), ',' ORDER BY id), '') FROM operators),
		(SELECT count(*) FROM operator_sessions),
		(SELECT coalesce(string_agg(name || ':' || coalesce(disabled_at::text, '-'), ',' ORDER BY name), '') FROM provider_accounts),
		(SELECT coalesce(string_agg(tenant_id || ':' || position || ':' || account, ',' ORDER BY tenant_id, position), '') FROM tenant_routes)`).
		Scan(&s.Audit, &s.Keys, &s.Operators, &s.Sessions, &s.Accounts, &s.Routes)
	require.NoError(t, err)
	return s
}

// audit is the admin audit, newest first.
func (b *testBundle) audit(t testing.TB) []admin.Entry {
	t.Helper()
	entries, err := admin.New(b.Pool).Audit(context.Background(), 1000)
	require.NoError(t, err)
	return entries
}

// keyIDs are a tenant's key ids, newest first.
func (b *testBundle) keyIDs(t testing.TB, tenantID string) []string {
	t.Helper()
	keys, err := tenant.Keys(context.Background(), b.Pool, tenantID)
	require.NoError(t, err)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k.ID)
	}
	return out
}

// requireKeyWorks checks that key authenticates as tenantID, or with works
// false that it does not.
func (b *testBundle) requireKeyWorks(t testing.TB, key, tenantID string, works bool) {
	t.Helper()
	got, err := tenant.Authenticate(context.Background(), b.Pool, key)
	if !works {
		require.ErrorIs(t, err, tenant.ErrUnauthenticated)
		return
	}
	require.NoError(t, err)
	require.Equal(t, tenantID, got.ID)
}

// newKeyOnPage finds the one new API key a rotation's answer shows.
var newKeyOnPage = regexp.MustCompile(`<code class="secret" id="new-key">(cfk_[A-Za-z0-9_-]+)</code>`)

// requireNoSecret checks that none of the credentials is in data.
func requireNoSecret(t testing.TB, what string, data []byte, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		require.NotContains(t, string(data), s, "%s holds a credential", what)
	}
}

// Every operator reads the administration page from the navigation: the
// tenants with their keys (never a key's secret), the operators and the
// admin audit. A viewer sees no form.
func TestOpsAdminPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, _, _, err := admin.New(b.Pool).RotateKey(ctx, "cli:root", b.TenantB.ID, 0)
	require.NoError(t, err)
	admins := apitest.SignIn(t, b.URL, b.Admin.Token)
	viewer := apitest.SignIn(t, b.URL, b.Viewer.Token)
	secrets := []string{b.TenantA.Key, b.TenantB.Key, b.Admin.Token, b.Viewer.Token}

	for _, s := range []apitest.PageSession{admins, viewer} {
		apitest.RequirePage(t, s.Get(t, "/ops/"), http.StatusOK, `<a href="/ops/admin">Administration</a>`)
		page := s.Get(t, "/ops/admin")
		apitest.RequirePage(t, page, http.StatusOK, "tenant-a", "tenant-b", b.TenantA.ID, b.TenantB.ID,
			`id="operators"`, b.Admin.Name, b.Viewer.Name, `id="audit"`, "cli:root", admin.KeyRotated)
		require.Equal(t, "no-store", page.Header.Get("Cache-Control"))
		for _, id := range append(b.keyIDs(t, b.TenantA.ID), b.keyIDs(t, b.TenantB.ID)...) {
			require.Contains(t, string(page.Body), `id="key-`+id+`"`)
		}
		requireNoSecret(t, "the administration page", page.Body, secrets...)
		require.NotContains(t, string(page.Body), "cfk_", "no key's secret, not even in part")
		body := string(page.Body)
		// Tenant B's first key stopped at the rotation: one working key each.
		require.Contains(t, body, "stopped")
		require.Equal(t, 2, strings.Count(body, ">1 working key<"), "%s", body)
	}
	viewerPage := string(viewer.Get(t, "/ops/admin").Body)
	require.Contains(t, viewerPage, `id="viewer-note"`)
	require.NotContains(t, viewerPage, `action="/ops/admin/`, "a viewer gets no form")
	adminPage := string(admins.Get(t, "/ops/admin").Body)
	require.Contains(t, adminPage, `action="/ops/admin/tenants/`+b.TenantA.ID+`/rotate-key"`)
	require.Contains(t, adminPage, `action="/ops/admin/tenants/`+b.TenantA.ID+`/keys/`+b.keyIDs(t, b.TenantA.ID)[0]+`/revoke"`)
	require.Contains(t, adminPage, `name="name" value="`+b.Viewer.Name+`"`, "the viewer can be revoked")
	require.NotContains(t, adminPage, `name="name" value="`+b.Admin.Name+`"`, "the signed-in admin is not offered to revoke themselves")
	require.NotContains(t, adminPage, `id="viewer-note"`)

	// Without a session it is the sign-in form.
	resp := apitest.PageRequest(t, b.URL, nil, http.MethodGet, "/ops/admin", nil)
	require.Equal(t, http.StatusSeeOther, resp.Status)
	require.Equal(t, "/ops/sign-in", resp.Header.Get("Location"))
}

// Every form of the administration page needs the session's CSRF token, a
// same-origin request and an admin: anything else is 403 (or 401 without a
// session) and changes nothing — no audit record, every key still works,
// every operator still active.
func TestOpsAdminFormsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	admins := apitest.SignIn(t, b.URL, b.Admin.Token)
	viewer := apitest.SignIn(t, b.URL, b.Viewer.Token)
	keyA := b.keyIDs(t, b.TenantA.ID)[0]
	// An account and a route to disable and clear, made without a record.
	_, err := route.AddAccount(context.Background(), b.Pool, route.Account{Name: "backup", Kind: route.KindFake, Endpoint: "http://127.0.0.1:9091"})
	require.NoError(t, err)
	require.NoError(t, route.SetRoute(context.Background(), b.Pool, b.TenantA.ID, []route.Entry{{Account: "backup"}}))
	forms := []struct {
		path string
		form func() url.Values
	}{
		{"/ops/admin/tenants/" + b.TenantA.ID + "/rotate-key", func() url.Values { return url.Values{"overlap": {"1h"}} }},
		{"/ops/admin/tenants/" + b.TenantA.ID + "/keys/" + keyA + "/revoke", func() url.Values { return url.Values{} }},
		{"/ops/admin/operators/revoke", func() url.Values { return url.Values{"name": {b.Viewer.Name}} }},
		{"/ops/admin/accounts", func() url.Values {
			return url.Values{"name": {"eu"}, "kind": {"fake"}, "endpoint": {"http://127.0.0.1:9092"}}
		}},
		{"/ops/admin/accounts/disable", func() url.Values { return url.Values{"name": {"backup"}} }},
		{"/ops/admin/tenants/" + b.TenantB.ID + "/route", func() url.Values { return url.Values{"entries": {"backup"}} }},
		{"/ops/admin/tenants/" + b.TenantA.ID + "/route/clear", func() url.Values { return url.Values{} }},
	}
	before := b.adminState(t)

	for _, f := range forms {
		for _, csrf := range []string{"", "forged", viewer.CSRF, admins.CSRF + "x", strings.ToUpper(admins.CSRF)} {
			form := f.form()
			form.Set("csrf", csrf)
			apitest.RequirePage(t, admins.Post(t, f.path, form), http.StatusForbidden, "CSRF token")
		}
		// No csrf field at all.
		apitest.RequirePage(t, apitest.PageRequest(t, b.URL, admins.Cookie, http.MethodPost, f.path, f.form()), http.StatusForbidden, "CSRF token")
		apitest.RequirePage(t, admins.Post(t, f.path, f.form(), "Sec-Fetch-Site", "cross-site"), http.StatusForbidden, "cross-origin")
		apitest.RequirePage(t, admins.Post(t, f.path, f.form(), "Origin", "https://evil.example"), http.StatusForbidden, "cross-origin")
		apitest.RequirePage(t, viewer.Post(t, f.path, f.form()), http.StatusForbidden, "needs an admin", "Back to administration")
		apitest.RequirePage(t, apitest.PageRequest(t, b.URL, nil, http.MethodPost, f.path, f.form()), http.StatusUnauthorized, "sign in")
	}
	require.Equal(t, before, b.adminState(t), "no refusal changed anything")
	require.Empty(t, b.audit(t), "no refusal is in the admin audit")
	b.requireKeyWorks(t, b.TenantA.Key, b.TenantA.ID, true)
	_, err = operator.Authenticate(context.Background(), b.Pool, b.Viewer.Token)
	require.NoError(t, err, "the viewer is still active")
	require.Equal(t, http.StatusOK, viewer.Get(t, "/ops/admin").Status, "and still signed in")
}

// Rotating a key shows the new key once, on a page no cache keeps; the old
// key works through the overlap and the new one at once; the admin audit has
// exactly one record, signed with the operator. A refused rotation changes
// nothing.
func TestOpsAdminRotateKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	admins := apitest.SignIn(t, b.URL, b.Admin.Token)
	path := "/ops/admin/tenants/" + b.TenantA.ID + "/rotate-key"
	before := b.adminState(t)

	for _, tc := range []struct {
		name   string
		form   url.Values
		status int
		code   api.Code
	}{
		{"Negative", url.Values{"overlap": {"-1h"}}, 400, api.CodeInvalidField},
		{"PastTheMaximum", url.Values{"overlap": {(admin.MaxOverlap + 1).String()}}, 400, api.CodeInvalidField},
		{"NotADuration", url.Values{"overlap": {"a week"}}, 400, api.CodeInvalidField},
		{"Missing", url.Values{}, 400, api.CodeMissingField},
		{"Twice", url.Values{"overlap": {"1h", "0s"}}, 400, api.CodeDuplicateMember},
		{"NUL", url.Values{"overlap": {"1h\x00"}}, 400, api.CodeInvalidField},
		{"UnderASecond", url.Values{"overlap": {"1µs"}}, 400, api.CodeInvalidField},
		{"PartOfASecond", url.Values{"overlap": {"1h0.5s"}}, 400, api.CodeInvalidField},
	} {
		apitest.RequirePage(t, admins.Post(t, path, tc.form), tc.status, string(tc.code), "overlap", "Back to administration")
		require.Equal(t, before, b.adminState(t), "%s changed nothing", tc.name)
	}
	unknownTenant := "tn_" + strings.Repeat("0", 26)
	apitest.RequirePage(t, admins.Post(t, "/ops/admin/tenants/"+unknownTenant+"/rotate-key", url.Values{"overlap": {"1h"}}), http.StatusNotFound, "no such tenant")
	apitest.RequirePage(t, admins.Post(t, "/ops/admin/tenants/tn_nope/rotate-key", url.Values{"overlap": {"1h"}}), http.StatusNotFound, "no such tenant")
	require.Equal(t, before, b.adminState(t), "refusals changed nothing")
	require.Empty(t, b.audit(t))

	// An hour's overlap: both keys work.
	resp := admins.Post(t, path, url.Values{"overlap": {"1h"}}, "Sec-Fetch-Site", "same-origin", "Origin", b.URL)
	apitest.RequirePage(t, resp, http.StatusOK, "Key rotated.", "will not be shown again", "1 hour from now")
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"), "the page with a key is kept by no cache")
	m := newKeyOnPage.FindAllSubmatch(resp.Body, -1)
	require.Len(t, m, 1, "the new key, once: %s", resp.Body)
	newKey := string(m[0][1])
	require.Equal(t, 1, strings.Count(string(resp.Body), newKey), "shown once on its page")
	requireNoSecret(t, "the rotation's answer", resp.Body, b.TenantA.Key, b.TenantB.Key)
	b.requireKeyWorks(t, newKey, b.TenantA.ID, true)
	b.requireKeyWorks(t, b.TenantA.Key, b.TenantA.ID, true)
	keys := b.keyIDs(t, b.TenantA.ID)
	require.Len(t, keys, 2)
	require.Contains(t, string(resp.Body), keys[0], "the answer names the new key's id")

	entries := b.audit(t)
	require.Len(t, entries, 1, "one record for one rotation")
	require.Equal(t, "operator:"+b.Admin.Name, entries[0].Actor)
	require.Equal(t, admin.KeyRotated, entries[0].Action)
	require.Equal(t, b.TenantA.ID, entries[0].Subject)
	require.Contains(t, entries[0].Detail, keys[0])

	// The key is not shown again: not on the administration page, not in
	// the log.
	page := admins.Get(t, "/ops/admin")
	apitest.RequirePage(t, page, http.StatusOK, keys[0], "operator:"+b.Admin.Name)
	requireNoSecret(t, "the administration page", page.Body, newKey, b.TenantA.Key, b.TenantB.Key)
	requireNoSecret(t, "the logs", []byte(b.Logs.String()), newKey, b.TenantA.Key, b.TenantB.Key, b.Admin.Token)
	require.Contains(t, b.Logs.String(), `"route":"/ops/admin/tenants/:tenant/rotate-key"`)

	// No overlap: tenant B's old key stops now.
	resp = admins.Post(t, "/ops/admin/tenants/"+b.TenantB.ID+"/rotate-key", url.Values{"overlap": {"0s"}})
	apitest.RequirePage(t, resp, http.StatusOK, "Key rotated.", "stopped working")
	m = newKeyOnPage.FindAllSubmatch(resp.Body, -1)
	require.Len(t, m, 1)
	b.requireKeyWorks(t, string(m[0][1]), b.TenantB.ID, true)
	b.requireKeyWorks(t, b.TenantB.Key, b.TenantB.ID, false)
	require.Len(t, b.audit(t), 2)
	requireNoSecret(t, "the logs", []byte(b.Logs.String()), string(m[0][1]), b.TenantB.Key)
}

// Revoking a key makes it stop at once, with one audit record; a key that
// is not a working key of that tenant is 404 and changes nothing.
func TestOpsAdminRevokeKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	admins := apitest.SignIn(t, b.URL, b.Admin.Token)
	keyA, keyB := b.keyIDs(t, b.TenantA.ID)[0], b.keyIDs(t, b.TenantB.ID)[0]
	revoke := func(tenantID, keyID string) response {
		return admins.Post(t, "/ops/admin/tenants/"+tenantID+"/keys/"+keyID+"/revoke", url.Values{})
	}
	before := b.adminState(t)
	for _, path := range [][2]string{
		{b.TenantA.ID, keyB}, // another tenant's key
		{b.TenantA.ID, "key_" + strings.Repeat("0", 26)},
		{b.TenantA.ID, "key_nope"},
		{"tn_" + strings.Repeat("0", 26), keyA},
	} {
		apitest.RequirePage(t, revoke(path[0], path[1]), http.StatusNotFound, "no such", "Back to administration")
	}
	require.Equal(t, before, b.adminState(t), "refusals changed nothing")
	b.requireKeyWorks(t, b.TenantA.Key, b.TenantA.ID, true)

	resp := revoke(b.TenantA.ID, keyA)
	require.Equal(t, http.StatusSeeOther, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "/ops/admin?done=key_revoked", resp.Header.Get("Location"))
	apitest.RequirePage(t, admins.Get(t, resp.Header.Get("Location")), http.StatusOK, "Key revoked.", admin.KeyRevoked)
	b.requireKeyWorks(t, b.TenantA.Key, b.TenantA.ID, false)
	b.requireKeyWorks(t, b.TenantB.Key, b.TenantB.ID, true)
	entries := b.audit(t)
	require.Len(t, entries, 1)
	require.Equal(t, "operator:"+b.Admin.Name, entries[0].Actor)
	require.Equal(t, admin.KeyRevoked, entries[0].Action)
	require.Equal(t, b.TenantA.ID, entries[0].Subject)
	require.Equal(t, "key "+keyA, entries[0].Detail)

	// Again: it no longer works, so there is nothing to revoke.
	after := b.adminState(t)
	apitest.RequirePage(t, revoke(b.TenantA.ID, keyA), http.StatusNotFound, "no such")
	require.Equal(t, after, b.adminState(t))
	requireNoSecret(t, "the logs", []byte(b.Logs.String()), b.TenantA.Key, b.TenantB.Key)
}

// Revoking an operator ends their token and every session of theirs, with
// one audit record. An admin cannot revoke themselves from the page; an
// operator that is not active is 404. Neither changes anything.
func TestOpsAdminRevokeOperator(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	admins := apitest.SignIn(t, b.URL, b.Admin.Token)
	viewer := apitest.SignIn(t, b.URL, b.Viewer.Token)
	viewerAgain := apitest.SignIn(t, b.URL, b.Viewer.Token)
	path := "/ops/admin/operators/revoke"
	before := b.adminState(t)

	self := admins.Post(t, path, url.Values{"name": {b.Admin.Name}})
	apitest.RequirePage(t, self, http.StatusForbidden, "cannot revoke yourself", "Back to administration")
	for _, tc := range []struct {
		form   url.Values
		status int
		code   api.Code
	}{
		{url.Values{"name": {"nobody"}}, 404, api.CodeNotFound},
		{url.Values{"name": {strings.ToUpper(b.Viewer.Name)}}, 404, api.CodeNotFound},
		{url.Values{}, 400, api.CodeMissingField},
		{url.Values{"name": {""}}, 400, api.CodeMissingField},
		{url.Values{"name": {b.Viewer.Name, "nobody"}}, 400, api.CodeDuplicateMember},
		{url.Values{"name": {"victor\x00"}}, 400, api.CodeInvalidField},
		{url.Values{"name": {"vict\xffor"}}, 400, api.CodeInvalidUTF8},
		{url.Values{"name": {strings.Repeat("v", 101)}}, 400, api.CodeInvalidField},
	} {
		apitest.RequirePage(t, admins.Post(t, path, tc.form), tc.status, string(tc.code))
	}
	require.Equal(t, before, b.adminState(t), "refusals changed nothing")
	require.Equal(t, http.StatusOK, admins.Get(t, "/ops/admin").Status, "the admin is still signed in")
	require.Equal(t, http.StatusOK, viewer.Get(t, "/ops/admin").Status)

	resp := admins.Post(t, path, url.Values{"name": {b.Viewer.Name}})
	require.Equal(t, http.StatusSeeOther, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "/ops/admin?done=operator_revoked", resp.Header.Get("Location"))
	apitest.RequirePage(t, admins.Get(t, resp.Header.Get("Location")), http.StatusOK, "Operator revoked.", admin.OperatorRevoked)
	_, err := operator.Authenticate(ctx, b.Pool, b.Viewer.Token)
	require.ErrorIs(t, err, operator.ErrUnauthenticated, "their token")
	apitest.RequireProblem(t, b.Ops(t, b.Viewer.Token, http.MethodGet, "/charges", ""), http.StatusUnauthorized, api.CodeUnauthorized)
	for _, s := range []apitest.PageSession{viewer, viewerAgain} {
		resp := s.Get(t, "/ops/")
		require.Equal(t, http.StatusSeeOther, resp.Status, "their sessions")
		require.Equal(t, "/ops/sign-in", resp.Header.Get("Location"))
	}
	require.Equal(t, before.Sessions-2, b.adminState(t).Sessions, "their sessions are gone, the admin's is not")
	entries := b.audit(t)
	require.Len(t, entries, 1)
	require.Equal(t, "operator:"+b.Admin.Name, entries[0].Actor)
	require.Equal(t, admin.OperatorRevoked, entries[0].Action)
	require.Equal(t, "name "+b.Viewer.Name, entries[0].Detail)

	// Revoked already: nothing to revoke, and the page offers nothing.
	after := b.adminState(t)
	apitest.RequirePage(t, admins.Post(t, path, url.Values{"name": {b.Viewer.Name}}), http.StatusNotFound, "no active operator")
	require.Equal(t, after, b.adminState(t))
	page := admins.Get(t, "/ops/admin")
	apitest.RequirePage(t, page, http.StatusOK, "revoked")
	require.NotContains(t, string(page.Body), `name="name" value="`+b.Viewer.Name+`"`)
	requireNoSecret(t, "the logs", []byte(b.Logs.String()), b.Admin.Token, b.Viewer.Token, b.TenantA.Key, b.TenantB.Key)
}

// An admin adds provider accounts on the page, routes a tenant through
// them, disables one and clears the route: each change one admin audit
// record signed with the operator, the same package admin the CLI calls.
// Every refusal is the page again under the problem's status, the problem
// beside the form and the form as sent — less a value that may be a
// secret — and stores nothing. Every operator reads the accounts (the
// variables' names, never a secret) and the routes.
func TestOpsAdminAccountsAndRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	admins := apitest.SignIn(t, b.URL, b.Admin.Token)
	viewer := apitest.SignIn(t, b.URL, b.Viewer.Token)
	const typedSecret, password = "sk_live_canary_5e2a1", "pw_canary_90c3"
	adyen := func(change ...string) url.Values {
		form := url.Values{"name": {"eu-adyen"}, "kind": {"adyen"}, "endpoint": {"https://checkout-test.adyen.com/v71"},
			"credential_env": {"ADYEN_EU_KEY"}, "webhook_secret_env": {"ADYEN_EU_HMAC"}, "merchant_account": {"ShopEU"}}
		for i := 0; i+1 < len(change); i += 2 {
			form[change[i]] = []string{change[i+1]}
		}
		return form
	}
	var answers strings.Builder // every page the admin was answered with
	post := func(path string, form url.Values) response {
		t.Helper()
		resp := admins.Post(t, path, form)
		answers.Write(resp.Body)
		return resp
	}
	refused := func(path string, form url.Values, status int, code api.Code, contains ...string) response {
		t.Helper()
		before := b.adminState(t)
		resp := post(path, form)
		apitest.RequirePage(t, resp, status, append(contains, string(code))...)
		require.Equal(t, before, b.adminState(t), "a refusal stores nothing: %v", form)
		return resp
	}

	// Accounts refused: the page again, under the problem's status, with
	// the form as sent.
	const accounts = "/ops/admin/accounts"
	resp := refused(accounts, adyen("name", "stripe"), 400, api.CodeInvalidField, "the name of the processes&#39; own provider",
		`id="add-account"`, `class="form-problem"`, `name="name" value="stripe"`, `value="ShopEU"`, `id="tenants"`)
	require.Contains(t, string(resp.Body), `href="#add-account"`, "the banner leads to the form")
	refused(accounts, adyen("credential_env", typedSecret), 400, api.CodeInvalidField, "never the secret itself",
		"Left empty, as what was sent may be a secret: the API key variable.", `name="credential_env" value=""`, `value="ADYEN_EU_HMAC"`)
	refused(accounts, adyen("webhook_secret_env", "whsec "+typedSecret), 400, api.CodeInvalidField, "never the secret itself",
		"the webhook secret variable", `value="ADYEN_EU_KEY"`)
	refused(accounts, adyen("endpoint", "https://ws:"+password+"@checkout-test.adyen.com/v71"), 400, api.CodeInvalidField,
		"no user or password", "the endpoint.", `name="endpoint" value=""`)
	refused(accounts, adyen("merchant_account", ""), 400, api.CodeInvalidField, "needs its merchant account")
	refused(accounts, adyen("kind", "paypal"), 400, api.CodeInvalidField, "kind &#34;paypal&#34;")
	refused(accounts, adyen("endpoint", "https://checkout-test.adyen.com/v71\x00"), 400, api.CodeInvalidField, "(NUL)", `value="https://checkout-test.adyen.com/v71`)
	refused(accounts, adyen("name", "eu\xff"), 400, api.CodeInvalidUTF8)
	twice := adyen()
	twice.Add("name", "other")
	refused(accounts, twice, 400, api.CodeDuplicateMember)
	refused(accounts, url.Values{}, 400, api.CodeInvalidField, "an account&#39;s name")
	require.Empty(t, b.audit(t))

	// Added: a redirect, then the account on the page, with its
	// variables' names.
	resp = post(accounts, adyen())
	require.Equal(t, http.StatusSeeOther, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "/ops/admin?done=account_added", resp.Header.Get("Location"))
	apitest.RequirePage(t, admins.Get(t, resp.Header.Get("Location")), http.StatusOK, "Provider account added.",
		`id="account-eu-adyen"`, "$ADYEN_EU_KEY", "$ADYEN_EU_HMAC", "ShopEU", "https://checkout-test.adyen.com/v71")
	resp = post(accounts, url.Values{"name": {"backup"}, "kind": {"fake"}, "endpoint": {"http://127.0.0.1:9091"}})
	require.Equal(t, http.StatusSeeOther, resp.Status, "body: %s", resp.Body)
	refused(accounts, adyen(), 400, api.CodeInvalidField, "a provider account has that name already")

	// Routes: the same entries as the CLI takes, one a line or
	// space-separated.
	routeA := "/ops/admin/tenants/" + b.TenantA.ID + "/route"
	resp = refused(routeA, url.Values{"entries": {"eu-adyen:eur\nbackup"}}, 400, api.CodeInvalidField,
		`entry &#34;eu-adyen:eur&#34;: currency &#34;eur&#34;`, `<details class="edit" open>`, ">eu-adyen:eur\nbackup</textarea>",
		`href="#route-`+b.TenantA.ID+`"`)
	require.Equal(t, 1, strings.Count(string(resp.Body), "<details class=\"edit\" open>"), "only the form sent is open")
	refused(routeA, url.Values{"entries": {"backup::500-100"}}, 400, api.CodeInvalidField, "the largest amount")
	refused(routeA, url.Values{"entries": {"backup eu-adyen backup"}}, 400, api.CodeInvalidField, "in the route twice")
	refused(routeA, url.Values{"entries": {"eu-adyen nowhere"}}, 404, api.CodeNotFound, "no provider account has that name",
		">eu-adyen nowhere</textarea>")
	refused(routeA, url.Values{"entries": {" \n "}}, 400, api.CodeMissingField, "Clear route")
	refused(routeA, url.Values{}, 400, api.CodeMissingField)
	refused(routeA, url.Values{"entries": {"backup", "eu-adyen"}}, 400, api.CodeDuplicateMember)
	unknownTenant := "tn_" + strings.Repeat("0", 26)
	refused("/ops/admin/tenants/"+unknownTenant+"/route", url.Values{"entries": {"backup"}}, 404, api.CodeNotFound, "no such tenant")
	refused("/ops/admin/tenants/tn_nope/route", url.Values{"entries": {"backup"}}, 404, api.CodeNotFound, "no such tenant")
	refused("/ops/admin/tenants/"+unknownTenant+"/route/clear", url.Values{}, 404, api.CodeNotFound, "no such tenant")
	require.Len(t, b.audit(t), 2, "the two accounts, and no refusal")

	resp = post(routeA, url.Values{"entries": {"eu-adyen:EUR,GBP\r\n backup::-100000 \r\n"}})
	require.Equal(t, http.StatusSeeOther, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "/ops/admin?done=route_set", resp.Header.Get("Location"))
	entries, err := route.Route(ctx, b.Pool, b.TenantA.ID)
	require.NoError(t, err)
	require.Equal(t, []route.Entry{{Account: "eu-adyen", Currencies: []string{"EUR", "GBP"}}, {Account: "backup", MaxAmount: 100_000}}, entries)
	apitest.RequirePage(t, admins.Get(t, "/ops/admin?done=route_set"), http.StatusOK, "Route set.",
		"<code>eu-adyen:EUR,GBP</code>", "EUR or GBP, any amount", "<code>backup::-100000</code>", "any currency, up to 100000 in minor units",
		">eu-adyen:EUR,GBP\nbackup::-100000</textarea>", `action="/ops/admin/tenants/`+b.TenantA.ID+`/route/clear"`)

	// Disabled: it stays in the route, passed over.
	const disable = "/ops/admin/accounts/disable"
	refused(disable, url.Values{"name": {"nowhere"}}, 404, api.CodeNotFound, "no provider account has that name")
	refused(disable, url.Values{}, 400, api.CodeMissingField)
	refused(disable, url.Values{"name": {"backup\x00"}}, 400, api.CodeInvalidField)
	resp = post(disable, url.Values{"name": {"backup"}})
	require.Equal(t, http.StatusSeeOther, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "/ops/admin?done=account_disabled", resp.Header.Get("Location"))
	page := admins.Get(t, resp.Header.Get("Location"))
	apitest.RequirePage(t, page, http.StatusOK, "Provider account disabled.", "disabled: passed over")
	require.NotContains(t, string(page.Body), `name="name" value="backup"`, "nothing left to disable")

	// Cleared: the processes' own provider again.
	resp = post(routeA+"/clear", url.Values{})
	require.Equal(t, http.StatusSeeOther, resp.Status, "body: %s", resp.Body)
	require.Equal(t, "/ops/admin?done=route_cleared", resp.Header.Get("Location"))
	entries, err = route.Route(ctx, b.Pool, b.TenantA.ID)
	require.NoError(t, err)
	require.Empty(t, entries)

	records := b.audit(t)
	var got []string
	for _, e := range records {
		require.Equal(t, "operator:"+b.Admin.Name, e.Actor)
		got = append(got, e.Action+" "+e.Subject+": "+e.Detail)
	}
	require.Equal(t, []string{
		admin.RouteSet + " " + b.TenantA.ID + ": the processes' own provider",
		admin.AccountDisabled + " backup: no new charges",
		admin.RouteSet + " " + b.TenantA.ID + ": eu-adyen:EUR,GBP then backup::-100000",
		admin.AccountAdded + " backup: kind fake, endpoint http://127.0.0.1:9091",
		admin.AccountAdded + " eu-adyen: kind adyen, endpoint https://checkout-test.adyen.com/v71, key from $ADYEN_EU_KEY, " +
			"webhook secret from $ADYEN_EU_HMAC, merchant account ShopEU",
	}, got, "each change once, newest first")

	// A viewer reads both sections, with no form.
	page = viewer.Get(t, "/ops/admin")
	apitest.RequirePage(t, page, http.StatusOK, `id="accounts"`, `id="account-eu-adyen"`, "$ADYEN_EU_KEY", `id="routes"`,
		`id="route-`+b.TenantA.ID+`"`, "No route: the processes' own provider.")
	require.NotContains(t, string(page.Body), `action="/ops/admin/`)
	answers.Write(page.Body)

	for _, secret := range []string{typedSecret, password} {
		require.NotContains(t, answers.String(), secret, "no answer shows a secret typed where a variable's name belongs")
		require.NotContains(t, b.Logs.String(), secret, "nor does the log")
		for _, e := range records {
			require.NotContains(t, e.Detail, secret)
		}
	}
}
