package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"

	"chargeflow/migrations"
	"chargeflow/tenant"
)

// demoTenant is the tenant `chargeflow all` creates for the quickstart.
const demoTenant = "demo"

// runAll runs every role in one process against the local Postgres: it
// migrates, makes sure the demo tenant exists, gives it a fresh API key and
// prints a curl that works.
func runAll(ctx context.Context, e env, args []string) error {
	var c common
	var f apiFlags
	fs := newFlagSet("all", e)
	c.bind(fs, e)
	f.bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger, err := c.logger(e, "all")
	if err != nil {
		return err
	}
	points, err := crashPoints(e, logger)
	if err != nil {
		return err
	}
	server, pool, err := newAPI(ctx, c, f, logger, points)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Apply(ctx, pool, logger); err != nil {
		return err
	}
	demo, found, err := tenant.ByName(ctx, pool, demoTenant)
	if err != nil {
		return err
	}
	var apiKey string
	if found {
		apiKey, err = tenant.NewKey(ctx, pool, demo.ID)
	} else {
		demo, apiKey, err = tenant.Create(ctx, pool, demoTenant)
	}
	if err != nil {
		return err
	}
	return serveHTTP(ctx, f.addr, server.Handler(), logger, func(addr net.Addr) {
		printQuickstart(e, displayURL(addr), demo.ID, apiKey)
	})
}

// printQuickstart shows the demo tenant's fresh key and a curl to try. It
// goes to stdout, on purpose and only here: logs never carry API keys.
func printQuickstart(e env, baseURL, tenantID, apiKey string) {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	key := "demo-order-" + hex.EncodeToString(nonce[:])
	fmt.Fprintf(e.stdout, `
chargeflow is running at %[1]s (demo tenant %[2]s)

Create a charge (run it twice: the second answer is the stored replay):

  curl -sS -i %[1]s/v1/charges \
    -H 'Authorization: Bearer %[3]s' \
    -H 'Idempotency-Key: %[4]s' \
    -H 'Content-Type: application/json' \
    -d '{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "Order 1"}'

Then follow it:

  curl -sS %[1]s/v1/charges -H 'Authorization: Bearer %[3]s'

`, baseURL, tenantID, apiKey, key)
}
