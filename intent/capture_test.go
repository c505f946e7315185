package intent_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
)

// heldCharge accepts a charge of amount to be captured later and moves it
// as the worker would on the provider's authorization.
func (b *testBundle) heldCharge(t *testing.T, amount int64) intent.Charge {
	t.Helper()
	c := dbtest.PendingCharge(t, b.pool, dbtest.Charge{TenantID: b.tenantID, Amount: amount, CaptureLater: true})
	return dbtest.Walk(t, b.pool, c, "py_"+c.ID[3:], intent.StateSubmitting, intent.StateRequiresCapture)
}

// settleOp moves operation op through submitting to to, as the worker
// would on the provider's answer.
func (b *testBundle) settleOp(ctx context.Context, t *testing.T, op intent.Charge, to intent.State) error {
	t.Helper()
	_, err := intent.MoveCharge(ctx, b.pool, intent.Move{TenantID: op.TenantID, ChargeID: op.ID, From: intent.StatePending,
		To: intent.StateSubmitting, Actor: "worker", Reason: "submit", CountAttempt: true})
	require.NoError(t, err)
	_, err = intent.MoveCharge(ctx, b.pool, intent.Move{TenantID: op.TenantID, ChargeID: op.ID, From: intent.StateSubmitting,
		To: to, Actor: "worker", Reason: "test", ProviderChargeID: "py_x", FailureCode: "hold_expired"})
	return err
}

func (b *testBundle) get(ctx context.Context, t *testing.T, id string) intent.Charge {
	t.Helper()
	c, err := intent.Get(ctx, b.pool, b.tenantID, id)
	require.NoError(t, err)
	return c
}

func (b *testBundle) eventTypes(ctx context.Context, t *testing.T, objectID string) []string {
	t.Helper()
	rows, err := b.pool.Query(ctx, `SELECT type FROM events WHERE object_id = $1 ORDER BY created_at`, objectID)
	require.NoError(t, err)
	var types []string
	for rows.Next() {
		var typ string
		require.NoError(t, rows.Scan(&typ))
		types = append(types, typ)
	}
	require.NoError(t, rows.Err())
	return types
}

