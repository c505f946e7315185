package api

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

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/api/jsoncanon"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/object"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/settle"
	"github.com/chargeflow/chargeflow/submit"
)

// The operator plane (docs/operations.md, "Operators"): /ops/v1 serves
// people with an operator token, never a merchant's API key. Operators read
// every tenant's charges; admins also force lookups and resolve what the
// machine could not prove, and every such action is an event of the charge,
// signed with the operator's name from the token.

const operatorKey = "chargeflow.operator"

// authenticateOperator is the middleware of every /ops/v1 route: a valid
// operator token, or 401. A tenant's API key is not an operator token.
func (s *Server) authenticateOperator(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		op, err := bearer(s, c, "operator token", func(ctx context.Context, token string) (operator.Operator, error) {
			return operator.Authenticate(ctx, s.cfg.DB, token)
		}, operator.ErrUnauthenticated)
		if err != nil {
			return err
		}
		c.Set(operatorKey, op)
		c.Set(logOperatorKey, op.ID)
		return next(c)
	}
}

// requireAdmin refuses viewers: 403, nothing changed.
func requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if operatorOf(c).Role != operator.RoleAdmin {
			return problem(CodeForbidden, "this action needs an admin operator")
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
	object.Charge
	TenantID    string      `json:"tenant_id"`
	Provider    string      `json:"provider"`
	ProviderKey string      `json:"provider_key"`
	NextCheckAt *time.Time  `json:"next_check_at"`
	Events      []eventView `json:"events,omitempty"`
	// Kind is "charge" or "refund"; a refund's RefundOf is its charge.
	Kind     intent.Kind `json:"kind"`
	RefundOf *string     `json:"refund_of"`
}

func opsViewOf(c intent.Charge, events []intent.Event) opsChargeView {
	return opsChargeView{Charge: object.ChargeOf(c), TenantID: c.TenantID, Provider: c.Provider, ProviderKey: c.ProviderKey,
		NextCheckAt: c.NextCheckAt, Events: eventViews(events), Kind: cmp.Or(c.Kind, intent.KindCharge), RefundOf: nonEmpty(c.ParentID)}
}

// opsIDParam is the {id} of an operator route: a charge's or a refund's,
// which operators resolve alike. A malformed id is 404.
func opsIDParam(c echo.Context) (string, error) {
	id := c.Param("id")
	if !ids.Valid("ch", id) && !ids.Valid("re", id) {
		return "", problem(CodeNotFound, "no such charge or refund")
	}
	return id, nil
}

// opsListCharges answers a page of charges of every tenant (or one, with
// ?tenant=), newest first.
func (s *Server) opsListCharges(c echo.Context) error {
	return listPage(s, c, intent.ListParams{AllTenants: true, Limit: 20}, func(ch intent.Charge) opsChargeView { return opsViewOf(ch, nil) })
}

// opsGetCharge answers one charge with its timeline.
func (s *Server) opsGetCharge(c echo.Context) error {
	charge, events, err := s.findWithEvents(c)
	if err != nil {
		return err
	}
	return s.writeJSON(c, http.StatusOK, opsViewOf(charge, events))
}

// findWithEvents reads the charge named in the path and its events.
func (s *Server) findWithEvents(c echo.Context) (intent.Charge, []intent.Event, error) {
	id, err := opsIDParam(c)
	if err != nil {
		return intent.Charge{}, nil, err
	}
	ctx, cancel := s.dbContext(c)
	defer cancel()
	charge, err := intent.Find(ctx, s.cfg.DB, id)
	if err != nil {
		return intent.Charge{}, nil, err
	}
	events, err := intent.Events(ctx, s.cfg.DB, charge.TenantID, id)
	if err != nil {
		return intent.Charge{}, nil, err
	}
	c.Set(logChargeKey, id)
	c.Set(logTenantKey, charge.TenantID)
	return charge, events, nil
}

// opsReconcile asks the reconciler to look an unknown charge up at once:
// 202, and the lookup happens on the reconciler's next tick under its lease
// like every other. See reconcileCharge.
func (s *Server) opsReconcile(c echo.Context) error {
	id, err := opsIDParam(c)
	if err != nil {
		return err
	}
	charge, err := s.reconcileCharge(c, id)
	if err != nil {
		return err
	}
	return s.writeJSON(c, http.StatusAccepted, opsViewOf(charge, nil))
}

