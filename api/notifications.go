package api

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/psp"
)

// receiveNotification receives the provider's notification of what it applied
// (docs/notifications.md, "Receiving"). It is authenticated by the
// provider's signature, not by a tenant's key: a forged, expired or
// malformed one is 400 and changes nothing. A verified one is applied by
// package notify, which says what it may settle. Every verified
// notification is answered 200, so the provider stops retrying it.
func (s *Server) receiveNotification(c echo.Context) error {
	if s.cfg.ProviderNotifications == nil || c.Param("psp") != s.cfg.NotificationsFrom {
		return NewProblem(CodeNotFound, "no provider notifications are received here")
	}
	body, err := ReadLimited(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	n, err := s.cfg.ProviderNotifications(c.Request().Header, body, s.cfg.Now())
	var notErr *psp.NotificationError
	if errors.As(err, &notErr) {
		p := NewProblem(CodeInvalidSignature, "the notification was refused: "+notErr.Reason+"; nothing changed")
		p.Cause = err
		return p
	}
	if err != nil {
		return err
	}
	ctx, cancel := s.DBContext(c)
	defer cancel()
	action, err := s.cfg.Notifications.Apply(ctx, n)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if strings.Contains(action, "contradicts") || strings.Contains(action, "mismatch") {
		level = slog.LevelWarn
	}
	s.cfg.Logger.Log(c.Request().Context(), level, "provider notification", "event_id", n.EventID, "event_type", n.EventType,
		"provider_id", n.ProviderID, "reference", n.Reference, "action", action)
	return s.WriteJSON(c, http.StatusOK, struct {
		Received bool   `json:"received"`
		Action   string `json:"action"`
	}{true, action})
}
