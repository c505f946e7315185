package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/chargeflow/chargeflow/accept"
	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/submit"
)

// TestAcceptOneStatement covers the production accept path, which writes
// the charge and its job in one statement with no explicit transaction
// (the crash-point tests run it inside one).
func TestAcceptOneStatement(t *testing.T) {
	t.Parallel()

	// A request holding the key in an open transaction makes a second one
	// wait on the unique index; past lock_timeout that is 409 +
	// Retry-After, and after the holder commits, the holder's replay.
	t.Run("KeyHeldElsewhereIsConflictThenReplay", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(o *setupOpts) { o.LockTimeout = "100ms" })
		ctx := context.Background()
		const key = "held-elsewhere-key-01"
		tx, held := holdKey(t, b, key)

		waiting := b.Post(t, b.TenantA, key, apitest.ValidBody)
		apitest.RequireProblem(t, waiting, http.StatusConflict, api.CodeRequestInProgress)
		require.Equal(t, "1", waiting.Header.Get("Retry-After"))

		require.NoError(t, tx.Commit(ctx))
		replay := b.Post(t, b.TenantA, key, apitest.ValidBody)
		require.Equal(t, http.StatusCreated, replay.Status, "body: %s", replay.Body)
		require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
		require.Equal(t, held, replay.Body)
		// The held charge and the fingerprint probe's; the refused request wrote nothing.
		require.Equal(t, stored{Charges: 2, IdempotencyKeys: 2, Events: 2, Jobs: 2}, b.Stored(t))
	})

	// A lock the key does not hold — here on the jobs' table, as when a
	// commit holding PostgreSQL's notification queue waits for the standby —
	// is no request in progress: 503, nothing stored, and the same request
	// goes through once the lock is free.
	t.Run("ALockOtherThanTheKeysIsBusyNotInProgress", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(o *setupOpts) { o.LockTimeout = "100ms" })
		ctx := context.Background()
		tx, err := b.Pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		_, err = tx.Exec(ctx, `LOCK TABLE river_job IN SHARE MODE`)
		require.NoError(t, err)

		before := b.Stored(t)
		busy := b.Post(t, b.TenantA, "busy-charge-key-0001", apitest.ValidBody)
		apitest.RequireProblem(t, busy, http.StatusServiceUnavailable, api.CodeDatabaseUnavailable)
		require.Equal(t, "1", busy.Header.Get("Retry-After"))
		require.Contains(t, string(busy.Body), "too busy")
		require.Equal(t, before, b.Stored(t), "nothing stored")

		require.NoError(t, tx.Rollback(ctx))
		done := b.Post(t, b.TenantA, "busy-charge-key-0001", apitest.ValidBody)
		require.Equal(t, http.StatusCreated, done.Status, "body: %s", done.Body)
		require.Empty(t, done.Header.Get("Idempotent-Replayed"), "the first request stored nothing")
	})

	// The job carries the configured max attempts, and River's insert
	// notification goes out at most once per cooldown: with an hour's
	// cooldown the first charge sends it and the second does not (a
	// sentinel sent after the second would otherwise arrive after it).
	t.Run("JobAttemptsAndNotifyCooldown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(o *setupOpts) {
			o.Jobs = submit.Config{MaxAttempts: 4, WakeCooldown: time.Hour}
		})
		ctx := context.Background()
		channel, next := dbtest.ListenRiverInserts(t, b.Pool)

		first := b.Post(t, b.TenantA, "notify-key-00000001", apitest.ValidBody)
		require.Equal(t, http.StatusCreated, first.Status, "body: %s", first.Body)
		require.JSONEq(t, `{"queue": "default"}`, next().Payload)

		second := b.Post(t, b.TenantA, "notify-key-00000002", apitest.ValidBody)
		require.Equal(t, http.StatusCreated, second.Status, "body: %s", second.Body)
		_, err := b.Pool.Exec(ctx, `SELECT pg_notify($1, 'sentinel')`, channel)
		require.NoError(t, err)
		require.Equal(t, "sentinel", next().Payload, "the second charge notified within the cooldown")

		var attempts []int
		rows, err := b.Pool.Query(ctx, `SELECT max_attempts FROM river_job WHERE kind = 'charge.submit' ORDER BY id`)
		require.NoError(t, err)
		attempts, err = pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		require.Equal(t, []int{4, 4}, attempts)
	})
}

