package opsplane_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/psp"
)

// screenshotEnv names the file the browser test saves a screenshot of the
// charge page to, relative to the repository's root; unset, it saves none,
// so that tests leave the tree as it was. README.md shows docs/ops-page.png:
//
//	CHARGEFLOW_SCREENSHOT=docs/ops-page.png go test -run TestOpsPageInBrowser ./opsplane/
const screenshotEnv = "CHARGEFLOW_SCREENSHOT"

// chromium finds the browser: $CHARGEFLOW_CHROMIUM, or the first of the
// usual names on PATH (Debian's package is "chromium"). Without one the test
// fails rather than skips: `make test` installs it (scripts/ensure-chromium),
// and a skipped browser test would hide a page nobody checked.
func chromium(t *testing.T) string {
	t.Helper()
	if path := os.Getenv("CHARGEFLOW_CHROMIUM"); path != "" {
		return path
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless-shell"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Fatal("no Chromium found (chromium, chromium-browser, google-chrome or headless-shell on PATH, or $CHARGEFLOW_CHROMIUM): " +
		"the operator page's browser test needs one. Run scripts/ensure-chromium (make test does), or install Debian's chromium package.")
	return ""
}

// withJobsUI serves River's job UI as the command does (app.NewJobsUI).
func withJobsUI(t *testing.T) func(*setupOpts) {
	return func(o *setupOpts) {
		o.Server = func(cfg *app.ServerConfig) {
			client, err := river.NewClient(riverpgxv5.New(cfg.DB), &river.Config{})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			cfg.Ops.JobsUI, err = app.NewJobsUI(ctx, client, slog.New(slog.DiscardHandler))
			require.NoError(t, err)
		}
	}
}

