package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"chargeflow/api"
	"chargeflow/intent"
	"chargeflow/internal/dbtest"
	"chargeflow/internal/ids"
	"chargeflow/submit"
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
		b := setup(t, func(o *setupOpts) { o.lockTimeout = "100ms" })
		ctx := context.Background()
		const key = "held-elsewhere-key-01"

		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		now := time.Now().UTC().Truncate(time.Microsecond)
		id := ids.New("ch", now)
		keyHash := sha256.Sum256([]byte(key))
		held := []byte(`{"id":"` + id + `","held":true}`)
		fp := heldFingerprint(t, b)
		job, err := submit.RowOf(ctx, submit.ChargeArgs{TenantID: b.tenantA.ID, ChargeID: id}, 1)
		require.NoError(t, err)
		inserted, err := intent.Accept(ctx, tx, intent.Acceptance{
			Charge: intent.Charge{TenantID: b.tenantA.ID, ID: id, State: intent.StatePending, Amount: 1000, Currency: "USD",
				PaymentMethod: "pm_card_visa", Provider: "fakepsp", ProviderKey: intent.ProviderKeyFor(id), CreatedAt: now, UpdatedAt: now},
			Actor: "test", KeyHash: keyHash[:], Fingerprint: fp, StatusCode: http.StatusCreated, ResponseBody: held,
			ExpiresAt: now.Add(time.Hour), Job: job,
		})
		require.NoError(t, err)
		require.True(t, inserted)

		waiting := b.post(t, b.tenantA, key, validBody)
		requireProblem(t, waiting, http.StatusConflict, api.CodeRequestInProgress)
		require.Equal(t, "1", waiting.header.Get("Retry-After"))

		require.NoError(t, tx.Commit(ctx))
		replay := b.post(t, b.tenantA, key, validBody)
		require.Equal(t, http.StatusCreated, replay.status, "body: %s", replay.body)
		require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
		require.Equal(t, held, replay.body)
		// The held charge and the fingerprint probe's; the refused request wrote nothing.
		require.Equal(t, stored{Charges: 2, IdempotencyKeys: 2, Events: 2, Jobs: 2}, b.stored(t))
	})

	// The job carries the configured max attempts, and River's insert
	// notification goes out at most once per cooldown: with an hour's
	// cooldown the first charge sends it and the second does not (a
	// sentinel sent after the second would otherwise arrive after it).
	t.Run("JobAttemptsAndNotifyCooldown", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(o *setupOpts) {
			o.jobs = submit.Config{MaxAttempts: 4, NotifyCooldown: time.Hour}
		})
		ctx := context.Background()
		channel, next := dbtest.ListenRiverInserts(t, b.pool)

		first := b.post(t, b.tenantA, "notify-key-00000001", validBody)
		require.Equal(t, http.StatusCreated, first.status, "body: %s", first.body)
		require.JSONEq(t, `{"queue": "default"}`, next().Payload)

		second := b.post(t, b.tenantA, "notify-key-00000002", validBody)
		require.Equal(t, http.StatusCreated, second.status, "body: %s", second.body)
		_, err := b.pool.Exec(ctx, `SELECT pg_notify($1, 'sentinel')`, channel)
		require.NoError(t, err)
		require.Equal(t, "sentinel", next().Payload, "the second charge notified within the cooldown")

		var attempts []int
		rows, err := b.pool.Query(ctx, `SELECT max_attempts FROM river_job WHERE kind = 'charge.submit' ORDER BY id`)
		require.NoError(t, err)
		attempts, err = pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		require.Equal(t, []int{4, 4}, attempts)
	})
}

// heldFingerprint is the fingerprint the API gives validBody: it posts it
// once as tenant B and reads the record back (one charge, record, event and
// job that the caller counts).
func heldFingerprint(t *testing.T, b *testBundle) []byte {
	t.Helper()
	resp := b.post(t, b.tenantB, "fingerprint-probe-001", validBody)
	require.Equal(t, http.StatusCreated, resp.status, "body: %s", resp.body)
	var view struct{ ID string }
	require.NoError(t, json.Unmarshal(resp.body, &view))
	keyHash := sha256.Sum256([]byte("fingerprint-probe-001"))
	rec, err := intent.Idempotency(context.Background(), b.pool, b.tenantB.ID, keyHash[:])
	require.NoError(t, err)
	require.Equal(t, view.ID, rec.ChargeID)
	return rec.Fingerprint
}
