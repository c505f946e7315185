package intent

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Reroute moves a pending charge from one provider account to another
// (docs/routing.md, "Failover"). Only a pending charge moves: pending is
// proven not held where it is (never sent, an answer that proved nothing
// was applied, or a proven not-found), so the move cannot charge twice.
type Reroute struct {
	TenantID string
	ChargeID string
	// From is the account the charge is at; To the one it moves to.
	From string
	To   string
	// Actor and Evidence go into the audit entry (action "reroute"):
	// Evidence says why the charge is proven not held at From.
	Actor    string
	Evidence string
}

// ActionReroute is the audit entry's action of a reroute.
const ActionReroute = "reroute"

// RerouteCharge applies r in one statement with its audit entry: the
// charge's provider becomes r.To, with the next route number and that
// number's provider key ("cf_<id>_<n>"), and its attempts, their times and
// any provider id start afresh, since the new key was never sent. It
// returns the charge after the move; a *ConflictError when the charge is
// not pending at r.From (someone moved it first), ErrNotFound when there
// is no such charge.
func RerouteCharge(ctx context.Context, db DB, r Reroute) (Charge, error) {
	if r.From == "" || r.To == "" || r.From == r.To || r.Actor == "" || r.Evidence == "" {
		return Charge{}, errors.New("intent: a reroute needs two accounts, an actor and its evidence")
	}
	c, err := scanCharge(db.QueryRow(ctx, `
WITH moved AS (
	UPDATE charges SET
		provider = $4,
		route_seq = route_seq + 1,
		provider_key = 'cf_' || id || '_' || (route_seq + 1),
		attempts = 0,
		first_attempt_at = NULL,
		last_attempt_at = NULL,
		provider_charge_id = NULL,
		updated_at = now()
	WHERE tenant_id = $1 AND id = $2 AND state = 'pending' AND kind = 'charge' AND provider = $3
	RETURNING *
), audit AS (
	INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt, evidence, action)
	SELECT tenant_id, id, NULL, 'pending', $5, 'rerouted_from:' || $3, 0, $6, '`+ActionReroute+`' FROM moved
)
SELECT `+chargeColumns+` FROM moved`, r.TenantID, r.ChargeID, r.From, r.To, r.Actor, r.Evidence))
	if errors.Is(err, pgx.ErrNoRows) {
		return Charge{}, explainMiss(ctx, db, Move{TenantID: r.TenantID, ChargeID: r.ChargeID, From: StatePending})
	}
	if err != nil {
		return Charge{}, fmt.Errorf("reroute charge %s %s -> %s: %w", r.ChargeID, r.From, r.To, err)
	}
	return c, nil
}

// PendingProof is why a pending charge is not held at its account: the
// reason and evidence of the latest audit entry that made it pending since
// it came to that account (its creation, or its latest reroute), other
// than ignore (a move back to pending that sent nothing), as
// "reason: evidence" — "not_applied:…" for an answer that proved nothing
// applied, "proven_not_found: …" for a lookup past the apply window. Empty
// when there is none: nothing was ever sent to the account.
func PendingProof(ctx context.Context, db DB, tenantID, chargeID, ignore string) (string, error) {
	var proof string
	err := db.QueryRow(ctx, `SELECT reason || coalesce(': ' || evidence, '') FROM charge_audit
		WHERE charge_id = $1 AND tenant_id = $2 AND from_state IS NOT NULL AND to_state = 'pending' AND reason <> $3
		  AND id > coalesce((SELECT max(id) FROM charge_audit WHERE charge_id = $1 AND action = '`+ActionReroute+`'), 0)
		ORDER BY id DESC LIMIT 1`, chargeID, tenantID, ignore).Scan(&proof)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read why charge %s is pending: %w", chargeID, err)
	}
	return proof, nil
}

// ActionLateCharge is the audit entry's action recording that a provider a
// charge was moved away from says it charged it after all.
const ActionLateCharge = "late_charge_at_previous_provider"

// RecordLateCharge appends to the charge's audit trail, when the charge was
// rerouted away from provider, that provider's word that it charged it
// after all (evidence): the proof the reroute rested on was broken (a
// provider applying a request later than it promised), the charge may be
// charged twice, and a person must look (docs/routing.md, "What failover
// rests on"). It moves nothing. ok is false, and nothing is written, when
// the charge never left provider.
func RecordLateCharge(ctx context.Context, db DB, tenantID, chargeID, provider, actor, evidence string) (ok bool, err error) {
	tag, err := db.Exec(ctx, `INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt, evidence, action)
		SELECT tenant_id, id, NULL, state, $4, 'charged_at:' || $3, attempts, $5, '`+ActionLateCharge+`' FROM charges c
		WHERE tenant_id = $1 AND id = $2 AND provider <> $3 AND EXISTS (
			SELECT 1 FROM charge_audit a WHERE a.charge_id = c.id AND a.action = '`+ActionReroute+`' AND a.reason = 'rerouted_from:' || $3)`,
		tenantID, chargeID, provider, actor, evidence)
	if err != nil {
		return false, fmt.Errorf("record a late charge of %s at %s: %w", chargeID, provider, err)
	}
	return tag.RowsAffected() == 1, nil
}
