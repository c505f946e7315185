package retention_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"chargeflow/intent"
	"chargeflow/internal/dbtest"
	"chargeflow/internal/ids"
	"chargeflow/retention"
)

// Expired idempotency records are deleted in batches by the periodic job,
// run by a real River client; live records, charges and events stay.
func TestCleanup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenantID := dbtest.Tenant(t, pool, "retention")

	accept := func(i int, created time.Time, ttl time.Duration) {
		id := ids.New("ch", created)
		keyHash := sha256.Sum256(fmt.Appendf(nil, "key-%d", i))
		_, err := intent.Accept(ctx, pool, intent.Acceptance{
			Charge: intent.Charge{TenantID: tenantID, ID: id, State: intent.StatePending, Amount: 1, Currency: "USD",
				PaymentMethod: "pm_card_visa", Provider: "fakepsp", ProviderKey: intent.ProviderKeyFor(id), CreatedAt: created, UpdatedAt: created},
			Actor: "test", KeyHash: keyHash[:], Fingerprint: keyHash[:], StatusCode: 201, ResponseBody: []byte(`{}`),
			ExpiresAt: created.Add(ttl),
		})
		require.NoError(t, err)
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
		(SELECT count(*) FROM charge_events)`).Scan(&records, &charges, &events))
	require.Equal(t, 3, records, "only live records remain")
	require.Equal(t, 10, charges)
	require.Equal(t, 10, events)
}
