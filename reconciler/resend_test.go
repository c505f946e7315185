package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/reconciler"
)

// A provider with no lookup that answers a re-send of the same request under
// the same key with the first request's result (psp.LookupByResend: Adyen)
// is asked by that re-send, inside its key window and never past it; a
// re-send's refusal proves nothing about the first request. Each row of
// docs/provider.md's table for such a provider, against the real fake,
// which de-duplicates keys as such a provider does.
func TestResendLookup(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour
	resender := func(b *testBundle) func(*reconciler.Config) {
		return func(c *reconciler.Config) {
			c.Provider.Client = b.declaring(psp.Capabilities{Lookup: psp.LookupByResend, KeyWindow: 7 * day})
			c.MaxUnknownAge = time.Hour
		}
	}
	ledger := func(t *testing.T, b *testBundle) []fakepsp.LedgerEntry {
		t.Helper()
		entries, err := fakepsp.FetchLedger(context.Background(), b.pspURL, true)
		require.NoError(t, err)
		return entries
	}

	t.Run("TheFirstResultSettles", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.unknownCharge(ctx, t, 1500)
		b.chargeAtProvider(t, c, 1500, "pm_card_visa")

		res, err := b.newReconciler(t, resender(b)).RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, reconciler.Result{Leased: 1, Succeeded: 1}, res)
		require.Equal(t, intent.StateSucceeded, b.get(ctx, t, c.ID).State)
		require.Len(t, ledger(t, b), 1, "the re-send was answered with the first result, not applied again")
	})

	t.Run("ARequestThatNeverArrivedIsAppliedByItsResend", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.unknownCharge(ctx, t, 1500)

		res, err := b.newReconciler(t, resender(b)).RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Succeeded)
		entries := ledger(t, b)
		require.Len(t, entries, 1)
		require.Equal(t, c.ProviderKey, entries[0].IdempotencyKey, "sent with the row's own key")
	})

	t.Run("ADeclineSettles", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.unknownChargePaidWith(ctx, t, 1500, "pm_card_chargeDeclinedExpiredCard")
		b.chargeAtProvider(t, c, 1500, c.PaymentMethod)

		res, err := b.newReconciler(t, resender(b)).RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Failed)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateFailed, got.State)
		require.Equal(t, "expired_card", got.FailureCode)
	})

	for _, tc := range []struct{ name, fault string }{
		// The first request still executing: the key is refused meanwhile.
		{"InFlightWaits", fakepsp.FaultDelayedApply},
		// Refused before processing: says nothing of the first request.
		{"ARefusedResendProvesNothing", fakepsp.FaultNotProcessed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, b := setup(t)
			c := b.unknownCharge(ctx, t, 1500)
			b.faults(t, fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{{On: fakepsp.OnCharge, Fault: tc.fault, P: 1, MS: 5000}}})

			res, err := b.newReconciler(t, resender(b)).RunOnce(ctx)
			require.NoError(t, err)
			require.Equal(t, reconciler.Result{Leased: 1, LookupErrors: 1}, res)
			got := b.get(ctx, t, c.ID)
			require.Equal(t, intent.StateUnknown, got.State, "never pending, never failed")
			require.Equal(t, 1, got.LookupFailures)
			require.Zero(t, b.jobs(ctx, t, c.ID), "never re-attempted")
		})
	}

	t.Run("PastTheKeyWindowNothingIsSent", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.unknownCharge(ctx, t, 1500)
		b.age(ctx, t, c.ID, 7*day-30*time.Minute)

		res, err := b.newReconciler(t, resender(b)).RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, reconciler.Result{Leased: 1, NeedsReview: 1}, res)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateNeedsReview, got.State)
		require.Contains(t, got.ReviewReason, "a re-send could charge anew")
		require.Empty(t, ledger(t, b), "no re-send was made")
	})

	t.Run("ItsNotFoundIsNeverProof", func(t *testing.T) {
		t.Parallel()
		window, provable := reconciler.ProofWindow(psp.Capabilities{Lookup: psp.LookupByResend, KeyWindow: 7 * day},
			10*time.Second, time.Second, time.Second)
		require.Equal(t, 12*time.Second, window)
		require.False(t, provable)
	})
}
