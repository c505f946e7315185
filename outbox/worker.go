// Package outbox is the River worker that carries a charge from pending to
// its provider and back: the charge.submit job written with the charge.
//
// A run of the job never holds a transaction across the network. First it
// compare-and-sets pending → submitting (attempts + 1) and commits, BEFORE the
// call — in one statement with the runs asking at the same time (claims); a run that finds submitting instead knows an earlier run died (or is
// still running) mid-call, moves the charge to unknown and stops, so a rerun
// never sends blindly. Then it makes one provider call with the charge's fixed
// provider key. Last, in one transaction, it applies the move the answer
// proves, and returns; River's completer then marks the job completed, many
// jobs to a statement:
//
//	succeeded, same amount, currency, reference → succeeded
//	declined (a value, not an error)            → failed, with the decline code
//	an answer about other money                 → unknown → needs_review (amount_mismatch),
//	                                              both moves in the one transaction
//	provably not applied (refused, 429)         → pending, and River retries with
//	                                              backoff; on the job's last attempt
//	                                              → failed (provider_unavailable)
//	anything else (timeout, reset, 5xx, garbage) → unknown: the reconciler proves it
//
// River delivers at least once and a rescued job can run at the same time as
// the original: correctness comes from the charge row and the provider key,
// never from job state.
package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/batch"
	"github.com/chargeflow/chargeflow/internal/pg"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/route"
	"github.com/chargeflow/chargeflow/settle"
	"github.com/chargeflow/chargeflow/submit"
)

// Config configures the worker. Zero values take the defaults.
type Config struct {
	DB *pgxpool.Pool
	// Provider is the processes' own provider: its call timeout bounds
	// every run. Providers finds the adapter of the account each row was
	// sent to; nil is Provider alone.
	Provider  psp.Provider
	Providers psp.Registry
	// Routes, when set, lets a charge whose account's breaker is open move
	// to the next account of its tenant's route (docs/routing.md,
	// "Failover"); nil never moves a charge.
	Routes *route.Cache
	// Breaker configures each account's circuit breaker.
	Breaker BreakerConfig
	Logger  *slog.Logger
	// CrashPoints are armed in tests and scenarios only; nil is disarmed.
	CrashPoints *crashpoint.Set

	// UnknownCheckAfter is how soon after an unknown outcome the reconciler
	// first looks the key up. A lookup that finds the charge settles it at
	// once; one that does not waits for the apply window anyway. Default 1 s.
	UnknownCheckAfter time.Duration

	// TracerProvider makes the span of each charge.submit run, named after
	// the job kind, and the provider call's span is its child. With
	// TraceContext on the River clients, the run is itself a child of the
	// span that inserted the job (the API request, or the reconciler's
	// decision). Nil means no spans.
	TracerProvider trace.TracerProvider
	// MeterProvider records MetricUnknownOutcomes. Nil means no metrics.
	MeterProvider metric.MeterProvider

	// Lab holds the worker's laboratory modes, which only the lab build has
	// (lab.go); in the product build it is empty (product.go).
	Lab Lab
}

// DefaultUnknownCheckAfter is how soon the reconciler first looks up a
// charge whose outcome the worker could not know.
const DefaultUnknownCheckAfter = time.Second

// Worker is the charge.submit worker.
type Worker struct {
	river.WorkerDefaults[submit.ChargeArgs]
	cfg       Config
	telemetry telemetry
	// claims and settles make the run's two moves with the runs asking
	// at the same time (claims.go).
	claims   *batch.Batcher[intent.Ref, moved]
	settles  *batch.Batcher[intent.Move, moved]
	breakers *breakers
}

// BatchesInFlight is how many claim statements, and how many settling
// transactions, a worker runs at once at most (claims.go): a second starts
// only when a full batch waits (batch.NewParallel).
const BatchesInFlight = 4

