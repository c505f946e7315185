package opsplane

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/admin"
	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/route"
	"github.com/chargeflow/chargeflow/tenant"
)

// The administration page (docs/operations.md, "Administration"): /ops/admin
// shows every operator the tenants with their API keys, the operators, the
// provider accounts, the tenants' routes and the newest records of the
// admin audit; an admin also rotates and revokes a tenant's keys, revokes
// operators, adds and disables accounts and sets and clears routes there.
// Every action is package admin's, as the CLI's are, signed
// "operator:<name>", so it and its audit record commit together; a route is
// read by route.ParseEntries, as the CLI reads it. No key's secret is ever
// shown but the new one, on the one answer to its rotation; an account
// shows the names of the variables its secrets are in, never a secret.

// adminAuditPageSize is how many audit records the page shows, newest
// first.
const adminAuditPageSize = 50

// overlapChoices are the overlaps the rotate form offers; any duration
// from 0 to admin.MaxOverlap is taken.
var overlapChoices = []struct {
	Value, Label string
}{
	{"0s", "none: they stop now"},
	{"1h", "1 hour"},
	{"24h", "24 hours"},
	{"168h", "7 days"},
}

// defaultOverlap is the rotate form's choice at first, the CLI's default.
const defaultOverlap = "24h"

// The outcomes a redirect after an administrator's action names (?done=).
var adminOutcomes = map[string]pageOutcome{
	"key_revoked": {OK: true, Title: "Key revoked.",
		Detail: "It no longer works (an API process may trust it for its auth cache's 10 s); the admin audit has the record."},
	"operator_revoked": {OK: true, Title: "Operator revoked.",
		Detail: "Their token and every page session of theirs no longer work; the admin audit has the record."},
	"account_added": {OK: true, Title: "Provider account added.",
		Detail: "Each process reads its secrets from the variables it names: set them where the api, worker and reconciler run. " +
			"No charge goes to it until a tenant's route names it."},
	"account_disabled": {OK: true, Title: "Provider account disabled.",
		Detail: "No new charge goes to it (each process sees it within 5 s); charges already there are still looked up, settled and refunded through it."},
	"route_set": {OK: true, Title: "Route set.", Detail: "New charges of the tenant follow it within 5 s; the admin audit has the record."},
	"route_cleared": {OK: true, Title: "Route cleared.",
		Detail: "New charges of the tenant go to the processes' own provider within 5 s; the admin audit has the record."},
}

// adminTenant is a tenant as the page shows it, with its keys.
type adminTenant struct {
	tenant.Listed
	Keys []adminKey
}

// adminKey is one API key: its id and dates, never its secret.
type adminKey struct {
	tenant.Key
	// Works is whether it authenticates now; Ending that it does, until
	// RevokedAt (a rotation's overlap).
	Works, Ending bool
}

// adminOperator is an operator as the page lists it.
type adminOperator struct {
	operator.Listed
	// Self is the signed-in operator, whom the page does not offer to
	// revoke.
	Self bool
}

// accountForm is what the add-account form shows: empty at first, what
// the admin typed after a refusal — but for what typedAccount leaves out
// as it may be a secret (Dropped says which).
type accountForm struct {
	Name, Kind, Endpoint, CredentialEnv, WebhookSecretEnv, MerchantAccount string
	Dropped                                                                []string
	// Sent marks the form as the admin sent it, refused.
	Sent bool
}

// routeForm is a route form as the admin filled it, after a refusal.
type routeForm struct {
	TenantID, Entries string
}

// adminForms are the forms a refusal shows again as they were sent, with
// the problem beside them.
type adminForms struct {
	Account *accountForm
	Route   *routeForm
}

// tenantRoute is a tenant's route as the page shows it.
type tenantRoute struct {
	Tenant  tenant.Listed
	Entries []routeEntry
	// Text is the route as the set form takes it, an entry a line.
	Text string
}

// routeEntry is one entry of a route, and whether its account takes new
// charges.
type routeEntry struct {
	route.Entry
	Disabled bool
}