func TestCaptureInPostgres(t *testing.T) {
	t.Parallel()

	t.Run("CaptureMovesTheChargeWithWhatItTook", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		held := b.heldCharge(t, 1000)
		require.True(t, held.CaptureLater)
		require.Equal(t, []string{"charge.authorized"}, b.eventTypes(ctx, t, held.ID))

		op, err := dbtest.PendingOperation(b.pool, held, intent.KindCapture, 600)
		require.NoError(t, err)
		require.Equal(t, op.ID, b.get(ctx, t, held.ID).OpInFlight)
		require.NoError(t, b.settleOp(ctx, t, op, intent.StateSucceeded))

		got := b.get(ctx, t, held.ID)
		require.Equal(t, intent.StateSucceeded, got.State)
		require.Equal(t, int64(600), got.AmountCaptured)
		require.Empty(t, got.OpInFlight)
		require.Equal(t, []string{"charge.authorized", "charge.captured"}, b.eventTypes(ctx, t, held.ID))
		trail, err := intent.AuditTrail(ctx, b.pool, b.tenantID, held.ID)
		require.NoError(t, err)
		last := trail[len(trail)-1]
		require.Equal(t, intent.StateRequiresCapture, last.From)
		require.Equal(t, "captured", last.Reason)
		require.Equal(t, "capture:"+op.ID, last.Actor)

		// Refunds apply to what was captured.
		_, err = b.refund(ctx, got, "refund-past-capture", 601, "USD")
		require.ErrorIs(t, err, intent.ErrRefundExceedsCharge)
		_, err = b.refund(ctx, got, "refund-of-capture", 600, "USD")
		require.NoError(t, err)
	})

	t.Run("CancelReleasesTheCharge", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		held := b.heldCharge(t, 1000)
		op, err := dbtest.PendingOperation(b.pool, held, intent.KindCancel, 1000)
		require.NoError(t, err)
		require.NoError(t, b.settleOp(ctx, t, op, intent.StateSucceeded))
		got := b.get(ctx, t, held.ID)
		require.Equal(t, intent.StateCanceled, got.State)
		require.Zero(t, got.AmountCaptured)
		require.Equal(t, []string{"charge.authorized", "charge.canceled"}, b.eventTypes(ctx, t, held.ID))
		_, err = dbtest.PendingOperation(b.pool, got, intent.KindCapture, 1000)
		require.ErrorIs(t, err, intent.ErrNotCapturable, "a released charge is never captured")
		_, err = b.refund(ctx, got, "refund-of-released", 100, "USD")
		require.ErrorIs(t, err, intent.ErrNotRefundable)
	})

	t.Run("FailedOperationLeavesTheChargeHeld", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		held := b.heldCharge(t, 1000)
		op, err := dbtest.PendingOperation(b.pool, held, intent.KindCapture, 1000)
		require.NoError(t, err)
		require.NoError(t, b.settleOp(ctx, t, op, intent.StateFailed))
		got := b.get(ctx, t, held.ID)
		require.Equal(t, intent.StateRequiresCapture, got.State)
		require.Empty(t, got.OpInFlight)
		require.Equal(t, []string{"charge.authorized"}, b.eventTypes(ctx, t, held.ID))
		require.Equal(t, []string{"capture.failed"}, b.eventTypes(ctx, t, op.ID))
		_, err = dbtest.PendingOperation(b.pool, got, intent.KindCancel, 1000)
		require.NoError(t, err, "a charge still held can be canceled")
	})

	t.Run("RefusalsStoreNothing", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		held := b.heldCharge(t, 1000)
		_, err := dbtest.PendingOperation(b.pool, held, intent.KindCapture, 1001)
		require.ErrorIs(t, err, intent.ErrCaptureExceedsAuthorization)

		paid := b.succeededCharge(ctx, t, 1000)
		_, err = dbtest.PendingOperation(b.pool, paid, intent.KindCapture, 1000)
		require.ErrorIs(t, err, intent.ErrNotCapturable, "a charge captured at once")
		pending := dbtest.PendingCharge(t, b.pool, dbtest.Charge{TenantID: b.tenantID, CaptureLater: true})
		_, err = dbtest.PendingOperation(b.pool, pending, intent.KindCancel, 1000)
		require.ErrorIs(t, err, intent.ErrNotCapturable, "a charge not yet authorized")

		first, err := dbtest.PendingOperation(b.pool, held, intent.KindCapture, 500)
		require.NoError(t, err)
		_, err = dbtest.PendingOperation(b.pool, held, intent.KindCancel, 1000)
		require.ErrorIs(t, err, intent.ErrOperationInProgress)
		require.NoError(t, b.settleOp(ctx, t, first, intent.StateSucceeded))
		_, err = dbtest.PendingOperation(b.pool, b.get(ctx, t, held.ID), intent.KindCapture, 500)
		require.ErrorIs(t, err, intent.ErrNotCapturable, "captured once, never twice")

		require.Equal(t, 1, b.count(ctx, t, `SELECT count(*) FROM charges WHERE parent_id = $1`, held.ID),
			"only the capture accepted is stored")
		require.Equal(t, 0, b.count(ctx, t, `SELECT count(*) FROM charges WHERE parent_id IN ($1, $2)`, paid.ID, pending.ID))
	})

	// Captures and cancels racing from many clients: exactly one is
	// accepted, whatever the interleaving, and the rest are refused.
	t.Run("OneOperationOfManyAtOnce", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		held := b.heldCharge(t, 1000)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() {
				kind := map[bool]intent.Kind{true: intent.KindCapture, false: intent.KindCancel}[i%2 == 0]
				_, errs[i] = dbtest.PendingOperation(b.pool, held, kind, 1000)
			})
		}
		wg.Wait()
		accepted := 0
		for _, err := range errs {
			if err == nil {
				accepted++
				continue
			}
			require.ErrorIs(t, err, intent.ErrOperationInProgress)
		}
		require.Equal(t, 1, accepted)
		require.NotEmpty(t, b.get(ctx, t, held.ID).OpInFlight)
	})

	// Nothing but its operation moves a held charge with one in flight:
	// a release found by the hold sweep waits for the capture to settle.
	t.Run("NothingElseMovesAChargeWithAnOperationInFlight", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		held := b.heldCharge(t, 1000)
		_, err := dbtest.PendingOperation(b.pool, held, intent.KindCapture, 1000)
		require.NoError(t, err)
		_, err = intent.MoveCharge(ctx, b.pool, intent.Move{TenantID: held.TenantID, ChargeID: held.ID,
			From: intent.StateRequiresCapture, To: intent.StateCanceled, Actor: "reconciler", Reason: "hold_released"})
		var conflict *intent.ConflictError
		require.ErrorAs(t, err, &conflict)
		require.Equal(t, intent.StateRequiresCapture, b.get(ctx, t, held.ID).State)

		_, err = b.pool.Exec(ctx, `UPDATE charges SET state = 'canceled' WHERE id = $1`, held.ID)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "charges_op_in_flight_held", pgErr.ConstraintName, "nor does SQL that bypasses MoveCharge")
	})
}
