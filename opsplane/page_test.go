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
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/operator"
)

// Only an operator's token signs in, into a session that every API process
// knows, that the JSON API does not take, and that signing out ends
// everywhere. No token is ever logged.
// Failed sign-ins count against the address like failed API
// authentications: past the limit even the right token waits.
func TestOpsPageSignInIsRateLimited(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.API = func(c *api.Config) { c.AuthFailureLimit = 3 } })
	for range 3 {
		resp := apitest.PageRequest(t, b.URL, nil, http.MethodPost, "/ops/sign-in", url.Values{"token": {"cfo_guess"}})
		require.Equal(t, http.StatusUnauthorized, resp.Status)
	}
	resp := apitest.PageRequest(t, b.URL, nil, http.MethodPost, "/ops/sign-in", url.Values{"token": {b.Admin.Token}})
	apitest.RequirePage(t, resp, http.StatusTooManyRequests, "Too many failed sign-ins")
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Nil(t, apitest.CookieOf(resp), "no session while the address is blocked")
}

func TestOpsPageSignIn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.InReview(t, "page-sign-in-key-0001")

	// Without a session every page sends the browser to the sign-in form.
	for _, path := range []string{"/ops/", "/ops/charges/" + id, "/ops/jobs/", "/ops/?status=unknown"} {
		resp := apitest.PageRequest(t, b.URL, nil, http.MethodGet, path, nil)
		require.Equal(t, http.StatusSeeOther, resp.Status, path)
		require.Equal(t, "/ops/sign-in", resp.Header.Get("Location"), path)
	}
	for _, path := range []string{"/ops", "/ops/jobs"} {
		resp := apitest.PageRequest(t, b.URL, nil, http.MethodGet, path, nil)
		require.Equal(t, http.StatusMovedPermanently, resp.Status, path)
		require.Equal(t, path+"/", resp.Header.Get("Location"))
	}
	apitest.RequirePage(t, apitest.PageRequest(t, b.URL, nil, http.MethodGet, "/ops/sign-in", nil), http.StatusOK, `name="token"`, `type="password"`)

	// What is not a live operator's token is 401, the form again, and no
	// cookie: a merchant's key, a revoked operator's token, nonsense.
	rita, ritaToken, err := operator.Create(ctx, b.Pool, "rita", operator.RoleAdmin)
	require.NoError(t, err)
	_, err = b.Pool.Exec(ctx, `UPDATE operators SET revoked_at = now() WHERE id = $1`, rita.ID)
	require.NoError(t, err)
	for _, credential := range []string{b.TenantA.Key, ritaToken, "", "cfo_nonsense", b.Admin.Token + "x", "Bearer " + b.Admin.Token} {
		resp := apitest.PageRequest(t, b.URL, nil, http.MethodPost, "/ops/sign-in", url.Values{"token": {credential}})
		apitest.RequirePage(t, resp, http.StatusUnauthorized, "not a valid operator token", `name="token"`)
		require.Nil(t, apitest.CookieOf(resp), "no session for %q", credential)
	}

	// An admin's token: a session cookie for /ops/ only, out of scripts'
	// reach, never sent cross-site, for twelve hours.
	resp := apitest.PageRequest(t, b.URL, nil, http.MethodPost, "/ops/sign-in", url.Values{"token": {b.Admin.Token}})
	require.Equal(t, http.StatusSeeOther, resp.Status, "body: %s", resp.Body)
	cookie := apitest.CookieOf(resp)
	require.NotNil(t, cookie)
	require.True(t, strings.HasPrefix(cookie.Value, "cfs_"))
	require.Equal(t, "/ops/", cookie.Path)
	require.True(t, cookie.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	require.False(t, cookie.Secure, "plain HTTP, and not configured otherwise")
	require.InDelta(t, (12 * time.Hour).Seconds(), cookie.MaxAge, 60)

	// The session works on every API process: here a second one on the
	// same database.
	twin := b.Serve(t, b.Config)
	s := apitest.PageSession{URL: twin, Cookie: cookie}
	home := s.Get(t, "/ops/")
	apitest.RequirePage(t, home, http.StatusOK, b.Admin.Name, "/ops/charges/"+id)
	s.CSRF = html.UnescapeString(string(apitest.CSRFField.FindSubmatch(home.Body)[1]))

	// The cookie is not a credential for the JSON API.
	apitest.RequireProblem(t, apitest.PageRequest(t, b.URL, cookie, http.MethodGet, "/ops/v1/charges", nil), http.StatusUnauthorized, api.CodeUnauthorized)

	// Signing out needs the CSRF token, and then ends the session on every
	// process.
	apitest.RequirePage(t, s.Post(t, "/ops/sign-out", url.Values{"csrf": {"forged"}}), http.StatusForbidden)
	require.Equal(t, http.StatusOK, s.Get(t, "/ops/").Status, "a forged sign-out changed nothing")
	out := s.Post(t, "/ops/sign-out", url.Values{})
	require.Equal(t, http.StatusSeeOther, out.Status, "body: %s", out.Body)
	require.Equal(t, "/ops/sign-in", out.Header.Get("Location"))
	require.Less(t, apitest.CookieOf(out).MaxAge, 0, "the browser drops the cookie")
	for _, at := range []string{b.URL, twin} {
		resp := apitest.PageRequest(t, at, cookie, http.MethodGet, "/ops/", nil)
		require.Equal(t, http.StatusSeeOther, resp.Status)
		require.Equal(t, "/ops/sign-in", resp.Header.Get("Location"))
	}

	// Behind a proxy that ends TLS, the cookie can be made Secure.
	cfg := b.Config
	cfg.Ops.SecureCookie = true
	resp = apitest.PageRequest(t, b.Serve(t, cfg), nil, http.MethodPost, "/ops/sign-in", url.Values{"token": {b.Viewer.Token}})
	require.Equal(t, http.StatusSeeOther, resp.Status)
	require.True(t, apitest.CookieOf(resp).Secure)

	logs := b.Logs.String()
	for _, secret := range []string{b.Admin.Token, b.Viewer.Token, ritaToken, b.TenantA.Key, cookie.Value, s.CSRF} {
		require.NotContains(t, logs, secret, "no credential in the logs")
	}
	require.Contains(t, logs, `"route":"/ops/sign-in"`)
}

