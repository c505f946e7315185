package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/psp"
)

// bindWorker registers the outbox worker's flags into o; the provider's
// URL and call timeout are bindProvider's.
func bindWorker(fs *flag.FlagSet, o *app.Options) {
	d := app.Defaults().Worker
	fs.IntVar(&o.Worker.Concurrency, "concurrency", 0, fmt.Sprintf("charge.submit jobs worked at once: calls that may wait on the provider at the same time (a job holds no database connection during its call; 0: %d per CPU it may use, at most %d)", app.WorkerSlotsPerCPU, psp.MaxIdleConns))
	fs.DurationVar(&o.Worker.RescueAfter, "rescue-after", 0, "how long a job may run before River reruns it, as after a crash; at least the call timeout + 6s (default: the call timeout + 5s + 2m)")
	fs.DurationVar(&o.Worker.UnknownCheckAfter, "unknown-check-after", d.UnknownCheckAfter, "how soon the reconciler first looks up a charge whose outcome is unknown")
	fs.DurationVar(&o.Worker.Retry.Base, "retry-base", d.Retry.Base, "first backoff after the provider provably did not apply a charge")
	fs.DurationVar(&o.Worker.Retry.Cap, "retry-cap", d.Retry.Cap, "longest backoff between attempts")
	fs.DurationVar(&o.Worker.RetentionInterval, "retention-interval", d.RetentionInterval, "how often expired idempotency records, and events past --event-retention, are deleted (by one worker: River's leader)")
	o.Worker.EventRetention = d.EventRetention
	fs.Var(&keepFor{d: &o.Worker.EventRetention, value: d.EventRetention}, "event-retention", "how long events, with their webhook deliveries and attempts, are kept; 0 keeps them forever")
}

// keepFor is --event-retention: a duration whose 0 keeps events forever,
// which app.Options spells as negative (its zero takes the default). It
// reads back as given, so that its bounds (flagBounds) judge what a person
// wrote: a negative value is refused there, never taken for forever.
type keepFor struct {
	d     *time.Duration
	value time.Duration
}

func (f *keepFor) String() string { return f.value.String() }

func (f *keepFor) Get() any { return f.value }

func (f *keepFor) Set(value string) error {
	d, err := time.ParseDuration(value)
	if err != nil {
		return err
	}
	f.value, *f.d = d, d
	if d == 0 {
		*f.d = -1
	}
	return nil
}

// runWorker runs the outbox worker until interrupted.
func runWorker(ctx context.Context, e env, args []string) error {
	var c common
	var o app.Options
	var metricsAddr string
	var grace time.Duration
	fs := newFlagSet("worker", e)
	c.bind(fs)
	bindProvider(fs, &o)
	bindWorker(fs, &o)
	fs.IntVar(&o.Worker.MaxConns, "max-conns", 0, "database connections, shared by every job: a job holds one only for a statement (0: 4 per CPU + 8)")
	bindWebhooks(fs, &o, false)
	fs.StringVar(&metricsAddr, "metrics-addr", "", "serve GET /metrics on this address (default: no metrics listener)")
	bindShutdownGrace(fs, "worker", &grace)
	r, done, err := setupRole(ctx, e, "worker", &c, fs, args)
	if err != nil {
		return err
	}
	defer done()
	if err := brokenModes(e, &o, r.logger); err != nil {
		return err
	}
	o = r.options(o, c, "worker")
	pool, err := app.WorkerPool(ctx, o)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := app.NewWorker(pool, o)
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveMetrics(ctx, metricsAddr, r.tel, r.logger) })
	g.Go(func() error { return app.RunRiver(ctx, client, r.logger, grace) })
	return g.Wait()
}
