package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/api/jsoncanon"
	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/resource"
	"github.com/chargeflow/chargeflow/route"
	"github.com/chargeflow/chargeflow/submit"
)

const chargesRoute = "/v1/charges"

// NonEmpty is s, or nil (JSON null) when it is empty.
func NonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// createCharge accepts a charge once per idempotency key. The order of work
// is docs/api.md's: (authenticate, rate-limit: middleware) → key header →
// body → strict JSON, card check and fingerprint → validate as a charge →
// one statement that is the replay check and the write. A body that is not
// a valid charge gets the replay check on its own before its 400: a retry
// of an accepted request is answered from its record whatever changed
// since (a lower --max-amount, a newer currency table, a stricter rule),
// so nothing can refuse what was already accepted.
func (s *Server) createCharge(c echo.Context) error {
	t := tenantOf(c)
	k, err := s.readRequest(c, chargesRoute)
	if k.cancel != nil {
		defer k.cancel()
	}
	if err != nil {
		return err
	}
	ctx, fp, keyHash := k.ctx, k.fingerprint, k.keyHash
	if rec, ok := s.cfg.Accept.Cached(t.ID, keyHash, s.cfg.Now()); ok {
		return s.replayFromMemory(c, rec, fp)
	}
	req, err := chargeFromJSON(k.parsed, s.cfg.MaxAmount)
	if err != nil {
		// A retry of an accepted request is answered from its record
		// whatever changed since; only a request that is not one gets
		// its 400.
		if replayed, rerr := s.checkReplay(c, &k); replayed || rerr != nil {
			return rerr
		}
		return err
	}

	provider, err := s.routeOf(ctx, t.ID, req)
	if err != nil {
		// As for a body that is not valid: an accepted request's retry is
		// answered from its record whatever the route, or the provider it
		// names, says now.
		if replayed, rerr := s.checkReplay(c, &k); replayed || rerr != nil {
			return rerr
		}
		return err
	}

	now := s.cfg.Now().UTC().Truncate(time.Microsecond) // Postgres keeps microseconds
	id := ids.New("ch", now)
	charge := intent.Charge{
		TenantID:      t.ID,
		ID:            id,
		State:         intent.StatePending,
		Amount:        req.Amount,
		Currency:      req.Currency,
		PaymentMethod: req.PaymentMethod,
		Description:   req.Description,
		Metadata:      req.Metadata,
		Provider:      provider,
		ProviderKey:   intent.ProviderKeyFor(id),
		CaptureLater:  req.CaptureLater,
		CreatedAt:     now,
		UpdatedAt:     now,
	}
	response, err := encodeJSON(resource.ChargeOf(charge))
	if err != nil {
		return fmt.Errorf("encode charge: %w", err)
	}
	job, err := s.cfg.Jobs.Row(ctx, submit.ChargeArgs{TenantID: t.ID, ChargeID: id}, now)
	if err != nil {
		return err
	}
	acceptance := intent.Acceptance{
		Charge:       charge,
		Actor:        "api",
		KeyHash:      keyHash[:],
		Fingerprint:  fp,
		StatusCode:   http.StatusCreated,
		ResponseBody: response,
		ExpiresAt:    now.Add(s.cfg.IdempotencyTTL),
		Job:          job,
	}
	rec, inserted, err := s.cfg.Accept.Accept(ctx, acceptance)
	if err != nil {
		return err
	}
	if !inserted {
		return s.replay(c, rec, fp)
	}
	c.Set(logChargeKey, id)
	if err := s.cfg.CrashPoints.Hit(ctx, crashpoint.APIAfterCommitBeforeResponse); err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, chargesRoute+"/"+id)
	return c.Blob(http.StatusCreated, echo.MIMEApplicationJSON, response)
}

// routeOf is the provider account a new charge of tenantID goes to, which
// must be able to capture later when req asks for that.
func (s *Server) routeOf(ctx context.Context, tenantID string, req chargeRequest) (string, error) {
	provider := s.cfg.Provider
	if s.cfg.Route != nil {
		var err error
		provider, err = s.cfg.Route(ctx, tenantID, req.Currency, req.Amount)
		if errors.Is(err, route.ErrNoRoute) {
			return "", NewProblem(CodeNoRoute, "no enabled provider account of this tenant's route takes a charge of this currency and amount; nothing was stored")
		}
		if err != nil {
			return "", fmt.Errorf("route the charge: %w", err)
		}
	}
	if req.CaptureLater {
		if err := s.capturesLater(ctx, provider); err != nil {
			return "", err
		}
	}
	return provider, nil
}

