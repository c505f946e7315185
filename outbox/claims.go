package outbox

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/batch"
	"github.com/chargeflow/chargeflow/internal/pg"
)

// The two moves every run makes are made with the runs asking at the same
// time, a batch to a statement (batcher): the claim of its charge,
// pending → submitting, before the call, and the move its answer proves,
// after it (docs/architecture.md, "The outbox worker"). Each charge keeps
// its own compare-and-set: a statement moves only rows still where their
// run expects them, and a run whose charge it did not move asks MoveCharge
// why, exactly as when it moved alone. Crash safety is each statement's:
// every charge of a claim is submitting, committed, before any of their
// calls is sent; the answers of a batch commit together, or none does.

// MaxBatch bounds one statement: the most charges a claim, or a settling
// transaction, moves.
const MaxBatch = 128

// moved is one charge's part of a batch: the charge after its move, or
// not moved.
type moved struct {
	charge intent.Charge
	ok     bool
}

// newClaims claims charges for their runs: pending → submitting, counting
// an attempt, as MoveCharge's claim does (intent.MoveMany).
func newClaims(db intent.DB) *batch.Batcher[intent.Ref, moved] {
	return batch.NewParallel(MaxBatch, BatchesInFlight, func(ctx context.Context, refs []intent.Ref) ([]moved, error) {
		moves := make([]intent.Move, len(refs))
		for i, ref := range refs {
			moves[i] = intent.Move{TenantID: ref.TenantID, ChargeID: ref.ChargeID,
				From: intent.StatePending, To: intent.StateSubmitting, Actor: actor, Reason: "submit", CountAttempt: true}
		}
		// A claim whose commit the standby did not confirm claims nothing:
		// no call may be sent for a submitting a failover can lose.
		var out []moved
		err := pg.Confirmed(ctx, func(ctx context.Context) (err error) {
			out, err = moveOnce(ctx, db, moves)
			return err
		})
		return out, err
	})
}

// newSettles writes the moves the runs' answers prove, in one transaction
// (intent.MoveMany), with the worker's crash point between the save and
// the commit.
func newSettles(db interface {
	Begin(context.Context) (pgx.Tx, error)
}, points *crashpoint.Set) *batch.Batcher[intent.Move, moved] {
	return batch.NewParallel(MaxBatch, BatchesInFlight, func(ctx context.Context, moves []intent.Move) ([]moved, error) {
		var out []moved
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			var err error
			if out, err = moveOnce(ctx, tx, moves); err != nil {
				return err
			}
			return points.Hit(ctx, crashpoint.WorkerAfterSaveBeforeCommit)
		})
		return out, err
	})
}

// moveOnce makes a batch's moves in one statement. Two runs of one charge
// in one batch: the first's move goes in the statement; the second learns
// where the charge is from MoveCharge, as it would have after the first
// one's own commit.
func moveOnce(ctx context.Context, db intent.DB, moves []intent.Move) ([]moved, error) {
	refs := make([]intent.Ref, len(moves))
	var distinct []intent.Move
	seen := map[intent.Ref]bool{}
	for i, m := range moves {
		refs[i] = intent.Ref{TenantID: m.TenantID, ChargeID: m.ChargeID}
		if !seen[refs[i]] {
			seen[refs[i]] = true
			distinct = append(distinct, m)
		}
	}
	got, err := intent.MoveMany(ctx, db, distinct)
	return once(refs, got), err
}

// once answers each ref of a batch with its charge if the statement moved
// it, the first time the ref appears: two runs of one charge never both
// hold it.
func once(refs []intent.Ref, got map[intent.Ref]intent.Charge) []moved {
	out := make([]moved, len(refs))
	given := make(map[intent.Ref]bool, len(refs))
	for i, ref := range refs {
		if c, ok := got[ref]; ok && !given[ref] {
			out[i], given[ref] = moved{charge: c, ok: true}, true
		}
	}
	return out
}
