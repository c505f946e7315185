package opsplane

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bojanz/currency"
	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/api/jsoncanon"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/resolve"
)

// The operator's page (docs/operations.md, "Operators"): /ops/ serves a
// person with a browser what /ops/v1 serves a program — the charges by
// state, the review queue, a charge's timeline, and for admins the resolve
// and reconcile forms — rendered on the server from embedded templates, with
// no script and no build step. Signing in and the CSRF token are in
// session.go, the administration page in admin.go. Every action goes
// through the JSON API's own resolveCharge and reconcileCharge, or package
// admin as the CLI's do: the page is another way to ask, never another
// implementation.

//go:embed page
var pageFS embed.FS

// Content-Security-Policy of the pages. Ours need nothing but their own
// stylesheet and forms that post to themselves; River's job UI is a script
// application of its own, served from the same origin, whose components set
// inline styles.
const (
	pageCSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
		"frame-ancestors 'none'; base-uri 'none'"
	jobsCSP = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; " +
		"form-action 'self'; frame-ancestors 'none'; base-uri 'self'"
)

// queuePageSize is how many charges the page lists at once.
const queuePageSize = 50

// pages is what the page is rendered from, parsed once by New.
type pages struct {
	templates map[string]*template.Template
	css       []byte
	// styleURL names the stylesheet by its content, so browsers may keep it
	// forever and still never use an old one.
	styleURL string
}

func newPages() (*pages, error) {
	css, err := pageFS.ReadFile("page/ops.css")
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(css)
	pp := &pages{templates: map[string]*template.Template{}, css: css,
		styleURL: "/ops/ops.css?v=" + hex.EncodeToString(sum[:6])}
	funcs := template.FuncMap{"money": money, "when": when, "span": span, "opOf": opOf}
	for _, name := range []string{"sign-in", "home", "charge", "admin", "admin-key", "problem", "jobs-missing"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(pageFS, "page/layout.html", "page/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("opsplane: page template %s: %w", name, err)
		}
		pp.templates[name] = t
	}
	return pp, nil
}

// pageBase is what the layout of every page shows.
type pageBase struct {
	Title    string
	StyleURL string
	// Operator is the signed-in operator; its zero value hides the
	// navigation.
	Operator operator.Operator
	// CSRF is the session's token, the hidden field of every form.
	CSRF string
}

func (p *Plane) pageBase(c echo.Context, title string) pageBase {
	b := pageBase{Title: title, StyleURL: p.pages.styleURL, Operator: operatorOf(c)}
	if session, ok := sessionOf(c); ok {
		b.CSRF = csrfToken(session.ID)
	}
	return b
}

// render writes a page in full or not at all: a template error is a 500,
// never half a page.
func (p *Plane) render(c echo.Context, status int, name string, data any) error {
	var buf bytes.Buffer
	if err := p.pages.templates[name].ExecuteTemplate(&buf, "layout", data); err != nil {
		return fmt.Errorf("render page %s: %w", name, err)
	}
	// Pages show charges and carry the CSRF token: no cache keeps them,
	// and the back button after signing out shows nothing.
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.HTMLBlob(status, buf.Bytes())
}

// pageHeaders sets the headers that keep a page from being framed, from
// leaking its address, and from running anything but what csp allows.
func pageHeaders(csp string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			h := c.Response().Header()
			h.Set("Content-Security-Policy", csp)
			h.Set("X-Frame-Options", "DENY")
			h.Set("Referrer-Policy", "no-referrer")
			h.Set("X-Content-Type-Options", "nosniff")
			return next(c)
		}
	}
}

// pageErrors shows a person, as a page, the problem a program would get as
// problem+json: the status and detail come from api.ProblemFor, the one place
// errors become statuses.
func (p *Plane) pageErrors(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		err := next(c)
		if err == nil || c.Response().Committed {
			return err
		}
		pr := p.noteProblem(c, err)
		back := backLink{"/ops/", "Back to the charges"}
		if strings.HasPrefix(c.Request().URL.Path, "/ops/admin") {
			back = backLink{"/ops/admin", "Back to administration"}
		}
		return p.render(c, pr.Status, "problem", struct {
			pageBase
			Problem *api.Problem
			Back    backLink
		}{p.pageBase(c, pr.Title), pr, back})
	}
}

