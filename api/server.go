// Package api is chargeflow's merchant HTTP API: it authenticates and
// rate-limits merchants, parses their requests strictly, calls the
// application's services — package accept, which accepts each charge and
// refund exactly once per idempotency key; package notification, which applies the
// provider's verified notifications — and renders what they return. It
// holds no rule of its own about charges: it parses, calls and renders.
//
// routes.go shows the merchant API on one screen; problem.go is the one
// place errors become HTTP statuses; middleware.go holds the request log;
// openapi.yaml describes what is served to programs, and a test keeps it
// honest. The operator plane (package opsplane: /ops/v1 and the operator's
// page at /ops/) is mounted on the same server (Server.Mount) and uses the
// plumbing of plane.go, so every route shares one set of middleware, one
// request log and one mapping of errors to problems.
package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/chargeflow/chargeflow/accept"
	"github.com/chargeflow/chargeflow/census"
	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/internal/clock"
	"github.com/chargeflow/chargeflow/notification"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/submit"
	"github.com/chargeflow/chargeflow/webhook"
)

// Config is everything the API needs. Zero values take the defaults.
type Config struct {
	// DB is the pool the API works on. Its sessions should set a short
	// lock_timeout: a request that waits longer than that for another
	// request holding the same idempotency key gets 409 + Retry-After.
	DB *pgxpool.Pool
	// Jobs makes the charge.submit job of every accepted charge, written by
	// the accept statement itself (Queue.Row).
	Jobs *submit.Queue
	// Accept accepts charges and refunds once per idempotency key, and
	// keeps the records that answer retries. Required.
	Accept *accept.Acceptor
	// Census counts charges by state for MetricCharges. Required.
	Census *census.Census
	// Notifications applies the provider's verified notifications; required
	// when ProviderNotifications is set.
	Notifications *notification.Applier
	// Logger receives structured request logs. It never gets API keys,
	// idempotency keys, payment methods, descriptions or metadata, and New
	// wraps it so that no line can carry a card number (redactLogs).
	Logger *slog.Logger
	// CrashPoints are armed in tests and scenarios only; nil is disarmed.
	CrashPoints *crashpoint.Set
	// Ready reports whether the database is reachable and migrated; /readyz
	// calls it.
	Ready func(context.Context) error
	// Now is the API's clock: the times it writes (a charge's, a refund's
	// and an endpoint's created_at, an idempotency record's expiry), a
	// provider notification's age, and its own rate limits and caches;
	// defaults to clock.Now (docs/operations.md, "Clocks").
	Now func() time.Time

	// Provider names the provider new charges go to. Default "fakepsp".
	Provider string
	// Route, when set, names the provider account a new charge goes to
	// instead (docs/routing.md): the first account of the tenant's route
	// that takes its currency and amount, Provider for a tenant without a
	// route, or an error wrapping route.ErrNoRoute (422 no_route).
	Route func(ctx context.Context, tenantID, currency string, amount int64) (string, error)
	// Capabilities says what the provider (account) called name promises,
	// as the processes' registry of providers knows it (psp.Registry): a
	// charge to be captured later is accepted only for one that declares
	// SeparateCapture (422 capture_not_supported). An error wrapping
	// psp.ErrNoSuchProvider, an account this process cannot build, is 503
	// provider_unavailable. Nil knows of no such provider: every charge to
	// be captured later is refused.
	Capabilities func(ctx context.Context, name string) (psp.Capabilities, error)
	// MaxBodyBytes caps a request body. Default 64 KiB.
	MaxBodyBytes int64
	// ProviderNotifications verifies and reads the provider's notifications
	// posted to /v1/provider_webhooks/{NotificationsFrom}; nil answers 404
	// (no secret configured). internal/app picks the parser of the
	// provider's protocol and binds its secret (PSP_WEBHOOK_SECRET).
	ProviderNotifications func(header http.Header, body []byte, now time.Time) (psp.Notification, error)
	NotificationsFrom     string
	// NotificationSources, when set, finds the source of the notifications
	// posted to /v1/provider_webhooks/{name} for a name other than
	// NotificationsFrom: a provider account's (docs/routing.md).
	NotificationSources func(ctx context.Context, name string) (NotificationSource, bool)

	// WebhooksAllowPrivate accepts webhook endpoint URLs that resolve to
	// loopback, private or link-local addresses: for tests and a laptop,
	// never in front of the internet (docs/webhooks.md, "Endpoints").
	WebhooksAllowPrivate bool
	// WebhookPorts are the ports an endpoint URL may name (or imply);
	// nil is webhook.DefaultPorts (--webhook-ports).
	WebhookPorts []uint16
	// WebhookLookup resolves an endpoint URL's host; default
	// webhook.LookupHost, the system's resolver.
	WebhookLookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// MaxAmount caps a charge's amount: a number of major units, counted in
	// minor units of a two-decimal currency, that each currency's cap scales
	// to its own minor unit (maxAmountFor; docs/architecture.md, "Money").
	// At least 100. Default 99,999,999 (999,999.99).
	MaxAmount int64
	// IdempotencyTTL is how long a key is remembered: 1 h to 7 d, default
	// 24 h. Records are deleted in batches after that by a periodic job.
	IdempotencyTTL time.Duration
	// RateLimit is each tenant's sustained requests per second, unless the
	// tenant has its own; RateBurst is the bucket size. Defaults 5,000/s and
	// twice the rate. The limit is per API process.
	RateLimit float64
	RateBurst int
	// AuthFailureLimit is how many failed authentications a client address
	// may make a minute (a token bucket of that size, refilled at that rate)
	// before it gets 429 too_many_auth_failures; per API process. Default 60.
	AuthFailureLimit int
	// AuthCacheTTL is how long a verified API key is trusted without asking
	// the database again (so a revoked key works for at most this long).
	// Default 10 s.
	AuthCacheTTL time.Duration
	// DBTimeout bounds the database work of one request. Default 5 s.
	DBTimeout time.Duration

	// TracerProvider makes a server span per request (health probes and
	// scrapes excepted), the parent of everything the request does,
	// including the charge.submit job it inserts. Nil means no spans.
	TracerProvider trace.TracerProvider
	// MeterProvider records the API's metrics (MetricRequestDuration,
	// MetricReplays, MetricProblems, MetricCharges). Nil means no metrics.
	MeterProvider metric.MeterProvider
	// Metrics serves GET /metrics, normally the Prometheus exposition of
	// MeterProvider's reader. Nil answers 404.
	Metrics http.Handler
}