// pageAdmin shows the tenants and their keys, the operators, the provider
// accounts, the routes and the admin audit, with an admin's forms.
func (p *Plane) pageAdmin(c echo.Context) error {
	var outcome *pageOutcome
	if o, ok := adminOutcomes[c.QueryParam("done")]; ok {
		outcome = &o
	}
	return p.renderAdmin(c, http.StatusOK, outcome, adminForms{})
}

// renderAdminRefusal shows the administration page under the status of
// the problem that refused an action, the problem above it and beside the
// form, and the form as the admin sent it. An internal error shows no
// cause, as api.ProblemFor's answer has none.
func (p *Plane) renderAdminRefusal(c echo.Context, err error, forms adminForms) error {
	pr := p.noteProblem(c, adminProblem(err))
	return p.renderAdmin(c, pr.Status, &pageOutcome{Title: pr.Title, Detail: pr.Detail, Code: pr.Code}, forms)
}

func (p *Plane) renderAdmin(c echo.Context, status int, outcome *pageOutcome, forms adminForms) error {
	ctx, cancel := p.api.DBContext(c)
	defer cancel()
	listed, err := tenant.List(ctx, p.cfg.DB)
	if err != nil {
		return err
	}
	now := p.api.Now()
	tenants := make([]adminTenant, 0, len(listed))
	for _, t := range listed {
		keys, err := tenant.Keys(ctx, p.cfg.DB, t.ID)
		if errors.Is(err, tenant.ErrNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			return err
		}
		at := adminTenant{Listed: t, Keys: make([]adminKey, 0, len(keys))}
		for _, k := range keys {
			works := k.Active(now)
			at.Keys = append(at.Keys, adminKey{Key: k, Works: works, Ending: works && k.RevokedAt != nil})
		}
		tenants = append(tenants, at)
	}
	ops, err := operator.List(ctx, p.cfg.DB)
	if err != nil {
		return err
	}
	me := operatorOf(c)
	operators := make([]adminOperator, 0, len(ops))
	for _, o := range ops {
		operators = append(operators, adminOperator{Listed: o, Self: o.ID == me.ID})
	}
	accounts, err := route.Accounts(ctx, p.cfg.DB)
	if err != nil {
		return err
	}
	routes, err := route.Routes(ctx, p.cfg.DB)
	if err != nil {
		return err
	}
	audit, err := p.cfg.Admin.Audit(ctx, adminAuditPageSize)
	if err != nil {
		return err
	}
	if forms.Account == nil {
		forms.Account = &accountForm{}
	}
	return p.render(c, status, "admin", struct {
		pageBase
		Outcome        *pageOutcome
		Admin          bool
		Tenants        []adminTenant
		Operators      []adminOperator
		Accounts       []route.Account
		Routes         []tenantRoute
		Forms          adminForms
		Kinds          []route.Kind
		Audit          []admin.Entry
		AuditPageSize  int
		OverlapChoices any
		DefaultOverlap string
	}{
		pageBase: p.pageBase(c, "Administration"), Outcome: outcome, Admin: me.Role == operator.RoleAdmin,
		Tenants: tenants, Operators: operators, Accounts: accounts, Routes: tenantRoutes(listed, accounts, routes),
		Forms: forms, Kinds: route.Kinds, Audit: audit, AuditPageSize: adminAuditPageSize,
		OverlapChoices: overlapChoices, DefaultOverlap: defaultOverlap,
	})
}

// tenantRoutes is every tenant's route, in the tenants' order, each entry
// marked when its account takes no new charge.
func tenantRoutes(tenants []tenant.Listed, accounts []route.Account, routes map[string][]route.Entry) []tenantRoute {
	disabled := map[string]bool{}
	for _, a := range accounts {
		disabled[a.Name] = !a.Enabled()
	}
	out := make([]tenantRoute, 0, len(tenants))
	for _, t := range tenants {
		tr := tenantRoute{Tenant: t}
		var lines []string
		for _, e := range routes[t.ID] {
			tr.Entries = append(tr.Entries, routeEntry{Entry: e, Disabled: disabled[e.Account]})
			lines = append(lines, e.String())
		}
		tr.Text = strings.Join(lines, "\n")
		out = append(out, tr)
	}
	return out
}

