package intent

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// StrandedParams selects pending charges that lost their job.
type StrandedParams struct {
	Provider string
	// OlderThan is how long a charge must have been pending untouched.
	OlderThan time.Duration
	Limit     int
}

// LockStranded finds, and locks until tx ends, pending charges of a
// provider that no live charge.submit job will ever pick up: River
// discarded or cancelled theirs. Every path that makes a charge pending
// writes its job in the same transaction, so a pending charge without a
// live job can only mean the job was given up on outside chargeflow's
// control. The caller inserts a new job for each in the same transaction
// and calls TouchPending.
func LockStranded(ctx context.Context, tx pgx.Tx, p StrandedParams) ([]Charge, error) {
	rows, err := tx.Query(ctx, `SELECT `+chargeColumns+` FROM charges c
		WHERE c.state = 'pending' AND c.provider = $1 AND c.updated_at < now() - $2::interval
		  AND NOT EXISTS (SELECT 1 FROM river_job j
			WHERE j.kind = 'charge.submit' AND j.args->>'charge_id' = c.id AND j.args->>'tenant_id' = c.tenant_id
			  AND j.state IN ('available', 'scheduled', 'running', 'retryable', 'pending'))
		ORDER BY c.updated_at
		LIMIT $3
		FOR UPDATE SKIP LOCKED`, p.Provider, p.OlderThan, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("find stranded pending charges: %w", err)
	}
	charges, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Charge, error) { return scanCharge(row) })
	if err != nil {
		return nil, fmt.Errorf("find stranded pending charges: %w", err)
	}
	return charges, nil
}

// TouchPending marks a pending charge as just handled (updated_at = now())
// without moving it.
func TouchPending(ctx context.Context, tx pgx.Tx, tenantID, chargeID string) error {
	if _, err := tx.Exec(ctx, `UPDATE charges SET updated_at = now() WHERE tenant_id = $1 AND id = $2 AND state = 'pending'`,
		tenantID, chargeID); err != nil {
		return fmt.Errorf("touch pending charge %s: %w", chargeID, err)
	}
	return nil
}
