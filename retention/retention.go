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

// Defaults of the cleanup (docs/architecture.md, "Retention").
const (
	// DefaultBatchSize is how many records one statement deletes.
	DefaultBatchSize = 1000
	// DefaultDuty is the share of wall time a run spends deleting: after
	// each batch it rests long enough to keep to it, so that a backlog
	// never takes more than that share of a database connection from the
	// accepts.
	DefaultDuty = 0.1
	// DefaultTimeout bounds one run. It is the cleanup's own, not the
	// charge.submit jobs' (River's default for the client), and stays
	// below River's rescue delay (that job timeout plus two minutes), so
	// a live run is never rescued as a stuck one. A run that meets it
	// has deleted what it could; the next run goes on.
	DefaultTimeout = 100 * time.Second
)

// Worker deletes expired idempotency records in batches, so no statement
// holds many row locks or runs for long, each batch starting where the last
// one ended, resting between batches.
type Worker struct {
	river.WorkerDefaults[CleanupArgs]
	db        *pgxpool.Pool
	batchSize int
	duty      float64
	timeout   time.Duration
	logger    *slog.Logger
	now       func() time.Time
}

// NewWorker returns the cleanup worker. batchSize defaults to
// DefaultBatchSize.
func NewWorker(db *pgxpool.Pool, batchSize int, logger *slog.Logger) *Worker {
	return &Worker{db: db, batchSize: cmp.Or(batchSize, DefaultBatchSize), duty: DefaultDuty, timeout: DefaultTimeout,
		logger: cmp.Or(logger, slog.New(slog.DiscardHandler)), now: time.Now}
}

// WithDuty sets the share of wall time a run spends deleting, in (0, 1];
// 1 never rests.
func (w *Worker) WithDuty(duty float64) *Worker {
	if duty > 0 && duty <= 1 {
		w.duty = duty
	}
	return w
}

// WithTimeout bounds a run by d instead of DefaultTimeout, when d is
// positive: the worker's wiring keeps it below River's rescue delay.
func (w *Worker) WithTimeout(d time.Duration) *Worker {
	if d > 0 {
		w.timeout = d
	}
	return w
}

// Timeout is the run's own bound.
func (w *Worker) Timeout(*river.Job[CleanupArgs]) time.Duration { return w.timeout }

// Work deletes batches until a batch comes back short.
func (w *Worker) Work(ctx context.Context, _ *river.Job[CleanupArgs]) error {
	_, err := w.RunOnce(ctx)
	return err
}

// Run is what one run did.
type Run struct {
	Deleted, Batches int
	// Busy is the time spent in delete statements, Wall the whole run's.
	Busy, Wall time.Duration
	// TimedOut says ctx ended the run before the backlog did.
	TimedOut bool
}

// RunOnce is one run of the job: batches until one comes back short. Its
// cost is linear in what it deletes: each batch's index scan starts at the
// expiry where the previous one stopped.
func (w *Worker) RunOnce(ctx context.Context) (run Run, err error) {
	start := time.Now()
	cutoff := w.now()
	from := time.Time{}
	defer func() {
		run.Wall = time.Since(start)
		if run.Deleted > 0 {
			w.logger.InfoContext(ctx, "deleted expired idempotency records", "count", run.Deleted, "batches", run.Batches,
				"duration", run.Wall.Round(time.Millisecond).String())
		}
	}()
	for {
		began := time.Now()
		var n int
		var last time.Time
		n, last, err = intent.DeleteExpiredIdempotency(ctx, w.db, from, cutoff, w.batchSize)
		took := time.Since(began)
		run.Busy += took
		if err != nil {
			run.TimedOut = ctx.Err() != nil
			return run, err
		}
		run.Deleted, run.Batches, from = run.Deleted+n, run.Batches+1, last
		if n < w.batchSize {
			return run, nil
		}
		if w.duty < 1 {
			rest := time.Duration(float64(took) * (1 - w.duty) / w.duty)
			select {
			case <-ctx.Done():
				run.TimedOut = true
				return run, ctx.Err()
			case <-time.After(rest):
			}
		}
	}
}

// PeriodicJob schedules the cleanup every interval (default 10 minutes), and
// once at start.
func PeriodicJob(interval time.Duration) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(cmp.Or(interval, 10*time.Minute)),
		func() (river.JobArgs, *river.InsertOpts) { return CleanupArgs{}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})
}
