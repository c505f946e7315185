// Package notification applies the provider's verified notifications of what it
// applied (docs/notifications.md, "Receiving"). A verified notification is
// evidence exactly like a lookup's answer: it may settle a submitting or
// unknown charge or refund, through the same rule (settle.Moves: our money
// and reference, or a person looks), and never moves anything else — a
// terminal row, one in review, one not yet sent. A duplicate, or one
// arriving after the row settled, is therefore a no-op.
//
// It knows nothing of HTTP: the API verifies and reads a notification
// (psp.ParseNotification or the provider's own), calls Apply, and answers.
package notification

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/settle"
)

// Actor signs the moves a provider's notification makes.
const Actor = "provider_notification"

// Config is everything an Applier needs.
type Config struct {
	// DB is where rows are read and moved.
	DB *pgxpool.Pool
	// Provider names the provider whose notifications these are: a row
	// sent to another is not theirs to settle. Required.
	Provider string
}

// Applier applies verified notifications.
type Applier struct{ cfg Config }

// New checks cfg.
func New(cfg Config) (*Applier, error) {
	if cfg.DB == nil || cfg.Provider == "" {
		return nil, errors.New("notification: DB and Provider are required")
	}
	return &Applier{cfg: cfg}, nil
}

// Apply settles the row a verified notification from the configured
// provider is about, when it may (ApplyFrom).
func (s *Applier) Apply(ctx context.Context, n psp.Notification) (string, error) {
	return s.ApplyFrom(ctx, s.cfg.Provider, n)
}

// ApplyFrom settles the row a verified notification from provider is
// about, when it may, and says what it did: "settled",
// "needs_review:amount_mismatch" (its money or reference is not the row's:
// a person looks), "no_op" (with why, when the provider contradicts a
// settled row), "alert:late_charge_at_previous_provider" (a provider the
// charge was rerouted away from says it charged it: recorded on its audit
// trail for a person), or "ignored:" and why.
func (s *Applier) ApplyFrom(ctx context.Context, provider string, n psp.Notification) (string, error) {
	if !n.Actionable() {
		return "ignored:" + n.Reason, nil
	}
	// A row the worker moves while the notification is applied (submitting
	// to unknown: the call's answer was lost, or only acknowledged) can
	// still be settled: the notification is read against the row again.
	// A provider that is answered does not send it again.
	for range maxRaces {
		action, err := s.applyOnce(ctx, provider, n)
		if !errors.Is(err, errMovedMeanwhile) {
			return action, err
		}
	}
	return "no_op", nil
}

// maxRaces bounds how often a notification is read against a row that
// keeps moving under it; each move is the worker's or the reconciler's,
// and a row makes at most a few before it settles.
const maxRaces = 3

// errMovedMeanwhile is applyOnce's word that the row moved to another
// state a notification may still settle.
var errMovedMeanwhile = errors.New("notification: the row moved meanwhile")

// providerID is the provider's id a notification names for a row of kind
// k: an operation's row keeps its held charge's id (answer.ID), the
// notification's own being the operation's at the provider.
func providerID(n psp.Notification, k intent.Kind, answer psp.Charge) string {
	if k.Operation() {
		return answer.ID
	}
	return n.ProviderID
}

func (s *Applier) applyOnce(ctx context.Context, provider string, n psp.Notification) (string, error) {
	row, err := intent.Find(ctx, s.cfg.DB, n.Reference)
	if errors.Is(err, intent.ErrNotFound) {
		return "ignored:unknown_reference", nil
	}
	if err != nil {
		return "", err
	}
	answer, kind := settle.Notified(n, row)
	applied := settle.Applied(kind, answer)
	switch {
	case row.Kind != kind:
		return "ignored:kind_mismatch", nil
	case row.Provider != provider && kind == intent.KindCharge && applied && answer.Status != psp.StatusCanceled:
		late, err := intent.RecordLateCharge(ctx, s.cfg.DB, row.TenantID, row.ID, provider, Actor,
			fmt.Sprintf("%s notified that it charged %d %s (its id %s) after the charge had moved on", provider, answer.Amount, answer.Currency, answer.ID))
		if err != nil {
			return "", err
		}
		if late {
			return "alert:" + intent.ActionLateCharge, nil
		}
		return "ignored:other_provider", nil
	case row.Provider != provider:
		return "ignored:other_provider", nil
	case n.ProviderKey != "" && n.ProviderKey != row.ProviderKey:
		// Not this row's request: a provider object under another key is
		// for a person to look at, not for a notification to settle.
		return "ignored:key_mismatch", nil
	case providerID(n, kind, answer) != "" && row.ProviderChargeID != "" && providerID(n, kind, answer) != row.ProviderChargeID:
		return "ignored:provider_id_mismatch", nil
	case (row.State == intent.StateSucceeded) != applied &&
		(row.State == intent.StateSucceeded || row.State == intent.StateFailed):
		// The provider says otherwise about a settled row (a refund that
		// failed after it succeeded, say): never a move; a person's.
		return "no_op:contradicts_settled_state", nil
	case row.State != intent.StateSubmitting && row.State != intent.StateUnknown:
		// Settled, in review, or not yet sent: a pending row's next
		// attempt gets the provider's saved answer under the same key.
		return "no_op", nil
	}
	moves, outcome := settle.Moves(intent.Move{TenantID: row.TenantID, ChargeID: row.ID, From: row.State, Actor: Actor},
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
	if errors.As(err, &conflict) && (conflict.Current == intent.StateSubmitting || conflict.Current == intent.StateUnknown) {
		return "", errMovedMeanwhile
	}
	if errors.As(err, &conflict) {
		return "no_op", nil // settled meanwhile, by the worker or the reconciler
	}
	if err != nil {
		return "", err
	}
	if outcome == settle.Mismatch {
		return "needs_review:amount_mismatch", nil
	}
	return "settled", nil
}
