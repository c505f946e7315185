package main

import (
	"context"
	"flag"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"chargeflow/api"
	"chargeflow/crashpoint"
	"chargeflow/migrations"
)

// apiFlags configure the HTTP API.
type apiFlags struct {
	addr              string
	lockTimeout       time.Duration
	rateLimit         float64
	rateBurst         int
	maxAmount         int64
	idempotencyTTL    time.Duration
	provider          string
	submitMaxAttempts int
	maxConns          int
}

func (f *apiFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "address to listen on")
	fs.DurationVar(&f.lockTimeout, "lock-timeout", time.Second, "how long a request waits for another one holding the same idempotency key before answering 409")
	fs.Float64Var(&f.rateLimit, "rate-limit", 5000, "requests per second per tenant (per API process), unless the tenant has its own")
	fs.IntVar(&f.rateBurst, "rate-burst", 0, "token bucket size per tenant (default twice the rate)")
	fs.Int64Var(&f.maxAmount, "max-amount", 99_999_999, "largest amount accepted, in minor units")
	fs.DurationVar(&f.idempotencyTTL, "idempotency-ttl", 24*time.Hour, "how long idempotency keys are remembered (1h to 168h)")
	fs.StringVar(&f.provider, "provider", "fakepsp", "the provider new charges go to")
	fs.IntVar(&f.submitMaxAttempts, "submit-max-attempts", 10, "attempts of a charge.submit job before a charge the provider never accepted fails as provider_unavailable")
	fs.IntVar(&f.maxConns, "max-conns", 20, "database connections")
}

// newAPI builds the API server on its own pool; it serves tel's metrics.
func newAPI(ctx context.Context, c common, f apiFlags, logger *slog.Logger, points *crashpoint.Set, tel *telemetry) (*api.Server, *pgxpool.Pool, error) {
	pool, err := c.openPool(ctx, poolOptions{role: "api", maxConns: int32(f.maxConns), lockTimeout: f.lockTimeout})
	if err != nil {
		return nil, nil, err
	}
	// An insert-only River client: it has no queues and runs no jobs.
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:      logger,
		MaxAttempts: f.submitMaxAttempts,
		Middleware:  riverMiddleware(),
	})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	server, err := api.New(api.Config{
		DB:                pool,
		River:             riverClient,
		SubmitMaxAttempts: f.submitMaxAttempts,
		Logger:            logger,
		CrashPoints:       points,
		Ready:             func(ctx context.Context) error { return migrations.Check(ctx, pool) },
		Provider:          f.provider,
		MaxAmount:         f.maxAmount,
		IdempotencyTTL:    f.idempotencyTTL,
		RateLimit:         f.rateLimit,
		RateBurst:         f.rateBurst,
		TracerProvider:    tel.tracerProvider,
		MeterProvider:     tel.meterProvider,
		Metrics:           tel.metrics,
	})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return server, pool, nil
}

// runAPI serves the HTTP API until interrupted.
func runAPI(ctx context.Context, e env, args []string) error {
	var c common
	var f apiFlags
	fs := newFlagSet("api", e)
	c.bind(fs, e)
	f.bind(fs)
	r, done, err := setupRole(ctx, e, "api", &c, fs, args)
	if err != nil {
		return err
	}
	defer done()
	server, pool, err := newAPI(ctx, c, f, r.logger, r.points, r.tel)
	if err != nil {
		return err
	}
	defer pool.Close()
	return serveHTTP(ctx, f.addr, server.Handler(), r.logger, serveOptions{})
}
