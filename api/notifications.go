package api

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/psp"
)

// NotificationSource is where the notifications posted to one path of
// /v1/provider_webhooks/{name} come from.
type NotificationSource struct {
	// Provider is the name the rows sent there carry: a notification
	// settles only those.
	Provider string
	// Parse verifies a posted body and reads the notifications in it, one
	// or more; its refusals are *psp.NotificationError.
	Parse func(header http.Header, body []byte, now time.Time) ([]psp.Notification, error)
	// Ack, when set, is the text the provider expects as the answer to a
	// notification it may stop sending (Adyen's "[accepted]"); otherwise
	// the answer is JSON.
	Ack string
}

// source is the source of the notifications posted to name.
func (s *Server) source(c echo.Context, name string) (NotificationSource, bool) {
	if s.cfg.ProviderNotifications != nil && name == s.cfg.NotificationsFrom {
		parse := s.cfg.ProviderNotifications
		return NotificationSource{Provider: s.cfg.Provider, Parse: func(h http.Header, body []byte, now time.Time) ([]psp.Notification, error) {
			n, err := parse(h, body, now)
			return []psp.Notification{n}, err
		}}, true
	}
	if s.cfg.NotificationSources == nil {
		return NotificationSource{}, false
	}
	return s.cfg.NotificationSources(c.Request().Context(), name)
}

// receiveNotification receives the provider's notification of what it applied
// (docs/notifications.md, "Receiving"). It is authenticated by the
// provider's signature, not by a tenant's key: a forged, expired or
// malformed one is 400 and changes nothing. A verified one is applied by
// package notification, which says what it may settle. Every verified
// notification is answered 200, so the provider stops retrying it.
func (s *Server) receiveNotification(c echo.Context) error {
	src, ok := s.source(c, c.Param("psp"))
	if !ok {
		return NewProblem(CodeNotFound, "no provider notifications are received here")
	}
	body, err := ReadLimited(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	notifications, err := src.Parse(c.Request().Header, body, s.cfg.Now())
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
	actions := make([]string, 0, len(notifications))
	for _, n := range notifications {
		action, err := s.cfg.Notifications.ApplyFrom(ctx, src.Provider, n)
		if err != nil {
			return err
		}
		level := slog.LevelInfo
		switch {
		case strings.HasPrefix(action, "alert:"):
			level = slog.LevelError
		case strings.Contains(action, "contradicts") || strings.Contains(action, "mismatch"):
			level = slog.LevelWarn
		}
		s.cfg.Logger.Log(c.Request().Context(), level, "provider notification", "provider", src.Provider, "event_id", n.EventID,
			"event_type", n.EventType, "provider_id", n.ProviderID, "reference", n.Reference, "action", action)
		actions = append(actions, action)
	}
	if src.Ack != "" {
		return c.String(http.StatusOK, src.Ack)
	}
	return s.WriteJSON(c, http.StatusOK, struct {
		Received bool   `json:"received"`
		Action   string `json:"action"`
	}{true, strings.Join(actions, ",")})
}
