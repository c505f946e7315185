package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/event"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/resource"
	"github.com/chargeflow/chargeflow/webhook"
)

// getEvent answers one event; another tenant's id is 404.
func (s *Server) getEvent(c echo.Context) error {
	id := c.Param("id")
	if !ids.Valid("evt", id) {
		return NewProblem(CodeNotFound, "no such event")
	}
	ctx, cancel := s.DBContext(c)
	defer cancel()
	e, err := event.Get(ctx, s.cfg.DB, tenantOf(c).ID, id)
	if errors.Is(err, event.ErrNotFound) {
		return NewProblem(CodeNotFound, "no such event")
	}
	if err != nil {
		return err
	}
	return s.WriteJSON(c, http.StatusOK, e.Resource())
}

// listEvents answers a page of the tenant's events, newest first:
// GET /v1/events?type=&limit=&starting_after=.
func (s *Server) listEvents(c echo.Context) error {
	params := event.ListParams{TenantID: tenantOf(c).ID, Limit: 10}
	err := eachQueryParam(c, func(name, value string) (bool, error) {
		switch name {
		case "type":
			if !event.ValidType(value) {
				return true, FieldProblem(CodeInvalidParameter, name, "type must be one of "+strings.Join(event.Types, ", "))
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
	events, more, err := event.List(ctx, s.cfg.DB, params)
	if err != nil {
		return err
	}
	page := struct {
		Data    []resource.Event `json:"data"`
		HasMore bool             `json:"has_more"`
	}{Data: make([]resource.Event, 0, len(events)), HasMore: more}
	for _, e := range events {
		page.Data = append(page.Data, e.Resource())
	}
	return s.WriteJSON(c, http.StatusOK, page)
}

// endpointResource renders an endpoint without its secret.
func endpointResource(e webhook.Endpoint) resource.Endpoint {
	return resource.EndpointOf(e.ID, e.URL, e.Events, e.DisabledAt, e.DisabledReason, e.CreatedAt)
}
