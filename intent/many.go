package intent

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Ref names one charge.
type Ref struct {
	TenantID string
	ChargeID string
}

// MoveMany applies many single-row moves in one statement, each a
// compare-and-set exactly as MoveCharge makes it (the same columns, the
// same audit entry), and returns the charges it moved, as they are after
// their move. A move whose charge is not where it expects is left out of
// the result, not an error: the caller asks MoveCharge why. The refs must
// be distinct, and the moves unfenced (no LeaseToken): it is the worker's
// claiming and settling of many charges at once, not the reconciler's.
//
// Rows are locked in key order, so two batches of overlapping charges wait
// for each other instead of deadlocking; a charge another transaction is
// moving is moved only if it is still where its move expects once that one
// ends.
func MoveMany(ctx context.Context, db DB, moves []Move) (map[Ref]Charge, error) {
	n := len(moves)
	var (
		tenants, ids, from, to, chargeIDs, failures, reviews, actors, reasons, evidence = make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n)
		counts     = make([]bool, n)
		checkAfter = make([]time.Duration, n)
	)
	seen := make(map[Ref]bool, n)
	for i, m := range moves {
		if err := checkMove(m); err != nil {
			return nil, err
		}
		ref := Ref{TenantID: m.TenantID, ChargeID: m.ChargeID}
		if m.LeaseToken != 0 || seen[ref] {
			return nil, fmt.Errorf("intent: MoveMany takes distinct, unfenced moves (%s)", m.ChargeID)
		}
		seen[ref] = true
		tenants[i], ids[i], from[i], to[i] = m.TenantID, m.ChargeID, string(m.From), string(m.To)
		chargeIDs[i], failures[i], reviews[i] = m.ProviderChargeID, m.FailureCode, m.ReviewReason
		actors[i], reasons[i], evidence[i] = m.Actor, m.Reason, m.Evidence
		counts[i], checkAfter[i] = m.CountAttempt, m.CheckAfter
	}
	rows, err := db.Query(ctx, moveManyStatement,
		tenants, ids, from, to, counts, chargeIDs, failures, reviews, checkAfter, actors, reasons, evidence)
	if err != nil {
		return nil, fmt.Errorf("move %d charges: %w", n, err)
	}
	moved, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Charge, error) { return scanCharge(row) })
	if err != nil {
		return nil, fmt.Errorf("move %d charges: %w", n, err)
	}
	out := make(map[Ref]Charge, len(moved))
	for _, c := range moved {
		out[Ref{TenantID: c.TenantID, ChargeID: c.ID}] = c
	}
	return out, nil
}

// moveManyStatement is MoveMany's statement. Every relation an UPDATE or a
// FOR UPDATE joins besides its target is copied, a whole row for each row,
// for the recheck of a row another transaction changed meanwhile; so req
// and locked carry only the keys and each move's place i in the arrays, and
// the rest of a move is read by subscript, $n[i] (CHANGELOG.md, "Where end
// to end's CPU goes").
const moveManyStatement = `
WITH req AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS r(tenant_id, id, from_state, i)
), locked AS (
	SELECT c.tenant_id, c.id, r.i::int AS i FROM charges c
	JOIN req r ON c.tenant_id = r.tenant_id AND c.id = r.id AND c.state = r.from_state AND c.op_in_flight IS NULL
	ORDER BY c.tenant_id, c.id
	FOR UPDATE OF c
), moved AS (
	UPDATE charges c SET
		state = ($4::text[])[l.i],
		updated_at = now(),
		attempts = c.attempts + CASE WHEN ($5::bool[])[l.i] THEN 1 ELSE 0 END,
		first_attempt_at = CASE WHEN ($5::bool[])[l.i] THEN coalesce(c.first_attempt_at, now()) ELSE c.first_attempt_at END,
		last_attempt_at = CASE WHEN ($5::bool[])[l.i] THEN now() ELSE c.last_attempt_at END,
		provider_charge_id = coalesce(nullif(($6::text[])[l.i], ''), c.provider_charge_id),
		failure_code = CASE WHEN ($4::text[])[l.i] = 'failed' THEN ($7::text[])[l.i] ELSE c.failure_code END,
		review_reason = CASE WHEN ($4::text[])[l.i] = 'needs_review' THEN ($8::text[])[l.i] ELSE c.review_reason END,
		unknown_since = CASE WHEN ($4::text[])[l.i] = 'unknown' THEN now() ELSE NULL END,
		next_check_at = CASE WHEN ($4::text[])[l.i] = 'unknown' THEN now() + ($9::interval[])[l.i] ELSE NULL END,
		lookup_failures = 0,
		lease_owner = NULL,
		lease_expires_at = NULL
	FROM locked l
	WHERE c.tenant_id = l.tenant_id AND c.id = l.id AND c.state = ($3::text[])[l.i]
	RETURNING c.*, l.i
), audit AS (
	INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt, evidence)
	SELECT tenant_id, id, ($3::text[])[i], state, ($10::text[])[i], ($11::text[])[i], attempts, nullif(($12::text[])[i], '') FROM moved
)
SELECT ` + chargeColumns + ` FROM moved`
