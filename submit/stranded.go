package submit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// liveStates are the job states in which River will still run a job (a job
// "running" in a dead worker included: River's rescuer reruns it).
var liveStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStateRunning,
	rivertype.JobStateRetryable, rivertype.JobStatePending,
}

// StrandedParams selects pending charges that lost their job.
type StrandedParams struct {
	// Providers restricts the search to charges of these providers.
	Providers []string
	// OlderThan is how long a charge must have been pending untouched.
	OlderThan time.Duration
	Limit     int
}

// Stranded names a pending charge that no live job will carry.
type Stranded struct {
	TenantID string
	ChargeID string
}

// LockStranded finds, and locks until tx ends, pending charges of the
// providers that no live charge.submit job will ever pick up: River
// discarded or cancelled theirs. Every path that makes a charge pending
// enqueues its job in the same transaction, so a pending charge without a
// live job can only mean the job was given up on outside chargeflow's
// control. The caller enqueues a new job for each in the same transaction
// and touches the charge (intent.TouchPending). An index on the job's
// charge id (migrations) keeps the check cheap; the job kind is a literal
// in the statement so that even its generic plan can use that partial
// index. OFFSET 0 keeps the NOT EXISTS a lookup per pending charge (a
// small set) rather than an anti-join, which on a table of a day's jobs
// would read them all.
func LockStranded(ctx context.Context, tx pgx.Tx, p StrandedParams) ([]Stranded, error) {
	states := make([]string, len(liveStates))
	for i, s := range liveStates {
		states[i] = string(s)
	}
	rows, err := tx.Query(ctx, `SELECT c.tenant_id, c.id FROM charges c
		WHERE c.state = 'pending' AND c.provider = ANY($1) AND c.updated_at < now() - $2::interval
		  AND NOT EXISTS (SELECT 1 FROM river_job j
			WHERE j.kind = '`+KindCharge+`' AND j.args->>'charge_id' = c.id AND j.args->>'tenant_id' = c.tenant_id
			  AND j.state::text = ANY($4) OFFSET 0)
		ORDER BY c.updated_at
		LIMIT $3
		FOR UPDATE SKIP LOCKED`, p.Providers, p.OlderThan, p.Limit, states)
	if err != nil {
		return nil, fmt.Errorf("find stranded pending charges: %w", err)
	}
	stranded, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Stranded])
	if err != nil {
		return nil, fmt.Errorf("find stranded pending charges: %w", err)
	}
	return stranded, nil
}
