// Package app wires chargeflow together: it opens the connection pools and
// builds the River clients, the application's services (accept, resolve,
// notification, census, admin), the merchant API with the operator plane
// mounted on it (and River's job UI for the operator's page), the outbox worker and the
// reconciler from one Options struct with one set of defaults. The command (every
// role), the benchmarks and the tests start the system through it, so the
// system is wired in exactly one place (docs/architecture.md, "Wiring").
//
// Each component keeps its own defaults (api.Defaults, accept.Defaults,
// resolve.Defaults, opsplane.Defaults, reconciler.Defaults,
// submit.DefaultMaxAttempts, psp.DefaultTimeout, …); app adds only what
// belongs to no component — pool sizes and River's client settings — and
// passes shared values to every component that needs them, so they cannot
// disagree: the provider client's call timeout is the worker's and the
// reconciler's, the provider's name is the API's and the reconciler's, and
// the submit queue is the API's and the reconciler's, and the window in
// which a charge may be sent again is the reconciler's and the operators'
// (settle.ResendWindow).
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"riverqueue.com/riverui"

	"github.com/chargeflow/chargeflow/accept"
	"github.com/chargeflow/chargeflow/admin"
	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/census"
	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/delivery"
	"github.com/chargeflow/chargeflow/internal/logx"
	"github.com/chargeflow/chargeflow/internal/pg"
	"github.com/chargeflow/chargeflow/migrations"
	"github.com/chargeflow/chargeflow/notification"
	"github.com/chargeflow/chargeflow/opsplane"
	"github.com/chargeflow/chargeflow/outbox"
	"github.com/chargeflow/chargeflow/psp"
	pspadyen "github.com/chargeflow/chargeflow/psp/adyen"
	pspstripe "github.com/chargeflow/chargeflow/psp/stripe"
	"github.com/chargeflow/chargeflow/reconciler"
	"github.com/chargeflow/chargeflow/resolve"
	"github.com/chargeflow/chargeflow/retention"
	"github.com/chargeflow/chargeflow/route"
	"github.com/chargeflow/chargeflow/settle"
	"github.com/chargeflow/chargeflow/submit"
	"github.com/chargeflow/chargeflow/webhook"
)

// Options is everything a chargeflow process is built from. Zero values
// take the defaults (Defaults).
type Options struct {
	// DatabaseURL names the database; it is created if missing.
	DatabaseURL string
	// Logger receives every component's logs. Default: discarded.
	Logger *slog.Logger
	// CrashPoints are armed in tests and scenarios only; nil is disarmed.
	CrashPoints *crashpoint.Set
	// TracerProvider and MeterProvider go to every component; nil is a
	// no-op. Metrics serves the API's GET /metrics.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Metrics        http.Handler

	// Provider configures the provider client: its Timeout is the one call
	// timeout of the system (default psp.DefaultTimeout), and its
	// Capabilities name the provider new charges go to (and the reconciler
	// resolves) and say what a lookup proves.
	Provider psp.Config
	// ProviderKind picks the adapter Provider configures: ProviderFake
	// (psp.Client, chargeflow's own protocol; the default), ProviderStripe
	// (psp/stripe) or ProviderAdyen (psp/adyen), whose capabilities are
	// their provider's own, so Provider.Capabilities is not used.
	// StripeAPIKey is the secret key the Stripe adapter needs, AdyenAPIKey
	// and AdyenMerchantAccount what the Adyen adapter needs; keys are never
	// logged.
	ProviderKind         string
	StripeAPIKey         string
	AdyenAPIKey          string
	AdyenMerchantAccount string
	// StripeClockSkew is how far Stripe's clock may be from ours
	// (pspstripe.Config.ClockSkew); 0 is the adapter's default.
	StripeClockSkew time.Duration
	// ProviderWebhookSecret verifies the provider's notifications to
	// /v1/provider_webhooks/{fake|stripe|adyen} (for Adyen, the HMAC key
	// in hex); empty turns them off.
	ProviderWebhookSecret string

	// Getenv reads the environment variables provider accounts name for
	// their credentials and webhook secrets (docs/routing.md); nil reads
	// none, so only accounts that need no credentials can be called.
	Getenv func(string) string
	// RouteTTL is how long a process routes by accounts and routes it
	// read: route.DefaultTTL when zero.
	RouteTTL time.Duration

	// Jobs configures the submit queue (max attempts, wake-up cooldown).
	Jobs submit.Config

	// API configures the merchant API, Ops the operator plane mounted on
	// it, Accept, Resolve and Census the services they call; DB, Jobs,
	// the provider, Logger, CrashPoints and telemetry are filled in by
	// NewAPI. APIPool sizes the API's pool.
	API     api.Config
	Ops     opsplane.Config
	Accept  accept.Config
	Resolve resolve.Config
	Census  census.Config
	APIPool Pool

	// Worker configures the outbox worker's River client.
	Worker Worker

	// Webhooks configures webhook deliveries (the worker's River client
	// runs them in their own queue) and which endpoint URLs the API takes.
	Webhooks Webhooks

	// Reconciler configures the reconciler; DB, Jobs, the provider's name
	// and client, Logger, CrashPoints and telemetry are filled in by
	// NewReconciler. ReconcilerPool sizes its pool.
	Reconciler     reconciler.Config
	ReconcilerPool Pool
}

