package intent

import (
	"context"
	"fmt"
	"time"
)

// ExactCountLimit is the most charges Census counts one by one: past it,
// the settled states are estimated.
const ExactCountLimit = 100_000

// Census is the charges in each state, over every tenant, at a cost that
// does not grow with the table: the states a charge passes through on its
// way (pending, submitting, unknown, needs_review, requires_capture) are
// counted exactly, each through the partial index its sweep or listing
// uses, so the count reads those rows and no others; the settled states
// (succeeded, failed, canceled) are counted exactly while the table holds
// at most ExactCountLimit charges and estimated beyond, from the planner's
// statistics (pg_class's row counts of the table and of the failed and
// canceled charges' partial indexes, kept by autovacuum's ANALYZE). Census writes nothing: no counter row sits on
// the accept or the settle path.
type Census struct {
	Counts map[State]int64
	// Estimated names the states whose count is an estimate.
	Estimated map[State]bool
}

// TakeCensus counts the charges by state (see Census).
func TakeCensus(ctx context.Context, db DB) (Census, error) {
	return takeCensus(ctx, db, ExactCountLimit)
}

func takeCensus(ctx context.Context, db DB, exactLimit int) (Census, error) {
	c := Census{Counts: map[State]int64{}, Estimated: map[State]bool{}}
	var pending, submitting, unknown, review, held, sampled, sampledFailed, sampledCanceled int64
	var tableRows, failedRows, canceledRows float64
	// The one-by-one count runs only while the statistics say the table is
	// small, or have not been gathered yet; it reads at most
	// ExactCountLimit+1 rows whatever the table holds.
	err := db.QueryRow(ctx, `
WITH stats AS (
	SELECT (SELECT reltuples FROM pg_class WHERE oid = 'charges'::regclass) AS charges,
		(SELECT reltuples FROM pg_class WHERE oid = 'charges_failed_id'::regclass) AS failed,
		(SELECT reltuples FROM pg_class WHERE oid = 'charges_canceled_id'::regclass) AS canceled
), sample AS (
	SELECT count(*) AS n, count(*) FILTER (WHERE state = 'failed') AS failed,
		count(*) FILTER (WHERE state = 'canceled') AS canceled
	FROM (SELECT state FROM charges WHERE (SELECT charges FROM stats) <= $1 LIMIT $1 + 1) l
)
SELECT (SELECT count(*) FROM charges WHERE state = 'pending'),
	(SELECT count(*) FROM charges WHERE state = 'submitting'),
	(SELECT count(*) FROM charges WHERE state = 'unknown'),
	(SELECT count(*) FROM charges WHERE state = 'needs_review'),
	(SELECT count(*) FROM charges WHERE state = 'requires_capture'),
	sample.n, sample.failed, sample.canceled, stats.charges, stats.failed, stats.canceled
FROM stats, sample`, exactLimit).
		Scan(&pending, &submitting, &unknown, &review, &held, &sampled, &sampledFailed, &sampledCanceled, &tableRows,
			&failedRows, &canceledRows)
	if err != nil {
		return Census{}, fmt.Errorf("count charges by state: %w", err)
	}
	c.Counts[StatePending], c.Counts[StateSubmitting], c.Counts[StateUnknown], c.Counts[StateNeedsReview] = pending, submitting, unknown, review
	c.Counts[StateRequiresCapture] = held
	inFlight := pending + submitting + unknown + review + held
	if tableRows <= float64(exactLimit) && sampled <= int64(exactLimit) {
		c.Counts[StateFailed], c.Counts[StateCanceled] = sampledFailed, sampledCanceled
		c.Counts[StateSucceeded] = max(sampled-sampledFailed-sampledCanceled-inFlight, 0)
		return c, nil
	}
	total, failed, canceled := max(tableRows, float64(sampled)), max(failedRows, 0), max(canceledRows, 0)
	c.Counts[StateFailed], c.Counts[StateCanceled] = int64(failed), int64(canceled)
	c.Counts[StateSucceeded] = max(int64(total)-int64(failed)-int64(canceled)-inFlight, 0)
	c.Estimated[StateFailed], c.Estimated[StateSucceeded], c.Estimated[StateCanceled] = true, true, true
	return c, nil
}

// ReconcileLag is how long the most overdue piece of a reconciler's work
// has been waiting, by the database's clock: the oldest due check of an
// unknown charge of the providers, or the oldest charge sitting in submitting
// past staleSubmitting (the point at which Lease takes it). Zero means
// nothing is overdue. Both halves are served by partial indexes.
func ReconcileLag(ctx context.Context, db DB, providers []string, staleSubmitting time.Duration) (time.Duration, error) {
	var micros int64
	err := db.QueryRow(ctx, `
SELECT coalesce((extract(epoch FROM now() - least(
	(SELECT min(next_check_at) FROM charges
	  WHERE state = 'unknown' AND provider = ANY($1) AND next_check_at <= now()),
	(SELECT min(last_attempt_at) + $2::interval FROM charges
	  WHERE state = 'submitting' AND provider = ANY($1) AND last_attempt_at < now() - $2::interval)
)) * 1e6)::bigint, 0)`, providers, staleSubmitting).Scan(&micros)
	if err != nil {
		return 0, fmt.Errorf("reconcile lag: %w", err)
	}
	return time.Duration(micros) * time.Microsecond, nil
}
