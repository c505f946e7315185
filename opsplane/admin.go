package opsplane

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/admin"
	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/tenant"
)

// The administration page (docs/operations.md, "Administration"): /ops/admin
// shows every operator the tenants with their API keys, the operators and
// the newest records of the admin audit; an admin also rotates and revokes a
// tenant's keys and revokes operators there. Every action is package
// admin's, as the CLI's are, signed "operator:<name>", so it and its audit
// record commit together. No key's secret is ever shown but the new one, on
// the one answer to its rotation.

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

// pageAdmin shows the tenants and their keys, the operators and the admin
// audit, with an admin's forms.
func (p *Plane) pageAdmin(c echo.Context) error {
	var outcome *pageOutcome
	if o, ok := adminOutcomes[c.QueryParam("done")]; ok {
		outcome = &o
	}
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
	audit, err := p.cfg.Admin.Audit(ctx, adminAuditPageSize)
	if err != nil {
		return err
	}
	return p.render(c, http.StatusOK, "admin", struct {
		pageBase
		Outcome        *pageOutcome
		Admin          bool
		Tenants        []adminTenant
		Operators      []adminOperator
		Audit          []admin.Entry
		AuditPageSize  int
		OverlapChoices any
		DefaultOverlap string
	}{
		pageBase: p.pageBase(c, "Administration"), Outcome: outcome, Admin: me.Role == operator.RoleAdmin,
		Tenants: tenants, Operators: operators, Audit: audit, AuditPageSize: adminAuditPageSize,
		OverlapChoices: overlapChoices, DefaultOverlap: defaultOverlap,
	})
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
// input (a name may be anything); any other error goes to the error
// handler as it is.
func adminProblem(err error) error {
	switch {
	case errors.Is(err, tenant.ErrNotFound):
		return api.NewProblem(api.CodeNotFound, "no such tenant, or it has no such working key")
	case errors.Is(err, operator.ErrNotFound):
		return api.NewProblem(api.CodeNotFound, "no active operator has that name")
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