// Pool sizes a role's connection pool.
type Pool struct {
	// MaxConns is the most connections the pool opens.
	MaxConns int
	// LockTimeout, when set, bounds every lock wait of the pool's sessions.
	LockTimeout time.Duration
	// Logger receives the error line of a commit whose wait for the
	// synchronous standby was cancelled outside pg.Confirmed. Nil discards it.
	Logger *slog.Logger
}

// Webhooks configures webhook deliveries (package delivery).
type Webhooks struct {
	// AllowPrivate lets endpoints be, and deliveries reach, loopback and
	// private addresses, on any port: for tests and a laptop only.
	AllowPrivate bool
	// Ports are the ports endpoints may name and deliveries reach; nil is
	// webhook.DefaultPorts.
	Ports []uint16
	// Concurrency is how many deliveries run at once, in their own queue
	// so that slow receivers never hold up charges. Default 10.
	Concurrency int
	// Timeout bounds one delivery. Default delivery.DefaultTimeout.
	Timeout time.Duration
	// RetryBase and RetryCap space a failing delivery's attempts. Default
	// delivery.DefaultBackoffBase and DefaultBackoffCap.
	RetryBase, RetryCap time.Duration
}

// Worker configures the River client that runs the outbox worker and the
// periodic retention job.
type Worker struct {
	// Concurrency is how many charge.submit jobs run at once. A job holds
	// a database connection only for its two short statements, never
	// across the provider call, so it is sized by how many calls may wait
	// on the provider at once (rate × the provider's latency), not by the
	// database. Default WorkerConcurrency of the process's GOMAXPROCS.
	Concurrency int
	// MaxConns is the worker pool's size, shared by every job, the webhook
	// deliveries and River's own work. Default WorkerConns of the
	// machine's CPUs.
	MaxConns int
	// UnknownCheckAfter and Lab are the outbox.Config fields of the same
	// names; Lab is empty in the product build.
	UnknownCheckAfter time.Duration
	Lab               outbox.Lab
	// Retry spaces the attempts of a job whose call was provably not applied.
	Retry outbox.RetryPolicy
	// Breaker configures the circuit breaker kept for each provider.
	Breaker outbox.BreakerConfig
	// RescueAfter is how long a job may run before River reruns it, as
	// after a crash. It must exceed outbox.JobTimeout of the call timeout;
	// default that plus two minutes.
	RescueAfter time.Duration
	// RetentionInterval is how often the retention job runs (by River's
	// elected leader only): expired idempotency records and events past
	// EventRetention are deleted.
	RetentionInterval time.Duration
	// EventRetention is how long events are kept, with their webhook
	// deliveries and attempts; negative keeps them forever. Default
	// retention.DefaultEventRetention (30 days).
	EventRetention time.Duration
	// FetchCooldown and FetchPollInterval tune how fast River picks new
	// jobs up: a wake-up (River's insert notification) fetches at once, at
	// most once per cooldown; without one it polls.
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
}

