package outbox_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/outbox"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/route"
	"github.com/chargeflow/chargeflow/submit"
)

// failoverBundle is a worker whose tenant routes through two accounts,
// "first" and "second", each a fake provider of its own (the first may
// be an address where nothing listens).
type failoverBundle struct {
	testBundle
	firstURL, secondURL string
}

func setupFailover(t *testing.T, firstURL string, lab ...outbox.Lab) (context.Context, *failoverBundle) {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	second := fakepsptest.Start(t, fakepsp.Config{})
	if firstURL == "" {
		firstURL = fakepsptest.Start(t, fakepsp.Config{}).URL
	}
	tenantID := dbtest.Tenant(t, pool, "failover test")
	for _, a := range []route.Account{
		{Name: "first", Kind: route.KindFake, Endpoint: firstURL},
		{Name: "second", Kind: route.KindFake, Endpoint: second.URL},
	} {
		_, err := route.AddAccount(ctx, pool, a)
		require.NoError(t, err)
	}
	require.NoError(t, route.SetRoute(ctx, pool, tenantID, []route.Entry{{Account: "first"}, {Account: "second"}}))

	routes := route.NewCache(pool, time.Millisecond)
	providers, err := app.Options{Provider: psp.Config{BaseURL: "http://127.0.0.1:1", Timeout: 2 * time.Second}}.Providers(routes)
	require.NoError(t, err)
	worker, err := outbox.NewWorker(outbox.Config{
		DB: pool, Provider: providers.Own(), Providers: providers, Routes: routes,
		// Two failures in a row open a breaker, for long enough to outlast
		// the test.
		Breaker:           outbox.BreakerConfig{ConsecutiveFailures: 2, OpenFor: time.Hour},
		UnknownCheckAfter: time.Minute,
		// The lab build's broken modes, for its negative controls
		// (worker_lab_test.go).
		Lab: append(lab, outbox.Lab{})[0],
	})
	require.NoError(t, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers:           workers,
		MaxAttempts:       10,
		RetryPolicy:       outbox.RetryPolicy{Base: 20 * time.Millisecond, Cap: 50 * time.Millisecond},
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	})
	return ctx, &failoverBundle{testBundle: testBundle{pool: pool, river: client, pspURL: second.URL, tenantID: tenantID},
		firstURL: firstURL, secondURL: second.URL}
}

// acceptAt writes a pending charge at account, as the API routes it.
func (b *failoverBundle) acceptAt(ctx context.Context, t *testing.T, account string) intent.Charge {
	t.Helper()
	var c intent.Charge
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		c = dbtest.PendingCharge(t, tx, dbtest.Charge{TenantID: b.tenantID, Amount: 4200, Currency: "EUR",
			PaymentMethod: "pm_card_visa", Provider: account})
		_, err := b.river.InsertTx(ctx, tx, submit.ChargeArgs{TenantID: c.TenantID, ChargeID: c.ID}, nil)
		return err
	}))
	return c
}

// closedAddress is a loopback address where nothing listens: every call
// to it is refused, which proves it applied nothing.
func closedAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr
}

