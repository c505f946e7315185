package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
	pspadyen "github.com/chargeflow/chargeflow/psp/adyen"
	"github.com/chargeflow/chargeflow/reconciler"
)

// adyenBundle is testBundle with the Adyen adapter against the fake
// speaking Adyen's Checkout API, its de-duplication on as Adyen's is.
type adyenBundle struct {
	*testBundle
	adyen *pspadyen.Adapter
}

func setupAdyen(t *testing.T) (context.Context, *adyenBundle) {
	t.Helper()
	ctx, b := setup(t)
	fake := fakepsptest.Start(t, fakepsp.Config{Protocol: fakepsp.ProtocolAdyen})
	b.pspURL = fake.URL
	adapter := pspadyen.New(pspadyen.Config{BaseURL: fake.URL + "/v71", APIKey: "test_key", MerchantAccount: "ChargeflowTest",
		Timeout: callTimeout})
	return ctx, &adyenBundle{testBundle: b, adyen: adapter}
}

// charge is a pending charge of 1,500 USD paid with paymentMethod, at
// Adyen.
func (b *adyenBundle) charge(t *testing.T, paymentMethod string) intent.Charge {
	t.Helper()
	return dbtest.PendingCharge(t, b.pool, dbtest.Charge{TenantID: b.tenantID, Amount: 1500, PaymentMethod: paymentMethod,
		Provider: pspadyen.DefaultName})
}

// send is the charge's call to Adyen, whose answer the worker lost.
func (b *adyenBundle) send(ctx context.Context, c intent.Charge) error {
	_, err := b.adyen.Charge(ctx, psp.ChargeRequest{Key: c.ProviderKey, Amount: c.Amount, Currency: c.Currency,
		PaymentMethod: c.PaymentMethod, Reference: c.ID, Tag: c.TenantID})
	return err
}

// unknown is a charge paid with paymentMethod whose first call went out
// and whose answer was lost; sent says whether that call reached Adyen.
func (b *adyenBundle) unknown(ctx context.Context, t *testing.T, paymentMethod string, sent bool) intent.Charge {
	t.Helper()
	c := dbtest.Walk(t, b.pool, b.charge(t, paymentMethod), "", intent.StateSubmitting, intent.StateUnknown)
	if sent {
		require.NoError(t, b.send(ctx, c))
	}
	return c
}

func (b *adyenBundle) reconciler(t *testing.T) *reconciler.Reconciler {
	t.Helper()
	return b.newReconciler(t, func(c *reconciler.Config) {
		c.Provider.Client = b.adyen
		c.Providers = psp.Single(b.adyen)
		c.MaxUnknownAge = time.Hour
	})
}