// Defaults is the Options every zero field takes. Fields a component
// defaults itself (api.Config, opsplane.Config, accept.Config,
// resolve.Config, census.Config, reconciler.Config, psp.Config,
// submit.Config) are left zero here, so each default has one home.
func Defaults() Options {
	return Options{
		APIPool:        Pool{MaxConns: 20, LockTimeout: time.Second},
		Webhooks:       Webhooks{Concurrency: 10},
		ReconcilerPool: Pool{MaxConns: 10},
		Worker: Worker{
			Concurrency:       WorkerConcurrency(runtime.GOMAXPROCS(0)),
			MaxConns:          WorkerConns(runtime.NumCPU()),
			UnknownCheckAfter: outbox.DefaultUnknownCheckAfter,
			Retry:             outbox.RetryPolicy{Base: outbox.DefaultRetryBase, Cap: outbox.DefaultRetryCap},
			RetentionInterval: 10 * time.Minute,
			EventRetention:    retention.DefaultEventRetention,
			FetchCooldown:     20 * time.Millisecond,
			FetchPollInterval: 250 * time.Millisecond,
		},
	}
}

// withDefaults fills o's zero fields from Defaults.
func (o Options) withDefaults() Options {
	d := Defaults()
	o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	o.APIPool.MaxConns = cmp.Or(o.APIPool.MaxConns, d.APIPool.MaxConns)
	o.APIPool.LockTimeout = cmp.Or(o.APIPool.LockTimeout, d.APIPool.LockTimeout)
	o.ReconcilerPool.MaxConns = cmp.Or(o.ReconcilerPool.MaxConns, d.ReconcilerPool.MaxConns)
	w, dw := &o.Worker, d.Worker
	w.Concurrency = cmp.Or(w.Concurrency, dw.Concurrency)
	w.MaxConns = cmp.Or(w.MaxConns, dw.MaxConns)
	w.UnknownCheckAfter = cmp.Or(w.UnknownCheckAfter, dw.UnknownCheckAfter)
	w.Retry.Base = cmp.Or(w.Retry.Base, dw.Retry.Base)
	w.Retry.Cap = cmp.Or(w.Retry.Cap, dw.Retry.Cap)
	w.RetentionInterval = cmp.Or(w.RetentionInterval, dw.RetentionInterval)
	w.EventRetention = cmp.Or(w.EventRetention, dw.EventRetention)
	w.FetchCooldown = cmp.Or(w.FetchCooldown, dw.FetchCooldown)
	w.FetchPollInterval = cmp.Or(w.FetchPollInterval, dw.FetchPollInterval)
	o.Webhooks.Concurrency = cmp.Or(o.Webhooks.Concurrency, d.Webhooks.Concurrency)
	return o
}

// resendWindow is how long after a charge's first send a new attempt is
// still de-duplicated by provider, with the reconciler's margin, so that an
// operator and the reconciler judge it alike (settle.ResendWindow).
func (o Options) resendWindow(provider psp.Provider) time.Duration {
	return settle.ResendWindow(provider.Capabilities().KeyWindow,
		cmp.Or(o.Reconciler.Provider.KeyWindowMargin, reconciler.Defaults().Provider.KeyWindowMargin))
}

// StartTimeout bounds how long OpenPool waits for the database's first
// answer: a database that accepts connections and never answers (a hung
// server, a wrong port behind a proxy) ends the start with an error that
// says so, rather than a process that hangs before it serves.
const StartTimeout = 10 * time.Second

// NoJIT turns Postgres's JIT compilation off for a pool's sessions, unless
// the database URL set jit itself (docs/architecture.md, "No JIT").
// Every statement chargeflow sends reads a handful of rows through an
// index, but the planner prices a partial index by its pages, and the
// indexes of states every charge passes through (pending, submitting) keep
// the pages of every entry they ever held: at 10 million charges the
// reconciler's lease and the metrics census were priced past
// jit_above_cost and spent 5–40 ms compiling a query that runs in 0.2 ms.
func NoJIT(params map[string]string) {
	if _, set := params["jit"]; !set {
		params["jit"] = "off"
	}
}

// OpenPool creates the database if it is missing, opens a pool on it, named
// chargeflow-<role> in pg_stat_activity, and pings it. Every connection of
// the pool, and of the creation, must be made within
// migrations.ConnectTimeout unless the URL sets connect_timeout; the ping
// must answer within StartTimeout.
func OpenPool(ctx context.Context, databaseURL, role string, p Pool) (*pgxpool.Pool, error) {
	if err := migrations.CreateDatabase(ctx, databaseURL); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = migrations.ConnectTimeout
	}
	if p.MaxConns > 0 {
		cfg.MaxConns = int32(p.MaxConns)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "chargeflow-" + role
	if p.LockTimeout > 0 {
		cfg.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(p.LockTimeout.Milliseconds(), 10)
	}
	NoJIT(cfg.ConnConfig.RuntimeParams)
	logger := cmp.Or(p.Logger, slog.New(slog.DiscardHandler))
	pg.Observe(cfg.ConnConfig, func(*pgconn.Notice) {
		logger.Error("a commit's wait for the synchronous standby was cancelled: it is committed on this server, and a failover may lose it", "role", role)
	})
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database %s did not answer within %s: %w", cfg.ConnConfig.Database, StartTimeout, err)
	}
	return pool, nil
}

