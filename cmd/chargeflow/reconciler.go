package main

import (
	"cmp"
	"context"
	"flag"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"golang.org/x/sync/errgroup"

	"chargeflow/crashpoint"
	"chargeflow/psp"
	"chargeflow/reconciler"
)

// reconcilerFlags configure the reconciler.
type reconcilerFlags struct {
	pspURL            string
	provider          string
	strongLookup      bool
	maxApplyDelay     time.Duration
	keyWindow         time.Duration
	keyWindowMargin   time.Duration
	lookupRate        float64
	callTimeout       time.Duration
	staleMargin       time.Duration
	settleMargin      time.Duration
	maxAttempts       int
	maxUnknownAge     time.Duration
	strandedAfter     time.Duration
	leaseTTL          time.Duration
	batchSize         int
	interval          time.Duration
	backoffBase       time.Duration
	backoffCap        time.Duration
	id                string
	submitMaxAttempts int
	maxConns          int
}

// bind registers the flags; shared, when true, skips the ones `all` already
// has from the API and worker flags.
func (f *reconcilerFlags) bind(fs *flag.FlagSet, e env, shared bool) {
	if !shared {
		fs.StringVar(&f.pspURL, "psp-url", cmp.Or(e.getenv("PSP_URL"), psp.DefaultBaseURL), "the provider's base URL (env PSP_URL)")
		fs.StringVar(&f.provider, "provider", "fakepsp", "the provider whose charges this reconciler resolves")
		fs.DurationVar(&f.callTimeout, "call-timeout", 10*time.Second, "the worker's provider call timeout (keep them equal); also bounds each lookup")
		fs.IntVar(&f.submitMaxAttempts, "submit-max-attempts", 10, "attempts of the charge.submit job of a re-attempt")
		fs.IntVar(&f.maxConns, "max-conns", 10, "database connections")
	}
	fs.BoolVar(&f.strongLookup, "strong-lookup", true, "the provider's lookup by key is strongly consistent, so a not-found after the settle window proves no charge exists")
	fs.DurationVar(&f.maxApplyDelay, "max-apply-delay", 0, "the longest the provider may take to apply a request or show it to lookups (widens the settle window)")
	fs.DurationVar(&f.keyWindow, "key-window", 24*time.Hour, "how long the provider remembers an idempotency key")
	fs.DurationVar(&f.keyWindowMargin, "key-window-margin", time.Hour, "how long before the key window ends to stop trusting not-found")
	fs.Float64Var(&f.lookupRate, "lookup-rate", 50, "lookups per second at the provider, per reconciler process")
	fs.DurationVar(&f.staleMargin, "stale-margin", 10*time.Second, "how long past the call timeout a charge may sit in submitting before the reconciler takes it")
	fs.DurationVar(&f.settleMargin, "settle-margin", time.Second, "padding of the settle window")
	fs.IntVar(&f.maxAttempts, "max-attempts", 5, "provider calls per charge before a proven not-found asks for review instead of another attempt")
	fs.DurationVar(&f.maxUnknownAge, "max-unknown-age", time.Hour, "how long a charge may stay unknown while lookups fail before it needs review")
	fs.DurationVar(&f.strandedAfter, "stranded-after", time.Minute, "how long a pending charge whose job River gave up on waits before it gets a new one")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", 30*time.Second, "how long a reconciler holds a charge")
	fs.IntVar(&f.batchSize, "batch-size", 32, "charges leased per tick")
	fs.DurationVar(&f.interval, "interval", time.Second, "time between ticks")
	fs.DurationVar(&f.backoffBase, "lookup-backoff-base", time.Second, "first wait after a failed lookup")
	fs.DurationVar(&f.backoffCap, "lookup-backoff-cap", 5*time.Minute, "longest wait between failed lookups")
	fs.StringVar(&f.id, "id", "", "this reconciler's name in leases and events (default host-pid-random)")
}

// newReconciler builds a reconciler on pool; riverClient inserts the jobs
// of re-attempts.
func newReconciler(pool *pgxpool.Pool, riverClient *river.Client[pgx.Tx], f reconcilerFlags, logger *slog.Logger, points *crashpoint.Set, tel *telemetry) (*reconciler.Reconciler, error) {
	return reconciler.New(reconciler.Config{
		DB:    pool,
		River: riverClient,
		Provider: reconciler.Provider{
			Name: f.provider,
			Client: psp.NewClient(psp.Config{BaseURL: f.pspURL, Timeout: f.callTimeout,
				TracerProvider: tel.tracerProvider, MeterProvider: tel.meterProvider}),
			StrongLookup:    f.strongLookup,
			MaxApplyDelay:   f.maxApplyDelay,
			KeyWindow:       f.keyWindow,
			KeyWindowMargin: f.keyWindowMargin,
			LookupRate:      f.lookupRate,
		},
		Logger:            logger,
		CrashPoints:       points,
		ID:                f.id,
		Interval:          f.interval,
		BatchSize:         f.batchSize,
		LeaseTTL:          f.leaseTTL,
		CallTimeout:       f.callTimeout,
		StaleMargin:       f.staleMargin,
		SettleMargin:      f.settleMargin,
		MaxAttempts:       f.maxAttempts,
		MaxUnknownAge:     f.maxUnknownAge,
		StrandedAfter:     f.strandedAfter,
		LookupBackoffBase: f.backoffBase,
		LookupBackoffCap:  f.backoffCap,
		TracerProvider:    tel.tracerProvider,
		MeterProvider:     tel.meterProvider,
	})
}

// runReconciler runs the reconciler until interrupted.
func runReconciler(ctx context.Context, e env, args []string) error {
	var c common
	var f reconcilerFlags
	var metricsAddr string
	fs := newFlagSet("reconciler", e)
	c.bind(fs, e)
	f.bind(fs, e, false)
	fs.StringVar(&metricsAddr, "metrics-addr", "", "serve GET /metrics on this address (default: no metrics listener)")
	setup, done, err := setupRole(ctx, e, "reconciler", &c, fs, args)
	if err != nil {
		return err
	}
	defer done()
	logger, points, tel := setup.logger, setup.points, setup.tel
	pool, err := c.openPool(ctx, poolOptions{role: "reconciler", maxConns: int32(f.maxConns)})
	if err != nil {
		return err
	}
	defer pool.Close()
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: logger, MaxAttempts: f.submitMaxAttempts,
		Middleware: riverMiddleware()})
	if err != nil {
		return err
	}
	r, err := newReconciler(pool, riverClient, f, logger, points, tel)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveMetrics(ctx, metricsAddr, tel, logger) })
	g.Go(func() error { return r.Run(ctx) })
	return g.Wait()
}