// Every form needs the session's CSRF token, a same-origin request and an
// admin; anything else is 403 and changes nothing. A viewer sees no form.
func TestOpsPageForms(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.InReview(t, "page-forms-key-00001")
	providerID := b.ChargeAtProvider(t, id, 1000, "USD")
	admin := apitest.SignIn(t, b.URL, b.Admin.Token)
	viewer := apitest.SignIn(t, b.URL, b.Viewer.Token)
	require.NotEqual(t, admin.CSRF, viewer.CSRF, "each session has its own token")
	resolve := func() url.Values {
		return url.Values{"status": {"succeeded"}, "provider_charge_id": {providerID}, "evidence": {"Found it in the provider dashboard"}}
	}
	path := "/ops/charges/" + id + "/resolve"
	before, ledger := b.Stored(t), b.ledger(t)

	for _, csrf := range []string{"", "forged", viewer.CSRF, admin.CSRF + "x", strings.ToUpper(admin.CSRF)} {
		form := resolve()
		form.Set("csrf", csrf)
		apitest.RequirePage(t, admin.Post(t, path, form), http.StatusForbidden, "CSRF token")
	}
	apitest.RequirePage(t, apitest.PageRequest(t, b.URL, admin.Cookie, http.MethodPost, path, resolve()), http.StatusForbidden)
	apitest.RequirePage(t, admin.Post(t, path, resolve(), "Sec-Fetch-Site", "cross-site"), http.StatusForbidden, "cross-origin")
	apitest.RequirePage(t, admin.Post(t, path, resolve(), "Origin", "https://evil.example"), http.StatusForbidden, "cross-origin")
	apitest.RequirePage(t, viewer.Post(t, path, resolve()), http.StatusForbidden, "needs an admin")
	apitest.RequirePage(t, viewer.Post(t, "/ops/charges/"+id+"/reconcile", url.Values{}), http.StatusForbidden, "needs an admin")
	apitest.RequirePage(t, apitest.PageRequest(t, b.URL, nil, http.MethodPost, path, resolve()), http.StatusUnauthorized, "sign in")
	require.Equal(t, before, b.Stored(t), "no refusal changed anything")
	require.Equal(t, ledger, b.ledger(t))

	// A viewer reads the charge but is shown no form.
	apitest.RequirePage(t, viewer.Get(t, "/ops/charges/"+id), http.StatusOK, id, "You are a viewer")
	require.NotContains(t, string(viewer.Get(t, "/ops/charges/"+id).Body), `action="/ops/charges/`)
	apitest.RequirePage(t, admin.Get(t, "/ops/charges/"+id), http.StatusOK, `action="/ops/charges/`+id+`/resolve"`)

	// The admin's own form, from the page: resolved.
	done := admin.Post(t, path, resolve(), "Sec-Fetch-Site", "same-origin", "Origin", b.URL)
	require.Equal(t, http.StatusSeeOther, done.Status, "body: %s", done.Body)
	require.Equal(t, "/ops/charges/"+id+"?done=resolved", done.Header.Get("Location"))
	apitest.RequirePage(t, admin.Get(t, done.Header.Get("Location")), http.StatusOK, "Resolved.", "operator:"+b.Admin.Name)
	event := b.LastEvent(t, id)
	require.Equal(t, "succeeded", event["to"])
	require.Equal(t, "operator:"+b.Admin.Name, event["actor"])
}