// The provider kinds of Options.ProviderKind.
const (
	ProviderFake   = "fake"
	ProviderStripe = "stripe"
	ProviderAdyen  = "adyen"
)

// ProviderClient is the provider every component of o talks to, as
// o.ProviderKind picks it.
func (o Options) ProviderClient() (psp.Provider, error) {
	cfg := o.Provider
	cfg.TracerProvider, cfg.MeterProvider = o.TracerProvider, o.MeterProvider
	switch o.ProviderKind {
	case "", ProviderFake:
		return psp.NewClient(cfg), nil
	case ProviderStripe:
		if o.StripeAPIKey == "" {
			return nil, errors.New("the stripe provider needs an API key (STRIPE_API_KEY)")
		}
		// A lookup by reference must see every intent created while a
		// request could still be applied: up to the apply delay the
		// reconciler assumes after the call's timeout.
		return pspstripe.New(pspstripe.Config{
			BaseURL: cfg.BaseURL, APIKey: o.StripeAPIKey, Timeout: cfg.Timeout, HTTPClient: cfg.HTTPClient,
			ApplyDelay: o.Reconciler.Provider.MaxApplyDelay, ClockSkew: o.StripeClockSkew, HoldWindow: cfg.Capabilities.HoldWindow,
			TracerProvider: cfg.TracerProvider, MeterProvider: cfg.MeterProvider,
		}), nil
	case ProviderAdyen:
		if o.AdyenAPIKey == "" || o.AdyenMerchantAccount == "" {
			return nil, errors.New("the adyen provider needs an API key (ADYEN_API_KEY) and a merchant account (--adyen-merchant-account)")
		}
		return pspadyen.New(pspadyen.Config{BaseURL: cfg.BaseURL, APIKey: o.AdyenAPIKey, MerchantAccount: o.AdyenMerchantAccount,
			Timeout: cfg.Timeout, HTTPClient: cfg.HTTPClient, TracerProvider: cfg.TracerProvider, MeterProvider: cfg.MeterProvider}), nil
	default:
		return nil, fmt.Errorf("provider kind %q: want %s, %s or %s", o.ProviderKind, ProviderFake, ProviderStripe, ProviderAdyen)
	}
}

// notifications is the API's parser of the provider's notifications, with
// the secret bound, and the path name they are posted under; nil without a
// secret.
func (o Options) notifications() (func(http.Header, []byte, time.Time) (psp.Notification, error), string) {
	secret := o.ProviderWebhookSecret
	if secret == "" {
		return nil, ""
	}
	switch o.ProviderKind {
	case ProviderStripe:
		return func(h http.Header, body []byte, now time.Time) (psp.Notification, error) {
			return pspstripe.ParseNotification(secret, h, body, now, 0)
		}, ProviderStripe
	case ProviderAdyen:
		// Adyen's are read by the account sources, which take batches and
		// answer with Adyen's acknowledgement (notificationSources).
		return nil, ""
	}
	return func(h http.Header, body []byte, now time.Time) (psp.Notification, error) {
		return psp.ParseNotification(secret, h, body, now, 0)
	}, ProviderFake
}

// NewQueue makes the submit queue on a River client: an insert-only one
// (NewInserter) or a worker's own.
func NewQueue(client *river.Client[pgx.Tx], o Options) (*submit.Queue, error) {
	cfg := o.Jobs
	cfg.River = client
	return submit.NewQueue(cfg)
}

// NewInserter makes the submit queue on an insert-only River client (no
// queues, runs no jobs), as the API and the reconciler need.
func NewInserter(pool *pgxpool.Pool, o Options) (*submit.Queue, error) {
	o = o.withDefaults()
	client, err := newInsertClient(pool, o)
	if err != nil {
		return nil, err
	}
	return NewQueue(client, o)
}

