package opsplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/api/jsoncanon"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/resolve"
	"github.com/chargeflow/chargeflow/resource"
)

// The operator plane (docs/operations.md, "Operators"): /ops/v1 serves
// people with an operator token, never a merchant's API key. Operators read
// every tenant's charges; admins also force lookups and resolve what the
// machine could not prove, and every such action is an event of the charge,
// signed with the operator's name from the token.

const operatorKey = "chargeflow.operator"

// authenticateOperator is the middleware of every /ops/v1 route: a valid
// operator token, or 401. A tenant's API key is not an operator token.
func (p *Plane) authenticateOperator(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		op, err := api.Bearer(p.api, c, "operator token", func(ctx context.Context, token string) (operator.Operator, error) {
			return operator.Authenticate(ctx, p.cfg.DB, token)
		}, operator.ErrUnauthenticated)
		if err != nil {
			return err
		}
		c.Set(operatorKey, op)
		api.LogOperator(c, op.ID)
		return next(c)
	}
}

// requireAdmin refuses viewers: 403, nothing changed.
func requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if operatorOf(c).Role != operator.RoleAdmin {
			return api.NewProblem(api.CodeForbidden, "this action needs an admin operator")
		}
		return next(c)
	}
}

// operatorOf returns the operator authenticateOperator put on the request.
func operatorOf(c echo.Context) operator.Operator {
	op, _ := c.Get(operatorKey).(operator.Operator)
	return op
}

// opsChargeView is a charge as an operator sees it: the merchant's view,
// whose tenant it is, where the reconciler stands, and its timeline.
type opsChargeView struct {
	resource.Charge
	TenantID    string               `json:"tenant_id"`
	Provider    string               `json:"provider"`
	ProviderKey string               `json:"provider_key"`
	NextCheckAt *time.Time           `json:"next_check_at"`
	AuditTrail  []api.AuditEntryView `json:"events,omitempty"`
	// Kind is "charge" or "refund"; a refund's RefundOf is its charge.
	Kind     intent.Kind `json:"kind"`
	RefundOf *string     `json:"refund_of"`
}

func opsViewOf(c intent.Charge, trail []intent.AuditEntry) opsChargeView {
	return opsChargeView{Charge: resource.ChargeOf(c), TenantID: c.TenantID, Provider: c.Provider, ProviderKey: c.ProviderKey,
		NextCheckAt: c.NextCheckAt, AuditTrail: api.AuditEntryViews(trail), Kind: cmp.Or(c.Kind, intent.KindCharge), RefundOf: api.NonEmpty(c.ParentID)}
}

// opsIDParam is the {id} of an operator route: a charge's or a refund's,
// which operators resolve alike. A malformed id is 404.
func opsIDParam(c echo.Context) (string, error) {
	id := c.Param("id")
	if !ids.Valid("ch", id) && !ids.Valid("re", id) {
		return "", api.NewProblem(api.CodeNotFound, "no such charge or refund")
	}
	return id, nil
}

// opsListCharges answers a page of charges of every tenant (or one, with
// ?tenant=), newest first.
func (p *Plane) opsListCharges(c echo.Context) error {
	return api.ListPage(p.api, c, intent.ListParams{AllTenants: true, Limit: 20}, func(ch intent.Charge) opsChargeView { return opsViewOf(ch, nil) })
}

// opsGetCharge answers one charge with its timeline.
func (p *Plane) opsGetCharge(c echo.Context) error {
	charge, trail, err := p.findWithAuditTrail(c)
	if err != nil {
		return err
	}
	return p.api.WriteJSON(c, http.StatusOK, opsViewOf(charge, trail))
}

// findWithAuditTrail reads the charge named in the path and its audit trail.
func (p *Plane) findWithAuditTrail(c echo.Context) (intent.Charge, []intent.AuditEntry, error) {
	id, err := opsIDParam(c)
	if err != nil {
		return intent.Charge{}, nil, err
	}
	ctx, cancel := p.api.DBContext(c)
	defer cancel()
	charge, err := intent.Find(ctx, p.cfg.DB, id)
	if err != nil {
		return intent.Charge{}, nil, err
	}
	trail, err := intent.AuditTrail(ctx, p.cfg.DB, charge.TenantID, id)
	if err != nil {
		return intent.Charge{}, nil, err
	}
	api.LogCharge(c, id)
	api.LogTenant(c, charge.TenantID)
	return charge, trail, nil
}

