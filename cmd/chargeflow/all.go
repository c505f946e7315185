//go:build lab

package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/pg"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/migrations"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/tenant"
)

// demoTenant is the tenant `chargeflow all` creates for the quickstart.
const demoTenant = "demo"

// runAll runs every role in one process — API, worker, reconciler and the
// bundled fake provider — against the local Postgres: it migrates, makes sure the demo tenant exists,
// gives it a fresh API key and prints a curl that works.
func runAll(ctx context.Context, e env, args []string) error {
	var c common
	var o app.Options
	var addr string
	var p fakepspFlags
	var grace time.Duration
	fs := newFlagSet("all", e)
	c.bind(fs)
	bindAPI(fs, &o, &addr)
	bindProvider(fs, &o)
	bindWorker(fs, &o)
	p.bind(fs, e, "psp-addr")
	bindReconciler(fs, &o)
	bindCapabilities(fs, &o)
	bindWebhooks(fs, &o, true)
	bindShutdownGrace(fs, "all", &grace)
	r, done, err := setupRole(ctx, e, "all", &c, fs, args)
	if err != nil {
		return err
	}
	defer done()
	if o.ProviderKind == app.ProviderStripe {
		// The bundled fake speaks Stripe's API too: every role uses the
		// Stripe adapter against it, with a test key the fake accepts. No
		// other key is needed or used: the provider is always this fake.
		p.protocol, o.StripeAPIKey = fakepsp.ProtocolStripe, "sk_test_chargeflow_all"
	}

	// The bundled provider tells the API what it applied, signed with a
	// secret made for this run unless one is given: an unknown outcome
	// then settles on the provider's word before the reconciler asks.
	if o.ProviderWebhookSecret == "" {
		o.ProviderWebhookSecret = "whsec_" + rand.Text()
	}
	p.webhookSecret = o.ProviderWebhookSecret
	apiHost, apiPort, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %w", addr, err)
	}
	if apiHost == "" || apiHost == "0.0.0.0" || apiHost == "::" {
		apiHost = "127.0.0.1"
	}
	p.webhookURL = "http://" + net.JoinHostPort(apiHost, apiPort) + "/v1/provider_webhooks/" + cmp.Or(o.ProviderKind, app.ProviderFake)

	pspLogger := r.base.With("role", "fakepsp")
	provider, err := newFakePSP(p, pspLogger)
	if err != nil {
		return err
	}
	// The provider listens first: the worker needs its address.
	pspListening := make(chan string, 1)
	g, ctx := errgroup.WithContext(ctx)
	// What is in progress when the process is told to stop (the worker's
	// jobs, the reconciler's batch) finishes under work, and the provider
	// keeps answering them until then.
	work, stop := afterGrace(ctx, grace)
	defer stop()
	g.Go(func() error {
		return serveFakePSP(work, provider, p.addr, pspLogger, func(addr net.Addr) { pspListening <- displayURL(addr) })
	})
	select {
	case o.Provider.BaseURL = <-pspListening:
	case <-ctx.Done():
		return g.Wait()
	}

	// Every component works on the API's pool.
	a, err := app.NewAPI(ctx, r.options(o, c, "api"))
	if err != nil {
		return err
	}
	defer a.Close()
	if err := migrations.Apply(ctx, a.Pool, r.base.With("role", "migrate")); err != nil {
		return err
	}
	apiKey, demoID, err := demoKey(ctx, a.Pool)
	if err != nil {
		return err
	}
	opsToken, err := demoOperatorToken(ctx, a.Pool)
	if err != nil {
		return err
	}
	workerOptions := r.options(o, c, "worker")
	workerClient, err := app.NewWorker(a.Pool, workerOptions)
	if err != nil {
		return err
	}
	g.Go(func() error { return app.RunRiver(ctx, workerClient, workerOptions.Logger, grace) })

	reconcilerOptions := r.options(o, c, "reconciler")
	jobs, err := app.NewQueue(workerClient, reconcilerOptions)
	if err != nil {
		return err
	}
	reconcile, err := app.NewReconciler(a.Pool, jobs, reconcilerOptions)
	if err != nil {
		return err
	}
	g.Go(func() error { return reconcile.RunUntil(work, ctx.Done()) })

	var once sync.Once
	g.Go(func() error {
		return serveHTTP(ctx, addr, a.Server.Handler(), r.base.With("role", "api"), serveOptions{ready: func(listening net.Addr) {
			once.Do(func() { printQuickstart(e, displayURL(listening), o.Provider.BaseURL, demoID, apiKey, opsToken) })
		}, drain: a.Server.Drain, grace: grace})
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

// demoOperator is the admin operator `chargeflow all` creates for the
// quickstart.
const demoOperator = "demo-admin"

// demoOperatorToken makes sure the demo operator exists and gives it a
// fresh token (tokens are stored hashed, so an old one cannot be shown).
func demoOperatorToken(ctx context.Context, db pg.Handle) (string, error) {
	_, token, found, err := operator.ResetToken(ctx, db, demoOperator)
	if err != nil || found {
		return token, err
	}
	_, token, err = operator.Create(ctx, db, demoOperator, operator.RoleAdmin)
	return token, err
}

// printQuickstart shows the demo tenant's fresh key and a curl to try. It
// goes to stdout, on purpose and only here: logs never carry API keys.
func printQuickstart(e env, baseURL, pspURL, tenantID, apiKey, opsToken string) {
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

Refund part of it once it succeeded (a new key; the amount defaults to what is left):

  curl -sS -i %[1]s/v1/refunds \
    -H 'Authorization: Bearer %[3]s' \
    -H 'Idempotency-Key: %[4]s-refund' \
    -H 'Content-Type: application/json' \
    -d '{"charge": "<id>", "amount": 400, "reason": "requested_by_customer"}'

The provider's ledger (what really moved money): curl -sS %[5]s/_admin/ledger
As an operator (the demo admin's token; every tenant's charges, timelines, resolve):

  open %[1]s/ops/ and sign in with %[6]s
  curl -sS '%[1]s/ops/v1/charges?status=needs_review' -H 'Authorization: Bearer %[6]s'

Other test cards: pm_card_chargeDeclined, pm_card_chargeDeclinedInsufficientFunds, pm_card_chargeDeclinedExpiredCard

`, baseURL, tenantID, apiKey, key, pspURL, opsToken)
}