// Server is the HTTP API.
type Server struct {
	cfg       Config
	echo      *echo.Echo
	auth      *authenticator
	limiter   *tenantLimiter
	telemetry telemetry
	// authFailures counts failed authentications per client address.
	authFailures *authFailureLimiter

	// served and methods index the routes, for 405 (protocol.go).
	served  map[string]bool
	methods map[string][]string

	// draining is set by Drain: /readyz answers 503 draining from then on.
	draining atomic.Bool
}

// Drain makes /readyz answer 503 draining from now on, so that a load
// balancer stops sending requests here; every other route keeps serving.
// The command calls it when it is told to stop (docs/operations.md,
// "Stopping").
func (s *Server) Drain() { s.draining.Store(true) }

// Defaults is the configuration New fills zero fields from (RateBurst
// aside: twice the rate); the command's flags show the same.
func Defaults() Config {
	return Config{
		Provider:         "fakepsp",
		MaxBodyBytes:     64 << 10,
		MaxAmount:        99_999_999,
		IdempotencyTTL:   24 * time.Hour,
		RateLimit:        5000,
		AuthFailureLimit: 60,
		AuthCacheTTL:     10 * time.Second,
		DBTimeout:        5 * time.Second,
	}
}

// New fills in defaults, refuses a configuration that makes no sense
// (Config.check) and builds the handler.
func New(cfg Config) (*Server, error) {
	if cfg.DB == nil || cfg.Jobs == nil || cfg.Accept == nil || cfg.Census == nil || ((cfg.ProviderNotifications != nil || cfg.NotificationSources != nil) && cfg.Notifications == nil) {
		return nil, errors.New("api: DB, Jobs, Accept and Census are required, and Notifications with ProviderNotifications")
	}
	cfg.Logger = redactLogs(cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)))
	if cfg.Now == nil {
		cfg.Now = clock.Now
	}
	if cfg.Ready == nil {
		cfg.Ready = func(ctx context.Context) error { return cfg.DB.Ping(ctx) }
	}
	if cfg.WebhookLookup == nil {
		cfg.WebhookLookup = webhook.LookupHost
	}
	d := Defaults()
	cfg.Provider = cmp.Or(cfg.Provider, d.Provider)
	cfg.MaxBodyBytes = cmp.Or(cfg.MaxBodyBytes, d.MaxBodyBytes)
	cfg.MaxAmount = cmp.Or(cfg.MaxAmount, d.MaxAmount)
	cfg.IdempotencyTTL = cmp.Or(cfg.IdempotencyTTL, d.IdempotencyTTL)
	cfg.RateLimit = cmp.Or(cfg.RateLimit, d.RateLimit)
	cfg.AuthFailureLimit = cmp.Or(cfg.AuthFailureLimit, d.AuthFailureLimit)
	cfg.AuthCacheTTL = cmp.Or(cfg.AuthCacheTTL, d.AuthCacheTTL)
	cfg.DBTimeout = cmp.Or(cfg.DBTimeout, d.DBTimeout)
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.RateBurst = cmp.Or(cfg.RateBurst, int(2*cfg.RateLimit)+1)
	tel, err := newTelemetry(cfg)
	if err != nil {
		return nil, err
	}

	s := &Server{
		cfg:          cfg,
		auth:         newAuthenticator(cfg.DB, cfg.AuthCacheTTL),
		limiter:      newTenantLimiter(cfg.RateLimit, cfg.RateBurst),
		telemetry:    tel,
		authFailures: newAuthFailureLimiter(cfg.AuthFailureLimit),
	}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.handleError
	s.echo = e
	s.routes(e)
	s.indexRoutes()
	return s, nil
}