// backLink is where a problem's page sends the operator back to.
type backLink struct{ Href, Label string }

// noteProblem turns err into its problem and records it for the request
// log and the problems metric, as handleError does for the JSON API.
func (p *Plane) noteProblem(c echo.Context, err error) *api.Problem {
	pr := api.ProblemFor(err)
	api.LogProblem(c, pr)
	if pr.RetryAfter > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(pr.RetryAfter))
	}
	return pr
}

// redirectTo answers every request with a redirect to path.
func redirectTo(path string) echo.HandlerFunc {
	return func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, path) }
}

// pageStyle serves the stylesheet. Its URL changes with its content.
func (p *Plane) pageStyle(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	return c.Blob(http.StatusOK, "text/css; charset=utf-8", p.pages.css)
}

type stateCount struct {
	State intent.State
	N     int64
	// Estimated marks a settled state's count estimated from the
	// database's statistics (intent.Census).
	Estimated bool
}

// pageHome shows the charges by state and a listing, the review queue
// unless ?status= names another state. It takes the JSON listing's query
// parameters (status, tenant, limit, starting_after).
func (p *Plane) pageHome(c echo.Context) error {
	params, err := api.ListQuery(c, intent.ListParams{AllTenants: true, State: intent.StateNeedsReview, Limit: queuePageSize})
	if err != nil {
		return err
	}
	ctx, cancel := p.api.DBContext(c)
	defer cancel()
	counts, countedAt, err := p.cfg.Census.Counts(ctx)
	if err != nil {
		return err
	}
	charges, more, err := intent.List(ctx, p.cfg.DB, params)
	if err != nil {
		return err
	}
	page := struct {
		pageBase
		Counts    []stateCount
		CountedAt time.Time
		State     intent.State
		Charges   []intent.Charge
		// Older is the starting_after of the next page; "" on the last.
		Older string
	}{pageBase: p.pageBase(c, "Charges"), CountedAt: countedAt, State: params.State, Charges: charges}
	for _, state := range intent.States() {
		page.Counts = append(page.Counts, stateCount{state, counts.Counts[state], counts.Estimated[state]})
	}
	if more {
		page.Older = charges[len(charges)-1].ID
	}
	return p.render(c, http.StatusOK, "home", page)
}

// pageOutcome is the banner above a charge after an action: what happened,
// or the problem that refused it.
type pageOutcome struct {
	OK     bool
	Title  string
	Detail string
	Code   api.Code
}

// resolveForm is what the resolve form shows: empty at first, what the
// operator typed after a refusal.
type resolveForm struct {
	Status, ProviderChargeID, FailureCode, Evidence string
}

// The outcomes a redirect after a successful action names (?done=); any
// other value shows nothing, so a link cannot put words on the page.
var doneOutcomes = map[string]pageOutcome{
	"resolved": {OK: true, Title: "Resolved.", Detail: "Checked against the provider's records; the timeline shows your resolution."},
	"reconcile": {OK: true, Title: "Lookup requested.",
		Detail: "The reconciler looks the charge up at the provider on its next tick; reload to see the outcome."},
}

// pageCharge shows a charge, its timeline, and an admin's forms.
func (p *Plane) pageCharge(c echo.Context) error {
	var outcome *pageOutcome
	if o, ok := doneOutcomes[c.QueryParam("done")]; ok {
		outcome = &o
	}
	return p.renderCharge(c, http.StatusOK, outcome, resolveForm{Status: string(intent.StateSucceeded)})
}