// capturesLater refuses a charge to be captured later at provider unless
// the provider declares that it can hold one (SeparateCapture): a charge
// it cannot hold is never sent to it.
func (s *Server) capturesLater(ctx context.Context, provider string) error {
	caps := psp.Capabilities{}
	if s.cfg.Capabilities != nil {
		var err error
		caps, err = s.cfg.Capabilities(ctx, provider)
		if errors.Is(err, psp.ErrNoSuchProvider) {
			p := NewProblem(CodeProviderUnavailable, "this process cannot call the provider account the charge would go to, "+
				"so it cannot tell whether the account can capture later; nothing was stored")
			p.Cause = err
			return p
		}
		if err != nil {
			return fmt.Errorf("capabilities of provider %s: %w", provider, err)
		}
	}
	if !caps.SeparateCapture {
		return FieldProblem(CodeCaptureNotSupported, "capture", "the provider account this charge would go to cannot authorize now and capture later; "+
			"nothing was stored: send the charge without \"capture\": false to capture it at once")
	}
	return nil
}

// keyed is an idempotent POST read up to its replay check.
type keyed struct {
	ctx         context.Context
	cancel      context.CancelFunc
	parsed      jsoncanon.Value
	fingerprint []byte
	keyHash     [32]byte
}

// readRequest is the front every idempotent POST shares (docs/api.md,
// "Accepting a charge"): the key header, the body, strict JSON with the card
// check, and the fingerprint over route and canonical body. The caller
// defers cancel when set.
func (s *Server) readRequest(c echo.Context, route string) (keyed, error) {
	key, err := idempotencyKey(c.Request().Header)
	if err != nil {
		return keyed{}, err
	}
	body, err := ReadBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return keyed{}, err
	}
	parsed, canonical, err := parseJSONBody(body)
	if err != nil {
		return keyed{}, err
	}
	k := keyed{parsed: parsed, fingerprint: fingerprint(http.MethodPost, route, canonical), keyHash: sha256.Sum256([]byte(key))}
	k.ctx, k.cancel = s.DBContext(c)
	return k, nil
}

// checkReplay is the replay check, one primary-key read, made before the
// body is judged, so that nothing changed since can refuse what was already
// accepted: when the key has a record it sends the answer (the replay, or
// 422 for another request) and reports replayed.
func (s *Server) checkReplay(c echo.Context, k *keyed) (replayed bool, err error) {
	tenantID := tenantOf(c).ID
	if rec, ok := s.cfg.Accept.Cached(tenantID, k.keyHash, s.cfg.Now()); ok {
		return true, s.replayFromMemory(c, rec, k.fingerprint)
	}
	rec, found, err := s.cfg.Accept.Record(k.ctx, tenantID, k.keyHash)
	if err != nil || !found {
		return false, err
	}
	return true, s.replay(c, rec, k.fingerprint)
}

// readKeyed is readRequest and then checkReplay. The caller defers cancel
// when set, and stops when replayed or on an error.
func (s *Server) readKeyed(c echo.Context, route string) (keyed, bool, error) {
	k, err := s.readRequest(c, route)
	if err != nil {
		return k, false, err
	}
	replayed, err := s.checkReplay(c, &k)
	return k, replayed, err
}

// replayFromMemory is replay with a record from the replay cache; the
// replays metric counts these apart (docs/operations.md), which is how an
// operator sizes --replay-cache.
func (s *Server) replayFromMemory(c echo.Context, rec intent.IdempotencyRecord, fp []byte) error {
	c.Set(logReplayMemoryKey, true)
	return s.replay(c, rec, fp)
}

// replay answers a retry with the stored response, byte for byte, or refuses
// a different request that reuses the key.
func (s *Server) replay(c echo.Context, rec intent.IdempotencyRecord, fp []byte) error {
	if subtle.ConstantTimeCompare(rec.Fingerprint, fp) != 1 {
		return NewProblem(CodeIdempotencyKeyReused, "this Idempotency-Key was used with a different request; use a new key for a new request")
	}
	c.Set(logChargeKey, rec.ChargeID)
	c.Set(logReplayKey, true)
	h := c.Response().Header()
	h.Set("Idempotent-Replayed", "true")
	if location := locationOf(rec.ChargeID); location != "" {
		h.Set(echo.HeaderLocation, location)
	}
	return c.Blob(rec.StatusCode, echo.MIMEApplicationJSON, rec.ResponseBody)
}

// chargeIDParam is the {id} of a charge route. A malformed id is 404, as an
// unknown one is: it names no charge.
func chargeIDParam(c echo.Context) (string, error) {
	id := c.Param("id")
	if !ids.Valid("ch", id) {
		return "", NewProblem(CodeNotFound, "no such charge")
	}
	return id, nil
}

