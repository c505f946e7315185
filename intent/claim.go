package intent

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Ref names one charge.
type Ref struct {
	TenantID string
	ChargeID string
}

// ClaimPending moves each of refs that is pending to submitting, counting
// an attempt (attempts + 1, first_attempt_at, last_attempt_at), with its
// audit row — the move MoveCharge makes with CountAttempt, for many charges
// in one statement: one round trip and one commit, however many charges.
// It returns the charges it moved, as they are after the move; a ref
// missing from the result was not pending (the caller asks MoveCharge why).
//
// Rows are locked in key order, so two claims of overlapping charges wait
// for each other instead of deadlocking; a charge another transaction is
// moving is claimed only if it is still pending once that one ends.
func ClaimPending(ctx context.Context, db DB, refs []Ref, actor, reason string) (map[Ref]Charge, error) {
	if actor == "" || reason == "" {
		return nil, fmt.Errorf("intent: a claim needs an actor and a reason")
	}
	tenants := make([]string, len(refs))
	charges := make([]string, len(refs))
	for i, r := range refs {
		tenants[i], charges[i] = r.TenantID, r.ChargeID
	}
	rows, err := db.Query(ctx, `
WITH locked AS (
	SELECT c.tenant_id, c.id FROM charges c
	JOIN unnest($1::text[], $2::text[]) AS r(tenant_id, id) ON c.tenant_id = r.tenant_id AND c.id = r.id
	WHERE c.state = 'pending'
	ORDER BY c.tenant_id, c.id
	FOR UPDATE OF c
), moved AS (
	UPDATE charges c SET
		state = $5,
		updated_at = now(),
		attempts = attempts + 1,
		first_attempt_at = coalesce(first_attempt_at, now()),
		last_attempt_at = now(),
		unknown_since = NULL,
		next_check_at = NULL,
		lookup_failures = 0,
		lease_owner = NULL,
		lease_expires_at = NULL
	FROM locked l
	WHERE c.tenant_id = l.tenant_id AND c.id = l.id AND c.state = 'pending'
	RETURNING c.*
), event AS (
	INSERT INTO charge_events (tenant_id, charge_id, from_state, to_state, actor, reason, attempt)
	SELECT tenant_id, id, 'pending', $5, $3, $4, attempts FROM moved
)
SELECT `+chargeColumns+` FROM moved`, tenants, charges, actor, reason, string(StateSubmitting))
	if err != nil {
		return nil, fmt.Errorf("claim pending charges: %w", err)
	}
	moved, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Charge, error) { return scanCharge(row) })
	if err != nil {
		return nil, fmt.Errorf("claim pending charges: %w", err)
	}
	out := make(map[Ref]Charge, len(moved))
	for _, c := range moved {
		out[Ref{TenantID: c.TenantID, ChargeID: c.ID}] = c
	}
	return out, nil
}
