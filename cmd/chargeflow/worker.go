package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/outbox"
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
	bindBreaker(fs, &o.Worker.Breaker)
}

// bindBreaker registers the flags of the circuit breaker the worker keeps
// for each provider account (docs/routing.md, "Failover"), with
// outbox.DefaultBreaker's values for defaults.
func bindBreaker(fs *flag.FlagSet, b *outbox.BreakerConfig) {
	*b = outbox.DefaultBreaker()
	fs.Var((*count32)(&b.ConsecutiveFailures), "breaker-failures", "calls in a row that failed (refused, unanswered, or of unknown outcome) that open a provider account's circuit breaker (docs/routing.md, \"Failover\")")
	fs.Float64Var(&b.FailureRatio, "breaker-failure-ratio", b.FailureRatio, "the share of failed calls within --breaker-window that opens the breaker too, once there were --breaker-min-calls")
	fs.Var((*count32)(&b.MinCalls), "breaker-min-calls", "the calls within --breaker-window before --breaker-failure-ratio can open the breaker")
	fs.DurationVar(&b.Window, "breaker-window", b.Window, "how long a closed breaker counts calls before starting afresh")
	fs.DurationVar(&b.OpenFor, "breaker-open-for", b.OpenFor, "how long an open breaker sends its account nothing (a charge moves to the next account of its route, or waits) before letting calls through again")
	fs.Var((*count32)(&b.HalfOpenCalls), "breaker-half-open-calls", "the calls a breaker lets through once --breaker-open-for has passed; one answered closes it")
}

// count32 is a flag of a count the breaker keeps as a uint32; it reads
// as an int, which its bounds (flagBounds) judge.
type count32 uint32

func (c *count32) String() string {
	if c == nil {
		return "0"
	}
	return strconv.FormatUint(uint64(*c), 10)
}

func (c *count32) Set(value string) error {
	n, err := strconv.ParseUint(value, 10, 32)
	if err != nil {
		return err
	}
	*c = count32(n)
	return nil
}

func (c *count32) Get() any { return int(*c) }

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
