package retention_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/retention"
)

// Expired idempotency records are deleted in batches by the periodic job,
// run by a real River client; live records, charges and events stay.
func TestCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenantID := dbtest.Tenant(t, pool, "retention")

	accept := func(i int, created time.Time, ttl time.Duration) {
		acceptExpiring(t, pool, tenantID, i, created, created.Add(ttl))
	}
	old := time.Now().Add(-48 * time.Hour)
	for i := range 7 {
		accept(i, old, 24*time.Hour) // expired a day ago
	}
	for i := 7; i < 10; i++ {
		accept(i, time.Now(), 24*time.Hour)
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, retention.NewWorker(pool, 2, nil))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:       map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers:      workers,
		PeriodicJobs: []*river.PeriodicJob{retention.PeriodicJob(time.Hour)},
	})
	require.NoError(t, err)
	completed, cancel := client.Subscribe(river.EventKindJobCompleted)
	defer cancel()
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = client.Stop(context.Background()) })

	select {
	case event := <-completed:
		require.Equal(t, "idempotency.cleanup", event.Job.Kind)
	case <-time.After(30 * time.Second):
		t.Fatal("the cleanup never ran")
	}
	var records, charges, events int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM idempotency_keys), (SELECT count(*) FROM charges),
		(SELECT count(*) FROM charge_audit)`).Scan(&records, &charges, &events))
	require.Equal(t, 3, records, "only live records remain")
	require.Equal(t, 10, charges)
	require.Equal(t, 10, events)
}

// A batch starts at the expiry where the last one ended (so a run never
// walks again what it deleted) and reports where it ended.
func TestDeleteResumesWhereTheLastBatchEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenantID := dbtest.Tenant(t, pool, "retention-keyset")
	day := time.Now().UTC().Truncate(time.Second).Add(-72 * time.Hour)
	for i := range 6 {
		created := day.Add(time.Duration(i) * time.Hour)
		acceptExpiring(t, pool, tenantID, i, created, created.Add(24*time.Hour))
	}
	now := time.Now()
	// From the fourth expiry on: the three before it stay.
	from := day.Add(24*time.Hour + 3*time.Hour)
	n, last, err := intent.DeleteExpiredIdempotency(ctx, pool, from, now, 2)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.True(t, last.Equal(day.Add(24*time.Hour+4*time.Hour)), "ended at the fifth expiry, not %s", last)
	n, last, err = intent.DeleteExpiredIdempotency(ctx, pool, last, now, 2)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.True(t, last.Equal(day.Add(24*time.Hour+5*time.Hour)))
	n, again, err := intent.DeleteExpiredIdempotency(ctx, pool, last, now, 2)
	require.NoError(t, err)
	require.Zero(t, n)
	require.True(t, again.Equal(last), "an empty batch reports where it started")
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&left))
	require.Equal(t, 3, left, "the records before from are the next run's")
}

// A run starts at the latest expiry the worker's last run deleted, not at
// the first record: every record that expired before it was deleted then.
// Shown here with a record put behind that point by hand (the API cannot
// write one: a record expires at least an hour after it is written), which
// the second run of the same worker does not walk back to, and a new
// worker does.
func TestRunStartsWhereTheLastRunEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenantID := dbtest.Tenant(t, pool, "retention-runs")
	accept := func(i int, expires time.Time) {
		acceptExpiring(t, pool, tenantID, i, expires.Add(-24*time.Hour), expires)
	}
	base := time.Now().UTC().Truncate(time.Second).Add(-10 * time.Hour)
	for i := range 3 {
		accept(i, base.Add(time.Duration(i)*time.Hour))
	}
	w := retention.NewWorker(pool, 2, nil).WithDuty(1)
	run, err := w.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, run.Deleted)

	accept(3, base.Add(-time.Hour))  // behind where the run ended
	accept(4, base.Add(5*time.Hour)) // expired since, after it
	run, err = w.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, run.Deleted, "the second run starts where the first ended")

	run, err = retention.NewWorker(pool, 2, nil).WithDuty(1).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, run.Deleted, "a new worker starts from the first record")
}

// acceptExpiring accepts charge i with an idempotency record that expires
// at expires, made at created.
func acceptExpiring(t *testing.T, pool *pgxpool.Pool, tenantID string, i int, created, expires time.Time) {
	t.Helper()
	id := ids.New("ch", created)
	keyHash := sha256.Sum256(fmt.Appendf(nil, "key-%d", i))
	_, err := intent.Accept(context.Background(), pool, intent.Acceptance{
		Charge: intent.Charge{TenantID: tenantID, ID: id, State: intent.StatePending, Amount: 1, Currency: "USD",
			PaymentMethod: "pm_card_visa", Provider: "fakepsp", ProviderKey: intent.ProviderKeyFor(id), CreatedAt: created, UpdatedAt: created},
		Actor: "test", KeyHash: keyHash[:], Fingerprint: keyHash[:], StatusCode: 201, ResponseBody: []byte(`{}`),
		ExpiresAt: expires,
	})
	require.NoError(t, err)
}