// NewWorker checks cfg and fills its defaults.
func NewWorker(cfg Config) (*Worker, error) {
	if cfg.DB == nil || cfg.Provider == nil {
		return nil, errors.New("outbox: DB and Provider are required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.UnknownCheckAfter = cmp.Or(cfg.UnknownCheckAfter, DefaultUnknownCheckAfter)
	if cfg.Providers == nil {
		cfg.Providers = psp.Single(cfg.Provider)
	}
	tel, err := newTelemetry(cfg.TracerProvider, cfg.MeterProvider)
	if err != nil {
		return nil, err
	}
	return &Worker{cfg: cfg, telemetry: tel,
		claims:   newClaims(cfg.DB),
		settles:  newSettles(cfg.DB, cfg.CrashPoints),
		breakers: newBreakers(cfg.Breaker, cfg.Logger),
	}, nil
}

// Timeout bounds one run: the provider client's call timeout, plus room
// for the two short transactions around it. River's RescueStuckJobsAfter
// must exceed it.
func (w *Worker) Timeout(*river.Job[submit.ChargeArgs]) time.Duration {
	return JobTimeout(w.cfg.Provider.Timeout())
}

// JobTimeout is how long a charge.submit run may take for a given provider
// call timeout.
func JobTimeout(callTimeout time.Duration) time.Duration { return callTimeout + 5*time.Second }

// actor is how the worker signs the events it writes.
const actor = "worker"

// Work runs one attempt of a charge.submit job, in its own span.
func (w *Worker) Work(ctx context.Context, job *river.Job[submit.ChargeArgs]) error {
	ctx, span := w.telemetry.startRun(ctx, job)
	defer span.End()
	log := w.cfg.Logger.With(rowIDKey(job.Args.ChargeID), job.Args.ChargeID, "tenant_id", job.Args.TenantID, "job_id", job.ID, "job_attempt", job.Attempt)
	if sc := span.SpanContext(); sc.HasTraceID() {
		log = log.With("trace_id", sc.TraceID().String())
	}
	err := w.work(ctx, job, log)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// work is one attempt of a charge.submit job.
func (w *Worker) work(ctx context.Context, job *river.Job[submit.ChargeArgs], log *slog.Logger) error {
	args := job.Args

	// Claimed with the other runs asking at the same time (claims.go); a
	// charge the claim did not move is asked about alone, which says why
	// (or moves it, if it became pending meanwhile).
	claimed, err := w.claims.Do(ctx, intent.Ref{TenantID: args.TenantID, ChargeID: args.ChargeID})
	charge := claimed.charge
	if err == nil && !claimed.ok {
		err = pg.Confirmed(ctx, func(ctx context.Context) (err error) {
			charge, err = intent.MoveCharge(ctx, w.cfg.DB, intent.Move{
				TenantID: args.TenantID, ChargeID: args.ChargeID,
				From: intent.StatePending, To: intent.StateSubmitting,
				Actor: actor, Reason: "submit", CountAttempt: true,
			})
			return err
		})
	}
	var conflict *intent.ConflictError
	if errors.As(err, &conflict) && conflict.Current == intent.StateSubmitting {
		// Only the lab build's negative control sends it again (lab.go).
		if again, resend, getErr := w.resendOnRerun(ctx, args, log); resend {
			if getErr != nil {
				return getErr
			}
			charge, err = again, nil
		}
	}
	switch {
	case errors.As(err, &conflict) && conflict.Current == intent.StateSubmitting:
		// An earlier run died (or is still running) after committing
		// submitting: a provider charge may exist. Never send again blindly.
		return w.finish(ctx, job, log, intent.Move{
			TenantID: args.TenantID, ChargeID: args.ChargeID,
			From: intent.StateSubmitting, To: intent.StateUnknown,
			Actor: actor, Reason: "rerun_found_submitting", CheckAfter: w.cfg.UnknownCheckAfter,
		})
	case errors.As(err, &conflict):
		// Someone already moved it on: this run is a duplicate or late.
		log.DebugContext(ctx, "nothing to send: a duplicate or late run found the "+rowNoun(args.ChargeID)+" already moved on", "state", string(conflict.Current))
		w.telemetry.settled(ctx, conflict.Current, "not_pending")
		return nil
	case errors.Is(err, intent.ErrNotFound):
		log.ErrorContext(ctx, "charge.submit job for a charge that does not exist")
		return river.JobCancel(err)
	case err != nil:
		return fmt.Errorf("move to submitting: %w", err)
	}
	if err := w.cfg.CrashPoints.Hit(ctx, crashpoint.WorkerAfterSubmittingCommit); err != nil {
		return err
	}

	// The account the row is at, unless its breaker is open: then a
	// charge moves to the next account of its route, or the row waits.
	charge, provider, done, err := w.account(ctx, log, charge)
	if err != nil {
		return w.notSent(ctx, job, log, charge, err)
	}

	// The row's kind decides the call: a charge, or a refund of its
	// parent charge (settle.Send).
	answer, callErr := settle.Send(ctx, w.cfg.DB, provider, charge)
	done(breakerOutcome(ctx, callErr))
	if err := w.cfg.CrashPoints.Hit(ctx, crashpoint.WorkerAfterPSPResponseBeforeSave); err != nil {
		return err
	}

	move := intent.Move{TenantID: charge.TenantID, ChargeID: charge.ID, From: intent.StateSubmitting, Actor: actor}
	switch {
	case callErr == nil:
		moves, _ := settle.Moves(move, charge, answer, settle.Call)
		return w.finish(ctx, job, log, moves...)
	case errors.Is(callErr, psp.ErrNotApplied):
		return w.notApplied(ctx, job, log, charge, callErr)
	default:
		// Only the lab build's negative control moves it on (lab.go).
		if handled, err := w.rerouteOnTimeout(ctx, job, log, charge, callErr); handled {
			return err
		}
		move.To, move.Reason, move.CheckAfter = intent.StateUnknown, unknownReasonPrefix+psp.ReasonOf(callErr), w.cfg.UnknownCheckAfter
		// A provider id the answer named makes the reconciler's lookup a
		// strong one (psp.LookupRequest.ProviderID).
		move.ProviderChargeID = psp.ProviderIDOf(callErr)
		log.WarnContext(ctx, "the provider's answer was lost; the reconciler will look the "+rowNoun(charge.ID)+" up", "err", callErr.Error())
		return w.finish(ctx, job, log, move)
	}
}

// notApplied handles an answer that proves nothing was charged: back to
// pending, and River retries the job with backoff. On the job's last attempt
// the charge fails as provider_unavailable instead — still proven uncharged.
func (w *Worker) notApplied(ctx context.Context, job *river.Job[submit.ChargeArgs], log *slog.Logger, charge intent.Charge, callErr error) error {
	back := intent.Move{
		TenantID: charge.TenantID, ChargeID: charge.ID,
		From: intent.StateSubmitting, To: intent.StatePending,
		Actor: actor, Reason: "not_applied:" + psp.ReasonOf(callErr),
	}
	if job.Attempt < job.MaxAttempts {
		if _, err := intent.MoveCharge(ctx, w.cfg.DB, back); err != nil {
			return w.lostRace(ctx, log, err)
		}
		w.telemetry.settled(ctx, back.To, back.Reason)
		log.InfoContext(ctx, "the provider did not take the "+rowNoun(charge.ID)+"; sending it again after a backoff", "err", callErr.Error())
		return fmt.Errorf("provider did not apply the charge: %w", callErr)
	}
	log.WarnContext(ctx, "the provider never took the "+rowNoun(charge.ID)+" in every attempt; it failed, uncharged", "err", callErr.Error())
	err := w.inTx(ctx, job, log, func(tx pgx.Tx) error {
		if _, err := intent.MoveCharge(ctx, tx, back); err != nil {
			return err
		}
		_, err := intent.MoveCharge(ctx, tx, intent.Move{
			TenantID: charge.TenantID, ChargeID: charge.ID,
			From: intent.StatePending, To: intent.StateFailed,
			Actor: actor, Reason: "attempts_exhausted", FailureCode: "provider_unavailable",
		})
		return err
	})
	if err == nil {
		w.telemetry.settled(ctx, intent.StateFailed, "attempts_exhausted")
	}
	return err
}

// finish applies the moves in one transaction: a single move with the
// answers of the runs finishing at the same time (claims.go), two moves (a
// mismatch) alone.
func (w *Worker) finish(ctx context.Context, job *river.Job[submit.ChargeArgs], log *slog.Logger, moves ...intent.Move) error {
	if len(moves) == 1 {
		settled, err := w.settles.Do(ctx, moves[0])
		if err != nil {
			return w.lostRace(ctx, log, err)
		}
		if settled.ok {
			w.logMoved(ctx, log, moves)
			return nil
		}
		// Not where the move expected it: alone, below, the miss says why
		// (and a definitive answer settles from unknown).
	}
	apply := func(tx pgx.Tx) error {
		for _, m := range moves {
			if _, err := intent.MoveCharge(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	}
	err := w.inTx(ctx, job, log, apply)
	var conflict *intent.ConflictError
	if errors.As(err, &conflict) && conflict.Current == intent.StateUnknown && definitive(moves) {
		// A rerun (or the reconciler) moved the charge to unknown while this
		// run waited for the provider. This run holds a definitive answer, so
		// it settles the charge from unknown.
		moves = fromUnknown(moves)
		err = w.inTx(ctx, job, log, apply)
	}
	if err != nil {
		return w.lostRace(ctx, log, err)
	}
	w.logMoved(ctx, log, moves)
	return nil
}

// logMoved logs and counts the moves a run made.
func (w *Worker) logMoved(ctx context.Context, log *slog.Logger, moves []intent.Move) {
	last := moves[len(moves)-1]
	log.InfoContext(ctx, rowNoun(last.ChargeID)+" "+string(last.To), "from", string(moves[0].From), "reason", last.Reason)
	w.telemetry.settled(ctx, last.To, last.Reason)
}

// definitive reports whether moves settle the charge from submitting on the
// strength of a provider answer (rather than leave its outcome unknown).
func definitive(moves []intent.Move) bool {
	last := moves[len(moves)-1]
	return moves[0].From == intent.StateSubmitting &&
		(last.To.Terminal() || last.To == intent.StateNeedsReview || last.To == intent.StateRequiresCapture)
}

// fromUnknown rewrites moves that start at submitting to start at unknown.
func fromUnknown(moves []intent.Move) []intent.Move {
	var out []intent.Move
	for _, m := range moves {
		if m.From == intent.StateSubmitting && m.To == intent.StateUnknown {
			continue // already there
		}
		if m.From == intent.StateSubmitting {
			m.From = intent.StateUnknown
		}
		out = append(out, m)
	}
	return out
}

// inTx runs fn in one transaction. The job is not completed in it: River's
// completer does that once the run returns, in batches (docs/architecture.md,
// "The outbox worker"). A crash in between reruns the job, and the rerun
// finds the charge no longer pending and does nothing: the charge row, not
// the job, says what was done.
func (w *Worker) inTx(ctx context.Context, _ *river.Job[submit.ChargeArgs], _ *slog.Logger, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, w.cfg.DB, func(tx pgx.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return w.cfg.CrashPoints.Hit(ctx, crashpoint.WorkerAfterSaveBeforeCommit)
	})
}

// lostRace treats a lost compare-and-set as the end of this run: someone
// else moved the charge, and their move stands.
func (w *Worker) lostRace(ctx context.Context, log *slog.Logger, err error) error {
	var conflict *intent.ConflictError
	if errors.As(err, &conflict) {
		log.DebugContext(ctx, "the reconciler or a notification settled it first; this run's answer is not needed", "state", string(conflict.Current))
		return nil
	}
	return err
}

// rowNoun names a row by its id: a refund or a charge.
func rowNoun(id string) string {
	for _, k := range []intent.Kind{intent.KindRefund, intent.KindCapture, intent.KindCancel} {
		if strings.HasPrefix(id, k.IDPrefix()+"_") {
			return string(k)
		}
	}
	return "charge"
}

// rowIDKey is the log attribute a row's id goes under.
func rowIDKey(id string) string { return rowNoun(id) + "_id" }
