package opsplane_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/operator"
)

// Only an operator's token signs in, into a session that every API process
// knows, that the JSON API does not take, and that signing out ends
// everywhere. No token is ever logged.
// Failed sign-ins count against the address like failed API
// authentications: past the limit even the right token waits.
func TestOpsPageSignInIsRateLimited(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.config = func(c *api.Config) { c.AuthFailureLimit = 3 } })
	for range 3 {
		resp := pageRequest(t, b.url, nil, http.MethodPost, "/ops/sign-in", url.Values{"token": {"cfo_guess"}})
		require.Equal(t, http.StatusUnauthorized, resp.status)
	}
	resp := pageRequest(t, b.url, nil, http.MethodPost, "/ops/sign-in", url.Values{"token": {b.admin.Token}})
	requirePage(t, resp, http.StatusTooManyRequests, "Too many failed sign-ins")
	require.NotEmpty(t, resp.header.Get("Retry-After"))
	require.Nil(t, cookieOf(resp), "no session while the address is blocked")
}

func TestOpsPageSignIn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.inReview(t, "page-sign-in-key-0001")

	// Without a session every page sends the browser to the sign-in form.
	for _, path := range []string{"/ops/", "/ops/charges/" + id, "/ops/jobs/", "/ops/?status=unknown"} {
		resp := pageRequest(t, b.url, nil, http.MethodGet, path, nil)
		require.Equal(t, http.StatusSeeOther, resp.status, path)
		require.Equal(t, "/ops/sign-in", resp.header.Get("Location"), path)
	}
	for _, path := range []string{"/ops", "/ops/jobs"} {
		resp := pageRequest(t, b.url, nil, http.MethodGet, path, nil)
		require.Equal(t, http.StatusMovedPermanently, resp.status, path)
		require.Equal(t, path+"/", resp.header.Get("Location"))
	}
	requirePage(t, pageRequest(t, b.url, nil, http.MethodGet, "/ops/sign-in", nil), http.StatusOK, `name="token"`, `type="password"`)

	// What is not a live operator's token is 401, the form again, and no
	// cookie: a merchant's key, a revoked operator's token, nonsense.
	rita, ritaToken, err := operator.Create(ctx, b.pool, "rita", operator.RoleAdmin)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE operators SET revoked_at = now() WHERE id = $1`, rita.ID)
	require.NoError(t, err)
	for _, credential := range []string{b.tenantA.Key, ritaToken, "", "cfo_nonsense", b.admin.Token + "x", "Bearer " + b.admin.Token} {
		resp := pageRequest(t, b.url, nil, http.MethodPost, "/ops/sign-in", url.Values{"token": {credential}})
		requirePage(t, resp, http.StatusUnauthorized, "not a valid operator token", `name="token"`)
		require.Nil(t, cookieOf(resp), "no session for %q", credential)
	}

	// An admin's token: a session cookie for /ops/ only, out of scripts'
	// reach, never sent cross-site, for twelve hours.
	resp := pageRequest(t, b.url, nil, http.MethodPost, "/ops/sign-in", url.Values{"token": {b.admin.Token}})
	require.Equal(t, http.StatusSeeOther, resp.status, "body: %s", resp.body)
	cookie := cookieOf(resp)
	require.NotNil(t, cookie)
	require.True(t, strings.HasPrefix(cookie.Value, "cfs_"))
	require.Equal(t, "/ops/", cookie.Path)
	require.True(t, cookie.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	require.False(t, cookie.Secure, "plain HTTP, and not configured otherwise")
	require.InDelta(t, (12 * time.Hour).Seconds(), cookie.MaxAge, 60)

	// The session works on every API process: here a second one on the
	// same database.
	twin := b.serve(t, b.cfg)
	s := pageSession{url: twin, cookie: cookie}
	home := s.get(t, "/ops/")
	requirePage(t, home, http.StatusOK, b.admin.Name, "/ops/charges/"+id)
	s.csrf = html.UnescapeString(string(csrfField.FindSubmatch(home.body)[1]))

	// The cookie is not a credential for the JSON API.
	requireProblem(t, pageRequest(t, b.url, cookie, http.MethodGet, "/ops/v1/charges", nil), http.StatusUnauthorized, api.CodeUnauthorized)

	// Signing out needs the CSRF token, and then ends the session on every
	// process.
	requirePage(t, s.post(t, "/ops/sign-out", url.Values{"csrf": {"forged"}}), http.StatusForbidden)
	require.Equal(t, http.StatusOK, s.get(t, "/ops/").status, "a forged sign-out changed nothing")
	out := s.post(t, "/ops/sign-out", url.Values{})
	require.Equal(t, http.StatusSeeOther, out.status, "body: %s", out.body)
	require.Equal(t, "/ops/sign-in", out.header.Get("Location"))
	require.Less(t, cookieOf(out).MaxAge, 0, "the browser drops the cookie")
	for _, at := range []string{b.url, twin} {
		resp := pageRequest(t, at, cookie, http.MethodGet, "/ops/", nil)
		require.Equal(t, http.StatusSeeOther, resp.status)
		require.Equal(t, "/ops/sign-in", resp.header.Get("Location"))
	}

	// Behind a proxy that ends TLS, the cookie can be made Secure.
	cfg := b.cfg
	cfg.Ops.SecureCookie = true
	resp = pageRequest(t, b.serve(t, cfg), nil, http.MethodPost, "/ops/sign-in", url.Values{"token": {b.viewer.Token}})
	require.Equal(t, http.StatusSeeOther, resp.status)
	require.True(t, cookieOf(resp).Secure)

	logs := b.logs.String()
	for _, secret := range []string{b.admin.Token, b.viewer.Token, ritaToken, b.tenantA.Key, cookie.Value, s.csrf} {
		require.NotContains(t, logs, secret, "no credential in the logs")
	}
	require.Contains(t, logs, `"route":"/ops/sign-in"`)
}

// Every form needs the session's CSRF token, a same-origin request and an
// admin; anything else is 403 and changes nothing. A viewer sees no form.
func TestOpsPageForms(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.inReview(t, "page-forms-key-00001")
	providerID := b.chargeAtProvider(t, id, 1000, "USD")
	admin := signIn(t, b.url, b.admin.Token)
	viewer := signIn(t, b.url, b.viewer.Token)
	require.NotEqual(t, admin.csrf, viewer.csrf, "each session has its own token")
	resolve := func() url.Values {
		return url.Values{"status": {"succeeded"}, "provider_charge_id": {providerID}, "evidence": {"Found it in the provider dashboard"}}
	}
	path := "/ops/charges/" + id + "/resolve"
	before, ledger := b.stored(t), b.ledger(t)

	for _, csrf := range []string{"", "forged", viewer.csrf, admin.csrf + "x", strings.ToUpper(admin.csrf)} {
		form := resolve()
		form.Set("csrf", csrf)
		requirePage(t, admin.post(t, path, form), http.StatusForbidden, "CSRF token")
	}
	requirePage(t, pageRequest(t, b.url, admin.cookie, http.MethodPost, path, resolve()), http.StatusForbidden)
	requirePage(t, admin.post(t, path, resolve(), "Sec-Fetch-Site", "cross-site"), http.StatusForbidden, "cross-origin")
	requirePage(t, admin.post(t, path, resolve(), "Origin", "https://evil.example"), http.StatusForbidden, "cross-origin")
	requirePage(t, viewer.post(t, path, resolve()), http.StatusForbidden, "needs an admin")
	requirePage(t, viewer.post(t, "/ops/charges/"+id+"/reconcile", url.Values{}), http.StatusForbidden, "needs an admin")
	requirePage(t, pageRequest(t, b.url, nil, http.MethodPost, path, resolve()), http.StatusUnauthorized, "sign in")
	require.Equal(t, before, b.stored(t), "no refusal changed anything")
	require.Equal(t, ledger, b.ledger(t))

	// A viewer reads the charge but is shown no form.
	requirePage(t, viewer.get(t, "/ops/charges/"+id), http.StatusOK, id, "You are a viewer")
	require.NotContains(t, string(viewer.get(t, "/ops/charges/"+id).body), `action="/ops/charges/`)
	requirePage(t, admin.get(t, "/ops/charges/"+id), http.StatusOK, `action="/ops/charges/`+id+`/resolve"`)

	// The admin's own form, from the page: resolved.
	done := admin.post(t, path, resolve(), "Sec-Fetch-Site", "same-origin", "Origin", b.url)
	require.Equal(t, http.StatusSeeOther, done.status, "body: %s", done.body)
	require.Equal(t, "/ops/charges/"+id+"?done=resolved", done.header.Get("Location"))
	requirePage(t, admin.get(t, done.header.Get("Location")), http.StatusOK, "Resolved.", "operator:"+b.admin.Name)
	event := b.lastEvent(t, id)
	require.Equal(t, "succeeded", event["to"])
	require.Equal(t, "operator:"+b.admin.Name, event["actor"])
}