// An operator works the review queue in a real browser: a merchant's key
// does not sign in; an admin does, finds the charge in the queue, opens it,
// has a forged form refused, resolves it with the provider's charge id and
// sees it succeeded with the resolution, signed with the admin's name, in
// its timeline; on the administration page rotates a tenant's key, is shown
// the new key once, and revokes another tenant's key; River's job UI runs under the same sign-in and the same
// security headers; signing out ends it. No page breaks its
// Content-Security-Policy.
//
// Then, on the same page, the admin adds a provider account (after a
// refusal that shows the form again without the secret typed into it),
// routes tenant A through it and a fake one (after a refused entry),
// disables the fake one and clears the route.
func TestOpsPageInBrowser(t *testing.T) {
	t.Parallel()
	browserPath := chromium(t)
	b := setup(t, withJobsUI(t))
	// A charge whose call timed out, as the worker and the reconciler
	// leave it when the provider's lookup stays down, although the
	// provider did take it.
	id := b.NewCharge(t, b.TenantA, "browser-key-000000001")
	b.lostCall(t, b.TenantA, id)
	providerID := b.ChargeAtProvider(t, id, 1000, "USD")
	other := b.NewCharge(t, b.TenantB, "browser-key-000000002")
	b.lostCall(t, b.TenantB, other)
	pending := b.NewCharge(t, b.TenantB, "browser-key-000000003")

	// A guard against a browser that hangs, not a measure: on a machine
	// running scenarios beside the tests the whole walk has taken over 60 s.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browserPath),
		chromedp.NoSandbox, // as root in a container; a test browser visits only our pages
		chromedp.WindowSize(1280, 900),
	)...)
	defer cancelAlloc()
	tab, closeTab := chromedp.NewContext(allocCtx)
	defer closeTab()

	// Every Content-Security-Policy violation of every page is reported to
	// the test, from a listener the browser installs in each document before
	// the page's own content runs.
	var violationsMu sync.Mutex
	var violations []cspViolation
	require.NoError(t, chromedp.Do(tab, chromedp.ExposeFunc("reportCSPViolation", func(_ context.Context, v cspViolation) (chromedp.Void, error) {
		violationsMu.Lock()
		defer violationsMu.Unlock()
		violations = append(violations, v)
		return chromedp.Void{}, nil
	})))
	_, err := chromedp.Call(tab, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `
		document.addEventListener('securitypolicyviolation', (e) => window.reportCSPViolation({
			page: location.pathname, directive: e.effectiveDirective, blocked: e.blockedURI, source: e.sourceFile}));`})
	require.NoError(t, err)

	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		require.NoError(t, chromedp.Do(tab, steps...))
	}
	// navigate runs steps that load a page and returns its HTTP status.
	navigate := func(steps ...chromedp.Action[chromedp.Void]) int64 {
		t.Helper()
		resp, err := chromedp.RunResponse(tab, steps...)
		require.NoError(t, err)
		return resp.Status
	}
	text := func(selector string) string {
		t.Helper()
		s, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(selector), chromedp.NodeVisible))
		require.NoError(t, err)
		return s
	}
	count := func(selector string) int {
		t.Helper()
		n, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll(`+jsString(selector)+`).length`))
		require.NoError(t, err)
		return n
	}
	location := func() string {
		t.Helper()
		l, err := chromedp.Run(tab, chromedp.Location())
		require.NoError(t, err)
		return strings.TrimPrefix(l, b.URL)
	}
	sessionCookie := func() *network.Cookie {
		t.Helper()
		res, err := chromedp.Call(tab, network.GetCookies, network.GetCookiesParams{URLs: []string{b.URL + "/ops/"}})
		require.NoError(t, err)
		for _, c := range res.Cookies {
			if c.Name == "chargeflow_ops" {
				return c
			}
		}
		return nil
	}

	// Unsigned, the page is the sign-in form; a merchant's key is refused
	// with 401 and no cookie.
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Navigate(b.URL+"/ops/")))
	require.Equal(t, "/ops/sign-in", location())
	do(chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), b.TenantA.Key))
	require.EqualValues(t, http.StatusUnauthorized, navigate(chromedp.Click(chromedp.CSS(`form button[type="submit"]`))))
	require.Contains(t, text("#sign-in-error"), "not a valid operator token")
	require.Nil(t, sessionCookie(), "a merchant's key gets no session")

	// The admin signs in and lands on the review queue.
	do(chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), b.Admin.Token))
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(`form button[type="submit"]`))))
	require.Equal(t, "/ops/", location())
	cookie := sessionCookie()
	require.NotNil(t, cookie)
	require.True(t, cookie.HTTPOnly)
	require.Equal(t, network.CookieSameSiteStrict, cookie.SameSite)
	require.Equal(t, "/ops/", cookie.Path)
	require.Contains(t, text("header"), b.Admin.Name)
	queue := text("#queue")
	require.Contains(t, queue, id)
	require.Contains(t, queue, other)
	require.NotContains(t, queue, pending, "the queue is needs_review only")
	require.Contains(t, queue, b.TenantA.ID)
	require.Contains(t, queue, "10.00 USD")
	require.Contains(t, queue, "lookups have failed for 10m0s: timeout")
	require.Less(t, strings.Index(queue, other), strings.Index(queue, id), "newest first")

	// The charge, with its timeline and the resolve form.
	link := `#queue a[href="/ops/charges/` + id + `"]`
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(link))))
	require.Equal(t, "/ops/charges/"+id, location())
	require.Equal(t, "needs_review", text("#charge-state"))
	require.Equal(t, 1, count("form#resolve"))
	require.Contains(t, text("#timeline"), "unknown → needs_review")

	const evidence = "Provider dashboard: captured 10:42 UTC under our key, same amount and reference"
	fill := []chromedp.Action[chromedp.Void]{
		chromedp.SetValue(chromedp.CSS(`select[name="status"]`), "succeeded"),
		chromedp.SendKeys(chromedp.CSS(`input[name="provider_charge_id"]`), providerID),
		chromedp.SendKeys(chromedp.CSS(`textarea[name="evidence"]`), evidence),
	}

	// A form whose CSRF token is not the session's is refused: 403, and
	// the charge is still in review.
	do(fill...)
	do(chromedp.SetValue(chromedp.CSS(`#resolve input[name="csrf"]`), "forged-token"))
	before := b.Stored(t)
	require.EqualValues(t, http.StatusForbidden, navigate(chromedp.Click(chromedp.CSS(`#resolve button[type="submit"]`))))
	require.Contains(t, text("main"), "CSRF token")
	require.Equal(t, before, b.Stored(t), "a forged form changed nothing")

	// The genuine form resolves it.
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Navigate(b.URL+"/ops/charges/"+id)))
	do(fill...)
	if path := os.Getenv(screenshotEnv); path != "" {
		saveScreenshot(t, tab, path)
	}
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(`#resolve button[type="submit"]`))))
	require.Equal(t, "/ops/charges/"+id+"?done=resolved", location())
	require.Equal(t, "succeeded", text("#charge-state"))
	require.Contains(t, text("#outcome"), "Resolved.")
	require.Equal(t, 0, count("form#resolve"), "nothing left to resolve")
	timeline := text("#timeline")
	require.Contains(t, timeline, "needs_review → succeeded")
	require.Contains(t, timeline, "operator:"+b.Admin.Name)
	require.Contains(t, timeline, "operator_resolved")
	require.Contains(t, timeline, evidence)
	require.Contains(t, text("main"), providerID)

	charge, err := intent.Find(context.Background(), b.Pool, id)
	require.NoError(t, err)
	require.Equal(t, intent.StateSucceeded, charge.State)
	require.Equal(t, providerID, charge.ProviderChargeID)
	event := b.LastEvent(t, id)
	require.Equal(t, "operator:"+b.Admin.Name, event["actor"])
	require.Equal(t, evidence, event["evidence"])

	// A refund of that charge whose call was lost too is in the queue and
	// reads as a refund: what it refunds, the charge's sums, the form
	// asking for the provider's refund id.
	refund := b.Refund(t, b.URL, b.TenantA, "browser-refund-key-001", `{"charge": "`+id+`", "amount": 400, "reason": "duplicate"}`)
	require.Equal(t, http.StatusCreated, refund.Status, "body: %s", refund.Body)
	refundID := apitest.Decode(t, refund)["id"].(string)
	b.lostCall(t, b.TenantA, refundID)
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Navigate(b.URL+"/ops/")))
	require.Contains(t, text("#queue"), refundID)
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(`#queue a[href="/ops/charges/`+refundID+`"]`))))
	facts := text("main dl")
	require.Contains(t, facts, "Refund of")
	require.Contains(t, facts, id)
	require.Contains(t, facts, "duplicate")
	require.NotContains(t, facts, "Payment method")
	require.Contains(t, text("form#resolve"), "Provider refund id")
	if path := os.Getenv(screenshotEnv + "_REFUND"); path != "" {
		saveScreenshot(t, tab, path)
	}
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(`main dl a[href="/ops/charges/`+id+`"]`))))
	require.Contains(t, text("main dl"), "0.00 USD (4.00 USD reserved)", "the refund links to its charge, which shows its sums")

	// A charge to be captured later, authorized at the provider, whose
	// capture's call was lost although the provider captured 6.00 of its
	// 10.00: the capture is in the queue, reads as a capture of its
	// charge, and is resolved with the provider's charge id through the
	// same form. Its charge is then succeeded with what was captured, and
	// lists the capture.
	held, heldProviderID := b.heldCharge(t, b.TenantA, "browser-held-key-0001", 1000)
	capture := b.capture(t, b.TenantA, "browser-capture-key-01", held, heldProviderID, 600)
	b.lostCall(t, b.TenantA, capture.ID)
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Navigate(b.URL+"/ops/")))
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(`#queue a[href="/ops/charges/`+capture.ID+`"]`))))
	facts = text("main dl")
	require.Contains(t, facts, "Capture of")
	require.Contains(t, facts, held.ID)
	require.Contains(t, facts, "6.00 USD")
	const captureEvidence = "Provider dashboard: the authorization captured for 6.00 USD at 11:02 UTC, the rest released"
	do(chromedp.SetValue(chromedp.CSS(`select[name="status"]`), "succeeded"),
		chromedp.SendKeys(chromedp.CSS(`input[name="provider_charge_id"]`), heldProviderID),
		chromedp.SendKeys(chromedp.CSS(`textarea[name="evidence"]`), captureEvidence))
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(`#resolve button[type="submit"]`))))
	require.Equal(t, "/ops/charges/"+capture.ID+"?done=resolved", location())
	require.Equal(t, "succeeded", text("#charge-state"))
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(`main dl a[href="/ops/charges/`+held.ID+`"]`))))
	require.Equal(t, "succeeded", text("#charge-state"), "the capture's success moved its charge")
	facts = text("main dl")
	require.Contains(t, facts, "later")
	require.Contains(t, facts, "6.00 USD")
	operations := text("#operations")
	require.Contains(t, operations, capture.ID)
	require.Contains(t, operations, "capture")
	require.Contains(t, operations, "succeeded")
	require.Contains(t, text("#timeline"), "requires_capture → succeeded")
	require.Equal(t, 1, count(`#timeline a[href="/ops/charges/`+capture.ID+`"]`), "the move its capture made links to it")
	if path := os.Getenv(screenshotEnv + "_CAPTURE"); path != "" {
		saveScreenshot(t, tab, path)
	}
	got, err := intent.Find(context.Background(), b.Pool, held.ID)
	require.NoError(t, err)
	require.Equal(t, int64(600), got.AmountCaptured)

	// The administration page, from the navigation: the tenants with their
	// keys, the operators, the admin audit. The admin rotates tenant A's key
	// with an hour's overlap and is shown the new key once; both keys work.
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(`header nav a[href="/ops/admin"]`))))
	require.Equal(t, "/ops/admin", location())
	tenants := text("#tenants")
	for _, s := range []string{b.TenantA.ID, b.TenantB.ID, "tenant-a", "1 working key", b.keyIDs(t, b.TenantA.ID)[0]} {
		require.Contains(t, tenants, s)
	}
	require.NotContains(t, text("main"), "cfk_", "no key's secret on the page")
	require.Contains(t, text("#operators"), b.Viewer.Name)
	require.Contains(t, text("#audit"), "Nothing recorded yet.")
	rotate := "#rotate-" + b.TenantA.ID
	do(chromedp.SetValue(chromedp.CSS(rotate+` select[name="overlap"]`), "1h"))
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(rotate+` button[type="submit"]`))))
	newKey := text("#new-key")
	require.True(t, strings.HasPrefix(newKey, "cfk_"), "the new key: %q", newKey)
	require.Contains(t, text("#shown-once"), "will not be shown again")
	require.Contains(t, text("#outcome"), "1 hour from now")
	if path := os.Getenv(screenshotEnv + "_ADMIN_KEY"); path != "" {
		saveScreenshot(t, tab, path)
	}
	b.requireKeyWorks(t, newKey, b.TenantA.ID, true)
	b.requireKeyWorks(t, b.TenantA.Key, b.TenantA.ID, true)

	// Back on the page the key is not shown again; the audit has the
	// rotation, signed with the admin. Tenant B's key is revoked through
	// its confirmation, opened without a script.
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(`main .crumbs a`))))
	require.NotContains(t, text("main"), newKey)
	audit := text("#audit")
	require.Contains(t, audit, "operator:"+b.Admin.Name)
	require.Contains(t, audit, "api_key.rotated")
	keyB := "#key-" + b.keyIDs(t, b.TenantB.ID)[0]
	require.Equal(t, 0, count(keyB+" details[open]"))
	do(chromedp.Click(chromedp.CSS(keyB + " summary")))
	require.Equal(t, 1, count(keyB+" details[open]"))
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(keyB+" button.danger"))))
	require.Equal(t, "/ops/admin?done=key_revoked", location())
	require.Contains(t, text("#outcome"), "Key revoked.")
	b.requireKeyWorks(t, b.TenantB.Key, b.TenantB.ID, false)
	if path := os.Getenv(screenshotEnv + "_ADMIN"); path != "" {
		// With the confirmation of revoking the viewer open.
		do(chromedp.Click(chromedp.CSS(`#operators summary`)))
		saveScreenshot(t, tab, path)
	}

	// Provider accounts: a secret typed where a variable's name belongs is
	// refused, the form shown again without it; then the account is added,
	// and a fake one beside it.
	value := func(selector string) string {
		t.Helper()
		v, err := chromedp.Run(tab, chromedp.Value(chromedp.CSS(selector)))
		require.NoError(t, err)
		return v
	}
	const typedSecret = "sk_test_browser_canary"
	add := "#add-account "
	fillAccount := func(fields map[string]string) {
		t.Helper()
		for name, v := range fields {
			tag := "input"
			if name == "kind" {
				tag = "select"
			}
			do(chromedp.SetValue(chromedp.CSS(add+tag+`[name="`+name+`"]`), v))
		}
	}
	fillAccount(map[string]string{"name": "eu-adyen", "kind": "adyen", "endpoint": "https://checkout-test.adyen.com/v71",
		"credential_env": typedSecret, "webhook_secret_env": "ADYEN_EU_HMAC", "merchant_account": "ShopEU"})
	require.EqualValues(t, http.StatusBadRequest, navigate(chromedp.Click(chromedp.CSS(add+`button[type="submit"]`))))
	require.Contains(t, text("#outcome"), "never the secret itself")
	require.Contains(t, text(add+".form-problem"), "Left empty, as what was sent may be a secret: the API key variable.")
	require.Empty(t, value(add+`input[name="credential_env"]`))
	require.Equal(t, "eu-adyen", value(add+`input[name="name"]`), "the rest as typed")
	require.Equal(t, "adyen", value(add+`select[name="kind"]`))
	fillAccount(map[string]string{"credential_env": "ADYEN_EU_KEY"})
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(add+`button[type="submit"]`))))
	require.Equal(t, "/ops/admin?done=account_added", location())
	accounts := text("#accounts")
	require.Contains(t, accounts, "eu-adyen")
	require.Contains(t, accounts, "$ADYEN_EU_KEY")
	require.Empty(t, value(add+`input[name="name"]`), "the form is empty again")
	fillAccount(map[string]string{"name": "backup", "kind": "fake", "endpoint": "http://127.0.0.1:9091"})
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(add+`button[type="submit"]`))))
	require.Contains(t, text("#accounts"), "backup")

	// Tenant A's route, in the entries the CLI takes: a bad one is shown
	// again, open, as typed; then it is set.
	routeA := "#route-" + b.TenantA.ID + " "
	do(chromedp.Click(chromedp.CSS(routeA + "summary")))
	do(chromedp.SetValue(chromedp.CSS(routeA+`textarea[name="entries"]`), "eu-adyen:eur\nbackup"))
	require.EqualValues(t, http.StatusBadRequest, navigate(chromedp.Click(chromedp.CSS(routeA+`.set-route button[type="submit"]`))))
	require.Equal(t, 1, count(routeA+"details[open]"))
	require.Contains(t, text(routeA+".form-problem"), `entry "eu-adyen:eur": currency "eur"`)
	require.Equal(t, "eu-adyen:eur\nbackup", value(routeA+`textarea[name="entries"]`))
	do(chromedp.SetValue(chromedp.CSS(routeA+`textarea[name="entries"]`), "eu-adyen:EUR,GBP\nbackup::-100000"))
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(routeA+`.set-route button[type="submit"]`))))
	require.Equal(t, "/ops/admin?done=route_set", location())
	routeText := text(routeA + "ol.route")
	require.Contains(t, routeText, "eu-adyen:EUR,GBP EUR or GBP, any amount")
	require.Contains(t, routeText, "backup::-100000 any currency, up to 100000 in minor units")
	if path := os.Getenv(screenshotEnv + "_ADMIN_ROUTES"); path != "" {
		// With tenant A's route form open, as an admin changing it sees it.
		do(chromedp.Click(chromedp.CSS(routeA + "summary")))
		saveScreenshot(t, tab, path)
		do(chromedp.Click(chromedp.CSS(routeA + "summary")))
	}

	// The backup account disabled, through its confirmation: the route
	// keeps it, passed over. Then the route cleared.
	do(chromedp.Click(chromedp.CSS("#account-backup summary")))
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS("#account-backup button.danger"))))
	require.Equal(t, "/ops/admin?done=account_disabled", location())
	require.Contains(t, text(routeA+"ol.route"), "disabled: passed over")
	do(chromedp.Click(chromedp.CSS(routeA + "summary")))
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(routeA+".clear-route button"))))
	require.Equal(t, "/ops/admin?done=route_cleared", location())
	require.Contains(t, text(routeA+"td"), "tenant-a")
	require.Equal(t, 0, count(routeA+"ol.route"))
	audit = text("#audit")
	for _, action := range []string{"provider_account.added", "provider_account.disabled", "route.set"} {
		require.Contains(t, audit, action)
	}
	require.NotContains(t, text("main"), typedSecret)
	require.NotContains(t, b.Logs.String(), typedSecret)

	// River's job UI runs under the same session: its script application
	// loads and draws its navigation.
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(`header nav a[href="/ops/jobs/"]`))))
	do(chromedp.WaitVisible(chromedp.CSS(`#root nav a[href^="/ops/jobs/"]`)))

	// Signing out ends the session: the page is the sign-in form again.
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Navigate(b.URL+"/ops/")))
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Click(chromedp.CSS(`header form button[type="submit"]`))))
	require.Equal(t, "/ops/sign-in", location())
	require.Nil(t, sessionCookie())
	require.EqualValues(t, http.StatusOK, navigate(chromedp.Navigate(b.URL+"/ops/charges/"+id)))
	require.Equal(t, "/ops/sign-in", location())

	violationsMu.Lock()
	defer violationsMu.Unlock()
	for _, v := range violations {
		// River's job UI bundles a validator that tries Function("") in a
		// try/catch to see whether it may compile code, and does without;
		// its CSP rightly says no. Nothing else may be refused.
		if strings.HasPrefix(v.Page, "/ops/jobs/") && v.Blocked == "eval" {
			continue
		}
		require.Failf(t, "a page broke its Content-Security-Policy", "%+v", v)
	}
}