// reconcileCharge makes an unknown charge's lookup due now, for the
// operator on c. It is the one implementation of a forced lookup: the JSON
// API and the operator's page both call it. Forced lookups are spaced by
// ReconcileFloor from the last lookup, so a loop of requests cannot override
// the lookup backoff and hammer the provider: too soon is 429 with
// Retry-After. The request is an event of the charge (action
// reconcile_requested).
func (s *Server) reconcileCharge(c echo.Context, id string) (intent.Charge, error) {
	ctx, cancel := s.dbContext(c)
	defer cancel()
	charge, err := intent.ForceCheck(ctx, s.cfg.DB, intent.ForcedCheck{ChargeID: id, Actor: operatorOf(c).Actor(), Floor: s.cfg.ReconcileFloor})
	var conflict *intent.ConflictError
	var tooSoon *intent.TooSoonError
	switch {
	case errors.As(err, &conflict):
		return intent.Charge{}, problem(CodeChargeNotUnknown, fmt.Sprintf("only an unknown charge can be reconciled; this one is %s", conflict.Current))
	case errors.As(err, &tooSoon):
		p := problem(CodeReconcileTooSoon, fmt.Sprintf("the charge was looked up less than %s ago; the reconciler keeps looking on its own", s.cfg.ReconcileFloor))
		p.RetryAfter = int(math.Ceil(tooSoon.Wait.Seconds()))
		return intent.Charge{}, p
	case err != nil:
		return intent.Charge{}, err
	}
	c.Set(logChargeKey, id)
	c.Set(logTenantKey, charge.TenantID)
	return charge, nil
}

// resolution is a validated resolve body.
type resolution struct {
	status           intent.State
	evidence         string
	providerChargeID string
	failureCode      string
}

var (
	resolvedStatusPattern = regexp.MustCompile(`^(succeeded|failed|pending)$`)
	providerIDPattern     = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	failureCodePattern    = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
)

const (
	minEvidence = 10
	maxEvidence = 2000
)

// opsResolve settles a needs_review charge on an admin's written evidence,
// given as a JSON body; see resolveCharge.
func (s *Server) opsResolve(c echo.Context) error {
	id, err := opsIDParam(c)
	if err != nil {
		return err
	}
	body, err := readBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	r, err := parseResolution(body)
	if err != nil {
		return err
	}
	charge, err := s.resolveCharge(c, id, r)
	if err != nil {
		return err
	}
	return s.writeJSON(c, http.StatusOK, opsViewOf(charge, nil))
}

// resolveCharge settles a needs_review charge on the written evidence of
// the operator on c: succeeded (with the provider's charge id), failed, or
// pending (a new attempt with the same provider key, its job in the same
// transaction). It is the one implementation of a resolve: the JSON API and
// the operator's page both call it, so both are held to the same proof.
//
// The operator's word is checked against the provider before anything is
// written, by a lookup of the charge's provider key (outside any
// transaction): succeeded needs the provider to hold that charge id,
// succeeded, with the charge's amount, currency and reference; failed and
// pending are refused while the provider holds a successful charge under the
// key; pending is refused once the provider's key window has passed, since
// a new attempt could then be charged twice. Each refusal changes nothing.
// A provider that cannot answer is 503: an operator's word alone settles
// nothing the provider could contradict.
func (s *Server) resolveCharge(c echo.Context, id string, r resolution) (intent.Charge, error) {
	ctx, cancel := s.dbContext(c)
	defer cancel()
	charge, err := intent.Find(ctx, s.cfg.DB, id)
	if err != nil {
		return intent.Charge{}, err
	}
	c.Set(logChargeKey, id)
	c.Set(logTenantKey, charge.TenantID)
	if charge.State != intent.StateNeedsReview {
		return intent.Charge{}, problem(CodeChargeNotInReview, fmt.Sprintf("only a needs_review charge can be resolved; this one is %s", charge.State))
	}
	if err := s.verifyResolution(ctx, charge, r); err != nil {
		return intent.Charge{}, err
	}

	move := intent.Move{
		TenantID: charge.TenantID, ChargeID: id, From: intent.StateNeedsReview, To: r.status,
		Actor: operatorOf(c).Actor(), Reason: "operator_resolved", Evidence: r.evidence,
	}
	switch r.status {
	case intent.StateSucceeded:
		move.ProviderChargeID = r.providerChargeID
	case intent.StateFailed:
		move.FailureCode = cmp.Or(r.failureCode, "resolved_by_operator")
	}
	err = pgx.BeginFunc(ctx, s.cfg.DB, func(tx pgx.Tx) error {
		var err error
		if charge, err = intent.MoveCharge(ctx, tx, move); err != nil {
			return err
		}
		if r.status == intent.StatePending {
			err = s.cfg.Jobs.Enqueue(ctx, tx, submit.ChargeArgs{TenantID: charge.TenantID, ChargeID: id})
		}
		return err
	})
	var conflict *intent.ConflictError
	if errors.As(err, &conflict) {
		return intent.Charge{}, problem(CodeChargeNotInReview, fmt.Sprintf("only a needs_review charge can be resolved; this one is %s", conflict.Current))
	}
	if err != nil {
		return intent.Charge{}, err
	}
	return charge, nil
}

