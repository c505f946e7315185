package reconciler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/reconciler"
)

// holdWindow is how long the fake of these tests holds an authorization.
const holdWindow = time.Second

// setupHolds is setup with a fake that releases holds after holdWindow,
// and a client that declares it.
func setupHolds(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	return setupWith(t, fakepsp.Config{HoldWindow: holdWindow}, psp.Capabilities{HoldWindow: holdWindow})
}

// heldCharge authorizes a charge at the fake under its key and settles it
// held, as the worker would.
func (b *testBundle) heldCharge(ctx context.Context, t *testing.T) intent.Charge {
	t.Helper()
	c := dbtest.PendingCharge(t, b.pool, dbtest.Charge{TenantID: b.tenantID, CaptureLater: true})
	held, err := b.provider.Charge(ctx, psp.ChargeRequest{Key: c.ProviderKey, Amount: c.Amount, Currency: c.Currency,
		PaymentMethod: fakepsp.PaymentMethodVisa, Reference: c.ID, CaptureLater: true})
	require.NoError(t, err)
	require.Equal(t, psp.StatusRequiresCapture, held.Status)
	return dbtest.Walk(t, b.pool, c, held.ID, intent.StateSubmitting, intent.StateRequiresCapture)
}

func holdTimings(cfg *reconciler.Config) {
	cfg.HoldMargin, cfg.HoldRecheck = 100*time.Millisecond, 10*time.Millisecond
}

// A hold the provider released when its window ended is found by the
// sweep and the charge canceled, with the lookup as evidence; until then
// the charge stays held.
func TestHoldSweep(t *testing.T) {
	t.Parallel()

	t.Run("ExpiredHoldIsReleased", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupHolds(t)
		r := b.newReconciler(t, holdTimings)
		c := b.heldCharge(ctx, t)

		var released int
		require.Eventually(t, func() bool {
			res, err := r.RunOnce(ctx)
			require.NoError(t, err)
			released += res.Released
			if released == 0 {
				require.Equal(t, intent.StateRequiresCapture, b.get(ctx, t, c.ID).State, "held until the provider released it")
			}
			return released > 0
		}, 10*holdWindow, 20*time.Millisecond)
		require.Equal(t, 1, released)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateCanceled, got.State)
		trail, err := intent.AuditTrail(ctx, b.pool, c.TenantID, c.ID)
		require.NoError(t, err)
		last := trail[len(trail)-1]
		require.Equal(t, "hold_released", last.Reason)
		require.Contains(t, last.Evidence, "provider charge "+c.ProviderChargeID+" canceled")

		// Nothing captures it now.
		_, err = dbtest.PendingOperation(b.pool, got, intent.KindCapture, got.Amount)
		require.ErrorIs(t, err, intent.ErrNotCapturable)
	})

	// A charge with a capture in flight is the capture's: the sweep leaves
	// it even after its hold is gone, and the capture, refused by the
	// provider, fails; the next sweep then finds the release.
	t.Run("CaptureInFlightWhenTheHoldExpires", func(t *testing.T) {
		t.Parallel()
		ctx, b := setupHolds(t)
		r := b.newReconciler(t, holdTimings)
		c := b.heldCharge(ctx, t)
		op, err := dbtest.PendingOperation(b.pool, c, intent.KindCapture, c.Amount)
		require.NoError(t, err)
		time.Sleep(holdWindow + 100*time.Millisecond) // the hold expires at the fake

		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Released, "left to its capture")
		require.Equal(t, intent.StateRequiresCapture, b.get(ctx, t, c.ID).State)

		refused, err := b.provider.Capture(ctx, psp.OperationRequest{Key: op.ProviderKey, Charge: c.ProviderChargeID,
			Amount: op.Amount, Currency: op.Currency, Reference: op.ID, ChargeReference: c.ID})
		require.NoError(t, err)
		require.Equal(t, psp.StatusFailed, refused.Status, "never captured after its hold expired")
		dbtest.Walk(t, b.pool, op, "", intent.StateSubmitting, intent.StateFailed)

		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Released)
		require.Equal(t, intent.StateCanceled, b.get(ctx, t, c.ID).State)
	})
}

// A capture whose answer was lost is looked up, as its held charge, before
// anything is sent again: found captured, it succeeds with its charge;
// proven not applied once the apply window passed, it is sent again with
// its own key.
func TestLostCapture(t *testing.T) {
	t.Parallel()
	unknownCapture := func(ctx context.Context, t *testing.T, b *testBundle) (intent.Charge, intent.Charge) {
		c := b.heldCharge(ctx, t)
		op, err := dbtest.PendingOperation(b.pool, c, intent.KindCapture, 600)
		require.NoError(t, err)
		return c, dbtest.Walk(t, b.pool, op, "", intent.StateSubmitting, intent.StateUnknown)
	}

	t.Run("FoundCaptured", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		r := b.newReconciler(t)
		c, op := unknownCapture(ctx, t, b)
		_, err := b.provider.Capture(ctx, psp.OperationRequest{Key: op.ProviderKey, Charge: c.ProviderChargeID,
			Amount: op.Amount, Currency: op.Currency, Reference: op.ID, ChargeReference: c.ID})
		require.NoError(t, err)
		b.makeDue(ctx, t, op.ID)

		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Succeeded)
		require.Equal(t, intent.StateSucceeded, b.get(ctx, t, op.ID).State)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateSucceeded, got.State)
		require.EqualValues(t, 600, got.AmountCaptured)
		require.Zero(t, b.jobs(ctx, t, op.ID), "nothing sent again")
	})

	t.Run("ProvenNotAppliedIsSentAgain", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		r := b.newReconciler(t)
		c, op := unknownCapture(ctx, t, b)
		require.Eventually(t, func() bool {
			b.makeDue(ctx, t, op.ID)
			res, err := r.RunOnce(ctx)
			require.NoError(t, err)
			return res.Requeued == 1
		}, 10*time.Second, 50*time.Millisecond)
		require.Equal(t, intent.StatePending, b.get(ctx, t, op.ID).State)
		require.Equal(t, 1, b.jobs(ctx, t, op.ID))
		require.Equal(t, intent.StateRequiresCapture, b.get(ctx, t, c.ID).State, "still held, its capture on its way")
	})
}
