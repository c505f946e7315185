// Package resolve is what an operator may do to a charge or a refund the
// machine could not settle (docs/operations.md, "Operators"): force a
// lookup of an unknown one, and resolve one in needs_review on written
// evidence, held to what the provider says about its key. The operator's
// JSON API and the operator's page (package opsplane) both call it, so both
// are held to the same proof, and the proof is the reconciler's own:
// an answer settles a row only when it has the row's money and reference
// (settle.Matches), and a new attempt is sent only while the provider still
// de-duplicates its key (settle.ResendCovered).
//
// It knows nothing of HTTP: a refusal is an *Error whose Reason the caller
// renders.
package resolve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/pg"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/settle"
	"github.com/chargeflow/chargeflow/submit"
)

// The reasons of a refusal; each changes nothing.
var (
	// ErrNotInReview: only a needs_review row can be resolved.
	ErrNotInReview = errors.New("resolve: not in needs_review")
	// ErrNotUnknown: only an unknown row can be looked up on demand.
	ErrNotUnknown = errors.New("resolve: not unknown")
	// ErrTooSoon: the row was looked up less than the floor ago.
	ErrTooSoon = errors.New("resolve: looked up too recently")
	// ErrKeyWindowPassed: a new attempt would no longer be de-duplicated.
	ErrKeyWindowPassed = errors.New("resolve: key window passed")
	// ErrEvidenceMismatch: the provider's records contradict the
	// resolution.
	ErrEvidenceMismatch = errors.New("resolve: the provider's records contradict the resolution")
	// ErrProviderUnavailable: the provider could not be asked.
	ErrProviderUnavailable = errors.New("resolve: provider unavailable")
)

// Error is a refusal: its Reason (one of the Err values above), a
// sentence saying why for the operator, how long to wait before asking
// again when that helps, and the cause when there is one.
type Error struct {
	Reason error
	Detail string
	Wait   time.Duration
	Err    error
}

func (e *Error) Error() string { return e.Reason.Error() + ": " + e.Detail }

// Unwrap makes errors.Is see the reason and the cause.
func (e *Error) Unwrap() []error { return []error{e.Reason, e.Err} }

// Config is everything a Resolver needs. Zero values take the defaults.
type Config struct {
	// DB is where rows are read and moved.
	DB *pgxpool.Pool
	// Jobs enqueues the new attempt of a row resolved to pending.
	Jobs *submit.Queue
	// Provider looks rows up, to check a resolution against its records;
	// Providers finds the adapter of the account a row was sent to (nil:
	// Provider alone).
	Provider  psp.Provider
	Providers psp.Registry
	// ResendWindow is how long after a row's first send to Provider a new
	// attempt is still de-duplicated (settle.ResendWindow of the
	// provider's key window and the reconciler's margin, so the two
	// agree): past it an operator cannot send the row again; zero when the
	// provider never de-duplicates. Another account's window is its key
	// window less KeyWindowMargin (the reconciler's).
	ResendWindow    time.Duration
	KeyWindowMargin time.Duration
	// ReconcileFloor is the least time between an operator's forced
	// lookup of a row and the previous lookup. Default 30 s.
	ReconcileFloor time.Duration
	// Now, when set, is the clock the key window is judged by, for tests;
	// nil (the default) is the database's, the clock the row's first send
	// was written by, so no process's clock enters the judgement.
	Now func() time.Time
}

// Defaults is the configuration New fills zero fields from.
func Defaults() Config { return Config{ReconcileFloor: 30 * time.Second} }

// Resolver carries out operators' actions.
type Resolver struct{ cfg Config }

// New fills in defaults and refuses a configuration that makes no sense.
func New(cfg Config) (*Resolver, error) {
	if cfg.DB == nil || cfg.Jobs == nil || cfg.Provider == nil || cfg.ResendWindow < 0 {
		return nil, errors.New("resolve: DB, Jobs and Provider are required, and ResendWindow cannot be negative")
	}
	cfg.ReconcileFloor = cmp.Or(cfg.ReconcileFloor, Defaults().ReconcileFloor)
	if cfg.Providers == nil {
		cfg.Providers = psp.Single(cfg.Provider)
	}
	if cfg.ReconcileFloor < 0 {
		return nil, fmt.Errorf("resolve: reconcile floor %s is negative", cfg.ReconcileFloor)
	}
	return &Resolver{cfg: cfg}, nil
}