// pageRotateKey gives a tenant a new API key (admin.Service.RotateKey) and
// shows it, once: the answer is that page itself, never a redirect to one,
// and like every page it is not cached. A reload would post again and make
// another key.
func (p *Plane) pageRotateKey(c echo.Context) error {
	tenantID, err := tenantParam(c)
	if err != nil {
		return err
	}
	overlap, err := overlapFromForm(formOf(c))
	if err != nil {
		return err
	}
	ctx, cancel := p.api.DBContext(c)
	defer cancel()
	key, keyID, ending, err := p.cfg.Admin.RotateKey(ctx, operatorOf(c).Actor(), tenantID, overlap)
	if err != nil {
		return adminProblem(err)
	}
	endsAt := p.api.Now().Add(overlap)
	return p.render(c, http.StatusOK, "admin-key", struct {
		pageBase
		TenantID, KeyID, Key string
		Ending               int
		Overlap              time.Duration
		EndsAt               time.Time
	}{p.pageBase(c, "New API key"), tenantID, keyID, key, len(ending), overlap, endsAt})
}

// pageRevokeKey makes one of a tenant's keys stop working now
// (admin.Service.RevokeKey).
func (p *Plane) pageRevokeKey(c echo.Context) error {
	tenantID, err := tenantParam(c)
	if err != nil {
		return err
	}
	keyID := c.Param("key")
	if !ids.Valid("key", keyID) {
		return api.NewProblem(api.CodeNotFound, "this tenant has no such working key")
	}
	ctx, cancel := p.api.DBContext(c)
	defer cancel()
	if err := p.cfg.Admin.RevokeKey(ctx, operatorOf(c).Actor(), tenantID, keyID); err != nil {
		return adminProblem(err)
	}
	return c.Redirect(http.StatusSeeOther, "/ops/admin?done=key_revoked")
}

// pageRevokeOperator ends the active operator the form names
// (admin.Service.RevokeOperator): their token and their sessions. The
// signed-in operator cannot revoke themselves, which would end the session
// in the middle of the action; another admin or the CLI can.
func (p *Plane) pageRevokeOperator(c echo.Context) error {
	name, err := operatorNameFromForm(formOf(c))
	if err != nil {
		return err
	}
	me := operatorOf(c)
	if name == me.Name {
		return api.NewProblem(api.CodeForbidden, "you cannot revoke yourself: it would end this session in the middle of the action. "+
			"Another admin can revoke you here, or an administrator with `chargeflow operator revoke`")
	}
	ctx, cancel := p.api.DBContext(c)
	defer cancel()
	if _, err := p.cfg.Admin.RevokeOperator(ctx, me.Actor(), name); err != nil {
		return adminProblem(err)
	}
	return c.Redirect(http.StatusSeeOther, "/ops/admin?done=operator_revoked")
}

// pageAddAccount adds a provider account (admin.Service.AddAccount) from
// the form's fields, which name the variables its secrets are in. A
// refusal shows the page again with the form as sent, less what may be a
// secret.
func (p *Plane) pageAddAccount(c echo.Context) error {
	form := formOf(c)
	a, err := accountFromForm(form)
	if err == nil {
		ctx, cancel := p.api.DBContext(c)
		defer cancel()
		_, err = p.cfg.Admin.AddAccount(ctx, operatorOf(c).Actor(), a)
	}
	if err != nil {
		typed := typedAccount(form)
		return p.renderAdminRefusal(c, err, adminForms{Account: &typed})
	}
	return c.Redirect(http.StatusSeeOther, "/ops/admin?done=account_added")
}

// accountFields are the add-account form's fields, in the form's order.
var accountFields = []string{"name", "kind", "endpoint", "credential_env", "webhook_secret_env", "merchant_account"}