func (p *Plane) renderCharge(c echo.Context, status int, outcome *pageOutcome, form resolveForm) error {
	charge, trail, err := p.findWithAuditTrail(c)
	if err != nil {
		return err
	}
	var children []intent.Charge
	var more bool
	if charge.ParentID == "" {
		ctx, cancel := p.api.DBContext(c)
		defer cancel()
		children, more, err = intent.List(ctx, p.cfg.DB, intent.ListParams{TenantID: charge.TenantID, ParentID: charge.ID, Limit: queuePageSize})
		if err != nil {
			return err
		}
	}
	return p.render(c, status, "charge", struct {
		pageBase
		Charge         intent.Charge
		Kind           kindWords
		Facts          []fact
		AuditTrail     []intent.AuditEntry
		Children       []intent.Charge
		MoreChildren   bool
		Outcome        *pageOutcome
		Admin          bool
		Form           resolveForm
		ReconcileFloor time.Duration
	}{
		pageBase: p.pageBase(c, charge.ID), Charge: charge, Kind: wordsOf(charge), Facts: chargeFacts(charge), AuditTrail: trail,
		Children: children, MoreChildren: more,
		Outcome: outcome, Admin: operatorOf(c).Role == operator.RoleAdmin, Form: form, ReconcileFloor: p.cfg.Resolve.ReconcileFloor(),
	})
}

// kindWords are what a row's page calls it and the outcomes its resolve
// form offers, in the row's own terms: a capture that succeeded took the
// money, a cancel that succeeded released it, and a charge captured later
// is resolved to held or released, never to succeeded (only its capture
// takes the money).
type kindWords struct {
	Title, Of string
	// ProviderIDFor names the outcomes that take the provider's charge id.
	ProviderIDFor string
	Outcomes      []resolveOutcome
}

// resolveOutcome is one option of the resolve form: the state, and what
// choosing it says happened at the provider.
type resolveOutcome struct {
	Status intent.State
	Says   string
}

// wordsOf is what ch's page says of it.
func wordsOf(ch intent.Charge) kindWords {
	retry := resolveOutcome{intent.StatePending, "try again with the same provider key"}
	words := func(title, of, succeeded, failed string) kindWords {
		return kindWords{Title: title, Of: of, ProviderIDFor: "succeeded only", Outcomes: []resolveOutcome{
			{intent.StateSucceeded, succeeded}, {intent.StateFailed, failed}, retry}}
	}
	switch {
	case ch.Kind == intent.KindRefund:
		return words("Refund", "Refund of", "the provider refunded it", "nothing was refunded")
	case ch.Kind == intent.KindCapture:
		return words("Capture", "Capture of", "the provider captured the charge, by this amount", "nothing was captured: the charge is still held")
	case ch.Kind == intent.KindCancel:
		return words("Cancel", "Cancel of", "the provider released the charge", "nothing was released: the charge is still held")
	case ch.CaptureLater:
		return kindWords{Title: "Charge", ProviderIDFor: "requires_capture or canceled", Outcomes: []resolveOutcome{
			{intent.StateRequiresCapture, "the provider authorized it and holds the money"},
			{intent.StateCanceled, "the provider authorized it and released it since"},
			{intent.StateFailed, "nothing was authorized"}, retry}}
	}
	return words("Charge", "", "the provider took the money", "nothing was charged")
}

// pageResolve is the resolve form's POST: the same resolveCharge as POST
// /ops/v1/charges/{id}/resolve, on the same validation. Success redirects
// to the charge (so a reload does not post again); a refusal shows the
// charge with the problem, under the problem's status, and the form as the
// operator filled it.
func (p *Plane) pageResolve(c echo.Context) error {
	id, err := opsIDParam(c)
	if err != nil {
		return err
	}
	form := formOf(c)
	typed := resolveForm{Status: form.Get("status"), ProviderChargeID: form.Get("provider_charge_id"),
		FailureCode: form.Get("failure_code"), Evidence: form.Get("evidence")}
	r, err := resolutionFromForm(form)
	if err == nil {
		_, err = p.resolveCharge(c, id, r)
	}
	if err != nil {
		return p.renderRefusal(c, err, typed)
	}
	return c.Redirect(http.StatusSeeOther, "/ops/charges/"+id+"?done=resolved")
}

