package intent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Accepted is one acceptance's part of AcceptMany, as AcceptOrReplay
// answers it: Inserted, or Found with the record the key already had, or
// neither when the key's first request committed while the statement
// waited on it (read the record with Idempotency).
type Accepted struct {
	Inserted bool
	Found    bool
	Record   IdempotencyRecord
}

// ErrBatchOfCharges is AcceptMany given a refund or an acceptance without
// its job: a refund's accounting can refuse it, which would fail every
// charge of the statement, so refunds are accepted alone.
var ErrBatchOfCharges = errors.New("AcceptMany takes charges with their jobs only")

// Batchable reports whether a may go in AcceptMany: a charge with its
// job, never a refund (ErrBatchOfCharges).
func (a Acceptance) Batchable() bool {
	return a.Job != nil && a.Charge.ParentID == "" && (a.Charge.Kind == "" || a.Charge.Kind == KindCharge)
}

// AcceptMany is AcceptOrReplay for many charges in one statement, and so
// one commit (docs/architecture.md, "Accepts share a commit"). Each charge
// is written with its idempotency record, its creation audit entry and its
// job, or not at all, exactly as alone; the statement commits all of them
// or none. Two acceptances with one key: the first is inserted, the second
// is neither inserted nor found, as when it waited on the first's commit.
// Keys are inserted in order, so two statements whose keys overlap wait on
// each other in one order, never in a cycle. The answers are in the order
// of as.
//
// A row that must wait for another transaction holding its key makes the
// whole statement wait, and a lock_timeout then fails all of it: the
// caller answers each acceptance alone after an error.
func AcceptMany(ctx context.Context, db DB, as []Acceptance) ([]Accepted, error) {
	n := len(as)
	var (
		tenants, chargeIDs, currencies, methods, metadata, providers, providerKeys, actors = make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n),
			make([]string, n)
		descriptions                              = make([]*string, n)
		jobArgs, jobKinds, jobMetadata, jobQueues = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		keyHashes, fingerprints, bodies           = make([][]byte, n), make([][]byte, n), make([][]byte, n)
		statuses, jobMaxAttempts, jobPriorities   = make([]int32, n), make([]int32, n), make([]int32, n)
		amounts                                   = make([]int64, n)
		captureLater                              = make([]bool, n)
		created, expires                          = make([]time.Time, n), make([]time.Time, n)
		wakeTopic, wakePayload                    string
	)
	for i, a := range as {
		c := a.Charge
		if c.State != StatePending {
			return nil, fmt.Errorf("%w: a charge is accepted pending, not %q", ErrIllegalMove, c.State)
		}
		if !a.Batchable() {
			return nil, ErrBatchOfCharges
		}
		if a.Job.MaxAttempts < 1 {
			return nil, fmt.Errorf("accept charge: job max attempts %d, want at least 1", a.Job.MaxAttempts)
		}
		md := []byte("{}")
		if c.Metadata != nil {
			var err error
			if md, err = json.Marshal(c.Metadata); err != nil {
				return nil, fmt.Errorf("encode metadata: %w", err)
			}
		}
		tenants[i], chargeIDs[i], currencies[i], methods[i], descriptions[i] = c.TenantID, c.ID, c.Currency, c.PaymentMethod, c.Description
		metadata[i], providers[i], providerKeys[i], actors[i] = string(md), c.Provider, c.ProviderKey, a.Actor
		keyHashes[i], fingerprints[i], bodies[i], statuses[i] = a.KeyHash, a.Fingerprint, a.ResponseBody, int32(a.StatusCode)
		amounts[i], created[i], expires[i], captureLater[i] = c.Amount, c.CreatedAt, a.ExpiresAt, c.CaptureLater
		j := a.Job
		jobArgs[i], jobKinds[i], jobQueues[i] = string(j.Args), j.Kind, j.Queue
		jobMetadata[i], jobMaxAttempts[i], jobPriorities[i] = "{}", int32(j.MaxAttempts), int32(j.Priority)
		if j.Metadata != nil {
			jobMetadata[i] = string(j.Metadata)
		}
		if j.WakeTopic != "" {
			wakeTopic, wakePayload = j.WakeTopic, j.WakePayload
		}
	}
	// The statement is AcceptOrReplay's, over the rows of input: existing
	// reads the records committed requests left, locked as ReplayRecord
	// locks them; only keys without one are inserted, in key order; each
	// charge, audit entry and job follows its inserted record. notified
	// runs once, when a job was written.
	rows, err := db.Query(ctx, `
WITH input AS (
	SELECT * FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::text[], $5::int[], $6::bytea[], $7::timestamptz[],
		$8::timestamptz[], $9::bigint[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[],
		$16::text[], $17::text[], $18::text[], $19::int[], $20::text[], $21::int[], $22::text[], $25::bool[])
	WITH ORDINALITY AS i(tenant_id, key_hash, fingerprint, charge_id, status_code, response_body, created_at,
		expires_at, amount, currency, payment_method, description, metadata, provider, provider_key,
		actor, job_args, job_kind, job_max_attempts, job_metadata, job_priority, job_queue, capture_later, ord)
), existing AS (
	SELECT i.ord, k.fingerprint, coalesce(k.charge_id, k.endpoint_id) AS charge_id, k.status_code, k.response_body, k.created_at, k.expires_at
	FROM input i JOIN idempotency_keys k ON k.tenant_id = i.tenant_id AND k.key_hash = i.key_hash
	FOR KEY SHARE OF k
), idem AS (
	INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, charge_id, status_code, response_body, created_at, expires_at)
	SELECT tenant_id, key_hash, fingerprint, charge_id, status_code, response_body, created_at, expires_at
	FROM input i WHERE NOT EXISTS (SELECT 1 FROM existing e WHERE e.ord = i.ord)
	ORDER BY tenant_id, key_hash
	ON CONFLICT (tenant_id, key_hash) DO NOTHING
	RETURNING tenant_id, charge_id
), charge AS (
	INSERT INTO charges (tenant_id, id, state, amount, currency, payment_method, description, metadata,
		provider, provider_key, created_at, updated_at, kind, capture_later)
	SELECT i.tenant_id, i.charge_id, 'pending', i.amount, i.currency, nullif(i.payment_method, ''), i.description,
		i.metadata::jsonb, i.provider, i.provider_key, i.created_at, i.created_at, 'charge', i.capture_later
	FROM idem JOIN input i ON i.tenant_id = idem.tenant_id AND i.charge_id = idem.charge_id
	RETURNING tenant_id, id
), audit AS (
	INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt)
	SELECT i.tenant_id, i.charge_id, NULL, 'pending', i.actor, 'accepted', 0
	FROM charge c JOIN input i ON i.tenant_id = c.tenant_id AND i.charge_id = c.id
), job AS (
	INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags)
	SELECT i.job_args::jsonb, i.job_kind, i.job_max_attempts, i.job_metadata::jsonb, i.job_priority, i.job_queue,
		now(), 'available', '{}'
	FROM charge c JOIN input i ON i.tenant_id = c.tenant_id AND i.charge_id = c.id
	RETURNING 1
), notified AS (
	SELECT pg_notify(coalesce(current_schema(), '') || '.' || $23, $24) WHERE $23 <> '' AND EXISTS (SELECT 1 FROM job)
)
SELECT idem.charge_id IS NOT NULL, (SELECT count(*) FROM notified), e.fingerprint, e.charge_id, e.status_code,
	e.response_body, e.created_at, e.expires_at
FROM input i
LEFT JOIN idem ON idem.tenant_id = i.tenant_id AND idem.charge_id = i.charge_id
LEFT JOIN existing e ON e.ord = i.ord
ORDER BY i.ord`,
		tenants, keyHashes, fingerprints, chargeIDs, statuses, bodies, created, expires, amounts, currencies, methods,
		descriptions, metadata, providers, providerKeys, actors, jobArgs, jobKinds, jobMaxAttempts, jobMetadata,
		jobPriorities, jobQueues, wakeTopic, wakePayload, captureLater)
	if err != nil {
		return nil, fmt.Errorf("accept charges: %w", CommitFailed(err))
	}
	defer rows.Close()
	out := make([]Accepted, 0, n)
	for rows.Next() {
		var a Accepted
		var notified int
		var fingerprint, body []byte
		var chargeID *string
		var status *int
		var createdAt, expiresAt *time.Time
		if err := rows.Scan(&a.Inserted, &notified, &fingerprint, &chargeID, &status, &body, &createdAt, &expiresAt); err != nil {
			return nil, fmt.Errorf("accept charges: %w", err)
		}
		if chargeID != nil {
			a.Found = true
			a.Record = IdempotencyRecord{Fingerprint: fingerprint, ChargeID: *chargeID, StatusCode: *status,
				ResponseBody: body, CreatedAt: *createdAt, ExpiresAt: *expiresAt}
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("accept charges: %w", CommitFailed(err))
	}
	if len(out) != n {
		return nil, fmt.Errorf("accept charges: %d answers for %d charges", len(out), n)
	}
	return out, nil
}
