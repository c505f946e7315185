package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"chargeflow/crashpoint"
	"chargeflow/delivery"
	"chargeflow/internal/app"
	"chargeflow/psp"
	pspstripe "chargeflow/psp/stripe"
)

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/chargeflow?sslmode=disable"

// common is what every long-running role reads: where the database is, how
// to log, and which crash points are armed.
type common struct {
	databaseURL string
	logLevel    string
}

// bind registers the common flags, defaulting from the environment.
func (c *common) bind(fs *flag.FlagSet, e env) {
	fs.StringVar(&c.databaseURL, "database-url", cmp.Or(e.getenv("DATABASE_URL"), defaultDatabaseURL), "Postgres URL (env DATABASE_URL)")
	fs.StringVar(&c.logLevel, "log-level", cmp.Or(e.getenv("LOG_LEVEL"), "info"), "debug, info, warn or error (env LOG_LEVEL)")
}

// newFlagSet makes a subcommand's flag set that reports to stderr.
func newFlagSet(name string, e env) *flag.FlagSet {
	fs := flag.NewFlagSet("chargeflow "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

// logger builds the JSON logger every process writes to stderr.
func (c *common) logger(e env) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", c.logLevel, err)
	}
	return slog.New(slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: level})), nil
}

// crashPoints arms what CHARGEFLOW_CRASHPOINTS names (tests and scenarios
// only); the draws are seeded by CHARGEFLOW_CRASHPOINT_SEED.
func crashPoints(e env, logger *slog.Logger) (*crashpoint.Set, error) {
	seed := uint64(time.Now().UnixNano())
	if s := e.getenv("CHARGEFLOW_CRASHPOINT_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("CHARGEFLOW_CRASHPOINT_SEED: %w", err)
		}
		seed = n
	}
	set, err := crashpoint.Parse(e.getenv("CHARGEFLOW_CRASHPOINTS"), seed, logger)
	if err != nil {
		return nil, fmt.Errorf("CHARGEFLOW_CRASHPOINTS: %w", err)
	}
	if set.Armed() {
		logger.Warn("crash points armed", "spec", e.getenv("CHARGEFLOW_CRASHPOINTS"), "seed", seed)
	}
	return set, nil
}

// roleSetup is what every long-running command has once its flags are
// parsed: its loggers, its crash points and its telemetry.
type roleSetup struct {
	// base logs without a role; `all` gives each component its own.
	base *slog.Logger
	// logger logs as the command's role.
	logger *slog.Logger
	points *crashpoint.Set
	tel    *telemetry
}

// setupRole parses a role's flags and builds its loggers, crash points and
// telemetry. The returned function flushes the telemetry; defer it.
func setupRole(ctx context.Context, e env, role string, c *common, fs *flag.FlagSet, args []string) (roleSetup, func(), error) {
	if err := fs.Parse(args); err != nil {
		return roleSetup{}, nil, err
	}
	base, err := c.logger(e)
	if err != nil {
		return roleSetup{}, nil, err
	}
	logger := base.With("role", role)
	points, err := crashPoints(e, logger)
	if err != nil {
		return roleSetup{}, nil, err
	}
	telLogger := logger
	if role == "all" {
		telLogger = base.With("role", "telemetry")
	}
	tel, err := newTelemetry(ctx, e, role, telLogger)
	if err != nil {
		return roleSetup{}, nil, err
	}
	return roleSetup{base: base, logger: logger, points: points, tel: tel}, func() { shutdownTelemetry(ctx, tel, telLogger) }, nil
}

// options fills into o what every component of the process shares: the
// database, crash points and telemetry, and a logger that logs as component.
func (r roleSetup) options(o app.Options, c common, component string) app.Options {
	o.DatabaseURL = c.databaseURL
	o.Logger = r.base.With("role", component)
	o.CrashPoints = r.points
	o.TracerProvider, o.MeterProvider, o.Metrics = r.tel.tracerProvider, r.tel.meterProvider, r.tel.metrics
	return o
}

