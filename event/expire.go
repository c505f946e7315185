package event

import (
	"context"
	"fmt"
	"time"

	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/internal/pg"
)

// ExpiredBatch is what one DeleteExpiredEvents did.
type ExpiredBatch struct {
	// Scanned is how many events the batch walked; fewer than its limit
	// means the tenant has no more before the cutoff. Last is the greatest
	// id it walked (where the next batch starts), FirstKept the smallest
	// it walked and kept ("" when it deleted all it walked).
	Scanned         int
	Last, FirstKept string
	// Events, Deliveries and Attempts are the rows it deleted.
	Events, Deliveries, Attempts int
}

// DeleteExpiredEvents walks, in id order, the next limit events of a tenant
// after the id after and made before the millisecond of before, and deletes
// those created before it whose deliveries are none of them pending, with
// their deliveries and attempts, in one statement (docs/architecture.md,
// "Retention"). An event whose delivery is still being retried is kept, with
// it, for a later run.
//
// Events' ids sort by the millisecond of their making, so the walk is a
// range of the primary key, (tenant_id, id > after, id < the cutoff's
// floor): a caller deleting a backlog passes the batch's Last back as the
// next after, and no batch walks the index entries of the events the ones
// before it deleted (they stay until vacuum). No index on created_at is
// needed, nor written on every settling move.
func DeleteExpiredEvents(ctx context.Context, db pg.Handle, tenantID, after string, before time.Time, limit int) (ExpiredBatch, error) {
	var b ExpiredBatch
	var last, firstKept *string
	// The events are found on the primary key and deleted by their
	// physical address (a TID scan): events are never updated, and the
	// address is read and used in one statement's snapshot. Deliveries
	// and attempts go in the same statement, found by the events' ids on
	// their primary keys' prefix (tenant_id, event_id); the foreign keys
	// are checked at its end, when they are gone with their events. A
	// delivery of an event this old is never made pending again, so one
	// found finished in the snapshot stays finished.
	err := db.QueryRow(ctx, `
WITH batch AS MATERIALIZED (
	SELECT ctid, id, created_at FROM events
	WHERE tenant_id = $1 AND id > $2 AND id < $3
	ORDER BY id LIMIT $4
), pending AS MATERIALIZED (
	SELECT event_id FROM webhook_deliveries
	WHERE tenant_id = $1 AND event_id = ANY (ARRAY(SELECT id FROM batch)) AND state = 'pending'
), doomed AS MATERIALIZED (
	SELECT ctid, id FROM batch
	WHERE created_at < $5 AND id <> ALL (ARRAY(SELECT event_id FROM pending))
), attempts AS (
	DELETE FROM webhook_attempts
	WHERE tenant_id = $1 AND event_id = ANY (ARRAY(SELECT id FROM doomed))
	RETURNING 1
), deliveries AS (
	DELETE FROM webhook_deliveries
	WHERE tenant_id = $1 AND event_id = ANY (ARRAY(SELECT id FROM doomed))
	RETURNING 1
), gone AS (
	DELETE FROM events WHERE ctid = ANY (ARRAY(SELECT ctid FROM doomed))
	RETURNING id
)
SELECT count(*), max(id),
	min(id) FILTER (WHERE NOT (created_at < $5 AND id <> ALL (ARRAY(SELECT event_id FROM pending)))),
	(SELECT count(*) FROM gone), (SELECT count(*) FROM deliveries), (SELECT count(*) FROM attempts)
FROM batch`,
		tenantID, after, ids.Floor("evt", before), limit, before).
		Scan(&b.Scanned, &last, &firstKept, &b.Events, &b.Deliveries, &b.Attempts)
	if err != nil {
		return ExpiredBatch{}, fmt.Errorf("delete expired events: %w", err)
	}
	b.Last = after
	if last != nil {
		b.Last = *last
	}
	if firstKept != nil {
		b.FirstKept = *firstKept
	}
	return b, nil
}