// newInsertClient makes a River client that runs no jobs: it inserts them,
// and serves River's job UI.
func newInsertClient(pool *pgxpool.Pool, o Options) (*river.Client[pgx.Tx], error) {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: riverLogger(o.Logger), Middleware: submit.Middleware()})
	if err != nil {
		return nil, fmt.Errorf("river insert client: %w", err)
	}
	return client, nil
}

// API is the HTTP API and the pool it owns.
type API struct {
	Server *api.Server
	Pool   *pgxpool.Pool
	Jobs   *submit.Queue

	stopJobsUI context.CancelFunc
}

// Close stops the job UI's background queries and closes the API's pool.
func (a *API) Close() {
	a.stopJobsUI()
	a.Pool.Close()
}

// NewAPI opens the API's pool (with its lock timeout) and builds the API on
// it, with River's job UI for the operator's page on the API's River client.
// /readyz checks that every migration is applied.
func NewAPI(ctx context.Context, o Options) (*API, error) {
	o = o.withDefaults()
	if _, err := o.ProviderClient(); err != nil {
		return nil, err
	}
	apiPool := o.APIPool
	apiPool.Logger = o.Logger
	pool, err := OpenPool(ctx, o.DatabaseURL, "api", apiPool)
	if err != nil {
		return nil, err
	}
	client, err := newInsertClient(pool, o)
	if err != nil {
		pool.Close()
		return nil, err
	}
	jobs, err := NewQueue(client, o)
	if err != nil {
		pool.Close()
		return nil, err
	}
	uiCtx, stopJobsUI := context.WithCancel(context.WithoutCancel(ctx))
	ui, err := NewJobsUI(uiCtx, client, o.Logger)
	if err != nil {
		stopJobsUI()
		pool.Close()
		return nil, err
	}
	routes := route.NewCache(pool, o.RouteTTL)
	providers, err := o.Providers(routes)
	if err != nil {
		stopJobsUI()
		pool.Close()
		return nil, err
	}
	provider := providers.Own()
	sc := ServerConfig{DB: pool, Jobs: jobs, Provider: provider, Providers: providers, Routes: routes, Logger: o.Logger,
		CrashPoints: o.CrashPoints, TracerProvider: o.TracerProvider, MeterProvider: o.MeterProvider,
		API: o.API, Ops: o.Ops, Accept: o.Accept, Resolve: o.Resolve, Census: o.Census}
	sc.API.Provider = provider.Capabilities().Name
	sc.API.NotificationSources = providers.notificationSources
	sc.API.WebhooksAllowPrivate, sc.API.WebhookPorts = o.Webhooks.AllowPrivate, o.Webhooks.Ports
	sc.API.ProviderNotifications, sc.API.NotificationsFrom = o.notifications()
	sc.API.Metrics = o.Metrics
	if sc.API.Ready == nil {
		sc.API.Ready = func(ctx context.Context) error { return migrations.Check(ctx, pool) }
	}
	sc.Resolve.ResendWindow = o.resendWindow(provider)
	sc.Resolve.KeyWindowMargin = cmp.Or(o.Reconciler.Provider.KeyWindowMargin, reconciler.Defaults().Provider.KeyWindowMargin)
	sc.Ops.JobsUI = ui
	server, err := NewServer(sc)
	if err != nil {
		stopJobsUI()
		pool.Close()
		return nil, err
	}
	return &API{Server: server, Pool: pool, Jobs: jobs, stopJobsUI: stopJobsUI}, nil
}

// ServerConfig is what NewServer builds the HTTP server from: the pool,
// the submit queue and the provider its parts work with, the logger, crash
// points and telemetry they share, and each part's own Config, whose
// fields of those kinds NewServer fills in.
type ServerConfig struct {
	DB       *pgxpool.Pool
	Jobs     *submit.Queue
	Provider psp.Provider
	// Providers finds every provider a row may have been sent to (nil:
	// Provider alone); Routes, when set, routes new charges by their
	// tenants' routes (docs/routing.md).
	Providers      psp.Registry
	Routes         *route.Cache
	Logger         *slog.Logger
	CrashPoints    *crashpoint.Set
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider

	// API configures the merchant API; its Provider (default
	// api.Defaults().Provider) is also whose notifications are applied.
	API api.Config
	// Ops configures the operator plane mounted on the API.
	Ops opsplane.Config
	// Accept, Resolve and Census configure the services: Resolve's
	// ResendWindow is NewAPI's to derive (settle.ResendWindow).
	Accept  accept.Config
	Resolve resolve.Config
	Census  census.Config
}

