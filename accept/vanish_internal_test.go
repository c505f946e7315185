package accept

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/tenant"
)

// An accept that waited on its key's first request, saw it commit, and
// then finds no record (the commit was local to a primary cut off from its
// standby and lost with the failover, or the record expired) is tried
// again: the key is free, and the request is stored as a first one. It is
// not answered "no such charge". After vanishedTries it gives up as busy,
// having stored nothing. A record that is there is replayed.
func TestRecordVanishedAfterTheWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	merchant, _, err := tenant.Create(ctx, pool, "merchant")
	require.NoError(t, err)
	a, err := New(Config{DB: pool})
	require.NoError(t, err)
	acceptance := func(key string) intent.Acceptance {
		now := time.Now().UTC().Truncate(time.Microsecond)
		id := ids.New("ch", now)
		keyHash := sha256.Sum256([]byte(key))
		return intent.Acceptance{
			Charge: intent.Charge{TenantID: merchant.ID, ID: id, State: intent.StatePending, Amount: 1000, Currency: "USD",
				PaymentMethod: "pm_card_visa", Provider: "fakepsp", ProviderKey: intent.ProviderKeyFor(id), CreatedAt: now, UpdatedAt: now},
			Actor: "test", KeyHash: keyHash[:], Fingerprint: keyHash[:], StatusCode: 201, ResponseBody: []byte(`{"id":"` + id + `"}`),
			ExpiresAt: now.Add(time.Hour),
		}
	}
	stored := func(acc intent.Acceptance) (charges int) {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM charges WHERE tenant_id = $1 AND id = $2`,
			acc.Charge.TenantID, acc.Charge.ID).Scan(&charges))
		return charges
	}

	first := acceptance("vanished-key-000001")
	_, inserted, err := a.replayAfterWait(ctx, first, 1)
	require.NoError(t, err)
	require.True(t, inserted, "the key is free: the request is stored as a first one")
	rec, err := intent.Idempotency(ctx, pool, merchant.ID, first.KeyHash)
	require.NoError(t, err)
	require.Equal(t, first.Charge.ID, rec.ChargeID)
	require.Equal(t, 1, stored(first))

	retry := acceptance("vanished-key-000001")
	rec, inserted, err = a.replayAfterWait(ctx, retry, 1)
	require.NoError(t, err)
	require.False(t, inserted)
	require.Equal(t, first.Charge.ID, rec.ChargeID, "a record that is there is the answer")
	require.Zero(t, stored(retry))

	last := acceptance("vanished-key-000002")
	_, inserted, err = a.replayAfterWait(ctx, last, vanishedTries)
	require.ErrorIs(t, err, ErrBusy)
	require.False(t, inserted)
	require.Zero(t, stored(last))
	_, err = intent.Idempotency(ctx, pool, merchant.ID, last.KeyHash)
	require.ErrorIs(t, err, intent.ErrNotFound, "given up, nothing stored")
}
