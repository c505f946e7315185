package intent_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/ids"
)

// acceptance is what the API hands the store for one new charge under key,
// with its job.
func (b *testBundle) acceptance(key string, amount int64) intent.Acceptance {
	now := time.Now().UTC().Truncate(time.Microsecond)
	id := ids.New("ch", now)
	keyHash := sha256.Sum256([]byte(key))
	fp := sha256.Sum256([]byte(key + "-body"))
	return intent.Acceptance{
		Charge: intent.Charge{TenantID: b.tenantID, ID: id, State: intent.StatePending, Amount: amount, Currency: "EUR",
			PaymentMethod: "pm_card_visa", Description: &key, Metadata: map[string]string{"order": key},
			Provider: "fake", ProviderKey: intent.ProviderKeyFor(id), CreatedAt: now},
		Actor: "api_key:test", KeyHash: keyHash[:], Fingerprint: fp[:], StatusCode: 201,
		ResponseBody: []byte(`{"id":"` + id + `"}`), ExpiresAt: now.Add(24 * time.Hour),
		Job: &intent.JobRow{Kind: "charge.submit", Args: []byte(`{"charge_id": "` + id + `"}`), Queue: "default",
			Priority: 1, MaxAttempts: 25, Metadata: []byte(`{"traceparent": "00-x"}`)},
	}
}

// written is every row one accepted charge has, with what names the
// charge itself (its id, its key, its times) left out, so that two charges
// accepted the same way compare equal.
func written(ctx context.Context, t *testing.T, db intent.DB, a intent.Acceptance) map[string]any {
	t.Helper()
	id := a.Charge.ID
	var charge, events, record, jobs string
	require.NoError(t, db.QueryRow(ctx, `SELECT
		(SELECT to_jsonb(c) - '{id,provider_key,created_at,updated_at,description,metadata}'::text[] FROM charges c WHERE id = $1)::text,
		(SELECT coalesce(jsonb_agg(to_jsonb(e) - '{id,charge_id,created_at}'::text[]), '[]') FROM charge_audit e WHERE charge_id = $1)::text,
		(SELECT coalesce(jsonb_agg(to_jsonb(k) - '{key_hash,fingerprint,charge_id,response_body,created_at,expires_at}'::text[]), '[]')
			FROM idempotency_keys k WHERE charge_id = $1)::text,
		(SELECT coalesce(jsonb_agg(jsonb_build_object('kind', kind, 'queue', queue, 'priority', priority, 'state', state,
			'max_attempts', max_attempts, 'metadata', metadata, 'args_name_it', args->>'charge_id' = $1)), '[]')
			FROM river_job WHERE args->>'charge_id' = $1)::text`, id).Scan(&charge, &events, &record, &jobs))
	out := map[string]any{}
	for name, text := range map[string]string{"charge": charge, "events": events, "record": record, "jobs": jobs} {
		var v any
		require.NoError(t, json.Unmarshal([]byte(text), &v))
		out[name] = v
	}
	return out
}

// TestAcceptManyWritesWhatAloneWrites accepts charges in one statement —
// new keys, a key a committed request already used, and one key twice —
// and checks each answer and each row against AcceptOrReplay's.
func TestAcceptManyWritesWhatAloneWrites(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)

	alone := b.acceptance("alone", 1000)
	inserted, _, _, err := intent.AcceptOrReplay(ctx, b.pool, alone)
	require.NoError(t, err)
	require.True(t, inserted)
	used := b.acceptance("used", 1000)
	inserted, _, _, err = intent.AcceptOrReplay(ctx, b.pool, used)
	require.NoError(t, err)
	require.True(t, inserted)
	usedRec, err := intent.Idempotency(ctx, b.pool, b.tenantID, used.KeyHash)
	require.NoError(t, err)

	listener, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, `LISTEN "public.river_insert"`)
	require.NoError(t, err)

	batch := []intent.Acceptance{b.acceptance("new-1", 1000), b.acceptance("used", 1000), b.acceptance("twice", 1000),
		b.acceptance("new-2", 1000), b.acceptance("twice", 1000)}
	batch[3].Job.WakeTopic, batch[3].Job.WakePayload = "river_insert", `{"queue": "default"}`
	got, err := intent.AcceptMany(ctx, b.pool, batch)
	require.NoError(t, err)
	require.Len(t, got, len(batch))

	require.Equal(t, intent.Accepted{Inserted: true}, got[0])
	require.Equal(t, intent.Accepted{Found: true, Record: usedRec}, got[1], "a used key answers with its record")
	require.Equal(t, intent.Accepted{Inserted: true}, got[2])
	require.Equal(t, intent.Accepted{Inserted: true}, got[3])
	require.Equal(t, intent.Accepted{}, got[4], "the key's second use in the statement waited on its first")

	want := written(ctx, t, b.pool, alone)
	for _, i := range []int{0, 2, 3} {
		require.Equal(t, want, written(ctx, t, b.pool, batch[i]), "charge %d is written as one accepted alone", i)
		c, err := intent.Get(ctx, b.pool, b.tenantID, batch[i].Charge.ID)
		require.NoError(t, err)
		require.Equal(t, batch[i].Charge.Metadata, c.Metadata)
		require.Equal(t, batch[i].Charge.Description, c.Description)
		require.True(t, batch[i].Charge.CreatedAt.Equal(c.CreatedAt))
		rec, err := intent.Idempotency(ctx, b.pool, b.tenantID, batch[i].KeyHash)
		require.NoError(t, err)
		require.Equal(t, intent.IdempotencyRecord{Fingerprint: batch[i].Fingerprint, ChargeID: batch[i].Charge.ID,
			StatusCode: 201, ResponseBody: batch[i].ResponseBody, CreatedAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt}, rec)
		require.True(t, batch[i].ExpiresAt.Equal(rec.ExpiresAt))
	}
	for _, i := range []int{1, 4} {
		_, err := intent.Get(ctx, b.pool, b.tenantID, batch[i].Charge.ID)
		require.ErrorIs(t, err, intent.ErrNotFound, "charge %d was not written", i)
	}
	var charges, jobs, events, records int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM charges), (SELECT count(*) FROM river_job),
		(SELECT count(*) FROM charge_audit), (SELECT count(*) FROM idempotency_keys)`).Scan(&charges, &jobs, &events, &records))
	require.Equal(t, []int{5, 5, 5, 5}, []int{charges, jobs, events, records})

	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := listener.Conn().WaitForNotification(waitCtx)
	require.NoError(t, err)
	require.Equal(t, `{"queue": "default"}`, n.Payload)
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	_, err = listener.Conn().WaitForNotification(short)
	require.Error(t, err, "one notification for the statement")
}

// TestAcceptManyTakesChargesOnly checks that a refund, or a charge without
// its job, fails the call before anything is written.
func TestAcceptManyTakesChargesOnly(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	refund := b.acceptance("refund", 500)
	refund.Charge.Kind, refund.Charge.ParentID = intent.KindRefund, "ch_01m8qzyxk3hh3gpgd1cj733nxc"
	noJob := b.acceptance("no-job", 500)
	noJob.Job = nil
	for _, odd := range []intent.Acceptance{refund, noJob} {
		_, err := intent.AcceptMany(ctx, b.pool, []intent.Acceptance{b.acceptance("fine", 100), odd})
		require.ErrorIs(t, err, intent.ErrBatchOfCharges)
	}
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM charges) + (SELECT count(*) FROM idempotency_keys)
		+ (SELECT count(*) FROM river_job)`).Scan(&n))
	require.Zero(t, n)
}
