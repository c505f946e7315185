//go:build lab

package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/pg"
	"github.com/chargeflow/chargeflow/submit"
)

// Lab is the worker's laboratory modes: deliberately broken behaviour the
// scenario runner's negative controls use to prove that the invariant
// checker can fail. Only the lab build (-tags lab) has them.
type Lab struct {
	// ResendOnRerun: a run that finds the charge submitting sends it again
	// instead of moving it to unknown. It can double-charge.
	ResendOnRerun bool
	// RerouteOnTimeout: a call whose outcome is unknown (a timeout, a
	// reset, a 5xx) is taken as proof that nothing was applied, and the
	// charge moves to the next account of its tenant's route and is sent
	// there. It can charge twice across providers (docs/routing.md: a
	// charge is never routed on a timeout).
	RerouteOnTimeout bool
}

// resendOnRerun is the negative control's turn when a run finds its charge
// submitting: with ResendOnRerun it reads the charge to send it again, and
// says so.
func (w *Worker) resendOnRerun(ctx context.Context, args submit.ChargeArgs, log *slog.Logger) (intent.Charge, bool, error) {
	if !w.cfg.Lab.ResendOnRerun {
		return intent.Charge{}, false, nil
	}
	log.WarnContext(ctx, "broken mode: resending a charge found submitting")
	charge, err := intent.Get(ctx, w.cfg.DB, args.TenantID, args.ChargeID)
	return charge, true, err
}

// reasonRerouteOnTimeout is the audit reason of the broken mode's move
// back to pending: it names the mode, so a trail shows the lie.
const reasonRerouteOnTimeout = "broken_reroute_on_timeout"

// rerouteOnTimeout is the negative control's turn when a call's outcome is
// unknown: with RerouteOnTimeout, and a next account in the charge's
// tenant's route, it moves the charge submitting → pending as if the
// timeout proved nothing was applied, reroutes it (intent.RerouteCharge)
// and sends it there in this run. handled is false when it did nothing:
// the run goes on to unknown, as the product's does.
func (w *Worker) rerouteOnTimeout(ctx context.Context, job *river.Job[submit.ChargeArgs], log *slog.Logger, c intent.Charge, callErr error) (handled bool, err error) {
	if !w.cfg.Lab.RerouteOnTimeout {
		return false, nil
	}
	next, ok, err := w.nextAccount(ctx, c)
	if err != nil || !ok {
		return false, nil
	}
	log.WarnContext(ctx, "broken mode: an unknown outcome taken for proof that nothing was applied; sending the charge to the next account",
		"from", c.Provider, "to", next, "err", callErr.Error())
	evidence := fmt.Sprintf("BROKEN MODE reroute_on_timeout: %s's outcome was unknown (%s), taken for proof it holds nothing", c.Provider, callErr)
	err = pg.Confirmed(ctx, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, w.cfg.DB, func(tx pgx.Tx) error {
			back := intent.Move{TenantID: c.TenantID, ChargeID: c.ID, From: intent.StateSubmitting, To: intent.StatePending,
				Actor: actor, Reason: "not_applied:" + reasonRerouteOnTimeout, Evidence: evidence}
			if _, err := intent.MoveCharge(ctx, tx, back); err != nil {
				return err
			}
			_, err := intent.RerouteCharge(ctx, tx, intent.Reroute{TenantID: c.TenantID, ChargeID: c.ID, From: c.Provider, To: next,
				Actor: actor, Evidence: evidence})
			return err
		})
	})
	var conflict *intent.ConflictError
	if errors.As(err, &conflict) {
		return true, w.lostRace(ctx, log, err)
	}
	if err != nil {
		return true, fmt.Errorf("broken mode: reroute charge %s to %s: %w", c.ID, next, err)
	}
	// A run of its own, as River's retry would make: it claims the charge
	// at the next account and sends it there.
	return true, w.work(ctx, job, log)
}