// accountFromForm reads the add-account form: each field at most once, an
// empty one absent; route.Account.Check, in admin.Service.AddAccount,
// judges the values.
func accountFromForm(form url.Values) (route.Account, error) {
	v := map[string]string{}
	for _, name := range accountFields {
		switch values := form[name]; {
		case len(values) > 1:
			return route.Account{}, api.FieldProblem(api.CodeDuplicateMember, name, "the form sent "+name+" more than once")
		case len(values) == 1:
			if err := api.StoredText(name, "the "+strings.ReplaceAll(name, "_", " "), values[0], 2048); err != nil {
				return route.Account{}, err
			}
			v[name] = strings.TrimSpace(values[0])
		}
	}
	return route.Account{Name: v["name"], Kind: route.Kind(v["kind"]), Endpoint: v["endpoint"],
		CredentialEnv: v["credential_env"], WebhookSecretEnv: v["webhook_secret_env"], MerchantAccount: v["merchant_account"]}, nil
}

// typedAccount is the add-account form as sent, to show again: a
// variable's field that holds no variable's name, and an endpoint with an
// "@" (a user, and maybe a password, or one it could not read as such),
// are left empty, since each may hold a secret.
func typedAccount(form url.Values) accountForm {
	f := accountForm{Name: form.Get("name"), Kind: form.Get("kind"), Endpoint: form.Get("endpoint"),
		CredentialEnv: form.Get("credential_env"), WebhookSecretEnv: form.Get("webhook_secret_env"),
		MerchantAccount: form.Get("merchant_account"), Sent: true}
	for _, v := range []struct {
		field *string
		label string
	}{{&f.CredentialEnv, "API key variable"}, {&f.WebhookSecretEnv, "webhook secret variable"}} {
		if s := strings.TrimSpace(*v.field); s != "" && !route.IsVariableName(s) {
			*v.field = ""
			f.Dropped = append(f.Dropped, v.label)
		}
	}
	if strings.Contains(f.Endpoint, "@") { // a user, and maybe a password
		f.Endpoint = ""
		f.Dropped = append(f.Dropped, "endpoint")
	}
	return f
}

// pageDisableAccount stops new charges from going to the account the form
// names (admin.Service.DisableAccount).
func (p *Plane) pageDisableAccount(c echo.Context) error {
	name, err := oneField(formOf(c), "name")
	if err != nil {
		return err
	}
	if err := api.StoredText("name", "the account's name", name, 100); err != nil {
		return err
	}
	ctx, cancel := p.api.DBContext(c)
	defer cancel()
	if _, err := p.cfg.Admin.DisableAccount(ctx, operatorOf(c).Actor(), name); err != nil {
		return adminProblem(err)
	}
	return c.Redirect(http.StatusSeeOther, "/ops/admin?done=account_disabled")
}

// pageSetRoute replaces a tenant's route (admin.Service.SetRoute) with the
// entries of the form's text, read by route.ParseEntries as the CLI reads
// its arguments. No entry is refused: the clear button removes a route. A
// refusal shows the page again with the entries as sent.
func (p *Plane) pageSetRoute(c echo.Context) error {
	tenantID, err := tenantParam(c)
	if err != nil {
		return err
	}
	form := formOf(c)
	text, err := oneField(form, "entries")
	var entries []route.Entry
	if err == nil {
		entries, err = route.ParseEntries(text)
	}
	if err == nil && len(entries) == 0 {
		err = api.FieldProblem(api.CodeMissingField, "entries",
			"a route names at least one account; “Clear route” sends the tenant's charges to the processes' own provider again")
	}
	if err == nil {
		ctx, cancel := p.api.DBContext(c)
		defer cancel()
		err = p.cfg.Admin.SetRoute(ctx, operatorOf(c).Actor(), tenantID, entries)
	}
	if err != nil {
		return p.renderAdminRefusal(c, err, adminForms{Route: &routeForm{TenantID: tenantID, Entries: form.Get("entries")}})
	}
	return c.Redirect(http.StatusSeeOther, "/ops/admin?done=route_set")
}

// pageClearRoute removes a tenant's route (admin.Service.SetRoute with no
// entry): its charges go to the processes' own provider again.
func (p *Plane) pageClearRoute(c echo.Context) error {
	tenantID, err := tenantParam(c)
	if err != nil {
		return err
	}
	ctx, cancel := p.api.DBContext(c)
	defer cancel()
	if err := p.cfg.Admin.SetRoute(ctx, operatorOf(c).Actor(), tenantID, nil); err != nil {
		return adminProblem(err)
	}
	return c.Redirect(http.StatusSeeOther, "/ops/admin?done=route_cleared")
}