// ReconcileFloor is Config.ReconcileFloor, which the operator's page shows.
func (r *Resolver) ReconcileFloor() time.Duration { return r.cfg.ReconcileFloor }

// Reconcile makes an unknown row's lookup due now, for the operator actor
// ("operator:<name>"); the lookup happens on the reconciler's next tick
// under its lease like every other. Forced lookups are spaced by
// ReconcileFloor from the last lookup, so a loop of requests cannot
// override the lookup backoff and hammer the provider: too soon is
// ErrTooSoon, with the wait. The request is an event of the row (action
// reconcile_requested).
func (r *Resolver) Reconcile(ctx context.Context, actor, id string) (intent.Charge, error) {
	charge, err := intent.ForceCheck(ctx, r.cfg.DB, intent.ForcedCheck{ChargeID: id, Actor: actor, Floor: r.cfg.ReconcileFloor})
	var conflict *intent.ConflictError
	var tooSoon *intent.TooSoonError
	switch {
	case errors.As(err, &conflict):
		return intent.Charge{}, &Error{Reason: ErrNotUnknown,
			Detail: fmt.Sprintf("only an unknown charge can be reconciled; this one is %s", conflict.Current)}
	case errors.As(err, &tooSoon):
		return intent.Charge{}, &Error{Reason: ErrTooSoon, Wait: tooSoon.Wait,
			Detail: fmt.Sprintf("the charge was looked up less than %s ago; the reconciler keeps looking on its own", r.cfg.ReconcileFloor)}
	case err != nil:
		return intent.Charge{}, err
	}
	return charge, nil
}

// Resolution is an operator's word on a row in needs_review: its Status
// (succeeded, failed or pending; for a charge captured later also
// requires_capture or canceled), the written Evidence, the provider's
// charge id of a success, a hold or a release, the failure code of a
// failure.
type Resolution struct {
	Status           intent.State
	Evidence         string
	ProviderChargeID string
	FailureCode      string
}

// Resolve settles a needs_review row on the written evidence of the
// operator actor: succeeded (with the provider's charge id), failed, or
// pending (a new attempt with the same provider key, its job in the same
// transaction), once Verify holds it to the provider's records. It returns
// the row as it is after the move; on a refusal, the row as it was found
// (zero when it was not found).
func (r *Resolver) Resolve(ctx context.Context, actor, id string, res Resolution) (intent.Charge, error) {
	charge, err := intent.Find(ctx, r.cfg.DB, id)
	if err != nil {
		return intent.Charge{}, err
	}
	if charge.State != intent.StateNeedsReview {
		return charge, &Error{Reason: ErrNotInReview,
			Detail: fmt.Sprintf("only a needs_review charge can be resolved; this one is %s", charge.State)}
	}
	if err := r.Verify(ctx, charge, res); err != nil {
		return charge, err
	}

	move := intent.Move{
		TenantID: charge.TenantID, ChargeID: id, From: intent.StateNeedsReview, To: res.Status,
		Actor: actor, Reason: "operator_resolved", Evidence: res.Evidence,
	}
	switch res.Status {
	case intent.StateSucceeded, intent.StateRequiresCapture, intent.StateCanceled:
		move.ProviderChargeID = res.ProviderChargeID
	case intent.StateFailed:
		move.FailureCode = cmp.Or(res.FailureCode, "resolved_by_operator")
	}
	found := charge
	// A resolution whose commit the standby did not confirm is not
	// reported done: a failover may lose it.
	err = pg.Confirmed(ctx, func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, r.cfg.DB, func(tx pgx.Tx) error {
			var err error
			if charge, err = intent.MoveCharge(ctx, tx, move); err != nil {
				return err
			}
			if res.Status == intent.StatePending {
				err = r.cfg.Jobs.Enqueue(ctx, tx, submit.ChargeArgs{TenantID: charge.TenantID, ChargeID: id})
			}
			return err
		})
	})
	var conflict *intent.ConflictError
	if errors.As(err, &conflict) {
		return found, &Error{Reason: ErrNotInReview,
			Detail: fmt.Sprintf("only a needs_review charge can be resolved; this one is %s", conflict.Current)}
	}
	if err != nil {
		return found, err
	}
	return charge, nil
}

