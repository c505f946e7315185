package outbox

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
)

// countingDB is the real pool, counting the statements sent through it.
// With gate set, a query waits for it first.
type countingDB struct {
	intent.DB
	statements atomic.Int64
	gate       chan struct{}
}

func (c *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.statements.Add(1)
	if c.gate != nil {
		<-c.gate
	}
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
// submitting exactly once (one attempt, one audit entry), one job of the pair
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
	cl := newClaims(db)
	start := make(chan struct{})
	var wg sync.WaitGroup
	var holders [n]atomic.Int32
	for i, ref := range asks {
		wg.Go(func() {
			<-start
			res, err := cl.Do(ctx, ref)
			c := res.charge
			assert.NoError(t, err)
			if res.ok {
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
		(SELECT count(*) FROM charge_audit WHERE to_state = 'submitting') FROM charges`).Scan(&submitting, &audit))
	require.Equal(t, n, submitting)
	require.Equal(t, n, audit, "one audit entry per move")
	require.Less(t, db.statements.Load(), int64(len(asks)), "claims asked at once share statements")
	require.True(t, cl.Idle())
}

// TestClaimWithdrawn checks that a job whose context ends while it waits
// for a claim leaves the queue without its charge being moved.
func TestClaimWithdrawn(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	tenantID := dbtest.Tenant(t, pool, "claims test")
	c := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenantID})
	other := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenantID})
	db := &countingDB{DB: pool, gate: make(chan struct{})}
	cl := newClaims(db)
	// Another job's claim is in flight, held at its statement: this one
	// queues behind it.
	first := make(chan error, 1)
	go func() {
		_, err := cl.Do(context.Background(), intent.Ref{TenantID: tenantID, ChargeID: other.ID})
		first <- err
	}()
	require.Eventually(t, func() bool { return db.statements.Load() == 1 }, 5e9, 1e6)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cl.Do(ctx, intent.Ref{TenantID: tenantID, ChargeID: c.ID})
		done <- err
	}()
	require.Eventually(t, func() bool { return cl.Queued() == 1 }, 5e9, 1e6)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Zero(t, cl.Queued())
	close(db.gate)
	require.NoError(t, <-first)
	require.True(t, cl.Idle())
	require.Equal(t, int64(1), db.statements.Load(), "the withdrawn claim sent no statement")
	got, err := intent.Get(context.Background(), pool, tenantID, c.ID)
	require.NoError(t, err)
	require.Equal(t, intent.StatePending, got.State, "a withdrawn claim moves nothing")
}

// countingBegins is the real pool, counting its transactions.
type countingBegins struct {
	*pgxpool.Pool
	begins atomic.Int64
}

func (c *countingBegins) Begin(ctx context.Context) (pgx.Tx, error) {
	c.begins.Add(1)
	return c.Pool.Begin(ctx)
}

// TestSettlesShareATransaction settles 60 submitting charges from 60 runs
// at once, one run twice: each charge moves once, to what its answer says,
// with its audit entry; a charge that is no longer submitting is left alone;
// and the runs shared transactions.
func TestSettlesShareATransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenantID := dbtest.Tenant(t, pool, "settles test")
	const n = 60
	moves := make([]intent.Move, n)
	for i := range moves {
		c := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenantID})
		_, err := intent.MoveCharge(ctx, pool, intent.Move{TenantID: tenantID, ChargeID: c.ID, From: intent.StatePending,
			To: intent.StateSubmitting, Actor: "test", Reason: "test", CountAttempt: true})
		require.NoError(t, err)
		m := intent.Move{TenantID: tenantID, ChargeID: c.ID, From: intent.StateSubmitting, Actor: actor}
		switch i % 3 {
		case 0:
			m.To, m.Reason, m.ProviderChargeID = intent.StateSucceeded, "provider_succeeded", fmt.Sprintf("py_%d", i)
		case 1:
			m.To, m.Reason, m.FailureCode = intent.StateFailed, "provider_declined", "card_declined"
		case 2:
			m.To, m.Reason, m.CheckAfter = intent.StateUnknown, "unknown:timeout", time.Minute
		}
		moves[i] = m
	}
	// The last charge was settled by someone else meanwhile.
	_, err := intent.MoveCharge(ctx, pool, intent.Move{TenantID: tenantID, ChargeID: moves[n-1].ChargeID,
		From: intent.StateSubmitting, To: intent.StateUnknown, Actor: "test", Reason: "test", CheckAfter: time.Minute})
	require.NoError(t, err)
	asks := append(moves, moves[0]) // two runs of one charge

	db := &countingBegins{Pool: pool}
	st := newSettles(db, nil)
	start := make(chan struct{})
	var wg sync.WaitGroup
	var holders [n]atomic.Int32
	for i, m := range asks {
		wg.Go(func() {
			<-start
			res, err := st.Do(ctx, m)
			assert.NoError(t, err)
			if res.ok {
				assert.Equal(t, m.To, res.charge.State)
				holders[i%n].Add(1)
			}
		})
	}
	close(start)
	wg.Wait()

	for i := range n - 1 {
		require.Equal(t, int32(1), holders[i].Load(), "charge %d is settled by exactly one run", i)
		got, err := intent.Get(ctx, pool, tenantID, moves[i].ChargeID)
		require.NoError(t, err)
		require.Equal(t, moves[i].To, got.State)
		switch got.State {
		case intent.StateSucceeded:
			require.Equal(t, moves[i].ProviderChargeID, got.ProviderChargeID)
		case intent.StateFailed:
			require.Equal(t, "card_declined", got.FailureCode)
		case intent.StateUnknown:
			require.NotNil(t, got.NextCheckAt)
			require.NotNil(t, got.UnknownSince)
		}
		events, err := intent.AuditTrail(ctx, pool, tenantID, moves[i].ChargeID)
		require.NoError(t, err)
		last := events[len(events)-1]
		require.Equal(t, []any{intent.StateSubmitting, moves[i].To, actor, moves[i].Reason}, []any{last.From, last.To, last.Actor, last.Reason})
	}
	require.Zero(t, holders[n-1].Load(), "a charge no longer submitting is not moved")
	require.Less(t, db.begins.Load(), int64(len(asks)), "settles made at once share transactions")
	require.True(t, st.Idle())
}

// TestEndedRunWritesNothing checks that a run whose context has ended —
// its job cancelled as the worker stops — moves nothing, even when it
// would run the batch itself.
func TestEndedRunWritesNothing(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	tenantID := dbtest.Tenant(t, pool, "claims test")
	c := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenantID})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newClaims(pool).Do(ctx, intent.Ref{TenantID: tenantID, ChargeID: c.ID})
	require.ErrorIs(t, err, context.Canceled)
	got, err := intent.Get(context.Background(), pool, tenantID, c.ID)
	require.NoError(t, err)
	require.Equal(t, intent.StatePending, got.State)
}