// tenantParam is the {tenant} of an administrator's route; a malformed id
// is 404, as no tenant has it.
func tenantParam(c echo.Context) (string, error) {
	id := c.Param("tenant")
	if !ids.Valid("tn", id) {
		return "", api.NewProblem(api.CodeNotFound, "no such tenant")
	}
	api.LogTenant(c, id)
	return id, nil
}

// overlapFromForm reads the rotate form's overlap: a duration ("24h",
// "0s") from 0 to admin.MaxOverlap in whole seconds (the form offers
// hours; a fraction of a second is a typing slip), sent once.
func overlapFromForm(form url.Values) (time.Duration, error) {
	value, err := oneField(form, "overlap")
	if err != nil {
		return 0, err
	}
	bounds := fmt.Sprintf("overlap must be a duration from 0 to %s in whole seconds, such as 24h", admin.MaxOverlap)
	overlap, err := time.ParseDuration(value)
	if err != nil || overlap < 0 || overlap > admin.MaxOverlap || overlap%time.Second != 0 {
		return 0, api.FieldProblem(api.CodeInvalidField, "overlap", bounds)
	}
	return overlap, nil
}

// operatorNameFromForm reads the revoke form's operator name, sent once,
// as text the database can hold.
func operatorNameFromForm(form url.Values) (string, error) {
	name, err := oneField(form, "name")
	if err != nil {
		return "", err
	}
	if err := api.StoredText("name", "the operator's name", name, 100); err != nil {
		return "", err
	}
	return name, nil
}

// oneField is a form's one non-empty value of name.
func oneField(form url.Values, name string) (string, error) {
	values := form[name]
	switch {
	case len(values) > 1:
		return "", api.FieldProblem(api.CodeDuplicateMember, name, "the form sent "+name+" more than once")
	case len(values) == 0 || values[0] == "":
		return "", api.FieldProblem(api.CodeMissingField, name, name+" is required")
	}
	return values[0], nil
}

// adminProblem is the problem a refusal of package admin is answered
// with: what is not there is 404, whose detail and log line repeat no
// input (a name may be anything); an account or a route that is not well
// formed, or an account's name that is taken, is 400 with route's words,
// which never repeat a value given for a variable's name; any other error
// goes to the error handler as it is. No problem carries the error as its
// cause, which the request log would print.
func adminProblem(err error) error {
	switch {
	case errors.Is(err, tenant.ErrNotFound):
		return api.NewProblem(api.CodeNotFound, "no such tenant, or it has no such working key")
	case errors.Is(err, route.ErrNoTenant):
		return api.NewProblem(api.CodeNotFound, "no such tenant")
	case errors.Is(err, operator.ErrNotFound):
		return api.NewProblem(api.CodeNotFound, "no active operator has that name")
	case errors.Is(err, route.ErrNoAccount):
		return api.NewProblem(api.CodeNotFound, "no provider account has that name: add it first")
	case errors.Is(err, route.ErrAccountExists):
		return api.FieldProblem(api.CodeInvalidField, "name", "a provider account has that name already: pick another")
	case errors.Is(err, route.ErrInvalid):
		return api.NewProblem(api.CodeInvalidField, strings.TrimPrefix(err.Error(), route.ErrInvalid.Error()+": "))
	}
	return err
}

// span shows a duration as a person says it: "7 days", "24 hours",
// "90 minutes"; anything finer as Go writes it.
func span(d time.Duration) string {
	unit := func(n int64, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	switch {
	case d == 0:
		return "0"
	case d%(24*time.Hour) == 0 && d >= 48*time.Hour:
		return unit(int64(d/(24*time.Hour)), "day")
	case d%time.Hour == 0:
		return unit(int64(d/time.Hour), "hour")
	case d%time.Minute == 0:
		return unit(int64(d/time.Minute), "minute")
	}
	return d.String()
}
