package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/psp"
)

// The hold sweep (docs/capture.md, "Holds expire"). A provider holds an
// authorization for its hold window (psp.Capabilities.Hold) and then
// releases it on its own, telling nobody. Each tick the reconciler claims
// held charges (requires_capture, no capture or cancel in flight) from
// HoldMargin before their provider's window ends, looks each up by its
// provider id, and moves one the provider released to canceled with the
// lookup as evidence. A hold still there is looked up again every
// HoldRecheck. A charge with an operation in flight is left to it: a
// capture of an expired hold is refused by the provider, the capture
// fails, and the next sweep finds the release.
//
// A provider whose lookup is a re-send (Adyen) cannot be asked: a re-send
// of the authorization answers the authorization. Its holds are not swept;
// a capture after expiry is refused there, and the charge stays held until
// an operator or a cancel releases it.

// sweepHolds runs one sweep over the held charges of providers and counts
// the releases it proved.
func (r *Reconciler) sweepHolds(ctx context.Context, providers []string) (int, error) {
	minAge, ok := r.minHoldAge(ctx, providers)
	if !ok {
		return 0, nil
	}
	held, now, err := intent.ClaimHolds(ctx, r.cfg.DB, intent.HoldParams{Providers: providers, MinAge: minAge,
		Recheck: r.cfg.HoldRecheck, Limit: r.cfg.BatchSize})
	if err != nil {
		return 0, err
	}
	released := 0
	var errs []error
	for _, c := range held {
		ok, err := r.checkHold(ctx, c, now)
		if ok {
			released++
		}
		errs = append(errs, err)
	}
	return released, errors.Join(errs...)
}

// minHoldAge is the youngest a held charge of providers can be and still
// be due for a look: the shortest hold window among those that can be
// looked up, less HoldMargin. ok is false when none can.
func (r *Reconciler) minHoldAge(ctx context.Context, providers []string) (time.Duration, bool) {
	var least time.Duration
	ok := false
	for _, name := range providers {
		a, err := r.account(ctx, name)
		if err != nil || !sweepable(a.caps) {
			continue
		}
		if age := max(a.caps.Hold()-r.cfg.HoldMargin, 0); !ok || age < least {
			least, ok = age, true
		}
	}
	return least, ok
}

// sweepable reports whether a provider's holds can be swept: it holds
// authorizations, and a lookup of one — by its id, or by a key lookup
// that sees everything applied — tells what became of it at once.
func sweepable(caps psp.Capabilities) bool {
	if !caps.SeparateCapture || caps.Lookup == psp.LookupByResend || caps.Lookup == psp.LookupNone {
		return false
	}
	return caps.ByProviderID || caps.Consistency == psp.Strong
}

// checkHold looks held charge c up if its own provider's hold is due, and
// moves it to canceled if the provider released it.
func (r *Reconciler) checkHold(ctx context.Context, c intent.Charge, now time.Time) (bool, error) {
	log := r.cfg.Logger.With("charge_id", c.ID, "tenant_id", c.TenantID, "provider", c.Provider)
	a, err := r.account(ctx, c.Provider)
	if err != nil || !sweepable(a.caps) || c.FirstAttemptAt == nil ||
		now.Before(c.FirstAttemptAt.Add(a.caps.Hold()-r.cfg.HoldMargin)) {
		return false, nil
	}
	if err := a.limiter.Wait(ctx); err != nil {
		return false, err
	}
	found, err := a.client.Find(ctx, psp.LookupRequest{Key: c.ProviderKey, Reference: c.ID, ProviderID: c.ProviderChargeID})
	switch {
	case err != nil:
		log.WarnContext(ctx, "could not look a held charge up; looking again later", "err", err.Error())
		return false, nil
	case found.Status == psp.StatusRequiresCapture:
		return false, nil
	case found.Status != psp.StatusCanceled || found.ID != c.ProviderChargeID:
		// Captured or otherwise moved at the provider, not by chargeflow:
		// nothing here proves what a person must decide.
		log.ErrorContext(ctx, "the provider reports a held charge as neither held nor released; a person must look",
			"provider_status", string(found.Status))
		return false, nil
	}
	_, err = intent.MoveCharge(ctx, r.cfg.DB, intent.Move{TenantID: c.TenantID, ChargeID: c.ID,
		From: intent.StateRequiresCapture, To: intent.StateCanceled, Actor: "reconciler:" + r.cfg.ID, Reason: "hold_released",
		Evidence: fmt.Sprintf("provider charge %s canceled, found %s after the first send (hold window %s)",
			found.ID, now.Sub(*c.FirstAttemptAt).Round(time.Second), a.caps.Hold())})
	var conflict *intent.ConflictError
	if errors.As(err, &conflict) {
		// A capture or cancel was accepted meanwhile: it settles the charge.
		log.InfoContext(ctx, "a held charge found released moved on meanwhile", "state", string(conflict.Current))
		return false, nil
	}
	if err != nil {
		return false, err
	}
	log.InfoContext(ctx, "the provider released a held charge (its hold expired); it is canceled", slog.String("decision", "hold_released"))
	return true, nil
}
