package intent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
)

// The census counts the states on the way exactly, and the settled ones
// exactly below its limit and from the statistics above it, saying so.
func TestCensus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenantID := dbtest.Tenant(t, pool, "census")
	move := func(c intent.Charge, m intent.Move) {
		t.Helper()
		m.TenantID, m.ChargeID, m.Actor, m.Reason = c.TenantID, c.ID, "test", "test"
		_, err := intent.MoveCharge(ctx, pool, m)
		require.NoError(t, err)
	}
	want := map[intent.State]int64{}
	for range 2 {
		dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenantID})
		want[intent.StatePending]++
	}
	for i := range 10 {
		c := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenantID})
		move(c, intent.Move{From: intent.StatePending, To: intent.StateSubmitting, CountAttempt: true})
		switch {
		case i < 5:
			move(c, intent.Move{From: intent.StateSubmitting, To: intent.StateSucceeded, ProviderChargeID: "pi_" + c.ID})
			want[intent.StateSucceeded]++
		case i < 7:
			move(c, intent.Move{From: intent.StateSubmitting, To: intent.StateFailed, FailureCode: "card_declined"})
			want[intent.StateFailed]++
		case i < 8:
			move(c, intent.Move{From: intent.StateSubmitting, To: intent.StateUnknown, CheckAfter: time.Minute})
			want[intent.StateUnknown]++
		case i < 9:
			move(c, intent.Move{From: intent.StateSubmitting, To: intent.StateUnknown, CheckAfter: time.Minute})
			move(c, intent.Move{From: intent.StateUnknown, To: intent.StateNeedsReview, ReviewReason: "test"})
			want[intent.StateNeedsReview]++
		default:
			want[intent.StateSubmitting]++
		}
	}

	for _, to := range []intent.State{intent.StateRequiresCapture, intent.StateCanceled} {
		c := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenantID, CaptureLater: true})
		path := []intent.State{intent.StateSubmitting, intent.StateRequiresCapture}
		if to == intent.StateCanceled {
			path = append(path, intent.StateCanceled)
		}
		dbtest.Walk(t, pool, c, "py_"+c.ID, path...)
		want[to]++
	}

	census, err := intent.TakeCensus(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, want, census.Counts, "a small table is counted exactly")
	require.Empty(t, census.Estimated)

	// Above the limit, before any ANALYZE: the states on the way are still
	// exact; the settled ones are marked estimated.
	census, err = intent.TakeCensusBelow(ctx, pool, 5)
	require.NoError(t, err)
	require.Equal(t, map[intent.State]bool{intent.StateSucceeded: true, intent.StateFailed: true, intent.StateCanceled: true}, census.Estimated)
	for _, state := range []intent.State{intent.StatePending, intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview,
		intent.StateRequiresCapture} {
		require.Equal(t, want[state], census.Counts[state], state)
	}

	// After ANALYZE (autovacuum's, on a live system), which reads the
	// whole of so small a table, the estimates are the counts.
	_, err = pool.Exec(ctx, `ANALYZE charges`)
	require.NoError(t, err)
	census, err = intent.TakeCensusBelow(ctx, pool, 5)
	require.NoError(t, err)
	require.Equal(t, want, census.Counts)
	require.Equal(t, map[intent.State]bool{intent.StateSucceeded: true, intent.StateFailed: true, intent.StateCanceled: true}, census.Estimated)
}