func TestFailover(t *testing.T) {
	t.Parallel()

	t.Run("AChargeProvenNotHeldMovesToTheNextAccount", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupFailover(t, closedAddress(t))

		var charges []intent.Charge
		for range 4 {
			charges = append(charges, b.acceptAt(ctx, t, "first"))
		}
		ledger := map[string]fakepsp.LedgerEntry{}
		for _, c := range charges {
			got := b.waitFor(ctx, t, c.ID, intent.StateSucceeded)
			require.Equal(t, "second", got.Provider, "the charge was taken by the second account")
			require.Equal(t, "cf_"+c.ID+"_1", got.ProviderKey)
			trail, err := intent.AuditTrail(ctx, b.pool, b.tenantID, c.ID)
			require.NoError(t, err)
			var reroute *intent.AuditEntry
			for i, e := range trail {
				if e.Action == intent.ActionReroute {
					reroute = &trail[i]
				}
			}
			require.NotNil(t, reroute, "the move is on the audit trail: %v", b.reasons(ctx, t, c.ID))
			require.Equal(t, "rerouted_from:first", reroute.Reason)
			require.Contains(t, reroute.Evidence, "not held by first (key cf_"+c.ID+")")
			require.Regexp(t, `nothing was ever sent to it|not_applied:connection_refused`, reroute.Evidence)
		}
		for _, e := range b.ledger(t) {
			_, twice := ledger[e.Reference]
			require.False(t, twice, "charged once: %s", e.Reference)
			ledger[e.Reference] = e
		}
		require.Len(t, ledger, len(charges))
	})

	t.Run("AnUnknownOutcomeNeverMoves", func(t *testing.T) {
		t.Parallel()
		first := fakepsptest.Start(t, fakepsp.Config{})
		ctx, b := setupFailover(t, first.URL)
		// The first account applies every charge and loses the answer.
		require.NoError(t, fakepsp.SetFaults(ctx, first.URL, fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{
			{On: "charge", Fault: "apply_then_reset", P: 1},
		}}))
		var charges []intent.Charge
		for range 4 {
			charges = append(charges, b.acceptAt(ctx, t, "first"))
		}
		// Each charge was either sent to the first account, which holds it
		// with its answer lost, and stays there unknown; or, once two lost
		// answers had opened the breaker, moved unsent and taken by the
		// second.
		b.waitJobsDone(ctx, t)
		atFirst := map[string]bool{}
		for _, c := range charges {
			got, err := intent.Get(ctx, b.pool, b.tenantID, c.ID)
			require.NoError(t, err)
			trail := strings.Join(b.reasons(ctx, t, c.ID), " ")
			if strings.Contains(trail, "submitting>unknown") {
				require.Equal(t, intent.StateUnknown, got.State, trail)
				require.Equal(t, "first", got.Provider, "a charge the first account may hold stays with it: %s", trail)
				require.Equal(t, c.ProviderKey, got.ProviderKey)
				atFirst[c.ID] = true
				continue
			}
			require.Equal(t, intent.StateSucceeded, got.State, trail)
			require.Equal(t, "second", got.Provider, trail)
			require.Contains(t, trail, "rerouted_from:first")
		}
		require.GreaterOrEqual(t, len(atFirst), 2, "the lost answers opened the breaker")
		firstLedger, err := fakepsp.FetchLedger(ctx, first.URL, false)
		require.NoError(t, err)
		require.Len(t, firstLedger, len(atFirst), "the first account took the charges sent to it")
		for _, e := range firstLedger {
			require.True(t, atFirst[e.Reference])
		}
		for _, e := range b.ledger(t) {
			require.False(t, atFirst[e.Reference], "the second took none the first may hold")
		}

		// Its breaker is open now, so a new charge goes to the second.
		fresh := b.acceptAt(ctx, t, "first")
		got := b.waitFor(ctx, t, fresh.ID, intent.StateSucceeded)
		require.Equal(t, "second", got.Provider)
		require.Contains(t, strings.Join(b.reasons(ctx, t, fresh.ID), " "), "rerouted_from:first")
	})

	t.Run("WithNowhereToGoAChargeIsSentWhereItIs", func(t *testing.T) {
		t.Parallel()
		first := fakepsptest.Start(t, fakepsp.Config{})
		ctx, b := setupFailover(t, first.URL)
		// The first account is the only one of the route: a breaker decides
		// where a charge goes, never whether one with nowhere else to go is
		// sent. Its lost answers open its breaker, and charges are still
		// sent to it, as they would be without breakers.
		require.NoError(t, route.SetRoute(ctx, b.pool, b.tenantID, []route.Entry{{Account: "first"}}))
		require.NoError(t, fakepsp.SetFaults(ctx, first.URL, fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{
			{On: "charge", Fault: "apply_then_reset", P: 1},
		}}))
		var charges []intent.Charge
		for range 5 {
			charges = append(charges, b.acceptAt(ctx, t, "first"))
		}
		for _, c := range charges {
			got := b.waitFor(ctx, t, c.ID, intent.StateUnknown)
			require.Equal(t, "first", got.Provider)
			trail := strings.Join(b.reasons(ctx, t, c.ID), " ")
			require.NotContains(t, trail, "circuit_open")
			require.NotContains(t, trail, "rerouted")
		}
		firstLedger, err := fakepsp.FetchLedger(ctx, first.URL, false)
		require.NoError(t, err)
		require.Len(t, firstLedger, len(charges), "every charge was sent")
		require.Empty(t, b.ledger(t))
	})
}
