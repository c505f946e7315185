package intent_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/internal/ids"
)

// succeededCharge accepts a charge of amount and settles it as the worker
// would.
func (b *testBundle) succeededCharge(ctx context.Context, t *testing.T, amount int64) intent.Charge {
	t.Helper()
	c := dbtest.PendingCharge(t, b.pool, dbtest.Charge{TenantID: b.tenantID, Amount: amount})
	for _, to := range []intent.State{intent.StateSubmitting, intent.StateSucceeded} {
		moved, err := intent.MoveCharge(ctx, b.pool, intent.Move{TenantID: b.tenantID, ChargeID: c.ID, From: c.State, To: to,
			Actor: "worker", Reason: "test", CountAttempt: to == intent.StateSubmitting, ProviderChargeID: "py_" + c.ID[3:]})
		require.NoError(t, err)
		c = moved
	}
	return c
}

// refund accepts a refund of parent as the API would, under key.
func (b *testBundle) refund(ctx context.Context, parent intent.Charge, key string, amount int64, currency string) (intent.Charge, error) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	id := ids.New("re", now)
	r := intent.Charge{TenantID: b.tenantID, ID: id, State: intent.StatePending, Kind: intent.KindRefund, ParentID: parent.ID,
		Reason: "requested_by_customer", Amount: amount, Currency: currency, Provider: parent.Provider,
		ProviderKey: intent.ProviderKeyFor(id), CreatedAt: now, UpdatedAt: now}
	keyHash := sha256.Sum256([]byte(key))
	inserted, err := intent.Accept(ctx, b.pool, intent.Acceptance{Charge: r, Actor: "test", KeyHash: keyHash[:], Fingerprint: keyHash[:],
		StatusCode: 201, ResponseBody: []byte(`{}`), ExpiresAt: now.Add(time.Hour)})
	if err == nil && !inserted {
		return intent.Charge{}, errors.New("the key was used before")
	}
	return r, err
}

// count reports how many rows a query counts.
func (b *testBundle) count(ctx context.Context, t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, query, args...).Scan(&n))
	return n
}

// requireNothingStored checks that a refused refund left no row, event or
// idempotency record, and the charge's sums as they were.
func (b *testBundle) requireNothingStored(ctx context.Context, t *testing.T, parent intent.Charge, refunds, reserved int) {
	t.Helper()
	require.Equal(t, refunds, b.count(ctx, t, `SELECT count(*) FROM charges WHERE parent_id = $1`, parent.ID))
	require.Equal(t, refunds, b.count(ctx, t, `SELECT count(*) FROM charge_audit e JOIN charges c ON c.id = e.charge_id WHERE c.parent_id = $1`, parent.ID))
	require.Equal(t, refunds+1, b.count(ctx, t, `SELECT count(*) FROM idempotency_keys WHERE tenant_id = $1`, b.tenantID))
	got, err := intent.Get(ctx, b.pool, b.tenantID, parent.ID)
	require.NoError(t, err)
	require.Equal(t, int64(reserved), got.AmountReserved)
}