// verifyResolution holds an operator's resolution to what the provider says
// about the charge's key; see resolveCharge.
func (s *Server) verifyResolution(ctx context.Context, charge intent.Charge, r resolution) error {
	if r.status == intent.StatePending {
		sent := charge.FirstAttemptAt != nil
		if sent && (s.cfg.ProviderKeyWindow == 0 || !s.cfg.Now().Before(charge.FirstAttemptAt.Add(s.cfg.ProviderKeyWindow))) {
			return problem(CodeKeyWindowPassed, "the provider no longer de-duplicates this charge's key, so a new attempt could charge twice; "+
				"resolve it to succeeded or failed with the provider's records")
		}
	}
	found, err := settle.Find(ctx, s.cfg.DB, s.cfg.ProviderClient, charge)
	notFound := errors.Is(err, psp.ErrNotFound)
	if err != nil && !notFound {
		p := problem(CodeProviderUnavailable, "the provider could not be asked about this charge ("+psp.ReasonOf(err)+"); nothing was changed")
		p.RetryAfter = 5
		p.cause = err
		return p
	}
	holdsSuccess := !notFound && found.Status == psp.StatusSucceeded
	switch r.status {
	case intent.StateSucceeded:
		switch {
		case notFound:
			return problem(CodeEvidenceMismatch, "the provider holds no charge under this charge's key")
		case !holdsSuccess || found.ID != r.providerChargeID || found.Amount != charge.Amount ||
			found.Currency != charge.Currency || found.Reference != charge.ID:
			return problem(CodeEvidenceMismatch, "the provider does not hold a successful charge with that id, this amount and currency under this charge's key")
		}
	case intent.StateFailed, intent.StatePending:
		if holdsSuccess {
			return problem(CodeEvidenceMismatch, "the provider holds a successful charge under this charge's key; resolve it to succeeded with the provider's charge id")
		}
	}
	return nil
}

// parseResolution parses a resolve body as strictly as a charge request.
// The operator is the token's, never a body field.
func parseResolution(body []byte) (resolution, error) {
	v, err := jsoncanon.Parse(body)
	if err != nil {
		return resolution{}, jsonProblem(err)
	}
	return resolutionOf(v)
}

// resolutionOf validates a parsed resolve body. The operator's page builds
// the same object from its form, so both are held to the same rules.
func resolutionOf(v jsoncanon.Value) (resolution, error) {
	if field, found := findCardNumber(v, ""); found {
		return resolution{}, fieldProblem(CodeCardNumberDetected, field, "the body contains what looks like a card number")
	}
	if v.Kind != jsoncanon.Object {
		return resolution{}, problem(CodeInvalidJSON, "the body must be a JSON object")
	}
	var r resolution
	// Every member is a string the database stores (the evidence and the
	// provider's ids in the charge's events): each goes through storedText
	// first, then its own pattern.
	str := func(m jsoncanon.Member, max int, pattern *regexp.Regexp, detail string) (string, error) {
		if m.Value.Kind != jsoncanon.String {
			return "", fieldProblem(CodeInvalidField, m.Name, detail)
		}
		if err := storedText(m.Name, m.Name, m.Value.String, max); err != nil {
			return "", err
		}
		if pattern != nil && !pattern.MatchString(m.Value.String) {
			return "", fieldProblem(CodeInvalidField, m.Name, detail)
		}
		return m.Value.String, nil
	}
	for _, m := range v.Members {
		var err error
		switch m.Name {
		case "status":
			var status string
			status, err = str(m, 0, resolvedStatusPattern, "status must be succeeded, failed or pending")
			r.status = intent.State(status)
		case "evidence":
			r.evidence, err = str(m, maxEvidence, nil, "evidence must be a string")
			if n := utf8.RuneCountInString(strings.TrimSpace(r.evidence)); err == nil && (n < minEvidence || n > maxEvidence) {
				err = fieldProblem(CodeInvalidField, "evidence", fmt.Sprintf("evidence must be %d to %d characters: say what you checked and where", minEvidence, maxEvidence))
			}
		case "provider_charge_id":
			r.providerChargeID, err = str(m, 0, providerIDPattern, "provider_charge_id must be the provider's charge id")
		case "failure_code":
			r.failureCode, err = str(m, 0, failureCodePattern, "failure_code must be snake_case, at most 64 characters")
		default:
			err = fieldProblem(CodeUnknownField, safeFieldName(m.Name), "this field is not part of a resolution (the operator is the token's)")
		}
		if err != nil {
			return resolution{}, err
		}
	}
	// In a fixed order, so the field a problem names does not vary.
	for _, required := range []struct{ name, value string }{
		{"status", string(r.status)}, {"evidence", r.evidence},
	} {
		if required.value == "" {
			return resolution{}, fieldProblem(CodeMissingField, required.name, required.name+" is required")
		}
	}
	switch {
	case r.status == intent.StateSucceeded && r.providerChargeID == "":
		return resolution{}, fieldProblem(CodeMissingField, "provider_charge_id", "resolving to succeeded needs the provider's charge id")
	case r.status != intent.StateSucceeded && r.providerChargeID != "":
		return resolution{}, fieldProblem(CodeInvalidField, "provider_charge_id", "only a succeeded resolution has a provider charge id")
	case r.status != intent.StateFailed && r.failureCode != "":
		return resolution{}, fieldProblem(CodeInvalidField, "failure_code", "only a failed resolution has a failure code")
	}
	return r, nil
}
