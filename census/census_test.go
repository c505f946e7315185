package census_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/census"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
)

// pathTo is how a charge gets to each state.
var pathTo = map[intent.State][]intent.State{
	intent.StatePending:     nil,
	intent.StateSubmitting:  {intent.StateSubmitting},
	intent.StateUnknown:     {intent.StateSubmitting, intent.StateUnknown},
	intent.StateNeedsReview: {intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview},
	intent.StateSucceeded:   {intent.StateSubmitting, intent.StateSucceeded},
	intent.StateFailed:      {intent.StateSubmitting, intent.StateFailed},
	// A charge captured later (docs/capture.md).
	intent.StateRequiresCapture: {intent.StateSubmitting, intent.StateRequiresCapture},
	intent.StateCanceled:        {intent.StateSubmitting, intent.StateRequiresCapture, intent.StateCanceled},
}

// fill writes, over two tenants, a different number of rows in each
// state and a succeeded refund (the gauge counts refunds too), and returns
// the counts it wrote and one unknown charge, to be moved later.
func fill(t *testing.T, pool *pgxpool.Pool) (map[intent.State]int64, intent.Charge) {
	t.Helper()
	tenants := []string{dbtest.Tenant(t, pool, "tenant-a"), dbtest.Tenant(t, pool, "tenant-b")}
	want := map[intent.State]int64{
		intent.StatePending: 1, intent.StateSubmitting: 2, intent.StateUnknown: 3,
		intent.StateNeedsReview: 4, intent.StateSucceeded: 5, intent.StateFailed: 6,
		intent.StateRequiresCapture: 2, intent.StateCanceled: 1,
	}
	var unknown, paid intent.Charge
	n := 0
	for _, state := range intent.States() {
		for range want[state] {
			later := state == intent.StateRequiresCapture || state == intent.StateCanceled
			c := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenants[n%2], CaptureLater: later})
			n++
			c = dbtest.Walk(t, pool, c, "py_"+c.ID, pathTo[state]...)
			switch state {
			case intent.StateUnknown:
				unknown = c
			case intent.StateSucceeded:
				paid = c
			}
		}
	}
	// A refund of a success, itself succeeded: a row of its own.
	refund := dbtest.PendingRefund(t, pool, paid, 100)
	dbtest.Walk(t, pool, refund, "py_"+refund.ID, pathTo[intent.StateSucceeded]...)
	want[intent.StateSucceeded]++
	return want, unknown
}

// held counts the rows of the charges table by state, every state present.
func held(t *testing.T, pool *pgxpool.Pool) map[intent.State]int64 {
	t.Helper()
	counts := map[intent.State]int64{}
	for _, s := range intent.States() {
		counts[s] = 0
	}
	var state string
	var n int64
	rows, err := pool.Query(context.Background(), `SELECT state, count(*) FROM charges GROUP BY state`)
	require.NoError(t, err)
	_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		counts[intent.State(state)] = n
		return nil
	})
	require.NoError(t, err)
	return counts
}

// The counts are what the database holds, state by state, over every
// tenant, counted exactly at this size.
func TestCountsMatchTheDatabase(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	want, _ := fill(t, pool)
	require.Equal(t, want, held(t, pool), "the test wrote what it meant to")

	c, err := census.New(census.Config{DB: pool})
	require.NoError(t, err)
	counts, at, err := c.Counts(context.Background())
	require.NoError(t, err)
	require.Equal(t, want, counts.Counts)
	require.Empty(t, counts.Estimated, "a small table is counted exactly")
	require.False(t, at.IsZero())
}

// Within MaxAge a second call answers the first count, with the first
// count's time, however the rows changed meanwhile; once MaxAge has passed
// it counts again. The age passing is made by the smallest MaxAge there is
// (the census has no clock of its own to move): a database round trip
// between the two calls is longer than a nanosecond.
func TestCountsAreCachedForMaxAge(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	want, unknown := fill(t, pool)

	// An age no test outlives.
	cached, err := census.New(census.Config{DB: pool, MaxAge: time.Hour})
	require.NoError(t, err)
	// An age that has always passed by the next call.
	fresh, err := census.New(census.Config{DB: pool, MaxAge: time.Nanosecond})
	require.NoError(t, err)

	first, firstAt, err := cached.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, want, first.Counts)
	freshFirst, freshAt, err := fresh.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, want, freshFirst.Counts)

	// The rows change: a new pending charge, and the unknown one settles.
	dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: unknown.TenantID})
	dbtest.Walk(t, pool, unknown, "py_"+unknown.ID, intent.StateFailed)
	changed := map[intent.State]int64{}
	for s, n := range want {
		changed[s] = n
	}
	changed[intent.StatePending]++
	changed[intent.StateUnknown]--
	changed[intent.StateFailed]++
	require.Equal(t, changed, held(t, pool))

	second, secondAt, err := cached.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, want, second.Counts, "within MaxAge: the first count, not the database's")
	require.Equal(t, firstAt, secondAt, "and the first count's time")

	recounted, recountedAt, err := fresh.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, changed, recounted.Counts, "past MaxAge: counted again")
	require.True(t, recountedAt.After(freshAt), "a new count has a new time")
}

// New needs a database, takes the default age for zero, refuses a
// negative one.
func TestNew(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	_, err := census.New(census.Config{})
	require.Error(t, err)
	_, err = census.New(census.Config{DB: pool, MaxAge: -time.Second})
	require.Error(t, err)
	require.Equal(t, 15*time.Second, census.Defaults().MaxAge)
	_, err = census.New(census.Config{DB: pool})
	require.NoError(t, err)
}