// getCharge answers one charge; another tenant's id is 404, never 403.
func (s *Server) getCharge(c echo.Context) error {
	id, err := chargeIDParam(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.DBContext(c)
	defer cancel()
	charge, err := intent.Get(ctx, s.cfg.DB, tenantOf(c).ID, id)
	if err != nil {
		return err
	}
	return s.WriteJSON(c, http.StatusOK, resource.ChargeOf(charge))
}

// stateList names every state, for an error that lists them.
func stateList() string {
	names := make([]string, 0, len(intent.States()))
	for _, s := range intent.States() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}

// listCharges answers a page of the tenant's charges, newest first.
func (s *Server) listCharges(c echo.Context) error {
	return ListPage(s, c, intent.ListParams{TenantID: tenantOf(c).ID, Kind: intent.KindCharge, Limit: 10}, resource.ChargeOf)
}

// ListPage answers {"data", "has_more"}: the charges base and the query
// select, newest first, each rendered by view.
func ListPage[V any](s *Server, c echo.Context, base intent.ListParams, view func(intent.Charge) V) error {
	params, err := ListQuery(c, base)
	if err != nil {
		return err
	}
	ctx, cancel := s.DBContext(c)
	defer cancel()
	charges, more, err := intent.List(ctx, s.cfg.DB, params)
	if err != nil {
		return err
	}
	page := struct {
		Data    []V  `json:"data"`
		HasMore bool `json:"has_more"`
	}{Data: make([]V, 0, len(charges)), HasMore: more}
	for _, ch := range charges {
		page.Data = append(page.Data, view(ch))
	}
	return s.WriteJSON(c, http.StatusOK, page)
}

// ListQuery parses a listing's query onto params: status, limit,
// starting_after and, for operators (params.AllTenants), tenant.
func ListQuery(c echo.Context, params intent.ListParams) (intent.ListParams, error) {
	err := eachQueryParam(c, func(name, value string) (bool, error) {
		switch {
		case name == "status":
			params.State = intent.State(value)
			if !params.State.Valid() {
				return true, FieldProblem(CodeInvalidParameter, name, "status must be one of "+stateList())
			}
		case name == "limit":
			n, err := pageLimit(name, value)
			params.Limit = n
			return true, err
		case name == "starting_after":
			if !ids.Valid("ch", value) && (params.Kind == intent.KindCharge || !ids.Valid("re", value)) {
				return true, FieldProblem(CodeInvalidParameter, name, "starting_after must be the id of the last item of the previous page")
			}
			params.StartingAfter = value
		case name == "tenant" && params.AllTenants:
			if !ids.Valid("tn", value) {
				return true, FieldProblem(CodeInvalidParameter, name, "tenant must be a tenant id")
			}
			params.TenantID = value
		default:
			return false, nil
		}
		return true, nil
	})
	return params, err
}

// eachQueryParam hands every query parameter to fn, in a fixed order so
// that the parameter a problem names does not vary. A parameter given
// twice, or one fn does not know, is 400 invalid_parameter.
func eachQueryParam(c echo.Context, fn func(name, value string) (known bool, err error)) error {
	query := c.QueryParams()
	for _, name := range slices.Sorted(maps.Keys(query)) {
		values := query[name]
		if len(values) != 1 {
			return FieldProblem(CodeInvalidParameter, SafeFieldName(name), "give each query parameter once")
		}
		known, err := fn(name, values[0])
		if err != nil {
			return err
		}
		if !known {
			return FieldProblem(CodeInvalidParameter, SafeFieldName(name), "unknown query parameter")
		}
	}
	return nil
}

// pageLimit reads a page size: an integer from 1 to 100.
func pageLimit(name, value string) (int, error) {
	n, err := strconv.Atoi(value)
	if err != nil || n < 1 || n > 100 {
		return 0, FieldProblem(CodeInvalidParameter, name, "limit must be an integer from 1 to 100")
	}
	return n, nil
}

// AuditEntryView is one entry of a charge's audit trail, as the merchant's
// and the operator's JSON show it.
type AuditEntryView struct {
	ID        int64        `json:"id"`
	From      *string      `json:"from"`
	To        intent.State `json:"to"`
	Actor     string       `json:"actor"`
	Reason    string       `json:"reason"`
	Attempt   int          `json:"attempt"`
	Evidence  *string      `json:"evidence"`
	CreatedAt time.Time    `json:"created_at"`
	// Action names an operator action that moved nothing (a forced
	// lookup); From is then null and To the state the charge stayed in.
	Action *string `json:"action,omitempty"`
}

// AuditEntryViews renders an audit trail.
func AuditEntryViews(entries []intent.AuditEntry) []AuditEntryView {
	views := make([]AuditEntryView, 0, len(entries))
	for _, e := range entries {
		views = append(views, AuditEntryView{
			ID: e.ID, From: NonEmpty(string(e.From)), To: e.To, Actor: e.Actor, Reason: e.Reason,
			Attempt: e.Attempt, Evidence: NonEmpty(e.Evidence), CreatedAt: e.CreatedAt.UTC(), Action: NonEmpty(e.Action),
		})
	}
	return views
}

// listAuditTrail answers a charge's audit trail, oldest first.
func (s *Server) listAuditTrail(c echo.Context) error {
	id, err := chargeIDParam(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.DBContext(c)
	defer cancel()
	trail, err := intent.AuditTrail(ctx, s.cfg.DB, tenantOf(c).ID, id)
	if err != nil {
		return err
	}
	return s.WriteJSON(c, http.StatusOK, struct {
		Data []AuditEntryView `json:"data"`
	}{AuditEntryViews(trail)})
}

// WriteJSON answers v as JSON (encodeJSON) with status.
func (s *Server) WriteJSON(c echo.Context, status int, v any) error {
	body, err := encodeJSON(v)
	if err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	return c.Blob(status, echo.MIMEApplicationJSON, body)
}