// opsReconcile asks the reconciler to look an unknown charge up at once:
// 202, and the lookup happens on the reconciler's next tick under its lease
// like every other. See reconcileCharge.
func (p *Plane) opsReconcile(c echo.Context) error {
	id, err := opsIDParam(c)
	if err != nil {
		return err
	}
	charge, err := p.reconcileCharge(c, id)
	if err != nil {
		return err
	}
	return p.api.WriteJSON(c, http.StatusAccepted, opsViewOf(charge, nil))
}

// reconcileCharge makes an unknown charge's lookup due now, for the
// operator on c (resolve.Resolver.Reconcile): the JSON API and the
// operator's page both call it. Too soon after the last lookup is 429 with
// Retry-After.
func (p *Plane) reconcileCharge(c echo.Context, id string) (intent.Charge, error) {
	ctx, cancel := p.api.DBContext(c)
	defer cancel()
	charge, err := p.cfg.Resolve.Reconcile(ctx, operatorOf(c).Actor(), id)
	if err != nil {
		return intent.Charge{}, problemOf(err)
	}
	api.LogCharge(c, id)
	api.LogTenant(c, charge.TenantID)
	return charge, nil
}

var (
	resolvedStatusPattern = regexp.MustCompile(`^(succeeded|failed|pending|requires_capture|canceled)$`)
	providerIDPattern     = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	failureCodePattern    = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
)

const (
	minEvidence = 10
	maxEvidence = 2000
)

// opsResolve settles a needs_review charge on an admin's written evidence,
// given as a JSON body; see resolveCharge.
func (p *Plane) opsResolve(c echo.Context) error {
	id, err := opsIDParam(c)
	if err != nil {
		return err
	}
	body, err := api.ReadBody(c, p.api.MaxBodyBytes())
	if err != nil {
		return err
	}
	r, err := parseResolution(body)
	if err != nil {
		return err
	}
	charge, err := p.resolveCharge(c, id, r)
	if err != nil {
		return err
	}
	return p.api.WriteJSON(c, http.StatusOK, opsViewOf(charge, nil))
}

// resolveCharge settles a needs_review charge on the written evidence of
// the operator on c (resolve.Resolver.Resolve, which holds it to the
// provider's records): the JSON API and the operator's page both call it,
// so both are held to the same proof.
func (p *Plane) resolveCharge(c echo.Context, id string, r resolve.Resolution) (intent.Charge, error) {
	ctx, cancel := p.api.DBContext(c)
	defer cancel()
	charge, err := p.cfg.Resolve.Resolve(ctx, operatorOf(c).Actor(), id, r)
	if charge.ID != "" {
		api.LogCharge(c, id)
		api.LogTenant(c, charge.TenantID)
	}
	if err != nil {
		return intent.Charge{}, problemOf(err)
	}
	return charge, nil
}

// problemOf is the problem a refusal of package resolve is answered with;
// any other error goes to the API's error handler as it is.
func problemOf(err error) error {
	var refusal *resolve.Error
	if !errors.As(err, &refusal) {
		return err
	}
	p := api.NewProblem(refusalCodes[refusal.Reason], refusal.Detail)
	p.RetryAfter = int(math.Ceil(refusal.Wait.Seconds()))
	p.Cause = refusal.Err
	return p
}

// refusalCodes is the problem code of each reason of a refusal.
var refusalCodes = map[error]api.Code{
	resolve.ErrNotInReview:         api.CodeChargeNotInReview,
	resolve.ErrNotUnknown:          api.CodeChargeNotUnknown,
	resolve.ErrTooSoon:             api.CodeReconcileTooSoon,
	resolve.ErrKeyWindowPassed:     api.CodeKeyWindowPassed,
	resolve.ErrEvidenceMismatch:    api.CodeEvidenceMismatch,
	resolve.ErrProviderUnavailable: api.CodeProviderUnavailable,
}