// The page's actions are the JSON API's: the same provider check, floor and
// validation refuse the same things with the same problems, shown on the
// charge's page with what the operator typed.
func TestOpsPageActions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.inReview(t, "page-actions-key-0001")
	b.chargeAtProvider(t, id, 1000, "USD")
	admin := signIn(t, b.url, b.admin.Token)
	resolvePath := "/ops/charges/" + id + "/resolve"
	before, ledger := b.stored(t), b.ledger(t)

	for _, tc := range []struct {
		name   string
		form   url.Values
		status int
		code   api.Code
	}{
		{"ProviderSaysOtherwise", url.Values{"status": {"succeeded"}, "provider_charge_id": {"py_made_up"}, "evidence": {"trust me, it was definitely paid"}}, 409, api.CodeEvidenceMismatch},
		{"FailedWhileProviderHoldsSuccess", url.Values{"status": {"failed"}, "provider_charge_id": {""}, "failure_code": {""}, "evidence": {"customer says it was not charged"}}, 409, api.CodeEvidenceMismatch},
		{"CardInEvidence", url.Values{"status": {"failed"}, "evidence": {"customer card 4242 4242 4242 4242"}}, 400, api.CodeCardNumberDetected},
		{"ShortEvidence", url.Values{"status": {"failed"}, "evidence": {"ok"}}, 400, api.CodeInvalidField},
		{"SucceededWithoutProviderID", url.Values{"status": {"succeeded"}, "provider_charge_id": {""}, "evidence": {"checked the provider dashboard"}}, 400, api.CodeMissingField},
		{"BadStatus", url.Values{"status": {"unknown"}, "evidence": {"checked the provider dashboard"}}, 400, api.CodeInvalidField},
		{"TwoStatuses", url.Values{"status": {"failed", "succeeded"}, "evidence": {"checked the provider dashboard"}}, 400, api.CodeDuplicateMember},
	} {
		resp := admin.post(t, resolvePath, tc.form)
		requirePage(t, resp, tc.status, string(tc.code), `id="outcome"`, `action="`+resolvePath+`"`)
		require.Contains(t, string(resp.body), html.EscapeString(tc.form.Get("evidence")), "%s: the form keeps what was typed", tc.name)
		require.Equal(t, before, b.stored(t), "%s changed nothing", tc.name)
	}
	require.Equal(t, ledger, b.ledger(t))
	requirePage(t, admin.post(t, "/ops/charges/"+id+"/reconcile", url.Values{}), http.StatusConflict, string(api.CodeChargeNotUnknown))
	requirePage(t, admin.post(t, "/ops/charges/ch_"+strings.Repeat("0", 26)+"/resolve", url.Values{"status": {"failed"}, "evidence": {"checked the provider dashboard"}}),
		http.StatusNotFound, "no such charge")

	// A forced lookup of an unknown charge, then one too soon.
	unknown := b.newCharge(t, b.tenantB, "page-actions-key-0002")
	b.walk(t, b.tenantB, unknown, intent.StateSubmitting, intent.StateUnknown)
	_, err := b.pool.Exec(ctx, `UPDATE charges SET next_check_at = now() + interval '1 hour' WHERE id = $1`, unknown)
	require.NoError(t, err)
	requirePage(t, admin.get(t, "/ops/charges/"+unknown), http.StatusOK, "Reconcile now")
	resp := admin.post(t, "/ops/charges/"+unknown+"/reconcile", url.Values{})
	require.Equal(t, http.StatusSeeOther, resp.status, "body: %s", resp.body)
	requirePage(t, admin.get(t, resp.header.Get("Location")), http.StatusOK, "Lookup requested.", "reconcile_requested", "operator:"+b.admin.Name)
	event := b.lastEvent(t, unknown)
	require.Equal(t, "reconcile_requested", event["action"])
	require.Equal(t, "operator:"+b.admin.Name, event["actor"])
	events := b.stored(t).Events
	again := admin.post(t, "/ops/charges/"+unknown+"/reconcile", url.Values{})
	requirePage(t, again, http.StatusTooManyRequests, string(api.CodeReconcileTooSoon))
	require.NotEmpty(t, again.header.Get("Retry-After"))
	require.Equal(t, events, b.stored(t).Events)
}

