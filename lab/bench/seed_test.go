package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
)

// TestSeedShape checks what Seed promises: n charges, the in-flight ones in
// their numbers, and idempotency records only for the newest charges (the
// live day's and ExpiredKeys expired ones).
func TestSeedShape(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t, dbtest.URL(t), 2)
	shape := DefaultSeedShape
	shape.Span = 1000 * 24 * time.Hour // a charge a day: one is inside KeyTTL
	shape.ExpiredKeys = 700
	const n = 1000
	_, err := Seed(ctx, pool, n, shape, nil)
	require.NoError(t, err)

	var charges, pending, submitting, unknown, review, jobs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*),
		count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'submitting'),
		count(*) FILTER (WHERE state = 'unknown'), count(*) FILTER (WHERE state = 'needs_review'),
		(SELECT count(*) FROM river_job WHERE kind = 'charge.submit')
		FROM charges WHERE kind = 'charge'`).Scan(&charges, &pending, &submitting, &unknown, &review, &jobs))
	require.Equal(t, []int{n, shape.Pending, shape.Submitting, shape.Unknown, shape.NeedsReview, shape.Pending},
		[]int{charges, pending, submitting, unknown, review, jobs})

	// Records for exactly the newest 701 charges (one alive, 700 expired)
	// and for the refunds of those, and none older.
	var keyed, alive, oldestKeyedRank, refundsKeyed, refundsOfKeyed int
	require.NoError(t, pool.QueryRow(ctx, `
		WITH ranked AS (SELECT id, row_number() OVER (ORDER BY created_at DESC) AS rank FROM charges WHERE kind = 'charge')
		SELECT count(*), count(*) FILTER (WHERE k.expires_at > now()), max(r.rank)
		FROM idempotency_keys k JOIN ranked r ON r.id = k.charge_id`).Scan(&keyed, &alive, &oldestKeyedRank))
	require.Equal(t, []int{701, 1, 701}, []int{keyed, alive, oldestKeyedRank})
	require.NoError(t, pool.QueryRow(ctx, `
		WITH newest AS (SELECT id FROM charges WHERE kind = 'charge' ORDER BY created_at DESC LIMIT 701)
		SELECT (SELECT count(*) FROM idempotency_keys k JOIN charges c ON c.id = k.charge_id WHERE c.kind = 'refund'),
			(SELECT count(*) FROM charges c WHERE c.kind = 'refund' AND c.parent_id IN (SELECT id FROM newest))`).
		Scan(&refundsKeyed, &refundsOfKeyed))
	require.Positive(t, refundsOfKeyed)
	require.Equal(t, refundsOfKeyed, refundsKeyed)
}
