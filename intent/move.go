package intent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Move is one compare-and-set move of a charge, with the audit facts that go
// into its audit entry and the columns that change with it.
type Move struct {
	TenantID string
	ChargeID string
	From     State
	To       State

	// Actor says who moved it: "api", "worker", "reconciler:<id>",
	// "operator:<name>". Reason is a short snake_case cause. Evidence is free
	// text kept on the audit entry (operators must give it).
	Actor    string
	Reason   string
	Evidence string

	// LeaseToken, when non-zero, fences the move: it happens only while the
	// charge's lease_token still equals it.
	LeaseToken int64

	// CountAttempt records a provider call about to be sent: attempts + 1 and
	// the attempt times (pending → submitting).
	CountAttempt bool
	// ProviderChargeID is stored when the provider confirmed the charge.
	ProviderChargeID string
	// FailureCode is stored with failed.
	FailureCode string
	// ReviewReason is stored with needs_review.
	ReviewReason string
	// CheckAfter, when moving to unknown, is how long to wait (by the
	// database clock) before the reconciler first looks the key up.
	CheckAfter time.Duration
}

// MoveCharge applies m in one statement: the compare-and-set on the state
// (and lease token), the column changes, and the audit entry. A held charge
// with a capture or cancel in flight moves only by that operation
// (operations_account), so MoveCharge finds it where it is not expected. It returns the charge
// as it is after the move. Every move ends any lease on the charge; the lease
// token itself only ever grows.
//
// It returns ErrIllegalMove before any SQL if the move is not in the state
// machine, a *ConflictError (ErrConflict or ErrFenced) if the charge is not
// where m expects it, and ErrNotFound if it does not exist.
func MoveCharge(ctx context.Context, db DB, m Move) (Charge, error) {
	if err := checkMove(m); err != nil {
		return Charge{}, err
	}
	c, err := scanCharge(db.QueryRow(ctx, `
WITH moved AS (
	UPDATE charges SET
		state = $4,
		updated_at = now(),
		attempts = attempts + CASE WHEN $5 THEN 1 ELSE 0 END,
		first_attempt_at = CASE WHEN $5 THEN coalesce(first_attempt_at, now()) ELSE first_attempt_at END,
		last_attempt_at = CASE WHEN $5 THEN now() ELSE last_attempt_at END,
		provider_charge_id = coalesce(nullif($6, ''), provider_charge_id),
		failure_code = CASE WHEN $4 = 'failed' THEN $7 ELSE failure_code END,
		review_reason = CASE WHEN $4 = 'needs_review' THEN $8 ELSE review_reason END,
		unknown_since = CASE WHEN $4 = 'unknown' THEN now() ELSE NULL END,
		next_check_at = CASE WHEN $4 = 'unknown' THEN now() + $9::interval ELSE NULL END,
		lookup_failures = 0,
		lease_owner = NULL,
		lease_expires_at = NULL
	WHERE tenant_id = $1 AND id = $2 AND state = $3 AND ($10::bigint = 0 OR lease_token = $10)
		AND op_in_flight IS NULL
	RETURNING *
), audit AS (
	INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt, evidence, lease_token)
	SELECT tenant_id, id, $3, $4, $11, $12, attempts, nullif($13, ''), nullif($10::bigint, 0) FROM moved
)
SELECT `+chargeColumns+` FROM moved`,
		m.TenantID, m.ChargeID, string(m.From), string(m.To), m.CountAttempt, m.ProviderChargeID, m.FailureCode,
		m.ReviewReason, m.CheckAfter, m.LeaseToken, m.Actor, m.Reason, m.Evidence))
	if errors.Is(err, pgx.ErrNoRows) {
		return Charge{}, explainMiss(ctx, db, m)
	}
	if err != nil {
		return Charge{}, fmt.Errorf("move charge %s %s -> %s: %w", m.ChargeID, m.From, m.To, err)
	}
	return c, nil
}

// checkMove refuses, before any SQL, a move the state machine does not have
// or one missing the facts its target state needs.
func checkMove(m Move) error {
	if !CanMove(m.From, m.To) {
		return fmt.Errorf("%w: %s -> %s", ErrIllegalMove, m.From, m.To)
	}
	if m.Actor == "" || m.Reason == "" {
		return errors.New("intent: a move needs an actor and a reason")
	}
	switch {
	case m.To == StateSucceeded && m.ProviderChargeID == "":
		return errors.New("intent: succeeded needs the provider's charge id")
	case m.To == StateRequiresCapture && m.ProviderChargeID == "":
		return errors.New("intent: requires_capture needs the provider's charge id")
	case m.To == StateFailed && m.FailureCode == "":
		return errors.New("intent: failed needs a failure code")
	case m.To == StateNeedsReview && m.ReviewReason == "":
		return errors.New("intent: needs_review needs a reason")
	}
	return nil
}

// explainMiss turns a compare-and-set that touched no row into the reason.
func explainMiss(ctx context.Context, db DB, m Move) error {
	var state State
	var token int64
	err := db.QueryRow(ctx, `SELECT state, lease_token FROM charges WHERE tenant_id = $1 AND id = $2`,
		m.TenantID, m.ChargeID).Scan(&state, &token)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("charge %s: %w", m.ChargeID, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("move charge %s: read current state: %w", m.ChargeID, err)
	}
	// A lost lease is reported as such even if the charge has also moved:
	// the write was refused because the caller no longer held the charge.
	fenced := m.LeaseToken != 0 && token != m.LeaseToken
	return &ConflictError{ChargeID: m.ChargeID, Current: state, LeaseToken: token, fenced: fenced}
}

// TouchPending marks a pending charge as just handled (updated_at = now())
// without moving it: a stranded charge given a new job is not stranded again
// until another while has passed.
func TouchPending(ctx context.Context, db DB, tenantID, chargeID string) error {
	if _, err := db.Exec(ctx, `UPDATE charges SET updated_at = now() WHERE tenant_id = $1 AND id = $2 AND state = 'pending'`,
		tenantID, chargeID); err != nil {
		return fmt.Errorf("touch pending charge %s: %w", chargeID, err)
	}
	return nil
}