// The page's actions are the JSON API's: the same provider check, floor and
// validation refuse the same things with the same problems, shown on the
// charge's page with what the operator typed.
func TestOpsPageActions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.InReview(t, "page-actions-key-0001")
	b.ChargeAtProvider(t, id, 1000, "USD")
	admin := apitest.SignIn(t, b.URL, b.Admin.Token)
	resolvePath := "/ops/charges/" + id + "/resolve"
	before, ledger := b.Stored(t), b.ledger(t)

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
		resp := admin.Post(t, resolvePath, tc.form)
		apitest.RequirePage(t, resp, tc.status, string(tc.code), `id="outcome"`, `action="`+resolvePath+`"`)
		require.Contains(t, string(resp.Body), html.EscapeString(tc.form.Get("evidence")), "%s: the form keeps what was typed", tc.name)
		require.Equal(t, before, b.Stored(t), "%s changed nothing", tc.name)
	}
	require.Equal(t, ledger, b.ledger(t))
	apitest.RequirePage(t, admin.Post(t, "/ops/charges/"+id+"/reconcile", url.Values{}), http.StatusConflict, string(api.CodeChargeNotUnknown))
	apitest.RequirePage(t, admin.Post(t, "/ops/charges/ch_"+strings.Repeat("0", 26)+"/resolve", url.Values{"status": {"failed"}, "evidence": {"checked the provider dashboard"}}),
		http.StatusNotFound, "no such charge")

	// A forced lookup of an unknown charge, then one too soon.
	unknown := b.NewCharge(t, b.TenantB, "page-actions-key-0002")
	b.Walk(t, b.TenantB, unknown, intent.StateSubmitting, intent.StateUnknown)
	_, err := b.Pool.Exec(ctx, `UPDATE charges SET next_check_at = now() + interval '1 hour' WHERE id = $1`, unknown)
	require.NoError(t, err)
	apitest.RequirePage(t, admin.Get(t, "/ops/charges/"+unknown), http.StatusOK, "Reconcile now")
	resp := admin.Post(t, "/ops/charges/"+unknown+"/reconcile", url.Values{})
	require.Equal(t, http.StatusSeeOther, resp.Status, "body: %s", resp.Body)
	apitest.RequirePage(t, admin.Get(t, resp.Header.Get("Location")), http.StatusOK, "Lookup requested.", "reconcile_requested", "operator:"+b.Admin.Name)
	event := b.LastEvent(t, unknown)
	require.Equal(t, "reconcile_requested", event["action"])
	require.Equal(t, "operator:"+b.Admin.Name, event["actor"])
	events := b.Stored(t).Events
	again := admin.Post(t, "/ops/charges/"+unknown+"/reconcile", url.Values{})
	apitest.RequirePage(t, again, http.StatusTooManyRequests, string(api.CodeReconcileTooSoon))
	require.NotEmpty(t, again.Header.Get("Retry-After"))
	require.Equal(t, events, b.Stored(t).Events)
}