func TestRefundsInPostgres(t *testing.T) {
	t.Parallel()

	t.Run("AcceptedRefundReservesItsAmount", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		parent := b.succeededCharge(ctx, t, 1000)
		r, err := b.refund(ctx, parent, "refund-1", 400, "USD")
		require.NoError(t, err)

		got, err := intent.Get(ctx, b.pool, b.tenantID, r.ID)
		require.NoError(t, err)
		require.Equal(t, []any{intent.KindRefund, parent.ID, "requested_by_customer", intent.StatePending, "", "cf_" + r.ID},
			[]any{got.Kind, got.ParentID, got.Reason, got.State, got.PaymentMethod, got.ProviderKey})
		b.requireNothingStored(ctx, t, parent, 1, 400)

		charges, _, err := intent.List(ctx, b.pool, intent.ListParams{TenantID: b.tenantID, Kind: intent.KindCharge, Limit: 10})
		require.NoError(t, err)
		require.Len(t, charges, 1, "a tenant's charges are not its refunds")
		all, _, err := intent.List(ctx, b.pool, intent.ListParams{TenantID: b.tenantID, Limit: 10})
		require.NoError(t, err)
		require.Len(t, all, 2)
	})

	t.Run("OnlyASucceededChargeOfTheSameCurrency", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		pending := dbtest.PendingCharge(t, b.pool, dbtest.Charge{TenantID: b.tenantID, Amount: 1000})
		_, err := b.refund(ctx, pending, "refund-pending", 100, "USD")
		require.ErrorIs(t, err, intent.ErrNotRefundable)
		b.requireNothingStored(ctx, t, pending, 0, 0)

		parent := b.succeededCharge(ctx, t, 1000)
		_, err = b.refund(ctx, parent, "refund-eur", 100, "EUR")
		require.ErrorIs(t, err, intent.ErrNotRefundable)
		require.Zero(t, b.count(ctx, t, `SELECT count(*) FROM charges WHERE parent_id = $1`, parent.ID))

		refund, err := b.refund(ctx, parent, "refund-ok", 100, "USD")
		require.NoError(t, err)
		_, err = b.refund(ctx, refund, "refund-of-refund", 10, "USD")
		require.ErrorIs(t, err, intent.ErrNotRefundable, "a refund is not refundable")
	})

	t.Run("NeverBeyondTheCharge", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		parent := b.succeededCharge(ctx, t, 1000)
		_, err := b.refund(ctx, parent, "refund-1", 600, "USD")
		require.NoError(t, err)
		_, err = b.refund(ctx, parent, "refund-2", 401, "USD")
		require.ErrorIs(t, err, intent.ErrRefundExceedsCharge)
		b.requireNothingStored(ctx, t, parent, 1, 600)
		_, err = b.refund(ctx, parent, "refund-3", 400, "USD")
		require.NoError(t, err, "exactly what is left")
		b.requireNothingStored(ctx, t, parent, 2, 1000)
	})

	// A failed refund gives its amount back; a succeeded one is refunded.
	t.Run("SettlingMovesTheSums", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		parent := b.succeededCharge(ctx, t, 1000)
		failed, err := b.refund(ctx, parent, "refund-1", 700, "USD")
		require.NoError(t, err)
		done, err := b.refund(ctx, parent, "refund-2", 300, "USD")
		require.NoError(t, err)

		for _, m := range []intent.Move{
			{ChargeID: failed.ID, From: intent.StatePending, To: intent.StateFailed, FailureCode: "refund_declined"},
			{ChargeID: done.ID, From: intent.StatePending, To: intent.StateSubmitting, CountAttempt: true},
			{ChargeID: done.ID, From: intent.StateSubmitting, To: intent.StateSucceeded, ProviderChargeID: "rf_1"},
		} {
			m.TenantID, m.Actor, m.Reason = b.tenantID, "worker", "test"
			_, err := intent.MoveCharge(ctx, b.pool, m)
			require.NoError(t, err)
		}
		got, err := intent.Get(ctx, b.pool, b.tenantID, parent.ID)
		require.NoError(t, err)
		require.Equal(t, []int64{300, 300}, []int64{got.AmountReserved, got.AmountRefunded})

		_, err = b.refund(ctx, parent, "refund-3", 700, "USD")
		require.NoError(t, err, "the failed refund's 700 is free again")
	})

	t.Run("IdentityIsFrozen", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		parent := b.succeededCharge(ctx, t, 1000)
		other := b.succeededCharge(ctx, t, 1000)
		r, err := b.refund(ctx, parent, "refund-1", 100, "USD")
		require.NoError(t, err)
		for _, stmt := range []string{
			`UPDATE charges SET parent_id = $2 WHERE id = $1`,
			`UPDATE charges SET kind = 'charge' WHERE id = $1 AND $2 <> ''`,
			`UPDATE charges SET reason = 'fraudulent' WHERE id = $1 AND $2 <> ''`,
		} {
			_, err := b.pool.Exec(ctx, stmt, r.ID, other.ID)
			require.Error(t, err, stmt)
		}
		_, err = b.pool.Exec(ctx, `UPDATE charges SET amount_reserved = amount + 1 WHERE id = $1`, parent.ID)
		require.ErrorContains(t, err, "charges_refunds_within_amount", "not even by hand")
	})

	// 200 concurrent one-unit refunds of a 100-unit charge, each its own
	// statement on its own connection: exactly 100 pass.
	t.Run("ConcurrentRefundsNeverExceed", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		parent := b.succeededCharge(ctx, t, 100)
		var wg sync.WaitGroup
		results := make(chan error, 200)
		for i := range 200 {
			wg.Go(func() {
				_, err := b.refund(ctx, parent, fmt.Sprintf("concurrent-%03d", i), 1, "USD")
				results <- err
			})
		}
		wg.Wait()
		close(results)
		accepted, exceeded := 0, 0
		for err := range results {
			switch {
			case err == nil:
				accepted++
			case errors.Is(err, intent.ErrRefundExceedsCharge):
				exceeded++
			default:
				t.Errorf("unexpected error: %v", err)
			}
		}
		require.Equal(t, []int{100, 100}, []int{accepted, exceeded})
		b.requireNothingStored(ctx, t, parent, 100, 100)
	})
}