// NewServer builds the services — accept, resolve, census, admin (for the
// operator page's administration) and, when the API receives the provider's
// notifications, notification — each from its Config with its own defaults,
// then the merchant API on them, and mounts the operator plane on it. The
// API knows its providers' capabilities from the registry (Providers, or
// Provider alone) unless its Config says them. It is the one place they
// are wired, for the command and the tests alike.
func NewServer(sc ServerConfig) (*api.Server, error) {
	acc := sc.Accept
	acc.DB, acc.Logger, acc.CrashPoints, acc.MeterProvider = sc.DB, sc.Logger, sc.CrashPoints, sc.MeterProvider
	acceptor, err := accept.New(acc)
	if err != nil {
		return nil, err
	}
	cen := sc.Census
	cen.DB = sc.DB
	counter, err := census.New(cen)
	if err != nil {
		return nil, err
	}
	res := sc.Resolve
	res.DB, res.Jobs, res.Provider, res.Providers = sc.DB, sc.Jobs, sc.Provider, sc.Providers
	resolver, err := resolve.New(res)
	if err != nil {
		return nil, err
	}
	cfg := sc.API
	cfg.DB, cfg.Jobs, cfg.Accept, cfg.Census = sc.DB, sc.Jobs, acceptor, counter
	if sc.Routes != nil {
		own := cmp.Or(cfg.Provider, api.Defaults().Provider)
		cfg.Route = func(ctx context.Context, tenantID, currency string, amount int64) (string, error) {
			table, err := sc.Routes.Table(ctx)
			if err != nil {
				return "", err
			}
			return table.Pick(tenantID, currency, amount, own)
		}
	}
	if cfg.Capabilities == nil && (sc.Providers != nil || sc.Provider != nil) {
		providers := sc.Providers
		if providers == nil {
			providers = psp.Single(sc.Provider)
		}
		cfg.Capabilities = func(ctx context.Context, name string) (psp.Capabilities, error) {
			p, err := providers.Provider(ctx, name)
			if err != nil {
				return psp.Capabilities{}, err
			}
			return p.Capabilities(), nil
		}
	}
	cfg.Logger, cfg.CrashPoints = sc.Logger, sc.CrashPoints
	cfg.TracerProvider, cfg.MeterProvider = sc.TracerProvider, sc.MeterProvider
	if cfg.ProviderNotifications != nil || cfg.NotificationSources != nil {
		cfg.Notifications, err = notification.New(notification.Config{DB: sc.DB, Provider: cmp.Or(cfg.Provider, api.Defaults().Provider)})
		if err != nil {
			return nil, err
		}
	}
	server, err := api.New(cfg)
	if err != nil {
		return nil, err
	}
	ops := sc.Ops
	ops.DB, ops.Resolve, ops.Census, ops.Admin = sc.DB, resolver, counter, admin.New(sc.DB)
	plane, err := opsplane.New(ops)
	if err != nil {
		return nil, err
	}
	server.Mount(plane.Routes)
	return server, nil
}

// JobsUIPrefix is where the operator's page serves River's job UI.
const JobsUIPrefix = "/ops/jobs"

// jobsUI is River's job UI (riverqueue.com/riverui), served at
// JobsUIPrefix. Its handler runs background queries once started (job
// counts by state, every few seconds to minutes), so it starts on its first
// request: an API process that no operator looks at pays nothing for it.
type jobsUI struct {
	ctx     context.Context
	handler *riverui.Handler
	logger  *slog.Logger
	start   sync.Once
}

// NewJobsUI builds River's job UI on client for opsplane's Config.JobsUI,
// which serves it behind the operator page's sign-in. Its background
// queries stop with ctx.
func NewJobsUI(ctx context.Context, client *river.Client[pgx.Tx], logger *slog.Logger) (http.Handler, error) {
	handler, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(client, nil),
		Logger:    logger,
		Prefix:    JobsUIPrefix,
	})
	if err != nil {
		return nil, fmt.Errorf("river job ui: %w", err)
	}
	return &jobsUI{ctx: ctx, handler: handler, logger: logger}, nil
}

