package main

import (
	"context"
	"flag"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/reconciler"
)

// bindReconciler registers the reconciler's own flags into o. The
// provider's URL, name, call timeout and key window, the submit job's
// attempts and the pool size are registered by the caller (runReconciler,
// or runAll from the API's and the worker's flags).
func bindReconciler(fs *flag.FlagSet, o *app.Options) {
	d, rc := reconciler.Defaults(), &o.Reconciler
	fs.DurationVar(&rc.Provider.MaxApplyDelay, "max-apply-delay", d.Provider.MaxApplyDelay, "the longest the provider may take to apply a request or show it to lookups (widens the apply window)")
	fs.Float64Var(&rc.Provider.LookupRate, "lookup-rate", d.Provider.LookupRate, "lookups per second at the provider, per reconciler process")
	fs.DurationVar(&rc.StaleMargin, "stale-margin", d.StaleMargin, "how long past the call timeout a charge may sit in submitting before the reconciler takes it")
	fs.DurationVar(&rc.ApplyMargin, "apply-margin", d.ApplyMargin, "padding of the apply window")
	fs.IntVar(&rc.MaxAttempts, "max-attempts", d.MaxAttempts, "provider calls per charge before a proven not-found asks for review instead of another attempt")
	fs.DurationVar(&rc.MaxUnknownAge, "max-unknown-age", d.MaxUnknownAge, "how long a charge may stay unknown while lookups fail before it needs review")
	fs.DurationVar(&rc.StrandedAfter, "stranded-after", d.StrandedAfter, "how long a pending charge whose job River gave up on waits before it gets a new one")
	fs.DurationVar(&rc.LeaseTTL, "lease-ttl", d.LeaseTTL, "how long a reconciler holds a charge")
	fs.IntVar(&rc.BatchSize, "batch-size", d.BatchSize, "charges leased per tick")
	fs.DurationVar(&rc.Interval, "interval", d.Interval, "time between ticks")
	fs.DurationVar(&rc.LookupBackoffBase, "lookup-backoff-base", d.LookupBackoffBase, "first wait after a failed lookup")
	fs.DurationVar(&rc.LookupBackoffCap, "lookup-backoff-cap", d.LookupBackoffCap, "longest wait between failed lookups")
	fs.DurationVar(&rc.HoldMargin, "hold-margin", d.HoldMargin, "how long before its provider's hold window ends a held charge is first looked up to find a release")
	fs.DurationVar(&rc.HoldRecheck, "hold-recheck", d.HoldRecheck, "how often a held charge past its hold margin is looked up again")
	fs.StringVar(&rc.ID, "id", "", "this reconciler's name in leases and events (default host-pid-random)")
}

// runReconciler runs the reconciler until interrupted.
func runReconciler(ctx context.Context, e env, args []string) error {
	var c common
	var o app.Options
	var metricsAddr string
	var grace time.Duration
	fs := newFlagSet("reconciler", e)
	c.bind(fs)
	bindProvider(fs, &o)
	bindCapabilities(fs, &o)
	bindSubmitMaxAttempts(fs, &o)
	fs.IntVar(&o.ReconcilerPool.MaxConns, "max-conns", app.Defaults().ReconcilerPool.MaxConns, "database connections")
	bindReconciler(fs, &o)
	fs.StringVar(&metricsAddr, "metrics-addr", "", "serve GET /metrics on this address (default: no metrics listener)")
	bindShutdownGrace(fs, "reconciler", &grace)
	setup, done, err := setupRole(ctx, e, "reconciler", &c, fs, args)
	if err != nil {
		return err
	}
	defer done()
	o = setup.options(o, c, "reconciler")
	pool, err := app.ReconcilerPool(ctx, o)
	if err != nil {
		return err
	}
	defer pool.Close()
	jobs, err := app.NewInserter(pool, o)
	if err != nil {
		return err
	}
	r, err := app.NewReconciler(pool, jobs, o)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveMetrics(ctx, metricsAddr, setup.tel, setup.logger) })
	work, stop := afterGrace(ctx, grace)
	defer stop()
	g.Go(func() error { return r.RunUntil(work, ctx.Done()) })
	return g.Wait()
}

// bindCapabilities registers what the provider promises (its name on
// charges, its key window, how consistent its lookup is, how long it holds
// an authorization) and the margin
// kept before its key window ends: the reconciler's decisions follow from
// them, and the API refuses an operator's re-attempt past the window.
func bindCapabilities(fs *flag.FlagSet, o *app.Options) {
	caps := &o.Provider.Capabilities
	fs.StringVar(&caps.Name, "provider", api.Defaults().Provider, "the provider's name on charges: where new charges go, whose charges a reconciler resolves")
	fs.DurationVar(&caps.KeyWindow, "key-window", psp.DefaultKeyWindow, "how long the provider de-duplicates an idempotency key")
	fs.DurationVar(&o.Reconciler.Provider.KeyWindowMargin, "key-window-margin", reconciler.Defaults().Provider.KeyWindowMargin, "how long before the key window ends to stop trusting not-found or re-sending")
	caps.Consistency = psp.Strong
	fs.Var(strongLookup{&caps.Consistency}, "strong-lookup", "the provider's lookup is strongly consistent, so a not-found after the apply window proves no charge exists")
	fs.DurationVar(&caps.LagBound, "lookup-lag-bound", 0, "with --strong-lookup=false: the longest the lookup may lag behind the provider (0: unbounded, so a not-found never proves anything)")
	fs.DurationVar(&caps.HoldWindow, "hold-window", psp.DefaultHoldWindow, "with --psp fake or stripe: how long the provider holds an authorization (a charge to capture later) before it releases it itself (the fake's --hold-window; at Stripe, 7 days for online cards, 2 for in-person)")
}

// strongLookup is --strong-lookup: a boolean flag that sets a consistency.
type strongLookup struct{ c *psp.Consistency }

func (f strongLookup) String() string {
	return strconv.FormatBool(f.c != nil && *f.c != psp.Eventual)
}

func (f strongLookup) Set(value string) error {
	strong, err := strconv.ParseBool(value)
	if err != nil {
		return err
	}
	*f.c = map[bool]psp.Consistency{true: psp.Strong, false: psp.Eventual}[strong]
	return nil
}

func (f strongLookup) Get() any { return f.c != nil && *f.c != psp.Eventual }

func (f strongLookup) IsBoolFlag() bool { return true }
