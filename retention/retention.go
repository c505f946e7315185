// Package retention deletes what chargeflow keeps only for a while: expired
// idempotency records (docs/api.md). Charges and their events are kept.
//
// The work is a River periodic job, so River's leader election runs it once
// however many worker processes there are.
package retention

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"chargeflow/intent"
)

// CleanupArgs is the idempotency.cleanup job.
type CleanupArgs struct{}

// Kind is the River job kind.
func (CleanupArgs) Kind() string { return "idempotency.cleanup" }

// Worker deletes expired idempotency records in batches, so no statement
// holds many row locks or runs for long.
type Worker struct {
	river.WorkerDefaults[CleanupArgs]
	db        *pgxpool.Pool
	batchSize int
	logger    *slog.Logger
	now       func() time.Time
}

// NewWorker returns the cleanup worker. batchSize defaults to 1,000.
func NewWorker(db *pgxpool.Pool, batchSize int, logger *slog.Logger) *Worker {
	return &Worker{db: db, batchSize: cmp.Or(batchSize, 1000), logger: cmp.Or(logger, slog.New(slog.DiscardHandler)), now: time.Now}
}

// Work deletes batches until a batch comes back short.
func (w *Worker) Work(ctx context.Context, _ *river.Job[CleanupArgs]) error {
	total := 0
	for {
		n, err := intent.DeleteExpiredIdempotency(ctx, w.db, w.now(), w.batchSize)
		if err != nil {
			return err
		}
		total += n
		if n < w.batchSize {
			break
		}
	}
	if total > 0 {
		w.logger.InfoContext(ctx, "deleted expired idempotency records", "count", total)
	}
	return nil
}

// PeriodicJob schedules the cleanup every interval (default 10 minutes), and
// once at start.
func PeriodicJob(interval time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(cmp.Or(interval, 10*time.Minute)),
		func() (river.JobArgs, *river.InsertOpts) { return CleanupArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})
}