// cspViolation is what the browser reports of a securitypolicyviolation.
type cspViolation struct {
	Page      string `json:"page"`
	Directive string `json:"directive"`
	Blocked   string `json:"blocked"`
	Source    string `json:"source"`
}

// lostCall moves a pending charge to needs_review as the worker and the
// reconciler do when a call times out and every lookup of its key fails.
func (b *testBundle) lostCall(t *testing.T, tt testTenant, id string) {
	t.Helper()
	for _, m := range []intent.Move{
		{From: intent.StatePending, To: intent.StateSubmitting, Actor: "worker", Reason: "submit", CountAttempt: true},
		{From: intent.StateSubmitting, To: intent.StateUnknown, Actor: "worker", Reason: "outcome_unknown:timeout", CheckAfter: time.Second},
		{From: intent.StateUnknown, To: intent.StateNeedsReview, Actor: "reconciler:rc-1", Reason: "lookup_unavailable",
			ReviewReason: "lookups have failed for 10m0s: timeout"},
	} {
		m.TenantID, m.ChargeID = tt.ID, id
		_, err := intent.MoveCharge(context.Background(), b.Pool, m)
		require.NoError(t, err)
	}
}

// heldCharge makes a charge of tenant tt to be captured later through the
// API, authorizes it at the bundle's provider under its key, and moves it
// to requires_capture as the worker would; it returns the charge and the
// provider's id of it.
func (b *testBundle) heldCharge(t *testing.T, tt testTenant, key string, amount int64) (intent.Charge, string) {
	t.Helper()
	ctx := context.Background()
	resp := b.Post(t, tt, key, fmt.Sprintf(`{"amount": %d, "currency": "USD", "payment_method": "pm_card_visa", "capture": false}`, amount))
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	c, err := intent.Find(ctx, b.Pool, apitest.Decode(t, resp)["id"].(string))
	require.NoError(t, err)
	answer, err := psp.NewClient(psp.Config{BaseURL: b.ProviderURL}).Charge(ctx, psp.ChargeRequest{
		Key: c.ProviderKey, Amount: c.Amount, Currency: c.Currency, PaymentMethod: c.PaymentMethod, Reference: c.ID, Tag: tt.ID,
		CaptureLater: true})
	require.NoError(t, err)
	require.Equal(t, psp.StatusRequiresCapture, answer.Status)
	for _, m := range []intent.Move{
		{From: intent.StatePending, To: intent.StateSubmitting, Actor: "worker", Reason: "submit", CountAttempt: true},
		{From: intent.StateSubmitting, To: intent.StateRequiresCapture, Actor: "worker", Reason: "provider_authorized", ProviderChargeID: answer.ID},
	} {
		m.TenantID, m.ChargeID = tt.ID, c.ID
		_, err := intent.MoveCharge(ctx, b.Pool, m)
		require.NoError(t, err)
	}
	c, err = intent.Find(ctx, b.Pool, c.ID)
	require.NoError(t, err)
	return c, answer.ID
}

