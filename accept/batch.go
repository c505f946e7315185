package accept

import (
	"context"
	"errors"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/pg"
)

// Accepts share a commit (docs/architecture.md, "Accepts share a commit").
// The charges that arrive while an accept statement runs are accepted
// together by the next one (package internal/batch: no timer, so a quiet
// API sends each charge alone, at once), and each keeps everything it
// had alone: its idempotency record, its creation audit entry and its job
// are written with it or not at all, and its 201 is sent only after the
// commit that holds them. What a batch saves is what every statement pays
// whatever it writes — a round trip, the executor's start, a commit and
// its WAL flush — which was most of an accept's cost.

// maxAcceptBatch bounds one statement.
const maxAcceptBatch = 8

// acceptAnswer is one charge's part of a batch: what the statement did
// with it, or why it was not accepted.
type acceptAnswer struct {
	intent.Accepted
	err error
}

// errAcceptAlone answers each charge of a batch whose statement failed:
// it wrote nothing, and each caller then sends its charge alone.
var errAcceptAlone = errors.New("accept batch failed")

// acceptBatch accepts the charges of one batch. Alone, a charge gets the
// statement it always had. Together, they get one (intent.AcceptMany); if
// that fails it wrote nothing — typically one key another request still
// holds past the lock timeout — and each caller then sends its charge
// alone, outside the batch's turn (acceptOnce), so each gets its own
// answer (that one key its 409, the others their 201) and the next batch
// does not wait for them.
func (a *Acceptor) acceptBatch(ctx context.Context, as []intent.Acceptance) ([]acceptAnswer, error) {
	a.batchSize.Record(ctx, int64(len(as)))
	out := make([]acceptAnswer, len(as))
	if len(as) == 1 {
		g := &out[0]
		g.err = pg.Confirmed(ctx, func(ctx context.Context) (err error) {
			g.Inserted, g.Record, g.Found, err = intent.AcceptOrReplay(ctx, a.cfg.DB, as[0])
			return err
		})
		return out, nil
	}
	var got []intent.Accepted
	err := pg.Confirmed(ctx, func(ctx context.Context) (err error) {
		got, err = intent.AcceptMany(ctx, a.cfg.DB, as)
		return err
	})
	if errors.Is(err, pg.ErrCommitUnconfirmed) {
		// Committed here, perhaps not on the standby: no charge of the
		// batch may be answered, nor sent alone again (a replay would
		// find it; the caller's retry does, once the standby has it).
		for i := range out {
			out[i].err = err
		}
		return out, nil
	}
	if err != nil {
		a.cfg.Logger.InfoContext(ctx, "accept batch failed; accepting its charges one by one", "charges", len(as), "err", err.Error())
		for i := range out {
			out[i].err = errAcceptAlone
		}
		return out, nil
	}
	for i, g := range got {
		out[i].Accepted = g
	}
	return out, nil
}
