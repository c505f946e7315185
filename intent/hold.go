package intent

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// HoldParams selects held charges (requires_capture) whose hold may have
// expired at their provider (docs/capture.md, "Holds expire"): at one of
// Providers, with no capture or cancel in flight, first sent at least
// MinAge ago, and not looked up in the last Recheck.
type HoldParams struct {
	Providers []string
	MinAge    time.Duration
	Recheck   time.Duration
	Limit     int
}

// ClaimHolds returns up to p.Limit such charges, oldest first, with the
// database's clock, and marks each looked up now (last_lookup_at), so that
// another reconciler claiming at the same time skips them (SKIP LOCKED)
// and none is looked up again before p.Recheck has passed.
func ClaimHolds(ctx context.Context, db DB, p HoldParams) ([]Charge, time.Time, error) {
	rows, err := db.Query(ctx, `
WITH due AS (
	SELECT tenant_id, id FROM charges
	WHERE state = 'requires_capture' AND op_in_flight IS NULL AND provider = ANY($1)
	  AND first_attempt_at <= now() - $2::interval
	  AND (last_lookup_at IS NULL OR last_lookup_at <= now() - $3::interval)
	ORDER BY first_attempt_at
	LIMIT $4
	FOR UPDATE SKIP LOCKED
), claimed AS (
	UPDATE charges c SET last_lookup_at = now()
	FROM due WHERE c.tenant_id = due.tenant_id AND c.id = due.id
	RETURNING c.*
)
SELECT `+chargeColumns+`, now() FROM claimed`, p.Providers, p.MinAge, p.Recheck, p.Limit)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("claim held charges: %w", err)
	}
	var now time.Time
	held, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Charge, error) { return scanCharge(row, &now) })
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("claim held charges: %w", err)
	}
	return held, now, nil
}
