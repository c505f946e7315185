// Package retention deletes what chargeflow keeps only for a while: expired
// idempotency records (docs/api.md), and events past the event retention
// with their webhook deliveries and attempts (docs/webhooks.md). Charges and
// their audit trail are kept.
//
// The work is a River periodic job, so River's leader election runs it once
// however many worker processes there are (docs/architecture.md,
// "Retention").
package retention

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/chargeflow/chargeflow/event"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/tenant"
)

// CleanupArgs is the retention job. Its kind is still idempotency.cleanup,
// the name it had when it deleted only idempotency records, so the periodic
// job already scheduled in a database keeps its worker.
type CleanupArgs struct{}

// Kind is the River job kind.
func (CleanupArgs) Kind() string { return "idempotency.cleanup" }

// Defaults of the cleanup (docs/architecture.md, "Retention").
const (
	// DefaultBatchSize is how many rows one statement deletes (for
	// events, how many it walks).
	DefaultBatchSize = 1000
	// DefaultDuty is the share of wall time a run spends deleting: before
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
	// DefaultEventRetention is how long events are kept, as Stripe keeps
	// them: thirty days.
	DefaultEventRetention = 30 * 24 * time.Hour
)

// Worker deletes expired idempotency records, then events past their
// retention, in batches, so no statement holds many row locks or runs for
// long, each batch starting where the last one ended, resting between
// batches.
type Worker struct {
	river.WorkerDefaults[CleanupArgs]
	db             *pgxpool.Pool
	batchSize      int
	duty           float64
	timeout        time.Duration
	eventRetention time.Duration
	logger         *slog.Logger

	// floors holds, per tenant, the id below which an earlier run of this
	// worker left no event it could delete: the next run's walk starts
	// there, not through the index entries of every event deleted since
	// the last vacuum. A new process starts from the first event once.
	mu     sync.Mutex
	floors map[string]string
	// expiredBefore is where the last run's walk of idempotency records
	// ended (deleteIdempotency).
	expiredBefore time.Time
}

// NewWorker returns the cleanup worker. batchSize defaults to
// DefaultBatchSize.
func NewWorker(db *pgxpool.Pool, batchSize int, logger *slog.Logger) *Worker {
	return &Worker{db: db, batchSize: cmp.Or(batchSize, DefaultBatchSize), duty: DefaultDuty, timeout: DefaultTimeout,
		eventRetention: DefaultEventRetention, logger: cmp.Or(logger, slog.New(slog.DiscardHandler)),
		floors: map[string]string{}}
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

// WithEventRetention keeps events for d instead of DefaultEventRetention;
// zero or less keeps them forever.
func (w *Worker) WithEventRetention(d time.Duration) *Worker {
	w.eventRetention = max(d, 0)
	return w
}

// Timeout is the run's own bound.
func (w *Worker) Timeout(*river.Job[CleanupArgs]) time.Duration { return w.timeout }

// Work runs the cleanup once.
func (w *Worker) Work(ctx context.Context, _ *river.Job[CleanupArgs]) error {
	_, err := w.RunOnce(ctx)
	return err
}

// Run is what one run did.
type Run struct {
	// Deleted is the idempotency records deleted, in Batches.
	Deleted, Batches int
	// Events, Deliveries and Attempts are the rows deleted past the event
	// retention, in EventBatches; Kept the events past it kept because a
	// delivery of theirs is still pending.
	Events, Deliveries, Attempts, Kept, EventBatches int
	// Busy is the time spent in delete statements, Wall the whole run's.
	Busy, Wall time.Duration
	// TimedOut says ctx ended the run before the backlog did.
	TimedOut bool
}

// RunOnce is one run of the job: the expired idempotency records, then each
// tenant's events past the retention, each in batches until one comes back
// short. Its cost is linear in what it deletes: each batch's index scan
// starts where the previous one stopped.
func (w *Worker) RunOnce(ctx context.Context) (run Run, err error) {
	start := time.Now()
	p := &pacer{duty: w.duty, run: &run}
	defer func() {
		run.Wall = time.Since(start)
		run.TimedOut = err != nil && ctx.Err() != nil
		// Counts only: nothing of a charge, a key or an event is logged.
		if run.Deleted > 0 {
			w.logger.InfoContext(ctx, "deleted expired idempotency records", "count", run.Deleted, "batches", run.Batches,
				"duration", run.Wall.Round(time.Millisecond).String())
		}
		if run.Events > 0 || run.Kept > 0 {
			w.logger.InfoContext(ctx, "deleted events past their retention", "events", run.Events, "deliveries", run.Deliveries,
				"attempts", run.Attempts, "kept", run.Kept, "batches", run.EventBatches,
				"duration", run.Wall.Round(time.Millisecond).String())
		}
	}()
	// Expiry and retention are judged by the database's clock: the one
	// that wrote the events' times, and the same whichever worker runs
	// the job (docs/operations.md, "Clocks").
	var now time.Time
	if err := w.db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return run, fmt.Errorf("retention: read the database's clock: %w", err)
	}
	if err := w.deleteIdempotency(ctx, p, now); err != nil {
		return run, err
	}
	if w.eventRetention <= 0 {
		return run, nil
	}
	return run, w.deleteEvents(ctx, p, now.Add(-w.eventRetention))
}

