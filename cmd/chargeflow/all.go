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

	"github.com/chargeflow/chargeflow/admin"
	"github.com/chargeflow/chargeflow/internal/app"
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
	// The bundled provider tells the API what it applied, signed with a
	// secret made for this run unless one is given: an unknown outcome
	// then settles on the provider's word before the reconciler asks (and
	// under Adyen, whose refunds are only acknowledged, a refund settles on
	// it).
	newSecret := func() string { return "whsec_" + rand.Text() }
	// The bundled fake speaks Stripe's and Adyen's APIs too: every role
	// uses that adapter against it, with a test key the fake accepts. No
	// other key is needed or used: the provider is always this fake.
	switch o.ProviderKind {
	case app.ProviderStripe:
		p.protocol, o.StripeAPIKey = fakepsp.ProtocolStripe, "sk_test_chargeflow_all"
	case app.ProviderAdyen:
		p.protocol, o.AdyenAPIKey = fakepsp.ProtocolAdyen, "chargeflow_all_test_key"
		o.AdyenMerchantAccount = cmp.Or(o.AdyenMerchantAccount, "ChargeflowDemo")
		// Adyen signs with an HMAC key, given in hex.
		newSecret = func() string {
			key := make([]byte, 32)
			_, _ = rand.Read(key)
			return hex.EncodeToString(key)
		}
	}
	if o.ProviderWebhookSecret == "" {
		o.ProviderWebhookSecret = newSecret()
	}
	p.webhookSecret = o.ProviderWebhookSecret
	// The provider holds authorizations for as long as the roles declare.
	p.holdWindow = o.Provider.Capabilities.HoldWindow
	// The API listens first, so that the provider's notifications are sent
	// to the port it really has (--addr may ask for any: port 0).
	apiListener, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	defer apiListener.Close()
	p.webhookURL = displayURL(apiListener.Addr()) + "/v1/provider_webhooks/" + cmp.Or(o.ProviderKind, app.ProviderFake)

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
	var pspURL string
	select {
	case pspURL = <-pspListening:
	case <-ctx.Done():
		return g.Wait()
	}
	o.Provider.BaseURL = pspURL
	if o.ProviderKind == app.ProviderAdyen {
		// Adyen's base URL names the API's version.
		o.Provider.BaseURL += "/v71"
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
	admins := admin.New(a.Pool)
	apiKey, demoID, err := demoKey(ctx, admins, a.Pool)
	if err != nil {
		return err
	}
	opsToken, err := demoOperatorToken(ctx, admins)
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
			once.Do(func() { printQuickstart(e, displayURL(listening), pspURL, demoID, apiKey, opsToken) })
		}, drain: a.Server.Drain, grace: grace, listener: apiListener})
	})
	return g.Wait()
}

// demoActor signs the demo's admin actions in the admin audit.
const demoActor = "chargeflow all"

// demoKey makes sure the demo tenant exists and gives it a fresh API key.
// Keys are stored hashed, so an old one cannot be shown again: the keys an
// earlier run printed are revoked instead of piling up.
func demoKey(ctx context.Context, s *admin.Service, db tenant.DB) (apiKey, tenantID string, err error) {
	demo, found, err := tenant.ByName(ctx, db, demoTenant)
	if err != nil {
		return "", "", err
	}
	if !found {
		demo, apiKey, err = s.CreateTenant(ctx, demoActor, demoTenant)
		return apiKey, demo.ID, err
	}
	apiKey, _, _, err = s.RotateKey(ctx, demoActor, demo.ID, 0)
	return apiKey, demo.ID, err
}

// demoOperator is the admin operator `chargeflow all` creates for the
// quickstart.
const demoOperator = "demo-admin"

// demoOperatorToken makes sure the demo operator exists and gives it a
// fresh token; the one an earlier run printed stops working.
func demoOperatorToken(ctx context.Context, s *admin.Service) (string, error) {
	_, token, found, err := s.ResetOperatorToken(ctx, demoActor, demoOperator)
	if err != nil || found {
		return token, err
	}
	_, token, err = s.CreateOperator(ctx, demoActor, demoOperator, operator.RoleAdmin)
	return token, err
}

// printQuickstart shows the demo's fresh key and token and commands to
// paste. It goes to stdout, on purpose and only here: logs never carry
// keys or tokens.
func printQuickstart(e env, baseURL, pspURL, tenantID, apiKey, opsToken string) {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	key := "demo-order-" + hex.EncodeToString(nonce[:])
	fmt.Fprint(e.stdout, quickstart(baseURL, pspURL, tenantID, apiKey, opsToken, key))
}

// quickstart is the banner: what runs where, then shell commands that work
// as pasted, each answer feeding the next through shell variables.
func quickstart(baseURL, pspURL, tenantID, apiKey, opsToken, idempotencyKey string) string {
	return fmt.Sprintf(`
chargeflow is running
  API             %[1]s   (in a browser: %[1]s/ops/, the operator page)
  fake provider   %[5]s   (what really moved money: %[5]s/_admin/ledger)
  demo tenant     %[2]s

Paste these into a shell. The key and token are shown only here, never logged; each run
replaces the ones the last run printed.

  export CHARGEFLOW_API_URL=%[1]s
  export CHARGEFLOW_API_KEY=%[3]s
  export CHARGEFLOW_OPERATOR_TOKEN=%[6]s

Create a charge. The Idempotency-Key (16 to 255 characters) names this request: send it
again and you get the same answer, never a second charge.

  CHARGE_ID=$(curl -sS "$CHARGEFLOW_API_URL/v1/charges" \
    -H "Authorization: Bearer $CHARGEFLOW_API_KEY" \
    -H "Idempotency-Key: %[4]s" \
    -H "Content-Type: application/json" \
    -d '{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "Order 1"}' \
    | sed -n 's/^{"id":"\([^"]*\)".*/\1/p'); echo "$CHARGE_ID"

Wait for it to succeed (about a second), then read it and its audit trail:

  for i in $(seq 50); do curl -sS "$CHARGEFLOW_API_URL/v1/charges/$CHARGE_ID" -H "Authorization: Bearer $CHARGEFLOW_API_KEY" | grep -q '"status":"succeeded"' && break; sleep 0.2; done
  curl -sS "$CHARGEFLOW_API_URL/v1/charges/$CHARGE_ID" -H "Authorization: Bearer $CHARGEFLOW_API_KEY"
  curl -sS "$CHARGEFLOW_API_URL/v1/charges/$CHARGE_ID/events" -H "Authorization: Bearer $CHARGEFLOW_API_KEY"

Refund part of it (a new key):

  curl -sS "$CHARGEFLOW_API_URL/v1/refunds" \
    -H "Authorization: Bearer $CHARGEFLOW_API_KEY" \
    -H "Idempotency-Key: %[4]s-refund" \
    -H "Content-Type: application/json" \
    -d "{\"charge\": \"$CHARGE_ID\", \"amount\": 400, \"reason\": \"requested_by_customer\"}"

The same with the CLI, which reads those variables: bin/chargeflow charge create --amount 1000 --wait
As an operator: sign in at %[1]s/ops/ with the token, or
  curl -sS "$CHARGEFLOW_API_URL/ops/v1/charges?status=needs_review" -H "Authorization: Bearer $CHARGEFLOW_OPERATOR_TOKEN"
Other test cards: pm_card_chargeDeclined, pm_card_chargeDeclinedInsufficientFunds, pm_card_chargeDeclinedExpiredCard

`, baseURL, tenantID, apiKey, idempotencyKey, pspURL, opsToken)
}
