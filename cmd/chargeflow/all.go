package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"sync"

	"golang.org/x/sync/errgroup"

	"chargeflow/migrations"
	"chargeflow/tenant"
)

// demoTenant is the tenant `chargeflow all` creates for the quickstart.
const demoTenant = "demo"

// runAll runs every role in one process — API, worker, reconciler and the
// bundled fake provider — against the local Postgres: it migrates, makes sure the demo tenant exists,
// gives it a fresh API key and prints a curl that works.
func runAll(ctx context.Context, e env, args []string) error {
	var c common
	var a apiFlags
	var w workerFlags
	var p fakepspFlags
	var r reconcilerFlags
	fs := newFlagSet("all", e)
	c.bind(fs, e)
	a.bind(fs)
	w.bind(fs, e)
	p.bind(fs, e, "psp-addr")
	r.bind(fs, e, true)
	if err := fs.Parse(args); err != nil {
		return err
	}
	// One process, several roles: each component logs with its own role.
	logger, err := c.logger(e, "")
	if err != nil {
		return err
	}
	points, err := crashPoints(e, logger.With("role", "all"))
	if err != nil {
		return err
	}

	tel, err := newTelemetry(ctx, e, "all", logger.With("role", "telemetry"))
	if err != nil {
		return err
	}
	defer shutdownTelemetry(ctx, tel, logger)

	provider, err := newFakePSP(p, logger.With("role", "fakepsp"))
	if err != nil {
		return err
	}
	// The provider listens first: the worker needs its address.
	pspListening := make(chan string, 1)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return serveFakePSP(ctx, provider, p.addr, logger.With("role", "fakepsp"), func(addr net.Addr) { pspListening <- displayURL(addr) })
	})
	select {
	case w.pspURL = <-pspListening:
	case <-ctx.Done():
		return g.Wait()
	}

	server, pool, err := newAPI(ctx, c, a, logger.With("role", "api"), points, tel)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Apply(ctx, pool, logger.With("role", "migrate")); err != nil {
		return err
	}
	apiKey, demoID, err := demoKey(ctx, pool)
	if err != nil {
		return err
	}
	w.insertMaxAttempts = a.submitMaxAttempts
	workerClient, err := newWorkerClient(pool, w, logger.With("role", "worker"), points, tel)
	if err != nil {
		return err
	}
	g.Go(func() error { return runRiver(ctx, workerClient, logger.With("role", "worker")) })

	r.provider, r.pspURL, r.callTimeout = a.provider, w.pspURL, w.callTimeout
	reconcile, err := newReconciler(pool, workerClient, r, logger.With("role", "reconciler"), points, tel)
	if err != nil {
		return err
	}
	g.Go(func() error { return reconcile.Run(ctx) })

	var once sync.Once
	g.Go(func() error {
		return serveHTTP(ctx, a.addr, server.Handler(), logger.With("role", "api"), serveOptions{ready: func(addr net.Addr) {
			once.Do(func() { printQuickstart(e, displayURL(addr), w.pspURL, demoID, apiKey) })
		}})
	})
	return g.Wait()
}

// demoKey makes sure the demo tenant exists and gives it a fresh API key
// (keys are stored hashed, so an old one cannot be shown again).
func demoKey(ctx context.Context, db tenant.DB) (apiKey, tenantID string, err error) {
	demo, found, err := tenant.ByName(ctx, db, demoTenant)
	if err != nil {
		return "", "", err
	}
	if !found {
		demo, apiKey, err = tenant.Create(ctx, db, demoTenant)
		return apiKey, demo.ID, err
	}
	apiKey, err = tenant.NewKey(ctx, db, demo.ID)
	return apiKey, demo.ID, err
}

// printQuickstart shows the demo tenant's fresh key and a curl to try. It
// goes to stdout, on purpose and only here: logs never carry API keys.
func printQuickstart(e env, baseURL, pspURL, tenantID, apiKey string) {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	key := "demo-order-" + hex.EncodeToString(nonce[:])
	fmt.Fprintf(e.stdout, `
chargeflow is running at %[1]s (demo tenant %[2]s), with the fake provider at %[5]s

Create a charge (run it twice: the second answer is the stored replay):

  curl -sS -i %[1]s/v1/charges \
    -H 'Authorization: Bearer %[3]s' \
    -H 'Idempotency-Key: %[4]s' \
    -H 'Content-Type: application/json' \
    -d '{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "Order 1"}'

Then follow it (pending, then succeeded within a second) and its audit trail:

  curl -sS %[1]s/v1/charges -H 'Authorization: Bearer %[3]s'
  curl -sS %[1]s/v1/charges/<id>/events -H 'Authorization: Bearer %[3]s'

The provider's ledger (what really moved money): curl -sS %[5]s/_admin/ledger
Other test cards: pm_card_chargeDeclined, pm_card_chargeDeclinedInsufficientFunds, pm_card_chargeDeclinedExpiredCard

`, baseURL, tenantID, apiKey, key, pspURL)
}
