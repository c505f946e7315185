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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/delivery"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/textlog"
	"github.com/chargeflow/chargeflow/psp"
	pspadyen "github.com/chargeflow/chargeflow/psp/adyen"
	pspstripe "github.com/chargeflow/chargeflow/psp/stripe"
	"github.com/chargeflow/chargeflow/webhook"
)

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/chargeflow?sslmode=disable"

// common is what every long-running role reads: where the database is, how
// to log, and which crash points are armed.
type common struct {
	databaseURL string
	logLevel    string
	logFormat   string
}

// bind registers the common flags.
func (c *common) bind(fs *flag.FlagSet) {
	fs.StringVar(&c.databaseURL, "database-url", defaultDatabaseURL, "the Postgres URL (the database is created if missing)")
	c.bindLogLevel(fs)
}

// bindLogLevel registers --log-level and --log-format alone, for the fake
// provider.
func (c *common) bindLogLevel(fs *flag.FlagSet) {
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "auto", "text (a line a person reads), json (a line a machine reads), or auto: text when stderr is a terminal, json otherwise")
}

// newFlagSet makes a subcommand's flag set that reports to stderr.
func newFlagSet(name string, e env) *flag.FlagSet {
	fs := flag.NewFlagSet("chargeflow "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

// logger builds the logger every process writes to stderr: text for a
// person at a terminal, JSON for a machine (--log-format).
func (c *common) logger(e env) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.logLevel)
	}
	format := cmp.Or(c.logFormat, "auto")
	if format == "auto" {
		format = "json"
		if e.stderrTerminal {
			format = "text"
		}
	}
	switch format {
	case "text":
		return slog.New(textlog.New(e.stderr, level)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: level})), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text, json or auto", c.logFormat)
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
	// getenv reads the variables provider accounts name for their
	// credentials (docs/routing.md).
	getenv func(string) string
}

