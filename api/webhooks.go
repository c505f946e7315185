package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/api/jsoncanon"
	"github.com/chargeflow/chargeflow/event"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/resource"
	"github.com/chargeflow/chargeflow/webhook"
)

// endpointViewOf renders a webhook endpoint (package resource). The secret
// is there only in the answer to its creation.
func endpointViewOf(e webhook.Endpoint, withSecret bool) resource.Endpoint {
	v := endpointResource(e)
	if withSecret {
		v.Secret = &e.Secret
	}
	return v
}

// endpointFromJSON validates a POST /v1/webhook_endpoints body: a url and
// the event types ("*" for all).
func endpointFromJSON(v jsoncanon.Value) (string, []string, error) {
	if v.Kind != jsoncanon.Object {
		return "", nil, NewProblem(CodeInvalidJSON, "the body must be a JSON object")
	}
	var rawURL string
	var events []string
	seen := map[string]bool{}
	for _, m := range v.Members {
		seen[m.Name] = true
		switch m.Name {
		case "url":
			if m.Value.Kind != jsoncanon.String || len(m.Value.String) > 2048 {
				return "", nil, FieldProblem(CodeInvalidField, "url", "url must be a string of at most 2048 characters")
			}
			if err := StoredText("url", "url", m.Value.String, 0); err != nil {
				return "", nil, err
			}
			rawURL = m.Value.String
		case "events":
			if m.Value.Kind != jsoncanon.Array || len(m.Value.Elems) == 0 || len(m.Value.Elems) > 16 {
				return "", nil, FieldProblem(CodeInvalidField, "events", "events must be a list of 1 to 16 event types, or [\"*\"]")
			}
			for _, e := range m.Value.Elems {
				if e.Kind != jsoncanon.String || (e.String != "*" && !event.ValidType(e.String)) {
					return "", nil, FieldProblem(CodeInvalidField, "events", "each event must be \"*\" or one of "+strings.Join(event.Types, ", "))
				}
				events = append(events, e.String)
			}
		default:
			return "", nil, FieldProblem(CodeUnknownField, SafeFieldName(m.Name), "this field is not part of a webhook endpoint")
		}
	}
	for _, name := range []string{"url", "events"} {
		if !seen[name] {
			return "", nil, FieldProblem(CodeMissingField, name, name+" is required")
		}
	}
	return rawURL, events, nil
}

const endpointsRoute = "/v1/webhook_endpoints"

// createEndpoint registers a webhook endpoint and answers its secret,
// once per idempotency key, in the order of createCharge (docs/api.md):
// key, body, strict JSON and fingerprint, replay, validation, one
// transaction that writes the endpoint and the key's record. A retry with
// the key gets the first answer, secret included; another request with it
// 422; one while the first is in flight 409. A URL whose address, or any
// address its host resolves to, is not a public internet address, or
// whose port is not allowed, is refused unless the API runs with
// --webhooks-allow-private; a tenant has at most webhook.MaxEndpoints
// (docs/webhooks.md, "Endpoints").
func (s *Server) createEndpoint(c echo.Context) error {
	t := tenantOf(c)
	k, replayed, err := s.readKeyed(c, endpointsRoute)
	if k.cancel != nil {
		defer k.cancel()
	}
	if err != nil || replayed {
		return err
	}
	rawURL, events, err := endpointFromJSON(k.parsed)
	if err != nil {
		return err
	}
	ctx, fp, keyHash := k.ctx, k.fingerprint, k.keyHash
	policy := webhook.Policy{AllowPrivate: s.cfg.WebhooksAllowPrivate, Ports: s.cfg.WebhookPorts}
	if err := policy.CheckURL(ctx, rawURL, s.cfg.WebhookLookup); err != nil {
		// The wording is fixed (webhook.URLError); what caused it is
		// logged with the request, never answered.
		p := FieldProblem(CodeInvalidField, "url", err.Error())
		p.Cause = errors.Unwrap(err)
		return p
	}
	now := s.cfg.Now()
	e := webhook.NewEndpoint(t.ID, rawURL, events, now)
	response, err := encodeJSON(endpointViewOf(e, true))
	if err != nil {
		return fmt.Errorf("encode webhook endpoint: %w", err)
	}
	creation := webhook.Creation{Endpoint: e, KeyHash: keyHash[:], Fingerprint: fp, StatusCode: http.StatusCreated,
		ResponseBody: response, ExpiresAt: e.CreatedAt.Add(s.cfg.IdempotencyTTL)}
	rec, created, err := webhook.CreateEndpoint(ctx, s.cfg.DB, creation)
	switch {
	case errors.Is(err, webhook.ErrEndpointLimit):
		return NewProblem(CodeEndpointLimitReached, fmt.Sprintf(
			"an account may have at most %d webhook endpoints; delete one to create another", webhook.MaxEndpoints))
	case lockTimeout(err):
		p := NewProblem(CodeRequestInProgress,
			"a request creating a webhook endpoint for this account, with this Idempotency-Key or another, is still being processed; retry shortly")
		p.RetryAfter = 1
		p.Cause = err
		return p
	case err != nil:
		return err
	}
	if !created {
		s.cfg.Accept.Remember(t.ID, keyHash, rec)
		return s.replay(c, rec, fp)
	}
	s.cfg.Accept.Remember(t.ID, keyHash, intent.IdempotencyRecord{Fingerprint: fp, ChargeID: e.ID, StatusCode: http.StatusCreated,
		ResponseBody: response, CreatedAt: e.CreatedAt, ExpiresAt: creation.ExpiresAt})
	return c.Blob(http.StatusCreated, echo.MIMEApplicationJSON, response)
}

