package api

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"chargeflow/api/jsoncanon"
	"chargeflow/internal/ids"
	"chargeflow/object"
	"chargeflow/webhook"
)

// endpointViewOf renders a webhook endpoint (package object). The secret
// is there only in the answer to its creation.
func endpointViewOf(e webhook.Endpoint, withSecret bool) object.Endpoint {
	v := endpointObject(e)
	if withSecret {
		v.Secret = &e.Secret
	}
	return v
}

// endpointFromJSON validates a POST /v1/webhook_endpoints body: a url and
// the event types ("*" for all).
func endpointFromJSON(v jsoncanon.Value) (string, []string, error) {
	if v.Kind != jsoncanon.Object {
		return "", nil, problem(CodeInvalidJSON, "the body must be a JSON object")
	}
	var rawURL string
	var events []string
	seen := map[string]bool{}
	for _, m := range v.Members {
		seen[m.Name] = true
		switch m.Name {
		case "url":
			if m.Value.Kind != jsoncanon.String || len(m.Value.String) > 2048 {
				return "", nil, fieldProblem(CodeInvalidField, "url", "url must be a string of at most 2048 characters")
			}
			rawURL = m.Value.String
		case "events":
			if m.Value.Kind != jsoncanon.Array || len(m.Value.Elems) == 0 || len(m.Value.Elems) > 16 {
				return "", nil, fieldProblem(CodeInvalidField, "events", "events must be a list of 1 to 16 event types, or [\"*\"]")
			}
			for _, e := range m.Value.Elems {
				if e.Kind != jsoncanon.String || (e.String != "*" && !webhook.ValidType(e.String)) {
					return "", nil, fieldProblem(CodeInvalidField, "events", "each event must be \"*\" or one of "+strings.Join(webhook.Types, ", "))
				}
				events = append(events, e.String)
			}
		default:
			return "", nil, fieldProblem(CodeUnknownField, safeFieldName(m.Name), "this field is not part of a webhook endpoint")
		}
	}
	for _, name := range []string{"url", "events"} {
		if !seen[name] {
			return "", nil, fieldProblem(CodeMissingField, name, name+" is required")
		}
	}
	return rawURL, events, nil
}

// createEndpoint registers a webhook endpoint and answers its secret, the
// only time it is shown. A URL that resolves to a loopback, private or
// link-local address is refused unless the API runs with
// --webhooks-allow-private (docs/webhooks.md, "Endpoints").
func (s *Server) createEndpoint(c echo.Context) error {
	body, err := readBody(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	parsed, _, err := parseJSONBody(body)
	if err != nil {
		return err
	}
	rawURL, events, err := endpointFromJSON(parsed)
	if err != nil {
		return err
	}
	ctx, cancel := s.dbContext(c)
	defer cancel()
	if err := webhook.CheckURL(ctx, rawURL, s.cfg.WebhooksAllowPrivate, webhook.LookupHost); err != nil {
		return fieldProblem(CodeInvalidField, "url", err.Error())
	}
	e, err := webhook.CreateEndpoint(ctx, s.cfg.DB, tenantOf(c).ID, rawURL, events)
	if err != nil {
		return err
	}
	return s.writeJSON(c, http.StatusCreated, endpointViewOf(e, true))
}

// listEndpoints answers the tenant's endpoints, without their secrets.
func (s *Server) listEndpoints(c echo.Context) error {
	ctx, cancel := s.dbContext(c)
	defer cancel()
	endpoints, err := webhook.Endpoints(ctx, s.cfg.DB, tenantOf(c).ID)
	if err != nil {
		return err
	}
	views := make([]object.Endpoint, 0, len(endpoints))
	for _, e := range endpoints {
		views = append(views, endpointViewOf(e, false))
	}
	return s.writeJSON(c, http.StatusOK, struct {
		Data []object.Endpoint `json:"data"`
	}{views})
}

// deleteEndpoint stops deliveries to an endpoint.
func (s *Server) deleteEndpoint(c echo.Context) error {
	id := c.Param("id")
	if !ids.Valid("we", id) {
		return problem(CodeNotFound, "no such webhook endpoint")
	}
	ctx, cancel := s.dbContext(c)
	defer cancel()
	err := webhook.DeleteEndpoint(ctx, s.cfg.DB, tenantOf(c).ID, id)
	if errors.Is(err, webhook.ErrEndpointNotFound) {
		return problem(CodeNotFound, "no such webhook endpoint")
	}
	if err != nil {
		return err
	}
	return s.writeJSON(c, http.StatusOK, struct {
		ID      string `json:"id"`
		Deleted bool   `json:"deleted"`
	}{id, true})
}

// listDeliveries answers an event's delivery log: each endpoint's state and
// every attempt.
func (s *Server) listDeliveries(c echo.Context) error {
	id := c.Param("id")
	if !ids.Valid("evt", id) {
		return problem(CodeNotFound, "no such event")
	}
	ctx, cancel := s.dbContext(c)
	defer cancel()
	if _, err := webhook.Get(ctx, s.cfg.DB, tenantOf(c).ID, id); errors.Is(err, webhook.ErrNotFound) {
		return problem(CodeNotFound, "no such event")
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
			v.Attempts = append(v.Attempts, attemptView{Attempt: a.Attempt, Status: a.Status, Error: nonEmpty(a.Error),
				DurationMS: a.Duration.Milliseconds(), CreatedAt: a.CreatedAt.UTC()})
		}
		views = append(views, v)
	}
	return s.writeJSON(c, http.StatusOK, struct {
		Data []deliveryView `json:"data"`
	}{views})
}