// setupRole parses a role's flags and builds its loggers, crash points and
// telemetry. The returned function flushes the telemetry; defer it.
func setupRole(ctx context.Context, e env, role string, c *common, fs *flag.FlagSet, args []string) (roleSetup, func(), error) {
	if err := parseFlags(fs, e, args); err != nil {
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
	if err := clockSkew(e, logger); err != nil {
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
	return roleSetup{base: base, logger: logger, points: points, tel: tel, getenv: e.getenv}, func() { shutdownTelemetry(ctx, tel, telLogger) }, nil
}

// options fills into o what every component of the process shares: the
// database, crash points and telemetry, and a logger that logs as component.
func (r roleSetup) options(o app.Options, c common, component string) app.Options {
	o.DatabaseURL = c.databaseURL
	o.Logger = r.base.With("role", component)
	o.CrashPoints = r.points
	o.TracerProvider, o.MeterProvider, o.Metrics = r.tel.tracerProvider, r.tel.meterProvider, r.tel.metrics
	o.Getenv = r.getenv
	return o
}

// bindProvider registers the provider client's flags, shared by every
// process that calls the provider: which adapter, its URL and key, and the
// one call timeout. An empty URL is the adapter's default.
func bindProvider(fs *flag.FlagSet, o *app.Options) {
	fs.StringVar(&o.ProviderKind, "psp", app.ProviderFake, "the provider adapter: fake (chargeflow's protocol, as fakepsp serves it), stripe or adyen")
	fs.StringVar(&o.Provider.BaseURL, "psp-url", "", "the provider's base URL (default "+psp.DefaultBaseURL+" for fake, "+pspstripe.DefaultBaseURL+" for stripe, "+pspadyen.DefaultBaseURL+" for adyen)")
	// Registered without a default, so that -h cannot print the key.
	fs.StringVar(&o.StripeAPIKey, "stripe-api-key", "", "the Stripe secret key, required with --psp stripe (set it from the environment: a flag shows in ps)")
	fs.StringVar(&o.AdyenAPIKey, "adyen-api-key", "", "the Adyen API key, required with --psp adyen (set it from the environment: a flag shows in ps)")
	fs.StringVar(&o.AdyenMerchantAccount, "adyen-merchant-account", "", "the Adyen merchant account charges are made for, required with --psp adyen")
	fs.DurationVar(&o.StripeClockSkew, "stripe-clock-skew", pspstripe.DefaultClockSkew, "how far Stripe's clock may be from the database's; widens a lookup by reference's created-time window on both sides (docs/provider.md)")
	fs.DurationVar(&o.Provider.Timeout, "call-timeout", psp.DefaultTimeout, "how long one provider call (or lookup) may take before its outcome is unknown; the worker's job timeout and the reconciler's apply window follow from it")
}

// bindWebhooks registers the webhook flags of the api (which endpoint URLs
// it takes) and the worker (which addresses deliveries may reach).
// allowPrivate is the default: true only for `all`, the laptop's system.
func bindWebhooks(fs *flag.FlagSet, o *app.Options, allowPrivate bool) {
	d := app.Defaults().Webhooks
	fs.BoolVar(&o.Webhooks.AllowPrivate, "webhooks-allow-private", allowPrivate,
		"accept webhook endpoints on any address and port (loopback, private and link-local among them), and deliver to them: tests and a laptop only")
	o.Webhooks.Ports = slices.Clone(webhook.DefaultPorts)
	fs.Var((*portsValue)(&o.Webhooks.Ports), "webhook-ports",
		"the ports webhook endpoints may name and deliveries may reach, comma-separated, from 1 to 65535 (--webhooks-allow-private lifts it)")
	fs.IntVar(&o.Webhooks.Concurrency, "webhook-concurrency", d.Concurrency, "webhook deliveries made at once, in their own queue")
	fs.DurationVar(&o.Webhooks.Timeout, "webhook-timeout", delivery.DefaultTimeout, "how long one webhook delivery may take")
	fs.DurationVar(&o.Webhooks.RetryBase, "webhook-retry-base", delivery.DefaultBackoffBase, "first wait before retrying a failed webhook delivery, doubled each time")
	fs.DurationVar(&o.Webhooks.RetryCap, "webhook-retry-cap", delivery.DefaultBackoffCap, "longest wait between webhook delivery attempts")
	// Registered without a default, so that -h cannot print the secret.
	fs.StringVar(&o.ProviderWebhookSecret, "psp-webhook-secret", "",
		"the secret the provider signs its notifications with (Adyen's: the HMAC key in hex); turns POST /v1/provider_webhooks/{fake,stripe,adyen} on (set it from the environment: a flag shows in ps)")
}

// portsValue is --webhook-ports: a comma-separated list of ports from 1 to
// 65535, at least one, each once.
type portsValue []uint16

func (p *portsValue) String() string {
	if p == nil {
		return ""
	}
	s := make([]string, len(*p))
	for i, port := range *p {
		s[i] = strconv.Itoa(int(port))
	}
	return strings.Join(s, ",")
}

func (p *portsValue) Set(value string) error {
	refuse := fmt.Errorf("--webhook-ports (%s) must be a comma-separated list of ports from 1 to 65535, each once, such as 443,8443",
		envName("webhook-ports"))
	var ports []uint16
	for _, field := range strings.Split(value, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(field), 10, 16)
		if err != nil || n == 0 || slices.Contains(ports, uint16(n)) {
			return refuse
		}
		ports = append(ports, uint16(n))
	}
	*p = ports
	return nil
}

// serveOptions adjust serveHTTP.
type serveOptions struct {
	// ready, if set, receives the bound address once the listener is open.
	ready func(net.Addr)
	// holdsConnections turns off the read and write timeouts: the fake
	// provider holds connections open on purpose for as long as a fault says.
	holdsConnections bool
	// drain, if set, is called as soon as ctx is done (the API's: /readyz
	// answers 503 draining); the server then keeps serving for grace, with
	// keep-alives off so that clients move their next request elsewhere.
	drain func()
	// grace is how long the server drains, and then how long requests in
	// flight get to finish once the listener is closed; default 10 s (the
	// latter only).
	grace time.Duration
	// beforeShutdown runs when the drain is over, before the listener closes.
	beforeShutdown func()
	// listener, when set, is served instead of a new one on addr: a caller
	// that must know the bound port before serving (addr's port 0) listens
	// first.
	listener net.Listener
}

// serveHTTP serves handler on addr until ctx is done, drains (o.drain), then
// closes the listener and waits for the requests in flight to finish.
func serveHTTP(ctx context.Context, addr string, handler http.Handler, logger *slog.Logger, o serveOptions) error {
	ln := o.listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("listen on %s: %w", addr, err)
		}
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
	if o.drain != nil {
		o.drain()
		server.SetKeepAlivesEnabled(false)
		logger.Info("draining: /readyz answers 503, requests are still served", "grace", o.grace.String())
		select {
		case err := <-errc:
			return fmt.Errorf("serve %s: %w", addr, err)
		case <-time.After(o.grace):
		}
	}
	if o.beforeShutdown != nil {
		o.beforeShutdown()
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmp.Or(o.grace, defaultShutdownWait))
	defer cancel()
	if err := server.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down %s: requests still in flight: %w", addr, err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	logger.Info("stopped serving", "addr", ln.Addr().String())
	return nil
}

