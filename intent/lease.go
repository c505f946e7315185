package intent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LeaseParams selects the charges a reconciler may take.
type LeaseParams struct {
	// Owner names the reconciler; it is stored with the lease for operators.
	Owner string
	// Providers restricts the lease to charges of these providers: the
	// ones the reconciler can look up.
	Providers []string
	// TTL is how long the lease lasts, by the database clock.
	TTL time.Duration
	// Limit is the most charges leased at once.
	Limit int
	// StaleSubmitting is how long a charge may sit in submitting before the
	// reconciler takes it: the provider call timeout plus a margin, so a live
	// worker is never overtaken mid-call.
	StaleSubmitting time.Duration
}

// Leased is a charge under lease, with the database's clock at lease time:
// every time comparison the reconciler makes uses it, never the local clock.
type Leased struct {
	Charge
	Now time.Time
}

// Lease takes up to p.Limit charges that need the reconciler: unknown ones
// whose next check is due, and ones stuck in submitting. Each gets a new
// lease_token (one more than before) that fences every later write. Rows
// another reconciler is leasing right now are skipped, not waited for.
func Lease(ctx context.Context, db DB, p LeaseParams) ([]Leased, error) {
	rows, err := db.Query(ctx, `
WITH due AS (
	SELECT tenant_id, id FROM charges
	WHERE provider = ANY($2)
	  AND ((state = 'unknown' AND next_check_at <= now())
	    OR (state = 'submitting' AND last_attempt_at < now() - $5::interval))
	  AND (lease_expires_at IS NULL OR lease_expires_at < now())
	ORDER BY coalesce(next_check_at, last_attempt_at)
	LIMIT $4
	FOR UPDATE SKIP LOCKED
), leased AS (
	UPDATE charges c SET lease_owner = $1, lease_token = c.lease_token + 1, lease_expires_at = now() + $3::interval
	FROM due WHERE c.tenant_id = due.tenant_id AND c.id = due.id
	RETURNING c.*
)
SELECT `+chargeColumns+`, now() FROM leased`, p.Owner, p.Providers, p.TTL, p.Limit, p.StaleSubmitting)
	if err != nil {
		return nil, fmt.Errorf("lease charges: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Leased, error) {
		var l Leased
		var err error
		l.Charge, err = scanCharge(row, &l.Now)
		return l, err
	})
}

// Recheck is a fenced write that keeps a charge unknown and says when to
// look again: not a move, so no audit entry. It ends the lease.
type Recheck struct {
	TenantID   string
	ChargeID   string
	LeaseToken int64
	// After is how long from now (database clock) to wait.
	After time.Duration
	// LookupFailed counts one more failed lookup; otherwise the count resets.
	LookupFailed bool
}

// RescheduleCheck applies r. It returns a *ConflictError (ErrFenced when the
// lease was lost, ErrConflict when the charge left unknown) and writes
// nothing when the compare-and-set misses.
func RescheduleCheck(ctx context.Context, db DB, r Recheck) error {
	tag, err := db.Exec(ctx, `UPDATE charges SET
		next_check_at = now() + $4::interval,
		lookup_failures = CASE WHEN $5 THEN lookup_failures + 1 ELSE 0 END,
		last_lookup_at = now(),
		lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
		WHERE tenant_id = $1 AND id = $2 AND state = 'unknown' AND lease_token = $3`,
		r.TenantID, r.ChargeID, r.LeaseToken, r.After, r.LookupFailed)
	if err != nil {
		return fmt.Errorf("reschedule check of %s: %w", r.ChargeID, err)
	}
	if tag.RowsAffected() == 0 {
		return explainMiss(ctx, db, Move{TenantID: r.TenantID, ChargeID: r.ChargeID, From: StateUnknown})
	}
	return nil
}

// ForcedCheck is an operator's request to look an unknown charge up now.
type ForcedCheck struct {
	ChargeID string
	// Actor is "operator:<name>"; it signs the action's audit entry.
	Actor string
	// Floor is the least time since the last lookup, forced or not.
	Floor time.Duration
}

// ForceCheck makes an unknown charge's check due now and records the
// operator's action as an audit entry of the charge, in one statement. It does not
// touch a lease: a reconciler holding one finishes first. It returns a
// *TooSoonError when the last lookup (or forced one) is within f.Floor, a
// *ConflictError when the charge is not unknown, and ErrNotFound.
func ForceCheck(ctx context.Context, db DB, f ForcedCheck) (Charge, error) {
	c, err := scanCharge(db.QueryRow(ctx, `
WITH forced AS (
	UPDATE charges SET next_check_at = now(), forced_check_at = now(), updated_at = now()
	WHERE id = $1 AND state = 'unknown'
	  AND (last_lookup_at IS NULL OR last_lookup_at <= now() - $2::interval)
	  AND (forced_check_at IS NULL OR forced_check_at <= now() - $2::interval)
	RETURNING *
), audit AS (
	INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt, action)
	SELECT tenant_id, id, NULL, state, $3, 'operator_reconcile', attempts, 'reconcile_requested' FROM forced
)
SELECT `+chargeColumns+` FROM forced`, f.ChargeID, f.Floor, f.Actor))
	if !errors.Is(err, pgx.ErrNoRows) {
		if err != nil {
			return Charge{}, fmt.Errorf("force check of %s: %w", f.ChargeID, err)
		}
		return c, nil
	}
	var state State
	var waitSeconds float64
	err = db.QueryRow(ctx, `SELECT state, extract(epoch FROM greatest(
			coalesce(last_lookup_at + $2::interval - now(), '0'),
			coalesce(forced_check_at + $2::interval - now(), '0')))::float8
		FROM charges WHERE id = $1`, f.ChargeID, f.Floor).Scan(&state, &waitSeconds)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Charge{}, fmt.Errorf("charge %s: %w", f.ChargeID, ErrNotFound)
	case err != nil:
		return Charge{}, fmt.Errorf("force check of %s: %w", f.ChargeID, err)
	case state != StateUnknown:
		return Charge{}, &ConflictError{ChargeID: f.ChargeID, Current: state}
	}
	return Charge{}, &TooSoonError{ChargeID: f.ChargeID, Wait: max(time.Duration(waitSeconds*float64(time.Second)), time.Millisecond)}
}