// The page lists the review queue across tenants and shows whatever a
// merchant sent as text, never as markup.
func TestOpsPageContent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	review := b.InReview(t, "page-content-key-0001")
	hostile := b.Post(t, b.TenantB, "page-content-key-0002",
		`{"amount": 1234, "currency": "JPY", "payment_method": "pm_card_visa", "description": "<script>alert(1)</script>", "metadata": {"note": "\"><img src=x>"}}`)
	require.Equal(t, http.StatusCreated, hostile.Status, "body: %s", hostile.Body)
	hostileID := strings.TrimPrefix(hostile.Header.Get("Location"), "/v1/charges/")
	viewer := apitest.SignIn(t, b.URL, b.Viewer.Token)

	home := viewer.Get(t, "/ops/")
	apitest.RequirePage(t, home, http.StatusOK, "/ops/charges/"+review, b.TenantA.ID, "10.00 USD", "lookup_unavailable")
	require.NotContains(t, string(home.Body), hostileID, "the queue is needs_review only")
	pending := viewer.Get(t, "/ops/?status=pending")
	apitest.RequirePage(t, pending, http.StatusOK, "/ops/charges/"+hostileID, "1234 JPY")
	apitest.RequirePage(t, viewer.Get(t, "/ops/?status=nonsense"), http.StatusBadRequest, string(api.CodeInvalidParameter))

	page := viewer.Get(t, "/ops/charges/"+hostileID)
	apitest.RequirePage(t, page, http.StatusOK, "&lt;script&gt;alert(1)&lt;/script&gt;", "&#34;&gt;&lt;img src=x&gt;")
	require.NotContains(t, string(page.Body), "<script>")
	require.NotContains(t, string(page.Body), "<img")
	apitest.RequirePage(t, viewer.Get(t, "/ops/charges/ch_nope"), http.StatusNotFound, "no such charge")

	css := viewer.Get(t, "/ops/ops.css")
	require.Equal(t, http.StatusOK, css.Status)
	require.Equal(t, "text/css; charset=utf-8", css.Header.Get("Content-Type"))
}

// River's job UI is served behind the same sign-in, with its full path; a
// viewer reads it but cannot change anything through it. Without one the
// page says so.
func TestOpsPageJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	viewer := apitest.SignIn(t, b.URL, b.Viewer.Token)
	apitest.RequirePage(t, viewer.Get(t, "/ops/jobs/"), http.StatusNotFound, "serves no job UI")

	var mu sync.Mutex
	var served []string
	cfg := b.Config
	cfg.Ops.JobsUI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, r.Method+" "+r.URL.Path)
		mu.Unlock()
		_, _ = io.WriteString(w, "job ui")
	})
	withJobs := b.Serve(t, cfg)
	viewer.URL = withJobs
	admin := apitest.SignIn(t, withJobs, b.Admin.Token)

	resp := apitest.PageRequest(t, withJobs, nil, http.MethodGet, "/ops/jobs/api/jobs", nil, "Authorization", "Bearer "+b.TenantA.Key)
	require.Equal(t, http.StatusSeeOther, resp.Status, "a merchant's key is no session")
	resp = viewer.Get(t, "/ops/jobs/api/jobs")
	require.Equal(t, http.StatusOK, resp.Status)
	require.Equal(t, "job ui", string(resp.Body))
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
	require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))

	cancel := func(s apitest.PageSession, headers ...string) response {
		req := apitest.PageRequest(t, withJobs, s.Cookie, http.MethodPost, "/ops/jobs/api/jobs/cancel", nil, headers...)
		return req
	}
	require.Equal(t, http.StatusForbidden, cancel(viewer).Status)
	require.Equal(t, http.StatusForbidden, cancel(admin, "Sec-Fetch-Site", "cross-site").Status)
	require.Equal(t, http.StatusOK, cancel(admin, "Sec-Fetch-Site", "same-origin").Status)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"GET /ops/jobs/api/jobs", "POST /ops/jobs/api/jobs/cancel"}, served)
}

