package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/object"
	"github.com/chargeflow/chargeflow/webhook"
)

// getNotification answers one event; another tenant's id is 404.
func (s *Server) getNotification(c echo.Context) error {
	id := c.Param("id")
	if !ids.Valid("evt", id) {
		return NewProblem(CodeNotFound, "no such event")
	}
	ctx, cancel := s.DBContext(c)
	defer cancel()
	e, err := webhook.Get(ctx, s.cfg.DB, tenantOf(c).ID, id)
	if errors.Is(err, webhook.ErrNotFound) {
		return NewProblem(CodeNotFound, "no such event")
	}
	if err != nil {
		return err
	}
	return s.WriteJSON(c, http.StatusOK, eventObject(e))
}

// listNotifications answers a page of the tenant's events, newest first:
// GET /v1/events?type=&limit=&starting_after=.
func (s *Server) listNotifications(c echo.Context) error {
	params := webhook.ListParams{TenantID: tenantOf(c).ID, Limit: 10}
	err := eachQueryParam(c, func(name, value string) (bool, error) {
		switch name {
		case "type":
			if !webhook.ValidType(value) {
				return true, FieldProblem(CodeInvalidParameter, name, "type must be one of "+strings.Join(webhook.Types, ", "))
			}
			params.Type = value
		case "limit":
			n, err := pageLimit(name, value)
			params.Limit = n
			return true, err
		case "starting_after":
			if !ids.Valid("evt", value) {
				return true, FieldProblem(CodeInvalidParameter, name, "starting_after must be an event id")
			}
			params.StartingAfter = value
		default:
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	ctx, cancel := s.DBContext(c)
	defer cancel()
	events, more, err := webhook.List(ctx, s.cfg.DB, params)
	if err != nil {
		return err
	}
	page := struct {
		Data    []object.Event `json:"data"`
		HasMore bool           `json:"has_more"`
	}{Data: make([]object.Event, 0, len(events)), HasMore: more}
	for _, e := range events {
		page.Data = append(page.Data, eventObject(e))
	}
	return s.WriteJSON(c, http.StatusOK, page)
}

// eventObject renders an event: about a charge or a refund, or about a
// webhook endpoint (webhook_endpoint.disabled), without its secret.
func eventObject(e webhook.Event) object.Event {
	if e.Endpoint != nil {
		return object.EndpointEventOf(e.ID, e.Type, e.CreatedAt, endpointObject(*e.Endpoint))
	}
	return object.EventOf(e.ID, e.Type, e.CreatedAt, e.Object)
}

// endpointObject renders an endpoint without its secret.
func endpointObject(e webhook.Endpoint) object.Endpoint {
	return object.EndpointOf(e.ID, e.URL, e.Events, e.DisabledAt, e.DisabledReason, e.CreatedAt)
}