// listEndpoints answers a page of the tenant's endpoints, newest first,
// without their secrets: {"data", "has_more"}, paged as charges are.
func (s *Server) listEndpoints(c echo.Context) error {
	params := webhook.EndpointListParams{TenantID: tenantOf(c).ID, Limit: 10}
	err := eachQueryParam(c, func(name, value string) (bool, error) {
		switch name {
		case "limit":
			n, err := pageLimit(name, value)
			params.Limit = n
			return true, err
		case "starting_after":
			if !ids.Valid("we", value) {
				return true, FieldProblem(CodeInvalidParameter, name, "starting_after must be the id of the last item of the previous page")
			}
			params.StartingAfter = value
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	ctx, cancel := s.DBContext(c)
	defer cancel()
	endpoints, more, err := webhook.Endpoints(ctx, s.cfg.DB, params)
	if err != nil {
		return err
	}
	page := struct {
		Data    []resource.Endpoint `json:"data"`
		HasMore bool                `json:"has_more"`
	}{Data: make([]resource.Endpoint, 0, len(endpoints)), HasMore: more}
	for _, e := range endpoints {
		page.Data = append(page.Data, endpointViewOf(e, false))
	}
	return s.WriteJSON(c, http.StatusOK, page)
}

// deleteEndpoint stops deliveries to an endpoint.
func (s *Server) deleteEndpoint(c echo.Context) error {
	id := c.Param("id")
	if !ids.Valid("we", id) {
		return NewProblem(CodeNotFound, "no such webhook endpoint")
	}
	ctx, cancel := s.DBContext(c)
	defer cancel()
	err := webhook.DeleteEndpoint(ctx, s.cfg.DB, tenantOf(c).ID, id)
	if errors.Is(err, webhook.ErrEndpointNotFound) {
		return NewProblem(CodeNotFound, "no such webhook endpoint")
	}
	if err != nil {
		return err
	}
	return s.WriteJSON(c, http.StatusOK, struct {
		ID      string `json:"id"`
		Deleted bool   `json:"deleted"`
	}{id, true})
}

// listDeliveries answers an event's delivery log: each endpoint's state and
// every attempt.
func (s *Server) listDeliveries(c echo.Context) error {
	id := c.Param("id")
	if !ids.Valid("evt", id) {
		return NewProblem(CodeNotFound, "no such event")
	}
	ctx, cancel := s.DBContext(c)
	defer cancel()
	if _, err := event.Get(ctx, s.cfg.DB, tenantOf(c).ID, id); errors.Is(err, event.ErrNotFound) {
		return NewProblem(CodeNotFound, "no such event")
	} else if err != nil {
		return err
	}
	logs, err := webhook.Log(ctx, s.cfg.DB, tenantOf(c).ID, id)
	if err != nil {
		return err
	}
	type attemptView struct {
		Attempt    int       `json:"attempt"`
		Status     *int      `json:"status"`
		Error      *string   `json:"error"`
		DurationMS int64     `json:"duration_ms"`
		CreatedAt  time.Time `json:"created_at"`
	}
	type deliveryView struct {
		Endpoint string        `json:"endpoint"`
		State    string        `json:"state"`
		Attempts []attemptView `json:"attempts"`
	}
	views := make([]deliveryView, 0, len(logs))
	for _, l := range logs {
		v := deliveryView{Endpoint: l.EndpointID, State: l.State, Attempts: make([]attemptView, 0, len(l.Attempts))}
		for _, a := range l.Attempts {
			v.Attempts = append(v.Attempts, attemptView{Attempt: a.Attempt, Status: a.Status, Error: NonEmpty(a.Error),
				DurationMS: a.Duration.Milliseconds(), CreatedAt: a.CreatedAt.UTC()})
		}
		views = append(views, v)
	}
	return s.WriteJSON(c, http.StatusOK, struct {
		Data []deliveryView `json:"data"`
	}{views})
}
