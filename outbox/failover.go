package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/pg"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/submit"
)

// This file is failover across provider accounts (docs/routing.md,
// "Failover"): the worker keeps a circuit breaker per account, and a
// charge claimed for an account whose breaker is open moves to the next
// account of its tenant's route that is not failing — but only because it
// is pending, which proves the account it leaves does not hold it: it was
// never sent there, or an answer proved nothing was applied, or a lookup
// proved it absent. A charge whose outcome at an account is unknown never
// reaches this file: it waits for the reconciler's proof.

// reasonCircuitOpen is the audit reason of a claimed row put back to
// pending, unsent, because its account's breaker was open.
const reasonCircuitOpen = "circuit_open"

// account is the provider c is sent to and the breaker's done for the
// call. When c's account's breaker is open, a charge moves to the next
// account of its route (c is then returned claimed there). A breaker only
// decides where a charge goes, never whether one with nowhere else to go
// is sent: such a charge (a refund, a tenant without a route, a route
// whose later accounts are failing too) goes to its account as it would
// without breakers, so one provider's charges behave as before routes.
func (w *Worker) account(ctx context.Context, log *slog.Logger, c intent.Charge) (intent.Charge, psp.Provider, func(error), error) {
	provider, err := w.cfg.Providers.Provider(ctx, c.Provider)
	if err != nil {
		return c, nil, nil, &psp.Error{Kind: psp.ErrNotApplied, Reason: "provider_not_here", Err: err}
	}
	done, err := w.breakers.allow(c.Provider)
	if err == nil {
		return c, provider, done, nil
	}
	// The breaker did not let the call through, so it hears nothing of it.
	unheard := func(error) {}
	next, ok, err := w.nextAccount(ctx, c)
	if err != nil {
		log.WarnContext(ctx, "cannot read the tenant's route; sending the charge where it is", "err", err.Error())
		return c, provider, unheard, nil
	}
	if !ok {
		return c, provider, unheard, nil
	}
	moved, err := w.reroute(ctx, c, next)
	if err != nil {
		return c, nil, nil, err
	}
	log.InfoContext(ctx, "the charge's provider is failing and never took it; sending it to the next of its route",
		"from", c.Provider, "to", next)
	return w.account(ctx, log, moved)
}

// nextAccount is the account of c's tenant's route after c's own that
// this process can call and whose breaker is not open.
func (w *Worker) nextAccount(ctx context.Context, c intent.Charge) (string, bool, error) {
	// A refund, a capture and a cancel act on a charge where it is.
	if w.cfg.Routes == nil || (c.Kind != "" && c.Kind != intent.KindCharge) {
		return "", false, nil
	}
	table, err := w.cfg.Routes.Table(ctx)
	if err != nil {
		return "", false, err
	}
	names, err := w.cfg.Providers.Names(ctx)
	if err != nil {
		return "", false, err
	}
	next, ok := table.Next(c.TenantID, c.Currency, c.Amount, c.Provider, func(name string) bool {
		return slices.Contains(names, name) && w.breakers.usable(name) && (!c.CaptureLater || w.capturesSeparately(ctx, name))
	})
	return next, ok, nil
}

// capturesSeparately reports whether the account name can authorize a
// charge to be captured later: one that cannot is never its next account.
func (w *Worker) capturesSeparately(ctx context.Context, name string) bool {
	p, err := w.cfg.Providers.Provider(ctx, name)
	return err == nil && p.Capabilities().SeparateCapture
}

// reroute puts the claimed c back to pending, unsent, moves it to the
// account next with what proves its account does not hold it, in one
// transaction, and claims it again there. A charge someone else moved
// meanwhile is errLostClaim.
func (w *Worker) reroute(ctx context.Context, c intent.Charge, next string) (intent.Charge, error) {
	var moved intent.Charge
	err := pg.Confirmed(ctx, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, w.cfg.DB, func(tx pgx.Tx) error {
			back := intent.Move{TenantID: c.TenantID, ChargeID: c.ID, From: intent.StateSubmitting, To: intent.StatePending,
				Actor: actor, Reason: "not_applied:" + reasonCircuitOpen,
				Evidence: "the circuit of provider " + c.Provider + " is open: nothing was sent"}
			if _, err := intent.MoveCharge(ctx, tx, back); err != nil {
				return err
			}
			proof, err := intent.PendingProof(ctx, tx, c.TenantID, c.ID, back.Reason)
			if err != nil {
				return err
			}
			if proof == "" {
				proof = "nothing was ever sent to it"
			}
			_, err = intent.RerouteCharge(ctx, tx, intent.Reroute{TenantID: c.TenantID, ChargeID: c.ID, From: c.Provider, To: next,
				Actor: actor, Evidence: fmt.Sprintf("not held by %s (key %s): %s; its circuit is open", c.Provider, c.ProviderKey, proof)})
			return err
		})
	})
	if err == nil {
		err = pg.Confirmed(ctx, func(ctx context.Context) (err error) {
			moved, err = intent.MoveCharge(ctx, w.cfg.DB, intent.Move{TenantID: c.TenantID, ChargeID: c.ID,
				From: intent.StatePending, To: intent.StateSubmitting, Actor: actor, Reason: "submit", CountAttempt: true})
			return err
		})
	}
	var conflict *intent.ConflictError
	if errors.As(err, &conflict) {
		return c, fmt.Errorf("%w: %w", errLostClaim, err)
	}
	if err != nil {
		return c, fmt.Errorf("reroute charge %s to %s: %w", c.ID, next, err)
	}
	return moved, nil
}

// errLostClaim ends a run whose charge someone else moved while it was
// being rerouted: their move stands.
var errLostClaim = errors.New("the charge was moved by someone else")

// notSent ends a run that sent nothing: a row put back to pending for a
// retry (an open breaker with nowhere to move, an account this process
// cannot call), or a run whose charge someone else took.
func (w *Worker) notSent(ctx context.Context, job *river.Job[submit.ChargeArgs], log *slog.Logger, c intent.Charge, err error) error {
	if errors.Is(err, errLostClaim) {
		log.DebugContext(ctx, "someone else moved the charge while it was being rerouted", "err", err.Error())
		return nil
	}
	if !errors.Is(err, psp.ErrNotApplied) {
		return err
	}
	return w.notApplied(ctx, job, log, c, err)
}

// breakerOutcome is what a call's result tells its account's breaker: an
// answer (a charge, a decline, a refund, a refusal, and a refusal of the
// request itself for what it asked: the provider is answering) is a
// success; a run cut short by this worker's own stop is not counted; every
// other not-applied or unknown outcome is a failure.
func breakerOutcome(ctx context.Context, callErr error) error {
	switch {
	case callErr == nil:
		return nil
	case ctx.Err() != nil:
		return context.Canceled
	case slices.Contains(requestFaults, psp.ReasonOf(callErr)):
		return nil
	}
	return errCallFailed
}

// requestFaults are the reasons of answers that refuse one request for
// what it asked (or of a call never made for want of the row's own data),
// not for the account's health.
var requestFaults = []string{"status_400", "status_404", "status_405", "status_413", "status_415",
	"invalid_request", "validation", "provider_cannot_refund", "refunded_charge_unreadable"}
