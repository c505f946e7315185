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

	"github.com/jackc/pgx/v5/pgxpool"

	"chargeflow/crashpoint"
	"chargeflow/migrations"
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
func (c *common) logger(e env, role string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", c.logLevel, err)
	}
	logger := slog.New(slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	if role != "" {
		logger = logger.With("role", role)
	}
	return logger, nil
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
// parsed: its logger, its crash points and its telemetry.
type roleSetup struct {
	logger *slog.Logger
	points *crashpoint.Set
	tel    *telemetry
}

// setupRole parses a role's flags and builds its logger, crash points and
// telemetry. The returned function flushes the telemetry; defer it.
func setupRole(ctx context.Context, e env, role string, c *common, fs *flag.FlagSet, args []string) (roleSetup, func(), error) {
	if err := fs.Parse(args); err != nil {
		return roleSetup{}, nil, err
	}
	logger, err := c.logger(e, role)
	if err != nil {
		return roleSetup{}, nil, err
	}
	points, err := crashPoints(e, logger)
	if err != nil {
		return roleSetup{}, nil, err
	}
	tel, err := newTelemetry(ctx, e, role, logger)
	if err != nil {
		return roleSetup{}, nil, err
	}
	return roleSetup{logger: logger, points: points, tel: tel}, func() { shutdownTelemetry(ctx, tel, logger) }, nil
}

// poolOptions tune a role's connection pool.
type poolOptions struct {
	role     string
	maxConns int32
	// lockTimeout, when set, bounds every lock wait of the pool's sessions.
	lockTimeout time.Duration
}

// openPool creates the database if it is missing and opens a pool on it.
func (c *common) openPool(ctx context.Context, o poolOptions) (*pgxpool.Pool, error) {
	if err := migrations.CreateDatabase(ctx, c.databaseURL); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(c.databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if o.maxConns > 0 {
		cfg.MaxConns = o.maxConns
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "chargeflow-" + o.role
	if o.lockTimeout > 0 {
		cfg.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(o.lockTimeout.Milliseconds(), 10)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	return pool, nil
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
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
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