func (j *jobsUI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	j.start.Do(func() {
		if err := j.handler.Start(j.ctx); err != nil {
			// It still serves; its counts are then queried per request.
			j.logger.WarnContext(r.Context(), "start river job ui", "err", err.Error())
		}
	})
	j.handler.ServeHTTP(w, r)
}

// WorkerSlotsPerCPU is how many jobs in flight WorkerConcurrency gives
// each CPU.
const WorkerSlotsPerCPU = 2048

// WorkerConcurrency is the worker's default number of jobs in flight for a
// process that runs on cpus CPUs (GOMAXPROCS, which follows a container's
// CPU quota): WorkerSlotsPerCPU a CPU, at most psp.MaxIdleConns. A job
// keeps its slot while it waits on the provider, so the slots must cover
// the rate the worker can settle times the provider's latency (Little's
// law). A CPU of the worker settles up to about 6,000 charges a second,
// and with a provider answering in 150–400 ms a job is in flight for
// about a third of a second: 2,000 a CPU. Fewer slots make a slow
// provider cap the rate below what the machine carries; more cost memory
// (about 60 KiB a job in flight) and only queue where the provider is
// faster. docs/capacity.md, "Jobs in flight".
func WorkerConcurrency(cpus int) int { return min(WorkerSlotsPerCPU*max(cpus, 1), psp.MaxIdleConns) }

// WorkerConns is the worker pool's default size on a machine with cpus
// CPUs: enough statements in flight to keep a database on the same machine
// busy (four per CPU), and eight for River's own work (its fetches, its
// completer, its leader election and the LISTEN connection of its
// notifier). More connections than that only queue inside Postgres;
// fewer leave it idle while jobs wait on the network.
func WorkerConns(cpus int) int { return 4*max(cpus, 1) + 8 }

// WorkerPool opens the outbox worker's pool, Worker.MaxConns connections
// shared by every job: a job holds one only for a statement, so the
// pool is sized by the database, and Worker.Concurrency by the provider.
func WorkerPool(ctx context.Context, o Options) (*pgxpool.Pool, error) {
	o = o.withDefaults()
	return OpenPool(ctx, o.DatabaseURL, "worker", Pool{MaxConns: o.Worker.MaxConns, Logger: o.Logger})
}

// NewWorker builds the River client that runs the outbox worker and the
// periodic retention job on pool. Start it with RunRiver.
func NewWorker(pool *pgxpool.Pool, o Options) (*river.Client[pgx.Tx], error) {
	o = o.withDefaults()
	routes := route.NewCache(pool, o.RouteTTL)
	providers, err := o.Providers(routes)
	if err != nil {
		return nil, err
	}
	provider := providers.Own()
	worker, err := outbox.NewWorker(outbox.Config{
		DB:                pool,
		Provider:          provider,
		Providers:         providers,
		Routes:            routes,
		Breaker:           o.Worker.Breaker,
		Logger:            o.Logger,
		CrashPoints:       o.CrashPoints,
		UnknownCheckAfter: o.Worker.UnknownCheckAfter,
		Lab:               o.Worker.Lab,
		TracerProvider:    o.TracerProvider,
		MeterProvider:     o.MeterProvider,
	})
	if err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, worker); err != nil {
		return nil, err
	}
	deliveries, err := delivery.NewWorker(delivery.Config{DB: pool, Logger: o.Logger, AllowPrivate: o.Webhooks.AllowPrivate,
		Ports: o.Webhooks.Ports, Timeout: o.Webhooks.Timeout, BackoffBase: o.Webhooks.RetryBase, BackoffCap: o.Webhooks.RetryCap, CrashPoints: o.CrashPoints})
	if err != nil {
		return nil, err
	}
	if err := river.AddWorkerSafely(workers, deliveries); err != nil {
		return nil, err
	}
	jobTimeout := outbox.JobTimeout(provider.Timeout())
	rescueAfter := cmp.Or(o.Worker.RescueAfter, jobTimeout+2*time.Minute)
	if rescueAfter <= jobTimeout {
		return nil, fmt.Errorf("rescue after %s must exceed the job timeout %s (call timeout + 5s)", rescueAfter, jobTimeout)
	}
	// Retention's run has its own timeout, kept below the rescue delay
	// so that River never reruns a live run as a stuck one.
	cleanup := retention.NewWorker(pool, 0, o.Logger).WithTimeout(min(retention.DefaultTimeout, rescueAfter-jobTimeout)).
		WithEventRetention(o.Worker.EventRetention)
	if err := river.AddWorkerSafely(workers, cleanup); err != nil {
		return nil, err
	}
	return river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger: riverLogger(o.Logger),
		Queues: map[string]river.QueueConfig{
			river.QueueDefault: {MaxWorkers: o.Worker.Concurrency},
			webhook.Queue:      {MaxWorkers: o.Webhooks.Concurrency},
		},
		Workers:              workers,
		PeriodicJobs:         []*river.PeriodicJob{retention.PeriodicJob(o.Worker.RetentionInterval)},
		RetryPolicy:          o.Worker.Retry,
		JobTimeout:           jobTimeout,
		RescueStuckJobsAfter: rescueAfter,
		FetchCooldown:        o.Worker.FetchCooldown,
		FetchPollInterval:    o.Worker.FetchPollInterval,
		Middleware:           submit.Middleware(),
	})
}

