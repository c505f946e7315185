package main

import (
	"context"
	"flag"
	"time"

	"github.com/chargeflow/chargeflow/accept"
	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/opsplane"
	"github.com/chargeflow/chargeflow/resolve"
	"github.com/chargeflow/chargeflow/submit"
)

// bindAPI registers the API's flags into o; addr receives --addr.
func bindAPI(fs *flag.FlagSet, o *app.Options, addr *string) {
	d, da := app.Defaults(), api.Defaults()
	dacc, dres, dops := accept.Defaults(), resolve.Defaults(), opsplane.Defaults()
	fs.StringVar(addr, "addr", "127.0.0.1:8080", "address to listen on")
	fs.DurationVar(&o.APIPool.LockTimeout, "lock-timeout", d.APIPool.LockTimeout, "how long a request waits for another one holding the same idempotency key before answering 409")
	fs.Float64Var(&o.API.RateLimit, "rate-limit", da.RateLimit, "requests per second per tenant (per API process), unless the tenant has its own")
	fs.IntVar(&o.API.RateBurst, "rate-burst", 0, "token bucket size per tenant (default twice the rate)")
	fs.IntVar(&o.API.AuthFailureLimit, "auth-failure-limit", da.AuthFailureLimit, "failed authentications a client address may make a minute (per API process) before it gets 429")
	fs.Int64Var(&o.API.MaxAmount, "max-amount", da.MaxAmount, "largest amount accepted, in minor units of a two-decimal currency (USD, EUR): the same number of major units caps every currency, scaled to its minor unit (JPY 999,999, KWD 999,999,990 by default)")
	fs.DurationVar(&o.API.IdempotencyTTL, "idempotency-ttl", da.IdempotencyTTL, "how long idempotency keys are remembered (1h to 168h)")
	fs.IntVar(&o.Accept.ReplayCache, "replay-cache", dacc.ReplayCache, "idempotency records kept in memory (per API process) to answer retries without a database read; negative keeps none")
	fs.IntVar(&o.Accept.Batches, "accept-batches", dacc.Batches, "accept statements run at once (per API process); the charges arriving while one runs share the next statement and commit; negative sends each charge in its own")
	bindSubmitMaxAttempts(fs, o)
	fs.IntVar(&o.APIPool.MaxConns, "max-conns", d.APIPool.MaxConns, "database connections")
	fs.DurationVar(&o.Resolve.ReconcileFloor, "reconcile-floor", dres.ReconcileFloor, "least time between an operator's forced lookup of a charge and the previous lookup")
	fs.DurationVar(&o.Ops.SessionTTL, "ops-session-ttl", dops.SessionTTL, "how long a sign-in to the operator's page at /ops/ lasts")
	fs.BoolVar(&o.Ops.SecureCookie, "ops-secure-cookie", false, "mark the operator page's session cookie Secure on plain HTTP too (TLS ends at a proxy in front of the API)")
}

// bindSubmitMaxAttempts registers --submit-max-attempts, a flag of every
// process that enqueues charge.submit jobs.
func bindSubmitMaxAttempts(fs *flag.FlagSet, o *app.Options) {
	fs.IntVar(&o.Jobs.MaxAttempts, "submit-max-attempts", submit.DefaultMaxAttempts, "attempts of a charge.submit job before a charge the provider never accepted fails as provider_unavailable")
}

// runAPI serves the HTTP API until interrupted.
func runAPI(ctx context.Context, e env, args []string) error {
	var c common
	var o app.Options
	var addr string
	var grace time.Duration
	fs := newFlagSet("api", e)
	c.bind(fs)
	bindAPI(fs, &o, &addr)
	bindProvider(fs, &o) // to check operators' resolutions with the provider
	bindCapabilities(fs, &o)
	bindWebhooks(fs, &o, false)
	bindShutdownGrace(fs, "api", &grace)
	r, done, err := setupRole(ctx, e, "api", &c, fs, args)
	if err != nil {
		return err
	}
	defer done()
	a, err := app.NewAPI(ctx, r.options(o, c, "api"))
	if err != nil {
		return err
	}
	defer a.Close()
	return serveHTTP(ctx, addr, a.Server.Handler(), r.logger, serveOptions{drain: a.Server.Drain, grace: grace})
}