// bindProvider registers the provider client's flags, shared by every
// process that calls the provider: which adapter, its URL and key, and the
// one call timeout. An empty URL is the adapter's default.
func bindProvider(fs *flag.FlagSet, e env, o *app.Options) {
	fs.StringVar(&o.ProviderKind, "psp", cmp.Or(e.getenv("PSP_KIND"), app.ProviderFake), "the provider adapter: fake (chargeflow's protocol, as fakepsp serves it) or stripe (env PSP_KIND)")
	fs.StringVar(&o.Provider.BaseURL, "psp-url", e.getenv("PSP_URL"), "the provider's base URL (env PSP_URL; default "+psp.DefaultBaseURL+" for fake, "+pspstripe.DefaultBaseURL+" for stripe)")
	// Registered without a default, so that -h cannot print the key.
	fs.StringVar(&o.StripeAPIKey, "stripe-api-key", "", "the Stripe secret key, required with --psp stripe (env STRIPE_API_KEY, better: a flag shows in ps)")
	o.StripeAPIKey = e.getenv("STRIPE_API_KEY")
	fs.DurationVar(&o.StripeClockSkew, "stripe-clock-skew", pspstripe.DefaultClockSkew, "how far Stripe's clock may be from the database's; widens a lookup by reference's created-time window on both sides (docs/provider.md)")
	fs.DurationVar(&o.Provider.Timeout, "call-timeout", psp.DefaultTimeout, "how long one provider call (or lookup) may take before its outcome is unknown; the worker's job timeout and the reconciler's settle window follow from it")
}

// bindWebhooks registers the webhook flags of the api (which endpoint URLs
// it takes) and the worker (which addresses deliveries may reach).
// allowPrivate is the default: true only for `all`, the laptop's system.
func bindWebhooks(fs *flag.FlagSet, e env, o *app.Options, allowPrivate bool) {
	d := app.Defaults().Webhooks
	if v := e.getenv("WEBHOOKS_ALLOW_PRIVATE"); v != "" {
		allowPrivate = v == "1" || v == "true"
	}
	fs.BoolVar(&o.Webhooks.AllowPrivate, "webhooks-allow-private", allowPrivate,
		"accept webhook endpoints on loopback, private and link-local addresses, and deliver to them (env WEBHOOKS_ALLOW_PRIVATE=1): tests and a laptop only")
	fs.IntVar(&o.Webhooks.Concurrency, "webhook-concurrency", d.Concurrency, "webhook deliveries made at once, in their own queue")
	fs.DurationVar(&o.Webhooks.Timeout, "webhook-timeout", delivery.DefaultTimeout, "how long one webhook delivery may take")
	fs.DurationVar(&o.Webhooks.RetryBase, "webhook-retry-base", delivery.DefaultBackoffBase, "first wait before retrying a failed webhook delivery, doubled each time")
	fs.DurationVar(&o.Webhooks.RetryCap, "webhook-retry-cap", delivery.DefaultBackoffCap, "longest wait between webhook delivery attempts")
	// Registered without a default, so that -h cannot print the secret.
	fs.StringVar(&o.ProviderWebhookSecret, "psp-webhook-secret", "",
		"the secret the provider signs its notifications with; turns POST /v1/provider_webhooks/{fake|stripe} on (better: env PSP_WEBHOOK_SECRET)")
	o.ProviderWebhookSecret = e.getenv("PSP_WEBHOOK_SECRET")
}

// serveOptions adjust serveHTTP.
type serveOptions struct {
	// ready, if set, receives the bound address once the listener is open.
	ready func(net.Addr)
	// holdsConnections turns off the read and write timeouts: the fake
	// provider holds connections open on purpose for as long as a fault says.
	holdsConnections bool
	// beforeShutdown runs when ctx is done, before in-flight requests drain.
	beforeShutdown func()
}

// serveHTTP serves handler on addr until ctx is done, then drains in-flight
// requests for up to ten seconds.
func serveHTTP(ctx context.Context, addr string, handler http.Handler, logger *slog.Logger, o serveOptions) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	server := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		// Past this net/http answers 431 itself, in plain text; below it the
		// API enforces its own, lower limit as problem+json
		// (api.MaxHeaderBytes; docs/api.md, "Protocol").
		MaxHeaderBytes: 1 << 20,
		ErrorLog:       slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	if o.holdsConnections {
		server.ReadTimeout, server.WriteTimeout = 0, 0
	}
	logger.Info("listening", "addr", ln.Addr().String())
	if o.ready != nil {
		o.ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- server.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", addr, err)
	case <-ctx.Done():
	}
	if o.beforeShutdown != nil {
		o.beforeShutdown()
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := server.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down %s: %w", addr, err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// displayURL turns a listen address into a URL a person can paste.
func displayURL(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	if host == "" || host == "::" || host == "0.0.0.0" {
		host = "127.0.0.1"
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return "http://" + host + ":" + port
}
