//go:build lab

package outbox_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/outbox"
	"github.com/chargeflow/chargeflow/route"
)

// TestRerunFindsSubmittingUnderTheNegativeControl is TestRerunFindsSubmitting
// with the lab build's broken mode (lab.go) on.
func TestRerunFindsSubmittingUnderTheNegativeControl(t *testing.T) {
	t.Parallel()

	// The negative control: the broken mode re-sends, and with the
	// provider's de-duplication off that is a second charge in the ledger.
	t.Run("BrokenModeResends", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t, func(o *setupOpts) { o.noStart = true; o.lab = outbox.Lab{ResendOnRerun: true} })
		b.faults(t, noDedupe())

		c := b.accept(ctx, t, "pm_card_visa", 1)
		_, err := intent.MoveCharge(ctx, b.pool, intent.Move{TenantID: c.TenantID, ChargeID: c.ID, From: intent.StatePending,
			To: intent.StateSubmitting, Actor: "test", Reason: "crashed_mid_call", CountAttempt: true})
		require.NoError(t, err)
		require.NoError(t, b.river.Start(ctx))
		b.waitFor(ctx, t, c.ID, intent.StateSucceeded)
		require.Len(t, b.ledger(t), 1, "it sent although an earlier attempt may have been applied")
	})
}

// TestUnknownOutcomeUnderTheRerouteNegativeControl is
// TestFailover/AnUnknownOutcomeNeverMoves with the lab build's broken mode
// reroute_on_timeout (lab.go) on: the timeout is taken for proof, the
// charge moves to the next account and is charged there too.
func TestUnknownOutcomeUnderTheRerouteNegativeControl(t *testing.T) {
	t.Parallel()

	// The first account applies every charge and loses the answer.
	losing := func(t *testing.T) *fakepsptest.Provider {
		t.Helper()
		first := fakepsptest.Start(t, fakepsp.Config{})
		require.NoError(t, fakepsp.SetFaults(t.Context(), first.URL, fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{
			{On: fakepsp.OnCharge, Fault: fakepsp.FaultApplyThenReset, P: 1},
		}}))
		return first
	}

	t.Run("BrokenModeChargesTwiceAcrossProviders", func(t *testing.T) {
		t.Parallel()
		first := losing(t)
		ctx, b := setupFailover(t, first.URL, outbox.Lab{RerouteOnTimeout: true})

		c := b.acceptAt(ctx, t, "first")
		got := b.waitFor(ctx, t, c.ID, intent.StateSucceeded)
		require.Equal(t, "second", got.Provider, "moved on a timeout")
		reasons := strings.Join(b.reasons(ctx, t, c.ID), " ")
		require.Contains(t, reasons, "not_applied:broken_reroute_on_timeout", "the trail names the broken mode")
		require.Contains(t, reasons, "rerouted_from:first")

		firstLedger, err := fakepsp.FetchLedger(ctx, first.URL, false)
		require.NoError(t, err)
		require.Len(t, firstLedger, 1, "the first account took it")
		require.Equal(t, c.ID, firstLedger[0].Reference)
		second := b.ledger(t)
		require.Len(t, second, 1, "and so did the second: a double charge across providers")
		require.Equal(t, c.ID, second[0].Reference)
	})

	t.Run("WithNowhereToGoItIsUnknown", func(t *testing.T) {
		t.Parallel()
		first := losing(t)
		ctx, b := setupFailover(t, first.URL, outbox.Lab{RerouteOnTimeout: true})
		require.NoError(t, route.SetRoute(ctx, b.pool, b.tenantID, []route.Entry{{Account: "first"}}))

		c := b.acceptAt(ctx, t, "first")
		got := b.waitFor(ctx, t, c.ID, intent.StateUnknown)
		require.Equal(t, "first", got.Provider)
		require.NotContains(t, strings.Join(b.reasons(ctx, t, c.ID), " "), "broken")
		b.waitJobsDone(ctx, t)
		require.Empty(t, b.ledger(t))
	})
}