// pageReconcile is the "reconcile now" button's POST: the same
// reconcileCharge as POST /ops/v1/charges/{id}/reconcile.
func (p *Plane) pageReconcile(c echo.Context) error {
	id, err := opsIDParam(c)
	if err != nil {
		return err
	}
	if _, err := p.reconcileCharge(c, id); err != nil {
		return p.renderRefusal(c, err, resolveForm{Status: string(intent.StateSucceeded)})
	}
	return c.Redirect(http.StatusSeeOther, "/ops/charges/"+id+"?done=reconcile")
}

// renderRefusal shows the charge with the problem that refused an action.
// An internal error shows no cause, as api.ProblemFor's answer has none.
func (p *Plane) renderRefusal(c echo.Context, err error, typed resolveForm) error {
	pr := p.noteProblem(c, err)
	return p.renderCharge(c, pr.Status, &pageOutcome{Title: pr.Title, Detail: pr.Detail, Code: pr.Code}, typed)
}

// resolutionFromForm reads the resolve form as the JSON body it stands
// for and validates it with resolutionOf, so that the page and the JSON API
// accept exactly the same resolutions (card numbers in the evidence
// included, and every value through storedText: a form's values are bytes
// as they came, where the JSON parser has already refused invalid UTF-8).
// Empty optional fields are absent; fields the form does not have are not
// read.
func resolutionFromForm(form url.Values) (resolve.Resolution, error) {
	v := jsoncanon.Value{Kind: jsoncanon.Object}
	for _, name := range []string{"status", "evidence", "provider_charge_id", "failure_code"} {
		values := form[name]
		switch {
		case len(values) == 0:
			continue
		case len(values) > 1:
			return resolve.Resolution{}, api.FieldProblem(api.CodeDuplicateMember, name, "the form sent "+name+" more than once")
		case values[0] == "" && (name == "provider_charge_id" || name == "failure_code"):
			continue
		}
		v.Members = append(v.Members, jsoncanon.Member{Name: name, Value: jsoncanon.Value{Kind: jsoncanon.String, String: values[0]}})
	}
	return resolutionOf(v)
}

// pageJobs serves River's job UI (Config.JobsUI) to a signed-in operator,
// or says that this process has none.
func (p *Plane) pageJobs(c echo.Context) error {
	if p.cfg.JobsUI == nil {
		c.Response().Header().Set("Content-Security-Policy", pageCSP) // our page, not River's
		return p.render(c, http.StatusNotFound, "jobs-missing", p.pageBase(c, "Jobs"))
	}
	p.cfg.JobsUI.ServeHTTP(c.Response(), c.Request())
	return nil
}

// viewersOnlyRead lets a viewer read River's job UI but not change
// anything through its API (cancel, retry or delete jobs, pause queues):
// every method but GET and HEAD needs an admin. Those requests are the job
// UI's own scripts, which cannot carry our CSRF token; the session cookie's
// SameSite=Strict and the cross-origin check of every /ops/ request stand in
// for it.
func viewersOnlyRead(next echo.HandlerFunc) echo.HandlerFunc {
	admin := requireAdmin(next)
	return func(c echo.Context) error {
		switch c.Request().Method {
		case http.MethodGet, http.MethodHead:
			return next(c)
		}
		return admin(c)
	}
}

// fact is one line of a charge's description on its page.
type fact struct {
	Name, Value string
	// Mono sets the value in a fixed-width font: ids and keys.
	Mono bool
	// Href, when set, links the value: a refund's, capture's or cancel's
	// charge.
	Href string
}

