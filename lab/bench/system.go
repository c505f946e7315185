package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/tenant"
)

// benchRateLimit keeps the per-tenant rate limiter out of the way: the
// benchmark measures capacity, and one tenant drives all of it. The limiter
// still runs (a token bucket per request), so its cost is in the numbers.
const benchRateLimit = 1_000_000

// System is the chargeflow a Run measures: an API serving HTTP on loopback
// against a migrated database with one tenant, a fake provider, and a way
// to start the outbox worker when a measurement needs it (the accept
// measurements run without one, so the worker does not compete with them).
type System struct {
	// Mode says how the API runs: "process" (its own process, so its
	// memory can be measured) or "in-process".
	Mode string
	// DatabaseURL is the API's database; the baselines run against it too.
	DatabaseURL string
	// APIURL is the API's base URL; APIKey is a key of TenantID.
	APIURL   string
	APIKey   string
	TenantID string
	// APIPID is the API's process id when it runs as its own process, 0
	// otherwise. Its memory and CPU are read from /proc/<pid>.
	APIPID int
	// APIMaxConns is the size of the API's connection pool.
	APIMaxConns int
	// WorkerConcurrency is how many charge.submit jobs the worker runs at
	// once.
	WorkerConcurrency int
	// PSPURL is the fake provider, its own de-duplication off, so its
	// ledger counts every provider call.
	PSPURL string
	// PSPPID and WorkerPID are the fake provider's and the running
	// worker's process ids when they run as their own processes, 0
	// otherwise.
	PSPPID    int
	WorkerPID int
	// ProviderLedger is the folder of the fake provider's ledger when it
	// runs as its own process.
	ProviderLedger string

	startWorker func(ctx context.Context) (stop func() error, err error)
	close       func(ctx context.Context) error
	// replays reads the API's replays counter by source.
	replays func(ctx context.Context) (replaySources, error)
}

// StartWorker starts the outbox worker; the function it returns stops it
// and waits for it.
func (s *System) StartWorker(ctx context.Context) (stop func() error, err error) {
	return s.startWorker(ctx)
}

// Close stops everything the System started.
func (s *System) Close(ctx context.Context) error {
	if s.close == nil {
		return nil
	}
	return s.close(ctx)
}

// InProcessConfig configures StartInProcess.
type InProcessConfig struct {
	// DatabaseURL is a migrated database of its own.
	DatabaseURL string
	// LedgerDir is where the fake provider writes its ledger.
	LedgerDir string
	// APIMaxConns and WorkerConcurrency default to the commands' defaults;
	// tests keep them small (the suite shares one server's connections).
	APIMaxConns       int
	WorkerConcurrency int
	// WorkerMaxConns is the worker pool's size; default the command's.
	WorkerMaxConns int
}

// StartInProcess builds the API, the fake provider and the worker in this
// process through internal/app, exactly as `chargeflow api`, `fakepsp` and
// `worker` build them (so the two cannot drift): telemetry on (spans made,
// not exported; metrics recorded), JSON logs at info (to io.Discard), the
// commands' defaults but for the rate limit and the sizes in cfg. Go
// benchmarks and tests use it; the API's memory cannot be told apart from
// the load generator's this way, so the report leaves it out.
func StartInProcess(ctx context.Context, cfg InProcessConfig) (_ *System, err error) {
	defaults := app.Defaults()
	sys := &System{
		Mode:              "in-process",
		DatabaseURL:       cfg.DatabaseURL,
		APIMaxConns:       cmp.Or(cfg.APIMaxConns, defaults.APIPool.MaxConns),
		WorkerConcurrency: cmp.Or(cfg.WorkerConcurrency, defaults.Worker.Concurrency),
	}
	var closers []func(context.Context) error
	sys.close = func(ctx context.Context) error {
		var errs []error
		for i := len(closers) - 1; i >= 0; i-- {
			errs = append(errs, closers[i](ctx))
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			_ = sys.close(context.WithoutCancel(ctx))
		}
	}()

	provider, err := fakepsp.New(fakepsp.Config{LedgerPath: filepath.Join(cfg.LedgerDir, "fakepsp-ledger.jsonl"), Dedupe: new(false)})
	if err != nil {
		return nil, err
	}
	closers = append(closers, func(context.Context) error { return provider.Close() })
	pspURL, stopPSP, err := serveLoopback(provider.Handler(), false)
	if err != nil {
		return nil, err
	}
	closers = append(closers, stopPSP)
	sys.PSPURL = pspURL

	tracerProvider := sdktrace.NewTracerProvider()
	metrics := sdkmetric.NewManualReader()
	meterProvider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics))
	sys.replays = func(ctx context.Context) (replaySources, error) { return collectReplays(ctx, metrics) }
	closers = append(closers, func(ctx context.Context) error {
		return errors.Join(tracerProvider.Shutdown(ctx), meterProvider.Shutdown(ctx))
	})
	o := app.Options{
		DatabaseURL:    cfg.DatabaseURL,
		Logger:         slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})),
		TracerProvider: tracerProvider,
		MeterProvider:  meterProvider,
		Provider:       psp.Config{BaseURL: pspURL},
		API:            api.Config{RateLimit: benchRateLimit},
		APIPool:        app.Pool{MaxConns: sys.APIMaxConns},
		Worker:         app.Worker{Concurrency: sys.WorkerConcurrency, MaxConns: cfg.WorkerMaxConns},
	}
	a, err := app.NewAPI(ctx, o)
	if err != nil {
		return nil, err
	}
	closers = append(closers, func(context.Context) error { a.Close(); return nil })
	created, apiKey, err := tenant.Create(ctx, a.Pool, "bench")
	if err != nil {
		return nil, err
	}
	sys.TenantID, sys.APIKey = created.ID, apiKey
	apiURL, stopAPI, err := serveLoopback(a.Server.Handler(), true)
	if err != nil {
		return nil, err
	}
	closers = append(closers, stopAPI)
	sys.APIURL = apiURL

	sys.startWorker = func(ctx context.Context) (func() error, error) {
		return startWorkerInProcess(ctx, o)
	}
	return sys, nil
}

// startWorkerInProcess runs the outbox worker as `chargeflow worker` does,
// on its own pool.
func startWorkerInProcess(ctx context.Context, o app.Options) (func() error, error) {
	pool, err := app.WorkerPool(ctx, o)
	if err != nil {
		return nil, err
	}
	client, err := app.NewWorker(pool, o)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		pool.Close()
		return nil, fmt.Errorf("start worker: %w", err)
	}
	return func() error {
		err := app.StopRiver(ctx, client)
		pool.Close()
		return err
	}, nil
}

// openPool opens a pool for the measurements' own connections (baselines,
// setup, counts), the way the roles open theirs.
func openPool(ctx context.Context, databaseURL, role string, maxConns int) (*pgxpool.Pool, error) {
	return app.OpenPool(ctx, databaseURL, role, app.Pool{MaxConns: maxConns})
}

// serveLoopback serves handler on a free loopback port, with the timeouts
// `chargeflow` serves with (none for the fake provider, whose faults hold
// connections on purpose).
func serveLoopback(handler http.Handler, timeouts bool) (string, func(context.Context) error, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	server := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	if timeouts {
		server.ReadTimeout, server.WriteTimeout = 30*time.Second, 30*time.Second
	}
	go func() { _ = server.Serve(ln) }()
	return "http://" + ln.Addr().String(), server.Shutdown, nil
}

// conn opens one connection to the System's database, for setup and
// counts.
func (s *System) conn(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, s.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("connect to the benchmark database: %w", err)
	}
	return conn, nil
}
