package api

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"chargeflow/api/jsoncanon"
	"chargeflow/intent"
	"chargeflow/submit"
)

// reconcileCharge asks the reconciler to look an unknown charge up at once.
// It answers 202: the lookup happens on the reconciler's next tick, under
// its lease, like every other.
func (s *Server) reconcileCharge(c echo.Context) error {
	id, err := chargeIDParam(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.dbContext(c)
	defer cancel()
	charge, err := intent.RequestCheck(ctx, s.cfg.DB, tenantOf(c).ID, id)
	var conflict *intent.ConflictError
	if errors.As(err, &conflict) {
		return problem(CodeChargeNotUnknown, fmt.Sprintf("only an unknown charge can be reconciled; this one is %s", conflict.Current))
	}
	if err != nil {
		return err
	}
	c.Set(logChargeKey, id)
	return s.writeJSON(c, http.StatusAccepted, viewOf(charge))
}

// resolution is a validated POST /v1/charges/{id}/resolve body.
type resolution struct {
	status           intent.State
	evidence         string
	operator         string
	providerChargeID string
	failureCode      string
}

var (
	resolvedStatusPattern = regexp.MustCompile(`^(succeeded|failed|pending)$`)
	operatorPattern       = regexp.MustCompile(`^[\x20-\x7e]{1,100}$`)
	providerIDPattern     = regexp.MustCompile(`^[A-Za-z0-9_-]{1,255}$`)
	failureCodePattern    = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
)

const (
	minEvidence = 10
	maxEvidence = 2000
)

// resolveCharge settles a needs_review charge on an operator's word and
// written evidence: succeeded (with the provider's charge id), failed, or
// pending (a new attempt with the same provider key, and its job in the same
// transaction). The event records who did it and why.
func (s *Server) resolveCharge(c echo.Context) error {
	id, err := chargeIDParam(c)
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
	t := tenantOf(c)
	move := intent.Move{
		TenantID: t.ID, ChargeID: id, From: intent.StateNeedsReview, To: r.status,
		Actor: "operator:" + r.operator, Reason: "operator_resolved", Evidence: r.evidence,
	}
	switch r.status {
	case intent.StateSucceeded:
		move.ProviderChargeID = r.providerChargeID
	case intent.StateFailed:
		move.FailureCode = cmp.Or(r.failureCode, "resolved_by_operator")
	}

	ctx, cancel := s.dbContext(c)
	defer cancel()
	var charge intent.Charge
	err = pgx.BeginFunc(ctx, s.cfg.DB, func(tx pgx.Tx) error {
		var err error
		if charge, err = intent.MoveCharge(ctx, tx, move); err != nil {
			return err
		}
		if r.status == intent.StatePending {
			err = s.cfg.Jobs.Enqueue(ctx, tx, submit.ChargeArgs{TenantID: t.ID, ChargeID: id})
		}
		return err
	})
	var conflict *intent.ConflictError
	if errors.As(err, &conflict) {
		return problem(CodeChargeNotInReview, fmt.Sprintf("only a needs_review charge can be resolved; this one is %s", conflict.Current))
	}
	if err != nil {
		return err
	}
	c.Set(logChargeKey, id)
	return s.writeJSON(c, http.StatusOK, viewOf(charge))
}

// parseResolution parses a resolve body as strictly as a charge request.
func parseResolution(body []byte) (resolution, error) {
	v, err := jsoncanon.Parse(body)
	if err != nil {
		return resolution{}, jsonProblem(err)
	}
	if field, found := findCardNumber(v, ""); found {
		return resolution{}, fieldProblem(CodeCardNumberDetected, field, "the body contains what looks like a card number")
	}
	if v.Kind != jsoncanon.Object {
		return resolution{}, problem(CodeInvalidJSON, "the body must be a JSON object")
	}
	var r resolution
	str := func(m jsoncanon.Member, pattern *regexp.Regexp, detail string) (string, error) {
		if m.Value.Kind != jsoncanon.String || (pattern != nil && !pattern.MatchString(m.Value.String)) {
			return "", fieldProblem(CodeInvalidField, m.Name, detail)
		}
		return m.Value.String, nil
	}
	for _, m := range v.Members {
		var err error
		switch m.Name {
		case "status":
			var status string
			status, err = str(m, resolvedStatusPattern, "status must be succeeded, failed or pending")
			r.status = intent.State(status)
		case "evidence":
			r.evidence, err = str(m, nil, "evidence must be a string")
			if n := utf8.RuneCountInString(strings.TrimSpace(r.evidence)); err == nil && (n < minEvidence || n > maxEvidence) {
				err = fieldProblem(CodeInvalidField, "evidence", fmt.Sprintf("evidence must be %d to %d characters: say what you checked and where", minEvidence, maxEvidence))
			}
		case "operator":
			r.operator, err = str(m, operatorPattern, "operator must name who resolves the charge (1 to 100 printable characters)")
		case "provider_charge_id":
			r.providerChargeID, err = str(m, providerIDPattern, "provider_charge_id must be the provider's charge id")
		case "failure_code":
			r.failureCode, err = str(m, failureCodePattern, "failure_code must be snake_case, at most 64 characters")
		default:
			err = fieldProblem(CodeUnknownField, safeFieldName(m.Name), "this field is not part of a resolution")
		}
		if err != nil {
			return resolution{}, err
		}
	}
	// In a fixed order, so the field a problem names does not vary.
	for _, required := range []struct{ name, value string }{
		{"status", string(r.status)}, {"evidence", r.evidence}, {"operator", r.operator},
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
