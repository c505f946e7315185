package intent

import (
	"context"
	"fmt"
	"time"
)

// CountByState counts the charges in each state, over every tenant; states
// with no charge are absent. It reads the whole table (an index-only scan at
// best), so callers bound how often they ask.
func CountByState(ctx context.Context, db DB) (map[State]int64, error) {
	rows, err := db.Query(ctx, `SELECT state, count(*) FROM charges GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("count charges by state: %w", err)
	}
	defer rows.Close()
	counts := map[State]int64{}
	for rows.Next() {
		var state State
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("count charges by state: %w", err)
		}
		counts[state] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count charges by state: %w", err)
	}
	return counts, nil
}

// ReconcileLag is how long the most overdue piece of a reconciler's work
// has been waiting, by the database's clock: the oldest due check of an
// unknown charge of provider, or the oldest charge sitting in submitting
// past staleSubmitting (the point at which Lease takes it). Zero means
// nothing is overdue. Both halves are served by partial indexes.
func ReconcileLag(ctx context.Context, db DB, provider string, staleSubmitting time.Duration) (time.Duration, error) {
	var micros int64
	err := db.QueryRow(ctx, `
SELECT coalesce((extract(epoch FROM now() - least(
	(SELECT min(next_check_at) FROM charges
	  WHERE state = 'unknown' AND provider = $1 AND next_check_at <= now()),
	(SELECT min(last_attempt_at) + $2::interval FROM charges
	  WHERE state = 'submitting' AND provider = $1 AND last_attempt_at < now() - $2::interval)
)) * 1e6)::bigint, 0)`, provider, staleSubmitting).Scan(&micros)
	if err != nil {
		return 0, fmt.Errorf("reconcile lag: %w", err)
	}
	return time.Duration(micros) * time.Microsecond, nil
}
