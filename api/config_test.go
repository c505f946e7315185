package api_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/submit"
)

// A configuration that would start and then refuse or fail every request
// does not start: New says what is wrong.
func TestNewRefusesNonsense(t *testing.T) {
	t.Parallel()
	// The pool connects lazily: New needs no database.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	jobs := apitest.NewQueue(t, pool, submit.Config{})

	for _, tt := range []struct {
		name      string
		configure func(*api.Config)
		says      string
	}{
		{"NegativeRateLimit", func(c *api.Config) { c.RateLimit = -1 }, "rate limit"},
		{"NaNRateLimit", func(c *api.Config) { c.RateLimit = math.NaN() }, "rate limit"},
		{"InfiniteRateLimit", func(c *api.Config) { c.RateLimit = math.Inf(1) }, "rate limit"},
		{"NegativeBurst", func(c *api.Config) { c.RateBurst = -1 }, "rate burst"},
		{"NegativeAuthFailureLimit", func(c *api.Config) { c.AuthFailureLimit = -1 }, "authentication failure limit"},
		{"NegativeMaxAmount", func(c *api.Config) { c.MaxAmount = -5 }, "max amount"},
		{"MaxAmountBelowOneUnit", func(c *api.Config) { c.MaxAmount = 99 }, "max amount"},
		{"MaxAmountOverflowsInKWD", func(c *api.Config) { c.MaxAmount = math.MaxInt64 / 5 }, "max amount"},
		{"NegativeBodyLimit", func(c *api.Config) { c.MaxBodyBytes = -1 }, "max body bytes"},
		{"ShortIdempotencyTTL", func(c *api.Config) { c.IdempotencyTTL = time.Minute }, "idempotency TTL"},
		{"NegativeAuthCacheTTL", func(c *api.Config) { c.AuthCacheTTL = -time.Second }, "auth cache TTL"},
		{"NegativeDBTimeout", func(c *api.Config) { c.DBTimeout = -time.Second }, "database timeout"},
		{"LongProviderName", func(c *api.Config) { c.Provider = strings.Repeat("p", 65) }, "provider name"},
		{"NoWebhookPorts", func(c *api.Config) { c.WebhookPorts = []uint16{} }, "webhook ports"},
		{"WebhookPortZero", func(c *api.Config) { c.WebhookPorts = []uint16{443, 0} }, "webhook ports"},
	} {
		cfg := app.ServerConfig{DB: pool, Jobs: jobs, Provider: psp.NewClient(psp.Config{})}
		tt.configure(&cfg.API)
		_, err := app.NewServer(cfg)
		require.ErrorContains(t, err, tt.says, tt.name)
	}
	// The services and the operator plane the server is built with refuse
	// theirs alike.
	for _, tt := range []struct {
		name      string
		configure func(*app.ServerConfig)
		says      string
	}{
		{"NegativeChargeCountMaxAge", func(c *app.ServerConfig) { c.Census.MaxAge = -time.Second }, "charge count max age"},
		{"NegativeReconcileFloor", func(c *app.ServerConfig) { c.Resolve.ReconcileFloor = -time.Second }, "reconcile floor"},
		{"NegativeOpsSessionTTL", func(c *app.ServerConfig) { c.Ops.SessionTTL = -time.Hour }, "operator session TTL"},
	} {
		cfg := app.ServerConfig{DB: pool, Jobs: jobs, Provider: psp.NewClient(psp.Config{})}
		tt.configure(&cfg)
		_, err := app.NewServer(cfg)
		require.ErrorContains(t, err, tt.says, tt.name)
	}

	// Zero values take the defaults, and the edges are accepted.
	for _, configure := range []func(*api.Config){
		func(*api.Config) {},
		func(c *api.Config) { c.MaxAmount = 100 },
		func(c *api.Config) { c.MaxAmount = math.MaxInt64 / 10 },
		func(c *api.Config) { c.RateLimit, c.RateBurst = 0.5, 1 },
		func(c *api.Config) { c.WebhookPorts = []uint16{65535} },
	} {
		cfg := app.ServerConfig{DB: pool, Jobs: jobs, Provider: psp.NewClient(psp.Config{})}
		configure(&cfg.API)
		_, err := app.NewServer(cfg)
		require.NoError(t, err)
	}
}