// chargeFacts lists what an operator needs to know about a charge, in the
// order they would check it; facts that do not apply are left out.
func chargeFacts(ch intent.Charge) []fact {
	facts := []fact{
		{Name: "Tenant", Value: ch.TenantID, Mono: true},
		{Name: "Amount", Value: money(ch.Amount, ch.Currency)},
	}
	if ch.ParentID != "" {
		// A refund, capture or cancel: what it acts on (and a refund's
		// reason) instead of a payment method.
		facts = append(facts, fact{Name: wordsOf(ch).Of, Value: ch.ParentID, Mono: true, Href: "/ops/charges/" + ch.ParentID})
		if ch.Reason != "" {
			facts = append(facts, fact{Name: "Reason", Value: ch.Reason})
		}
	} else {
		facts = append(facts, fact{Name: "Payment method", Value: ch.PaymentMethod, Mono: true})
		if ch.CaptureLater {
			// Authorized only: what its capture took, and the capture or
			// cancel on its way.
			facts = append(facts, fact{Name: "Capture", Value: "later"}, fact{Name: "Captured", Value: money(ch.AmountCaptured, ch.Currency)})
			if ch.OpInFlight != "" {
				facts = append(facts, fact{Name: "In flight", Value: ch.OpInFlight, Mono: true, Href: "/ops/charges/" + ch.OpInFlight})
			}
		}
		if ch.AmountRefunded > 0 || ch.AmountReserved > 0 {
			facts = append(facts, fact{Name: "Refunded", Value: money(ch.AmountRefunded, ch.Currency) + " (" + money(ch.AmountReserved, ch.Currency) + " reserved)"})
		}
	}
	if ch.Description != nil {
		facts = append(facts, fact{Name: "Description", Value: *ch.Description})
	}
	for _, k := range slices.Sorted(maps.Keys(ch.Metadata)) {
		facts = append(facts, fact{Name: "metadata." + k, Value: ch.Metadata[k]})
	}
	facts = append(facts, fact{Name: "Provider", Value: ch.Provider}, fact{Name: "Provider key", Value: ch.ProviderKey, Mono: true})
	optional := []fact{
		{Name: "Provider id", Value: ch.ProviderChargeID, Mono: true},
		{Name: "Failure code", Value: ch.FailureCode, Mono: true},
		{Name: "Review reason", Value: ch.ReviewReason},
	}
	for _, f := range optional {
		if f.Value != "" {
			facts = append(facts, f)
		}
	}
	facts = append(facts, fact{Name: "Attempts", Value: strconv.Itoa(ch.Attempts)})
	for _, t := range []struct {
		name string
		at   *time.Time
	}{
		{"First attempt", ch.FirstAttemptAt}, {"Last attempt", ch.LastAttemptAt}, {"Unknown since", ch.UnknownSince},
		{"Next check", ch.NextCheckAt}, {"Last lookup", ch.LastLookupAt}, {"Forced lookup", ch.ForcedCheckAt},
	} {
		if t.at != nil {
			facts = append(facts, fact{Name: t.name, Value: when(*t.at)})
		}
	}
	if ch.LookupFailures > 0 {
		facts = append(facts, fact{Name: "Lookup failures", Value: strconv.Itoa(ch.LookupFailures)})
	}
	return append(facts, fact{Name: "Created", Value: when(ch.CreatedAt)}, fact{Name: "Updated", Value: when(ch.UpdatedAt)})
}

// opOf is the capture or cancel that an audit entry's actor names
// ("capture:cp_…", as the database signs the move of a held charge that
// its operation made), or "".
func opOf(actor string) string {
	for _, kind := range []intent.Kind{intent.KindCapture, intent.KindCancel} {
		if id, ok := strings.CutPrefix(actor, string(kind)+":"); ok && ids.Valid(kind.IDPrefix(), id) {
			return id
		}
	}
	return ""
}

// money shows minor units as the currency's major units: 1000 USD is
// "10.00 USD".
func money(amount int64, code string) string {
	a, err := currency.NewAmountFromInt64(amount, code)
	if err != nil {
		return fmt.Sprintf("%d %s (minor units)", amount, code)
	}
	return a.Number() + " " + code
}

// when shows a time in UTC to the second, as operators compare it with
// providers' dashboards and logs.
func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}