// riverLogger is logger for River's own lines: its client's start, stop
// and producer statistics are DEBUG, its warnings and errors as they are.
func riverLogger(logger *slog.Logger) *slog.Logger {
	if logger == nil {
		return nil
	}
	return slog.New(logx.Quieter(logger.Handler()))
}

// ReconcilerPool opens the reconciler's pool.
func ReconcilerPool(ctx context.Context, o Options) (*pgxpool.Pool, error) {
	o = o.withDefaults()
	p := o.ReconcilerPool
	p.Logger = o.Logger
	return OpenPool(ctx, o.DatabaseURL, "reconciler", p)
}

// NewReconciler builds a reconciler on pool; jobs enqueues its re-attempts.
func NewReconciler(pool *pgxpool.Pool, jobs *submit.Queue, o Options) (*reconciler.Reconciler, error) {
	o = o.withDefaults()
	cfg := o.Reconciler
	cfg.DB, cfg.Jobs = pool, jobs
	providers, err := o.Providers(route.NewCache(pool, o.RouteTTL))
	if err != nil {
		return nil, err
	}
	cfg.Provider.Client, cfg.Providers = providers.Own(), providers
	cfg.Logger, cfg.CrashPoints = o.Logger, o.CrashPoints
	cfg.TracerProvider, cfg.MeterProvider = o.TracerProvider, o.MeterProvider
	return reconciler.New(cfg)
}

// RunRiver starts a River client and stops it when ctx is done: no job
// starts from then on, running jobs get grace to finish, and then their
// contexts are cancelled (a charge.submit run cut off mid-call leaves its
// charge submitting, which the reconciler resolves; docs/operations.md,
// "Stopping").
func RunRiver(ctx context.Context, client *river.Client[pgx.Tx], logger *slog.Logger, grace time.Duration) error {
	// Cancelling Start's context would cancel running jobs mid-call; the
	// stop below is a soft one first.
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start river: %w", err)
	}
	logger.Info("worker started")
	<-ctx.Done()
	logger.Info("stopping: no new jobs; running ones get the grace to finish", "grace", grace.String())
	return stopRiver(ctx, client, grace, logger)
}

// StopRiver stops a started River client softly, for up to thirty seconds,
// then cancels the jobs still running.
func StopRiver(ctx context.Context, client *river.Client[pgx.Tx]) error {
	return stopRiver(ctx, client, 30*time.Second, slog.New(slog.DiscardHandler))
}

// CancelWait bounds how long cancelled jobs take to return, after the
// grace: their provider call and queries end at once on cancellation.
const CancelWait = 5 * time.Second

func stopRiver(ctx context.Context, client *river.Client[pgx.Tx], grace time.Duration, logger *slog.Logger) error {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	err := client.Stop(stopCtx)
	if err == nil {
		logger.Info("stopped: every running job finished")
		return nil
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("stop river: %w", err)
	}
	logger.Warn("jobs still running after the grace; cancelling them", "grace", grace.String())
	hardCtx, cancelHard := context.WithTimeout(context.WithoutCancel(ctx), CancelWait)
	defer cancelHard()
	if err := client.StopAndCancel(hardCtx); err != nil {
		return fmt.Errorf("stop river, cancelling running jobs: %w", err)
	}
	logger.Info("stopped: running jobs were cancelled")
	return nil
}