// A charge held for capture reads as one: its state, that it is captured
// later, what was captured, and the capture or cancel on its way, linked.
// Its captures and cancels are rows of their own, listed under it, each
// with a page that links back; one in needs_review is in the queue, and its
// resolve form speaks of what the operation does. A held charge's form
// offers what can be proven of it.
func TestOpsPageHeldCharge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held := dbtest.PendingCharge(t, b.Pool, dbtest.Charge{TenantID: b.TenantA.ID, Amount: 1000, CaptureLater: true})
	held = dbtest.Walk(t, b.Pool, held, "py_held_"+held.ID[3:], intent.StateSubmitting, intent.StateRequiresCapture)
	viewer := apitest.SignIn(t, b.URL, b.Viewer.Token)
	admin := apitest.SignIn(t, b.URL, b.Admin.Token)

	page := viewer.Get(t, "/ops/charges/"+held.ID)
	apitest.RequirePage(t, page, http.StatusOK, `id="charge-state">requires_capture<`, "<dt>Capture</dt><dd>later</dd>",
		"<dt>Captured</dt><dd>0.00 USD</dd>")
	require.NotContains(t, string(page.Body), `id="operations"`, "nothing acted on it yet")
	require.NotContains(t, string(page.Body), "In flight")

	capture, err := dbtest.PendingOperation(b.Pool, held, intent.KindCapture, 600)
	require.NoError(t, err)
	page = viewer.Get(t, "/ops/charges/"+held.ID)
	apitest.RequirePage(t, page, http.StatusOK, "<dt>In flight</dt>", `href="/ops/charges/`+capture.ID+`"`, `id="operations"`,
		"<td>capture</td>", "6.00 USD", `class="badge s-pending">pending<`)

	opPage := viewer.Get(t, "/ops/charges/"+capture.ID)
	apitest.RequirePage(t, opPage, http.StatusOK, "<h2>Capture</h2>", "<dt>Capture of</dt>", `href="/ops/charges/`+held.ID+`"`, "6.00 USD")
	require.NotContains(t, string(opPage.Body), "Payment method")
	require.NotContains(t, string(opPage.Body), `id="operations"`, "an operation has none of its own")
	view, _ := b.OpsCharge(t, capture.ID)
	require.Equal(t, "capture", view["kind"])

	// Its call lost and never proven: in the queue, and resolved in its
	// own words.
	dbtest.Walk(t, b.Pool, capture, "", intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)
	apitest.RequirePage(t, viewer.Get(t, "/ops/"), http.StatusOK, "/ops/charges/"+capture.ID)
	apitest.RequirePage(t, admin.Get(t, "/ops/charges/"+capture.ID), http.StatusOK, `action="/ops/charges/`+capture.ID+`/resolve"`,
		"succeeded: the provider captured the charge, by this amount", "failed: nothing was captured: the charge is still held")

	// A cancel of another held charge, likewise.
	other := dbtest.PendingCharge(t, b.Pool, dbtest.Charge{TenantID: b.TenantB.ID, Amount: 500, Currency: "EUR", CaptureLater: true})
	other = dbtest.Walk(t, b.Pool, other, "py_other_"+other.ID[3:], intent.StateSubmitting, intent.StateRequiresCapture)
	cancel, err := dbtest.PendingOperation(b.Pool, other, intent.KindCancel, 500)
	require.NoError(t, err)
	apitest.RequirePage(t, viewer.Get(t, "/ops/charges/"+other.ID), http.StatusOK, "<td>cancel</td>", `href="/ops/charges/`+cancel.ID+`"`, "5.00 EUR")
	apitest.RequirePage(t, viewer.Get(t, "/ops/charges/"+cancel.ID), http.StatusOK, "<h2>Cancel</h2>", "<dt>Cancel of</dt>")

	// A charge to be captured later whose authorization was lost is
	// resolved to held or released, never to succeeded.
	lost := dbtest.PendingCharge(t, b.Pool, dbtest.Charge{TenantID: b.TenantA.ID, CaptureLater: true})
	dbtest.Walk(t, b.Pool, lost, "", intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)
	form := admin.Get(t, "/ops/charges/"+lost.ID)
	apitest.RequirePage(t, form, http.StatusOK, `<option value="requires_capture">requires_capture: the provider authorized it and holds the money`,
		`<option value="canceled">canceled:`, `<option value="failed">`, `<option value="pending">`, "<small>requires_capture or canceled</small>")
	require.NotContains(t, string(form.Body), `<option value="succeeded"`)

	// A charge captured at once says nothing of capture.
	atOnce := viewer.Get(t, "/ops/charges/"+b.NewCharge(t, b.TenantA, "page-held-key-000001"))
	apitest.RequirePage(t, atOnce, http.StatusOK, "<h2>Charge</h2>")
	require.NotContains(t, string(atOnce.Body), "<dt>Capture</dt>")
	apitest.RequirePage(t, viewer.Get(t, "/ops/charges/cp_nope"), http.StatusNotFound)
}