// The page lists the review queue across tenants and shows whatever a
// merchant sent as text, never as markup.
func TestOpsPageContent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	review := b.inReview(t, "page-content-key-0001")
	hostile := b.post(t, b.tenantB, "page-content-key-0002",
		`{"amount": 1234, "currency": "JPY", "payment_method": "pm_card_visa", "description": "<script>alert(1)</script>", "metadata": {"note": "\"><img src=x>"}}`)
	require.Equal(t, http.StatusCreated, hostile.status, "body: %s", hostile.body)
	hostileID := strings.TrimPrefix(hostile.header.Get("Location"), "/v1/charges/")
	viewer := signIn(t, b.url, b.viewer.Token)

	home := viewer.get(t, "/ops/")
	requirePage(t, home, http.StatusOK, "/ops/charges/"+review, b.tenantA.ID, "10.00 USD", "lookup_unavailable")
	require.NotContains(t, string(home.body), hostileID, "the queue is needs_review only")
	pending := viewer.get(t, "/ops/?status=pending")
	requirePage(t, pending, http.StatusOK, "/ops/charges/"+hostileID, "1234 JPY")
	requirePage(t, viewer.get(t, "/ops/?status=nonsense"), http.StatusBadRequest, string(api.CodeInvalidParameter))

	page := viewer.get(t, "/ops/charges/"+hostileID)
	requirePage(t, page, http.StatusOK, "&lt;script&gt;alert(1)&lt;/script&gt;", "&#34;&gt;&lt;img src=x&gt;")
	require.NotContains(t, string(page.body), "<script>")
	require.NotContains(t, string(page.body), "<img")
	requirePage(t, viewer.get(t, "/ops/charges/ch_nope"), http.StatusNotFound, "no such charge")

	css := viewer.get(t, "/ops/ops.css")
	require.Equal(t, http.StatusOK, css.status)
	require.Equal(t, "text/css; charset=utf-8", css.header.Get("Content-Type"))
}