// Handler is the API as an http.Handler.
func (s *Server) Handler() http.Handler { return s.echo }

// Mount adds the routes of another plane — the operator's (package
// opsplane) — to the server: routes registers them on its Echo, behind
// every middleware of the API's own (spans, metrics, the request log, the
// protocol checks) and with its error handler, and 405's Allow knows them
// from then on. internal/app mounts the planes once, before serving.
func (s *Server) Mount(routes func(e *echo.Echo, s *Server)) {
	routes(s.echo, s)
	s.indexRoutes()
}

// Routes lists every "METHOD path" the server serves, mounted planes
// included; the OpenAPI test compares the JSON API's (all but the
// operator's page) with openapi.yaml.
func (s *Server) Routes() []string {
	var routes []string
	for _, r := range s.echo.Routes() {
		if strings.HasPrefix(r.Method, "echo_") {
			continue // Echo's own not-found catch-alls for groups
		}
		routes = append(routes, r.Method+" "+r.Path)
	}
	return routes
}

// handleError is Echo's error handler: every error leaves as problem+json.
func (s *Server) handleError(err error, c echo.Context) {
	p := ProblemFor(err)
	c.Set(logProblemKey, p)
	if c.Response().Committed {
		return
	}
	if werr := writeProblem(c, p); werr != nil {
		s.cfg.Logger.WarnContext(c.Request().Context(), "write problem response", "err", werr)
	}
}

// DBContext detaches database work from the client's connection (a client
// that hangs up must not turn a commit into a rollback halfway) and bounds it.
func (s *Server) DBContext(c echo.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(c.Request().Context()), s.cfg.DBTimeout)
}

// encodeJSON is how every body is encoded: HTML escaping off (bodies are for
// programs), one trailing newline. Stored bodies are replayed as they are, so
// this must stay stable across versions.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