// afterGrace returns a context that is done grace after ctx is: the work a
// role has in progress when it is told to stop runs under it, so that it
// can finish, and is cancelled if it takes longer.
func afterGrace(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return work, func() {
		stop()
		cancel()
	}
}

// shutdownGraceUsage explains --shutdown-grace, for each role.
var shutdownGraceUsage = map[string]string{
	"api": "after SIGTERM or SIGINT: how long /readyz answers 503 draining while requests are still served (a load balancer's time to notice), " +
		"then how long requests in flight may take to finish",
	"worker": "after SIGTERM or SIGINT: how long running jobs may take to finish (none start); then they are cancelled, " +
		"and a charge cut off mid-call stays submitting for the reconciler",
	"reconciler": "after SIGTERM or SIGINT: how long the batch in progress may take to finish (none starts); then its lookups are cancelled " +
		"and its leases left to expire",
	"all": "after SIGTERM or SIGINT: the API drains for this long while the worker and the reconciler finish what they are doing, as each role does on its own",
}

// defaultShutdownGrace is each role's --shutdown-grace: the API's covers a
// load balancer's readiness probes (two failures 5 s apart); the worker's
// covers a provider call at the default call timeout and the transactions
// around it; the reconciler's, a lookup at the call timeout and its write.
// `all` is a laptop's: there is no load balancer to wait for.
var defaultShutdownGrace = map[string]time.Duration{
	"api": 10 * time.Second, "worker": 30 * time.Second, "reconciler": 15 * time.Second, "all": time.Second,
}

// telemetryFlush bounds how long a stopping process flushes its traces.
const telemetryFlush = 5 * time.Second

// defaultShutdownWait is how long requests in flight get when a server
// without a grace stops (the fake provider's, a metrics listener).
const defaultShutdownWait = 10 * time.Second

// stopWithin is the longest a role takes from SIGTERM to exit with the
// given --shutdown-grace; a container's stop timeout (docker-compose.yml's
// stop_grace_period) must exceed it, or the role is killed mid-drain.
func stopWithin(role string, grace time.Duration) time.Duration {
	switch role {
	case "api":
		return 2*grace + telemetryFlush // draining, then requests in flight
	case "worker":
		return grace + app.CancelWait + telemetryFlush
	case "reconciler":
		return grace + telemetryFlush // a cut batch's lookups end at once
	case "fakepsp":
		return defaultShutdownWait
	case "all":
		return max(2*grace, grace+app.CancelWait, grace+defaultShutdownWait) + telemetryFlush
	}
	return 0
}

// bindShutdownGrace registers --shutdown-grace for role.
func bindShutdownGrace(fs *flag.FlagSet, role string, grace *time.Duration) {
	fs.DurationVar(grace, "shutdown-grace", defaultShutdownGrace[role], shutdownGraceUsage[role])
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