// Verify holds a resolution of charge to what the provider says about its
// key, by a lookup of it (settle.Find, outside any transaction): succeeded
// needs the provider to hold that charge id, succeeded, with the charge's
// money and reference (settle.Matches); failed and pending are refused
// while the provider holds a successful charge under the key; pending is
// refused once a new attempt would no longer be de-duplicated
// (settle.ResendCovered), since it could then be charged twice. A provider
// that cannot answer is ErrProviderUnavailable: an operator's word alone
// settles nothing the provider could contradict. The one exception is a
// provider whose only lookup is a re-send (psp.LookupByResend), past its
// key window: asking could charge anew, so the provider is not asked and
// the resolution rests on the operator's evidence (docs/provider.md, "The
// Adyen adapter").
func (r *Resolver) Verify(ctx context.Context, charge intent.Charge, res Resolution) error {
	provider, err := r.cfg.Providers.Provider(ctx, charge.Provider)
	if err != nil {
		return &Error{Reason: ErrProviderUnavailable, Wait: 5 * time.Second, Err: err,
			Detail: "this process cannot call the charge's provider " + charge.Provider + "; nothing was changed"}
	}
	now, err := r.now(ctx)
	if err != nil {
		return err
	}
	covered := settle.ResendCovered(charge, r.resendWindow(provider), now)
	if res.Status == intent.StatePending && !covered {
		return &Error{Reason: ErrKeyWindowPassed,
			Detail: "the provider no longer de-duplicates this charge's key, so a new attempt could charge twice; " +
				"resolve it to succeeded or failed with the provider's records"}
	}
	if provider.Capabilities().Lookup == psp.LookupByResend && !covered {
		// The provider's only lookup is a re-send, which past its key
		// window could charge anew: nothing can be asked, and the
		// operator's word, with its evidence, is the record.
		return nil
	}
	found, err := settle.Find(ctx, r.cfg.DB, provider, charge)
	notFound := errors.Is(err, psp.ErrNotFound)
	if err != nil && !notFound {
		return &Error{Reason: ErrProviderUnavailable, Wait: 5 * time.Second, Err: err,
			Detail: "the provider could not be asked about this charge (" + psp.ReasonOf(err) + "); nothing was changed"}
	}
	// What the provider's answer proves of the row, by the worker's and
	// the reconciler's own rule (settle.Moves): the state it would move
	// the row to, "" when the provider holds nothing for it.
	var proven intent.State
	if !notFound {
		moves, _ := settle.Moves(intent.Move{From: intent.StateNeedsReview}, charge, found, settle.Lookup)
		proven = moves[len(moves)-1].To
	}
	mismatch := func(detail string) error { return &Error{Reason: ErrEvidenceMismatch, Detail: detail} }
	switch res.Status {
	case intent.StateSucceeded, intent.StateRequiresCapture, intent.StateCanceled:
		switch {
		case notFound:
			return mismatch("the provider holds no charge under this charge's key")
		case proven != res.Status || found.ID != res.ProviderChargeID:
			return mismatch(fmt.Sprintf("the provider's records of this %s with that id, this amount and currency do not show it %s",
				cmp.Or(charge.Kind, intent.KindCharge), res.Status))
		}
	case intent.StateFailed, intent.StatePending:
		if !notFound && settle.Applied(charge.Kind, found) {
			return mismatch(fmt.Sprintf("the provider's records show this %s applied (%s); resolve it with the provider's charge id",
				cmp.Or(charge.Kind, intent.KindCharge), found.Status))
		}
	}
	return nil
}

// resendWindow is how long after a row's first send to provider a new
// attempt is still de-duplicated.
func (r *Resolver) resendWindow(provider psp.Provider) time.Duration {
	if provider == r.cfg.Provider {
		return r.cfg.ResendWindow
	}
	return settle.ResendWindow(provider.Capabilities().KeyWindow, r.cfg.KeyWindowMargin)
}

// now is the time the key window is judged at: Config.Now's when set,
// else the database's, the clock that wrote the row's first send.
func (r *Resolver) now(ctx context.Context) (time.Time, error) {
	if r.cfg.Now != nil {
		return r.cfg.Now(), nil
	}
	var now time.Time
	if err := r.cfg.DB.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("resolve: read the database's clock: %w", err)
	}
	return now, nil
}