// capture asks the API to capture amount of held, as tenant tt, and
// applies the capture at the bundle's provider, as a call whose answer was
// lost would have; it returns the capture.
func (b *testBundle) capture(t *testing.T, tt testTenant, key string, held intent.Charge, providerID string, amount int64) intent.Charge {
	t.Helper()
	ctx := context.Background()
	resp := b.Request(t, http.MethodPost, "/v1/charges/"+held.ID+"/capture", fmt.Sprintf(`{"amount": %d}`, amount),
		"Authorization", "Bearer "+tt.Key, "Content-Type", "application/json", "Idempotency-Key", key)
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	op, err := intent.Find(ctx, b.Pool, apitest.Decode(t, resp)["id"].(string))
	require.NoError(t, err)
	answer, err := psp.NewClient(psp.Config{BaseURL: b.ProviderURL}).Capture(ctx, psp.OperationRequest{
		Key: op.ProviderKey, Charge: providerID, Amount: op.Amount, Currency: op.Currency, Reference: op.ID, ChargeReference: held.ID,
		Tag: held.TenantID})
	require.NoError(t, err)
	require.Equal(t, op.Amount, answer.AmountCaptured)
	return op
}

// saveScreenshot saves the whole page as a PNG; a relative path is from
// the repository's root. README.md shows the charge page's
// (CHARGEFLOW_SCREENSHOT); CHARGEFLOW_SCREENSHOT_REFUND,
// CHARGEFLOW_SCREENSHOT_CAPTURE, CHARGEFLOW_SCREENSHOT_ADMIN,
// CHARGEFLOW_SCREENSHOT_ADMIN_KEY and CHARGEFLOW_SCREENSHOT_ADMIN_ROUTES
// save the refund's page, the page of a charge captured later with its
// capture, the administration page, the rotated key's answer and the
// administration page with an account and a route.
func saveScreenshot(t *testing.T, tab context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	if !filepath.IsAbs(path) {
		path = filepath.Join("..", path)
	}
	require.NoError(t, os.WriteFile(path, png, 0o644))
	t.Logf("saved a screenshot of the page to %s", path)
}

// jsString quotes s for JavaScript.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
