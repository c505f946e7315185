package api

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/settle"
)

// notificationActor signs the moves a provider's notification makes.
const notificationActor = "provider_notification"

// providerWebhook receives the provider's notification of what it applied
// (docs/notifications.md, "Receiving"). It is authenticated by the
// provider's signature, not by a tenant's key: a forged, expired or
// malformed one is 400 and changes nothing. A verified one is evidence
// exactly like a lookup's answer: it may settle a submitting or unknown
// charge or refund, through the same rule (settle.Moves: our money and
// reference, or a person looks), and never moves anything else — a
// terminal row, one in review, one not yet sent. A duplicate, or one
// arriving after the row settled, is therefore a no-op. Every verified
// notification is answered 200, so the provider stops retrying it.
func (s *Server) providerWebhook(c echo.Context) error {
	if s.cfg.ProviderNotifications == nil || c.Param("psp") != s.cfg.NotificationsFrom {
		return problem(CodeNotFound, "no provider notifications are received here")
	}
	body, err := readLimited(c, s.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	n, err := s.cfg.ProviderNotifications(c.Request().Header, body, s.cfg.Now())
	var notErr *psp.NotificationError
	if errors.As(err, &notErr) {
		p := problem(CodeInvalidSignature, "the notification was refused: "+notErr.Reason+"; nothing changed")
		p.cause = err
		return p
	}
	if err != nil {
		return err
	}
	action, err := s.applyNotification(c, n)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if strings.Contains(action, "contradicts") || strings.Contains(action, "mismatch") {
		level = slog.LevelWarn
	}
	s.cfg.Logger.Log(c.Request().Context(), level, "provider notification", "event_id", n.EventID, "event_type", n.EventType,
		"provider_id", n.ProviderID, "reference", n.Reference, "action", action)
	return s.writeJSON(c, http.StatusOK, struct {
		Received bool   `json:"received"`
		Action   string `json:"action"`
	}{true, action})
}

// applyNotification settles the row a verified notification is about, when
// it can, and says what it did: settled, no_op, or ignored (with why).
func (s *Server) applyNotification(c echo.Context, n psp.Notification) (string, error) {
	if !n.Actionable() {
		return "ignored:" + n.Reason, nil
	}
	ctx, cancel := s.dbContext(c)
	defer cancel()
	row, err := intent.Find(ctx, s.cfg.DB, n.Reference)
	if errors.Is(err, intent.ErrNotFound) {
		return "ignored:unknown_reference", nil
	}
	if err != nil {
		return "", err
	}
	answer, kind := n.Charge, intent.KindCharge
	if n.Kind == psp.NotificationRefund {
		answer, kind = settle.AnswerOf(n.Refund), intent.KindRefund
	}
	switch {
	case row.Kind != kind:
		return "ignored:kind_mismatch", nil
	case row.Provider != s.cfg.Provider:
		return "ignored:other_provider", nil
	case n.ProviderKey != "" && n.ProviderKey != row.ProviderKey:
		// Not this row's request: a provider object under another key is
		// for a person to look at, not for a notification to settle.
		return "ignored:key_mismatch", nil
	case n.ProviderID != "" && row.ProviderChargeID != "" && n.ProviderID != row.ProviderChargeID:
		return "ignored:provider_id_mismatch", nil
	case (row.State == intent.StateSucceeded) != (answer.Status == psp.StatusSucceeded) &&
		(row.State == intent.StateSucceeded || row.State == intent.StateFailed):
		// The provider says otherwise about a settled row (a refund that
		// failed after it succeeded, say): never a move; a person's.
		return "no_op:contradicts_settled_state", nil
	case row.State != intent.StateSubmitting && row.State != intent.StateUnknown:
		// Settled, in review, or not yet sent: a pending row's next
		// attempt gets the provider's saved answer under the same key.
		return "no_op", nil
	}
	moves, _ := settle.Moves(intent.Move{TenantID: row.TenantID, ChargeID: row.ID, From: row.State, Actor: notificationActor},
		row, answer, settle.Notification)
	err = pgx.BeginFunc(ctx, s.cfg.DB, func(tx pgx.Tx) error {
		for _, m := range moves {
			if _, err := intent.MoveCharge(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	})
	var conflict *intent.ConflictError
	if errors.As(err, &conflict) {
		return "no_op", nil // settled meanwhile, by the worker or the reconciler
	}
	if err != nil {
		return "", err
	}
	return "settled", nil
}