// River's job UI is served behind the same sign-in, with its full path; a
// viewer reads it but cannot change anything through it. Without one the
// page says so.
func TestOpsPageJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	viewer := signIn(t, b.url, b.viewer.Token)
	requirePage(t, viewer.get(t, "/ops/jobs/"), http.StatusNotFound, "serves no job UI")

	var mu sync.Mutex
	var served []string
	cfg := b.cfg
	cfg.Ops.JobsUI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.Method+" "+r.URL.Path)
		mu.Unlock()
		_, _ = io.WriteString(w, "job ui")
	})
	withJobs := b.serve(t, cfg)
	viewer.url = withJobs
	admin := signIn(t, withJobs, b.admin.Token)

	resp := pageRequest(t, withJobs, nil, http.MethodGet, "/ops/jobs/api/jobs", nil, "Authorization", "Bearer "+b.tenantA.Key)
	require.Equal(t, http.StatusSeeOther, resp.status, "a merchant's key is no session")
	resp = viewer.get(t, "/ops/jobs/api/jobs")
	require.Equal(t, http.StatusOK, resp.status)
	require.Equal(t, "job ui", string(resp.body))
	require.Contains(t, resp.header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.Equal(t, "DENY", resp.header.Get("X-Frame-Options"))

	cancel := func(s pageSession, headers ...string) response {
		req := pageRequest(t, withJobs, s.cookie, http.MethodPost, "/ops/jobs/api/jobs/cancel", nil, headers...)
		return req
	}
	require.Equal(t, http.StatusForbidden, cancel(viewer).status)
	require.Equal(t, http.StatusForbidden, cancel(admin, "Sec-Fetch-Site", "cross-site").status)
	require.Equal(t, http.StatusOK, cancel(admin, "Sec-Fetch-Site", "same-origin").status)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"GET /ops/jobs/api/jobs", "POST /ops/jobs/api/jobs/cancel"}, served)
}