// holdKey accepts apitest.ValidBody under key as tenant A inside a transaction it
// leaves open, as a request between its insert and its commit would: other
// requests with the key wait on it. It returns the transaction and the
// response body it stored.
func holdKey(t *testing.T, b *testBundle, key string) (pgx.Tx, []byte) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	now := time.Now().UTC().Truncate(time.Microsecond)
	id := ids.New("ch", now)
	keyHash := sha256.Sum256([]byte(key))
	held := []byte(`{"id":"` + id + `","held":true}`)
	fp := heldFingerprint(t, b)
	job, err := submit.RowOf(ctx, submit.ChargeArgs{TenantID: b.TenantA.ID, ChargeID: id}, 1)
	require.NoError(t, err)
	inserted, err := intent.Accept(ctx, tx, intent.Acceptance{
		Charge: intent.Charge{TenantID: b.TenantA.ID, ID: id, State: intent.StatePending, Amount: 1000, Currency: "USD",
			PaymentMethod: "pm_card_visa", Provider: "fakepsp", ProviderKey: intent.ProviderKeyFor(id), CreatedAt: now, UpdatedAt: now},
		Actor: "test", KeyHash: keyHash[:], Fingerprint: fp, StatusCode: http.StatusCreated, ResponseBody: held,
		ExpiresAt: now.Add(time.Hour), Job: job,
	})
	require.NoError(t, err)
	require.True(t, inserted)
	return tx, held
}

// heldFingerprint is the fingerprint the API gives apitest.ValidBody: it posts it
// once as tenant B and reads the record back (one charge, record, event and
// job that the caller counts).
func heldFingerprint(t *testing.T, b *testBundle) []byte {
	t.Helper()
	resp := b.Post(t, b.TenantB, "fingerprint-probe-001", apitest.ValidBody)
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
	var view struct{ ID string }
	require.NoError(t, json.Unmarshal(resp.Body, &view))
	keyHash := sha256.Sum256([]byte("fingerprint-probe-001"))
	rec, err := intent.Idempotency(context.Background(), b.Pool, b.TenantB.ID, keyHash[:])
	require.NoError(t, err)
	require.Equal(t, view.ID, rec.ChargeID)
	return rec.Fingerprint
}

