package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"golang.org/x/sync/errgroup"

	"chargeflow/crashpoint"
	"chargeflow/outbox"
	"chargeflow/psp"
	"chargeflow/retention"
)

// workerFlags configure the outbox worker.
type workerFlags struct {
	pspURL            string
	concurrency       int
	callTimeout       time.Duration
	rescueAfter       time.Duration
	unknownCheckAfter time.Duration
	retryBase         time.Duration
	retryCap          time.Duration
	retentionInterval time.Duration
	// insertMaxAttempts is the max_attempts of jobs this client inserts
	// (in `all`, the reconciler's re-attempts); 0 is River's default.
	insertMaxAttempts int
	// resendOnRerun is the scenario runner's negative control, set only
	// through CHARGEFLOW_BROKEN=resend_on_rerun.
	resendOnRerun bool
}

func (f *workerFlags) bind(fs *flag.FlagSet, e env) {
	fs.StringVar(&f.pspURL, "psp-url", cmp.Or(e.getenv("PSP_URL"), psp.DefaultBaseURL), "the provider's base URL (env PSP_URL)")
	fs.IntVar(&f.concurrency, "concurrency", 20, "charge.submit jobs worked at once")
	fs.DurationVar(&f.callTimeout, "call-timeout", 10*time.Second, "how long one provider call may take before its outcome is unknown")
	fs.DurationVar(&f.rescueAfter, "rescue-after", 0, "how long a job may run before River reruns it, as after a crash; more than the call timeout + 5s (default: that + 2m)")
	fs.DurationVar(&f.unknownCheckAfter, "unknown-check-after", time.Second, "how soon the reconciler first looks up a charge whose outcome is unknown")
	fs.DurationVar(&f.retryBase, "retry-base", time.Second, "first backoff after the provider provably did not apply a charge")
	fs.DurationVar(&f.retryCap, "retry-cap", 5*time.Minute, "longest backoff between attempts")
	fs.DurationVar(&f.retentionInterval, "retention-interval", 10*time.Minute, "how often expired idempotency records are deleted (by one worker: River's leader)")
}

// newWorkerClient builds the River client that runs the outbox worker.
func newWorkerClient(pool *pgxpool.Pool, f workerFlags, logger *slog.Logger, points *crashpoint.Set, tel *telemetry) (*river.Client[pgx.Tx], error) {
	worker, err := outbox.NewWorker(outbox.Config{
		DB: pool,
		Provider: psp.NewClient(psp.Config{BaseURL: f.pspURL, Timeout: f.callTimeout,
			TracerProvider: tel.tracerProvider, MeterProvider: tel.meterProvider}),
		Logger:            logger,
		CrashPoints:       points,
		CallTimeout:       f.callTimeout,
		UnknownCheckAfter: f.unknownCheckAfter,
		ResendOnRerun:     f.resendOnRerun,
		TracerProvider:    tel.tracerProvider,
		MeterProvider:     tel.meterProvider,
	})
	if err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, worker); err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(workers, retention.NewWorker(pool, 0, logger)); err != nil {
		return nil, err
	}
	return river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:               logger,
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: f.concurrency}},
		Workers:              workers,
		PeriodicJobs:         []*river.PeriodicJob{retention.PeriodicJob(f.retentionInterval)},
		MaxAttempts:          f.insertMaxAttempts,
		RetryPolicy:          outbox.RetryPolicy{Base: f.retryBase, Cap: f.retryCap},
		JobTimeout:           outbox.JobTimeout(f.callTimeout),
		RescueStuckJobsAfter: cmp.Or(f.rescueAfter, outbox.JobTimeout(f.callTimeout)+2*time.Minute),
		FetchCooldown:        20 * time.Millisecond,
		FetchPollInterval:    250 * time.Millisecond,
		Middleware:           riverMiddleware(),
	})
}

// runWorker runs the outbox worker until interrupted.
func runWorker(ctx context.Context, e env, args []string) error {
	var c common
	var f workerFlags
	var metricsAddr string
	fs := newFlagSet("worker", e)
	c.bind(fs, e)
	f.bind(fs, e)
	fs.StringVar(&metricsAddr, "metrics-addr", "", "serve GET /metrics on this address (default: no metrics listener)")
	r, done, err := setupRole(ctx, e, "worker", &c, fs, args)
	if err != nil {
		return err
	}
	defer done()
	logger, points, tel := r.logger, r.points, r.tel
	if err := brokenModes(e, &f, logger); err != nil {
		return err
	}
	pool, err := c.openPool(ctx, poolOptions{role: "worker", maxConns: int32(f.concurrency + 5)})
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := newWorkerClient(pool, f, logger, points, tel)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveMetrics(ctx, metricsAddr, tel, logger) })
	g.Go(func() error { return runRiver(ctx, client, logger) })
	return g.Wait()
}

// runRiver starts a River client and stops it, letting running jobs finish,
// when ctx is done.
func runRiver(ctx context.Context, client *river.Client[pgx.Tx], logger *slog.Logger) error {
	// Cancelling Start's context would cancel running jobs mid-call; the
	// shutdown below is a soft stop instead.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start river: %w", err)
	}
	logger.Info("worker started")
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop river: %w", err)
	}
	return nil
}

// brokenModes arms the deliberately broken behaviours the scenario runner
// uses as negative controls. They exist to prove the invariant checker can
// fail; they are read only from CHARGEFLOW_BROKEN and are loudly logged.
func brokenModes(e env, f *workerFlags, logger *slog.Logger) error {
	switch mode := e.getenv("CHARGEFLOW_BROKEN"); mode {
	case "":
		return nil
	case "resend_on_rerun":
		logger.Error("BROKEN MODE: a rerun re-sends charges found submitting; this can double-charge", "mode", mode)
		f.resendOnRerun = true
		return nil
	default:
		return fmt.Errorf("CHARGEFLOW_BROKEN=%q: unknown broken mode", mode)
	}
}