// deleteIdempotency deletes the records expired at now, oldest first,
// starting at the latest expiry an earlier run of this worker deleted:
// every record that expired before it was deleted then, and a record
// written since expires at least an hour (the shortest TTL) after it, so
// the walk skips the index entries of what earlier runs deleted (they stay
// until vacuum). A new process starts from the first record once.
func (w *Worker) deleteIdempotency(ctx context.Context, p *pacer, now time.Time) error {
	w.mu.Lock()
	from := w.expiredBefore
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.expiredBefore = from
		w.mu.Unlock()
	}()
	return p.drain(ctx, func(ctx context.Context) (bool, error) {
		n, last, err := intent.DeleteExpiredIdempotency(ctx, w.db, from, now, w.batchSize)
		if err != nil {
			return false, err
		}
		p.run.Deleted, p.run.Batches, from = p.run.Deleted+n, p.run.Batches+1, last
		return n == w.batchSize, nil
	})
}

// deleteEvents deletes, tenant by tenant in id order, the events made before
// cutoff whose deliveries are all finished, with their deliveries and
// attempts. Each tenant's walk starts at its floor and moves it up to where
// no deletable event is left below it: the walk's end, or the first event
// it kept for a pending delivery, which the next run meets again.
func (w *Worker) deleteEvents(ctx context.Context, p *pacer, cutoff time.Time) error {
	tenants, err := tenant.IDs(ctx, w.db)
	if err != nil {
		return err
	}
	for _, tenantID := range tenants {
		after := w.floor(tenantID)
		kept := ""
		err := p.drain(ctx, func(ctx context.Context) (bool, error) {
			b, err := event.DeleteExpiredEvents(ctx, w.db, tenantID, after, cutoff, w.batchSize)
			if err != nil {
				return false, err
			}
			r := p.run
			r.Events, r.Deliveries, r.Attempts = r.Events+b.Events, r.Deliveries+b.Deliveries, r.Attempts+b.Attempts
			r.Kept, r.EventBatches = r.Kept+b.Scanned-b.Events, r.EventBatches+1
			after = b.Last
			if kept == "" {
				kept = b.FirstKept
			}
			return b.Scanned == w.batchSize, nil
		})
		floor := after
		if kept != "" {
			// The kept event's millisecond: ids sort by it, so the
			// next walk starts just below the kept event.
			floor = min(floor, ids.FloorOf(kept))
		}
		w.setFloor(tenantID, floor)
		if err != nil {
			return err
		}
	}
	return nil
}

func (w *Worker) floor(tenantID string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.floors[tenantID]
}

func (w *Worker) setFloor(tenantID, floor string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.floors[tenantID] = floor
}

// pacer keeps a run to its duty, whatever it deletes: before each batch but
// the run's first it rests for as long as the duty asks of the batch before
// it (nine times as long at 10 %), so a run with a backlog takes at most
// that share of one database connection's time, however its batches are
// split between tables and tenants.
type pacer struct {
	duty float64
	run  *Run
	owed time.Duration
}

// drain calls batch until it reports a short batch (false) or fails,
// resting before each call as the duty asks, and counts the time spent in
// it as the run's Busy.
func (p *pacer) drain(ctx context.Context, batch func(context.Context) (full bool, err error)) error {
	for {
		if p.owed > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(p.owed):
			}
		}
		began := time.Now()
		full, err := batch(ctx)
		took := time.Since(began)
		p.run.Busy += took
		p.owed = 0
		if p.duty < 1 {
			p.owed = time.Duration(float64(took) * (1 - p.duty) / p.duty)
		}
		if err != nil || !full {
			return err
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