// TestAcceptsShareACommit sends charges at once to an API with one accept
// batcher: every one is accepted once, with its own answer, and they
// shared statements. When a batch's statement fails — a key another
// request still holds, past the lock timeout — every other charge of the
// batch is accepted alone, and that key alone gets its 409.
func TestAcceptsShareACommit(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentChargesShareStatements", func(t *testing.T) {
		t.Parallel()
		reader := sdkmetric.NewManualReader()
		b := setup(t, func(o *setupOpts) {
			o.API = func(c *api.Config) {
				c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			}
			o.Server = func(c *app.ServerConfig) { c.Accept.Batches = 1 }
		})
		const n, dup = 40, 4
		start := make(chan struct{})
		resps := make([]response, n+dup)
		var wg sync.WaitGroup
		for i := range resps {
			key := fmt.Sprintf("together-%02d-000000", i)
			if i >= n {
				key = "together-duplicate-00" // one client's retries, racing
			}
			wg.Go(func() {
				<-start
				resps[i] = b.Post(t, b.TenantA, key, apitest.ValidBody)
			})
		}
		close(start)
		wg.Wait()

		seen := map[string]bool{}
		for i, r := range resps[:n] {
			require.Equal(t, http.StatusCreated, r.Status, "charge %d: %s", i, r.Body)
			require.Empty(t, r.Header.Get("Idempotent-Replayed"))
			var view struct{ ID string }
			require.NoError(t, json.Unmarshal(r.Body, &view))
			require.False(t, seen[view.ID], "charge %d has its own id", i)
			seen[view.ID] = true
			require.Equal(t, 1, b.JobsFor(t, view.ID))
		}
		fresh := 0
		for _, r := range resps[n:] {
			require.Equal(t, http.StatusCreated, r.Status, "body: %s", r.Body)
			require.Equal(t, resps[n].Body, r.Body, "every use of the key gets the first answer")
			if r.Header.Get("Idempotent-Replayed") == "" {
				fresh++
			}
		}
		require.Equal(t, 1, fresh, "one request with the key created the charge, the others were replays")
		require.Equal(t, stored{Charges: n + 1, IdempotencyKeys: n + 1, Events: n + 1, Jobs: n + 1}, b.Stored(t))

		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(context.Background(), &rm))
		h := histogramOf(t, rm, accept.MetricAcceptBatch)
		// A retry of the duplicate key that arrives after the first answer
		// was kept is answered from memory, before any statement.
		fromMemory := replaysBySource(t, reader)[api.ReplaySourceMemory]
		require.Equal(t, int64(n+dup), h.Sum+fromMemory, "every charge went through an accept statement once, but for retries answered from memory")
		require.Less(t, h.Count, uint64(n+dup), "charges sent at once shared statements")
		t.Logf("%d charges in %d statements", h.Sum, h.Count)
	})

	t.Run("AFailedBatchAcceptsEachAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(o *setupOpts) {
			o.LockTimeout = "500ms"
			o.Server = func(c *app.ServerConfig) { c.Accept.Batches = 1 }
		})
		const key = "held-by-another-001"
		holdKey(t, b, key)
		before := b.Stored(t)

		// The first request with the held key runs alone and waits on it;
		// what arrives meanwhile is the next batch: the key again, and
		// five new charges. That statement waits on the key too, fails,
		// and each of its charges is then accepted alone.
		first := make(chan response, 1)
		go func() { first <- b.Post(t, b.TenantA, key, apitest.ValidBody) }()
		require.Eventually(t, func() bool {
			var waiting int
			require.NoError(t, b.Pool.QueryRow(context.Background(),
				`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
			return waiting == 1
		}, 10*time.Second, 5*time.Millisecond)
		resps := make([]response, 6)
		var wg sync.WaitGroup
		for i := range resps {
			k := fmt.Sprintf("beside-held-%02d-0000", i)
			if i == 0 {
				k = key
			}
			wg.Go(func() { resps[i] = b.Post(t, b.TenantA, k, apitest.ValidBody) })
		}
		wg.Wait()

		apitest.RequireProblem(t, <-first, http.StatusConflict, api.CodeRequestInProgress)
		apitest.RequireProblem(t, resps[0], http.StatusConflict, api.CodeRequestInProgress)
		for i, r := range resps[1:] {
			require.Equal(t, http.StatusCreated, r.Status, "charge %d: %s", i+1, r.Body)
		}
		after := b.Stored(t)
		require.Equal(t, stored{Charges: before.Charges + 5, IdempotencyKeys: before.IdempotencyKeys + 5,
			Events: before.Events + 5, Jobs: before.Jobs + 5}, after, "the five new charges, nothing for the held key")
		require.Contains(t, b.Logs.String(), "accept batch failed; accepting its charges one by one")
	})
}

// histogramOf is the one data point of an int64 histogram.
func histogramOf(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.HistogramDataPoint[int64] {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				h, ok := m.Data.(metricdata.Histogram[int64])
				require.True(t, ok, "%s is an int64 histogram", name)
				require.Len(t, h.DataPoints, 1)
				return h.DataPoints[0]
			}
		}
	}
	require.Failf(t, "no metric", "%s was not recorded", name)
	return metricdata.HistogramDataPoint[int64]{}
}
