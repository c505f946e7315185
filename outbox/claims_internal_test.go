package outbox

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"chargeflow/intent"
	"chargeflow/internal/dbtest"
)

// countingDB is the real pool, counting the statements sent through it.
type countingDB struct {
	intent.DB
	statements atomic.Int64
}

func (c *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.statements.Add(1)
	return c.DB.Query(ctx, sql, args...)
}

func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.statements.Add(1)
	return c.DB.QueryRow(ctx, sql, args...)
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.statements.Add(1)
	return c.DB.Exec(ctx, sql, args...)
}

// TestClaimsShareStatements claims 100 pending charges from 100 jobs at
// once, two of them asking for the same charge: every charge moves to
// submitting exactly once (one attempt, one audit row), one job of the pair
// holds it, a charge that is not pending is not moved, and the claims
// shared statements.
func TestClaimsShareStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenantID := dbtest.Tenant(t, pool, "claims test")
	const n = 100
	refs := make([]intent.Ref, n)
	for i := range refs {
		c := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenantID})
		refs[i] = intent.Ref{TenantID: c.TenantID, ChargeID: c.ID}
	}
	// The last charge is already on its way: nobody may claim it.
	_, err := intent.MoveCharge(ctx, pool, intent.Move{TenantID: tenantID, ChargeID: refs[n-1].ChargeID,
		From: intent.StatePending, To: intent.StateSubmitting, Actor: "test", Reason: "test", CountAttempt: true})
	require.NoError(t, err)
	asks := append(refs, refs[0]) // two jobs of one charge

	db := &countingDB{DB: pool}
	cl := &claims{db: db}
	start := make(chan struct{})
	var wg sync.WaitGroup
	var holders [n]atomic.Int32
	for i, ref := range asks {
		wg.Go(func() {
			<-start
			c, moved, err := cl.claim(ctx, ref)
			assert.NoError(t, err)
			if moved {
				assert.Equal(t, intent.StateSubmitting, c.State)
				assert.Equal(t, 1, c.Attempts)
				holders[i%n].Add(1)
			}
		})
	}
	close(start)
	wg.Wait()

	for i := range n - 1 {
		require.Equal(t, int32(1), holders[i].Load(), "charge %d is held by exactly one job", i)
	}
	require.Zero(t, holders[n-1].Load(), "a charge that was not pending is not claimed")
	var submitting, audit int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'submitting' AND attempts = 1),
		(SELECT count(*) FROM charge_events WHERE to_state = 'submitting') FROM charges`).Scan(&submitting, &audit))
	require.Equal(t, n, submitting)
	require.Equal(t, n, audit, "one audit row per move")
	require.Less(t, db.statements.Load(), int64(len(asks)), "claims asked at once share statements")
	require.Empty(t, cl.queue)
	require.False(t, cl.claiming)
}

// TestClaimWithdrawn checks that a job whose context ends while it waits
// for a claim leaves the queue without its charge being moved.
func TestClaimWithdrawn(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	tenantID := dbtest.Tenant(t, pool, "claims test")
	c := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenantID})
	cl := &claims{db: pool}
	// Another job's claim is in flight: this one queues behind it.
	cl.claiming = true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := cl.claim(ctx, intent.Ref{TenantID: tenantID, ChargeID: c.ID})
		done <- err
	}()
	require.Eventually(t, func() bool { cl.mu.Lock(); defer cl.mu.Unlock(); return len(cl.queue) == 1 }, 5e9, 1e6)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Empty(t, cl.queue)
	got, err := intent.Get(context.Background(), pool, tenantID, c.ID)
	require.NoError(t, err)
	require.Equal(t, intent.StatePending, got.State, "a withdrawn claim moves nothing")
}