// parseResolution parses a resolve body as strictly as a charge request.
// The operator is the token's, never a body field.
func parseResolution(body []byte) (resolve.Resolution, error) {
	v, err := jsoncanon.Parse(body)
	if err != nil {
		return resolve.Resolution{}, api.JSONProblem(err)
	}
	return resolutionOf(v)
}

// resolutionOf validates a parsed resolve body. The operator's page builds
// the same object from its form, so both are held to the same rules.
func resolutionOf(v jsoncanon.Value) (resolve.Resolution, error) {
	if field, found := api.FindCardNumber(v, ""); found {
		return resolve.Resolution{}, api.FieldProblem(api.CodeCardNumberDetected, field, "the body contains what looks like a card number")
	}
	if v.Kind != jsoncanon.Object {
		return resolve.Resolution{}, api.NewProblem(api.CodeInvalidJSON, "the body must be a JSON object")
	}
	var r resolve.Resolution
	// Every member is a string the database stores (the evidence and the
	// provider's ids in the charge's events): each goes through storedText
	// first, then its own pattern.
	str := func(m jsoncanon.Member, max int, pattern *regexp.Regexp, detail string) (string, error) {
		if m.Value.Kind != jsoncanon.String {
			return "", api.FieldProblem(api.CodeInvalidField, m.Name, detail)
		}
		if err := api.StoredText(m.Name, m.Name, m.Value.String, max); err != nil {
			return "", err
		}
		if pattern != nil && !pattern.MatchString(m.Value.String) {
			return "", api.FieldProblem(api.CodeInvalidField, m.Name, detail)
		}
		return m.Value.String, nil
	}
	for _, m := range v.Members {
		var err error
		switch m.Name {
		case "status":
			var status string
			status, err = str(m, 0, resolvedStatusPattern, "status must be succeeded, failed, pending, or for a charge captured later requires_capture or canceled")
			r.Status = intent.State(status)
		case "evidence":
			r.Evidence, err = str(m, maxEvidence, nil, "evidence must be a string")
			if n := utf8.RuneCountInString(strings.TrimSpace(r.Evidence)); err == nil && (n < minEvidence || n > maxEvidence) {
				err = api.FieldProblem(api.CodeInvalidField, "evidence", fmt.Sprintf("evidence must be %d to %d characters: say what you checked and where", minEvidence, maxEvidence))
			}
		case "provider_charge_id":
			r.ProviderChargeID, err = str(m, 0, providerIDPattern, "provider_charge_id must be the provider's charge id")
		case "failure_code":
			r.FailureCode, err = str(m, 0, failureCodePattern, "failure_code must be snake_case, at most 64 characters")
		default:
			err = api.FieldProblem(api.CodeUnknownField, api.SafeFieldName(m.Name), "this field is not part of a resolution (the operator is the token's)")
		}
		if err != nil {
			return resolve.Resolution{}, err
		}
	}
	// In a fixed order, so the field a problem names does not vary.
	for _, required := range []struct{ name, value string }{
		{"status", string(r.Status)}, {"evidence", r.Evidence},
	} {
		if required.value == "" {
			return resolve.Resolution{}, api.FieldProblem(api.CodeMissingField, required.name, required.name+" is required")
		}
	}
	named := r.Status == intent.StateSucceeded || r.Status == intent.StateRequiresCapture || r.Status == intent.StateCanceled
	switch {
	case named && r.ProviderChargeID == "":
		return resolve.Resolution{}, api.FieldProblem(api.CodeMissingField, "provider_charge_id", "resolving to "+string(r.Status)+" needs the provider's charge id")
	case !named && r.ProviderChargeID != "":
		return resolve.Resolution{}, api.FieldProblem(api.CodeInvalidField, "provider_charge_id", "only a succeeded, requires_capture or canceled resolution has a provider charge id")
	case r.Status != intent.StateFailed && r.FailureCode != "":
		return resolve.Resolution{}, api.FieldProblem(api.CodeInvalidField, "failure_code", "only a failed resolution has a failure code")
	}
	return r, nil
}