// The reconciler's decision table for Adyen's capabilities (no lookup;
// a re-send inside its seven-day key window is answered with the first
// result), a row a subtest, with the adapter against the fake's Adyen
// protocol.
func TestAdyenDecisions(t *testing.T) {
	t.Parallel()
	run := func(ctx context.Context, t *testing.T, b *adyenBundle) reconciler.Result {
		t.Helper()
		res, err := b.reconciler(t).RunOnce(ctx)
		require.NoError(t, err)
		return res
	}
	ledger := func(t *testing.T, b *adyenBundle) []fakepsp.LedgerEntry {
		t.Helper()
		entries, err := fakepsp.FetchLedger(context.Background(), b.pspURL, true)
		require.NoError(t, err)
		return entries
	}

	t.Run("AuthorisedIsSucceeded", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupAdyen(t)
		c := b.unknown(ctx, t, fakepsp.PaymentMethodVisa, true)
		require.Equal(t, reconciler.Result{Leased: 1, Succeeded: 1}, run(ctx, t, b))
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateSucceeded, got.State)
		require.Len(t, ledger(t, b), 1)
		require.Equal(t, ledger(t, b)[0].ID, got.ProviderChargeID, "the pspReference of the first request")
	})

	t.Run("RefusedIsFailed", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupAdyen(t)
		c := b.unknown(ctx, t, fakepsp.PaymentMethodInsufficientFunds, true)
		require.Equal(t, reconciler.Result{Leased: 1, Failed: 1}, run(ctx, t, b))
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateFailed, got.State)
		require.Equal(t, "insufficient_funds", got.FailureCode)
	})

	t.Run("NeverArrivedIsAppliedByTheResend", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupAdyen(t)
		c := b.unknown(ctx, t, fakepsp.PaymentMethodVisa, false)
		require.Equal(t, reconciler.Result{Leased: 1, Succeeded: 1}, run(ctx, t, b))
		entries := ledger(t, b)
		require.Len(t, entries, 1)
		require.Equal(t, c.ProviderKey, entries[0].IdempotencyKey)
	})

	t.Run("InFlightWaits", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupAdyen(t)
		c := b.unknown(ctx, t, fakepsp.PaymentMethodVisa, false)
		b.faults(t, fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{{On: fakepsp.OnCharge, Fault: fakepsp.FaultDelayedApply, P: 1, MS: 5000}}})
		require.Equal(t, reconciler.Result{Leased: 1, LookupErrors: 1}, run(ctx, t, b))
		require.Equal(t, intent.StateUnknown, b.get(ctx, t, c.ID).State)
		require.Zero(t, b.jobs(ctx, t, c.ID))
	})

	t.Run("ARefusedResendWaits", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupAdyen(t)
		c := b.unknown(ctx, t, fakepsp.PaymentMethodVisa, false)
		b.faults(t, fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{{On: fakepsp.OnCharge, Fault: fakepsp.FaultNotProcessed, P: 1}}})
		require.Equal(t, reconciler.Result{Leased: 1, LookupErrors: 1}, run(ctx, t, b))
		require.Equal(t, intent.StateUnknown, b.get(ctx, t, c.ID).State, "a 429 says nothing of the first request")
		require.Zero(t, b.jobs(ctx, t, c.ID))
		require.Empty(t, ledger(t, b))
	})

	t.Run("ASaved500WaitsForTheNotification", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupAdyen(t)
		b.faults(t, fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{{On: fakepsp.OnCharge, Fault: fakepsp.FaultErrorAfterApply, P: 1}}})
		c := b.unknown(ctx, t, fakepsp.PaymentMethodVisa, false)
		require.ErrorIs(t, b.send(ctx, c), psp.ErrUnknownOutcome)
		require.Equal(t, reconciler.Result{Leased: 1, LookupErrors: 1}, run(ctx, t, b))
		require.Equal(t, intent.StateUnknown, b.get(ctx, t, c.ID).State, "the re-send gets the saved 500 again")
		require.Len(t, ledger(t, b), 1, "and charges nothing more")
	})

	t.Run("PastTheKeyWindowNothingIsSent", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupAdyen(t)
		c := b.unknown(ctx, t, fakepsp.PaymentMethodVisa, false)
		b.age(ctx, t, c.ID, pspadyen.DefaultKeyWindow-30*time.Minute)
		require.Equal(t, reconciler.Result{Leased: 1, NeedsReview: 1}, run(ctx, t, b))
		require.Equal(t, intent.StateNeedsReview, b.get(ctx, t, c.ID).State)
		require.Empty(t, ledger(t, b))
	})

	t.Run("UnansweredTooLongIsReviewed", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupAdyen(t)
		c := b.unknown(ctx, t, fakepsp.PaymentMethodVisa, false)
		b.faults(t, fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{{On: fakepsp.OnCharge, Fault: fakepsp.FaultNotProcessed, P: 1}}})
		b.age(ctx, t, c.ID, 2*time.Hour)
		require.Equal(t, reconciler.Result{Leased: 1, NeedsReview: 1}, run(ctx, t, b))
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateNeedsReview, got.State)
		require.Contains(t, got.ReviewReason, "lookups have failed")
	})

	t.Run("AnAcknowledgedRefundWaitsForItsNotification", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupAdyen(t)
		parent := b.charge(t, fakepsp.PaymentMethodVisa)
		paid, err := b.adyen.Charge(ctx, psp.ChargeRequest{Key: parent.ProviderKey, Amount: parent.Amount, Currency: parent.Currency,
			PaymentMethod: parent.PaymentMethod, Reference: parent.ID, Tag: parent.TenantID})
		require.NoError(t, err)
		parent = dbtest.Walk(t, b.pool, parent, paid.ID, intent.StateSubmitting, intent.StateSucceeded)
		r := dbtest.Walk(t, b.pool, dbtest.PendingRefund(t, b.pool, parent, 500), "", intent.StateSubmitting, intent.StateUnknown)
		_, err = b.adyen.Refund(ctx, psp.RefundRequest{Key: r.ProviderKey, Charge: paid.ID, Amount: 500, Currency: r.Currency, Reference: r.ID})
		require.ErrorIs(t, err, psp.ErrUnknownOutcome, "acknowledged, not settled")

		require.Equal(t, reconciler.Result{Leased: 1, LookupErrors: 1}, run(ctx, t, b))
		require.Equal(t, intent.StateUnknown, b.get(ctx, t, r.ID).State, "its re-send is acknowledged again")
		refunds := 0
		for _, e := range ledger(t, b) {
			refunds += len(e.Refunds)
		}
		require.Equal(t, 1, refunds, "and refunds nothing more")
	})
}
