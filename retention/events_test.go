package retention_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/event"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/retention"
)

// eventsFixture writes events as the trigger would, but made when a test
// says, with their deliveries and attempts, straight in SQL.
type eventsFixture struct {
	t        *testing.T
	pool     *pgxpool.Pool
	tenantID string
	chargeID string
	endpoint [2]string
}

func newEventsFixture(t *testing.T, pool *pgxpool.Pool, name string) *eventsFixture {
	t.Helper()
	f := &eventsFixture{t: t, pool: pool, tenantID: dbtest.Tenant(t, pool, name)}
	f.chargeID = dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: f.tenantID}).ID
	for i := range f.endpoint {
		e := dbtest.WebhookEndpoint(t, pool, f.tenantID, "https://example.com/hook", []string{"*"})
		f.endpoint[i] = e.ID
	}
	return f
}

// event writes an event made at made, with a delivery to each endpoint in
// the states given (none: no delivery) and, for each delivery that is not
// pending, two attempts.
func (f *eventsFixture) event(made time.Time, states ...string) string {
	f.t.Helper()
	ctx := context.Background()
	id := ids.New("evt", made)
	_, err := f.pool.Exec(ctx, `INSERT INTO events (tenant_id, id, type, object_id, snapshot, created_at)
		SELECT tenant_id, $3, 'charge.succeeded', id, to_jsonb(c), $4 FROM charges c WHERE tenant_id = $1 AND id = $2`,
		f.tenantID, f.chargeID, id, made)
	require.NoError(f.t, err)
	for i, state := range states {
		_, err := f.pool.Exec(ctx, `INSERT INTO webhook_deliveries (tenant_id, event_id, endpoint_id, state, attempts, created_at, updated_at)
			VALUES ($1, $2, $3, $4, 2, $5, $5)`, f.tenantID, id, f.endpoint[i], state, made)
		require.NoError(f.t, err)
		if state == "pending" {
			continue
		}
		for attempt := 1; attempt <= 2; attempt++ {
			_, err := f.pool.Exec(ctx, `INSERT INTO webhook_attempts (tenant_id, event_id, endpoint_id, attempt, status, duration_ms, created_at)
				VALUES ($1, $2, $3, $4, 200, 5, $5)`, f.tenantID, id, f.endpoint[i], attempt, made)
			require.NoError(f.t, err)
		}
	}
	return id
}

// rows counts a tenant's events, deliveries and attempts.
func (f *eventsFixture) rows() (events, deliveries, attempts int) {
	f.t.Helper()
	require.NoError(f.t, f.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM events WHERE tenant_id = $1),
		(SELECT count(*) FROM webhook_deliveries WHERE tenant_id = $1),
		(SELECT count(*) FROM webhook_attempts WHERE tenant_id = $1)`, f.tenantID).Scan(&events, &deliveries, &attempts))
	return events, deliveries, attempts
}

// listed is the tenant's events as GET /v1/events lists them.
func (f *eventsFixture) listed() []string {
	f.t.Helper()
	events, _, err := event.List(context.Background(), f.pool, event.ListParams{TenantID: f.tenantID, Limit: 100})
	require.NoError(f.t, err)
	var out []string
	for _, e := range events {
		out = append(out, e.ID)
	}
	return out
}

// Events older than the retention whose deliveries are finished go with
// their deliveries and attempts; a recent event stays, and so does an old
// one with a delivery still pending (with all its deliveries), until a run
// after the delivery finished. The charge and its audit trail stay.
func TestEventRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	a := newEventsFixture(t, pool, "events-a")
	b := newEventsFixture(t, pool, "events-b")
	old := time.Now().Add(-retention.DefaultEventRetention - 24*time.Hour)

	a.event(old, "delivered", "failed")
	a.event(old.Add(time.Minute), "delivered")
	a.event(old.Add(2 * time.Minute)) // no endpoint subscribed
	stuck := a.event(old.Add(3*time.Minute), "delivered", "pending")
	recent := a.event(time.Now().Add(-time.Hour), "delivered", "delivered")
	b.event(old, "failed")
	b.event(old.Add(time.Second), "delivered", "delivered")
	var audit int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM charge_audit`).Scan(&audit))

	w := retention.NewWorker(pool, 0, nil).WithDuty(1)
	run, err := w.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, run.Events)
	require.Equal(t, 2+1+0+1+2, run.Deliveries)
	require.Equal(t, 2*run.Deliveries, run.Attempts)
	require.Equal(t, 1, run.Kept, "the event with a pending delivery")
	require.False(t, run.TimedOut)

	events, deliveries, attempts := a.rows()
	require.Equal(t, []int{2, 4, 6}, []int{events, deliveries, attempts}, "the stuck event and the recent one, with theirs")
	require.Equal(t, []string{recent, stuck}, a.listed(), "the listing shows what is kept, newest first")
	events, deliveries, attempts = b.rows()
	require.Equal(t, []int{0, 0, 0}, []int{events, deliveries, attempts})
	var charges, auditAfter int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM charges), (SELECT count(*) FROM charge_audit)`).
		Scan(&charges, &auditAfter))
	require.Equal(t, 2, charges)
	require.Equal(t, audit, auditAfter)

	// The stuck delivery finishes: the next run deletes the event.
	_, err = pool.Exec(ctx, `UPDATE webhook_deliveries SET state = 'failed' WHERE event_id = $1`, stuck)
	require.NoError(t, err)
	run, err = w.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 2, 0}, []int{run.Events, run.Deliveries, run.Attempts, run.Kept})
	require.Equal(t, []string{recent}, a.listed())
}

// With the retention 0 every event is kept, however old.
func TestEventRetentionZeroKeepsEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	f := newEventsFixture(t, pool, "events-forever")
	ancient := time.Now().Add(-10 * 365 * 24 * time.Hour)
	f.event(ancient, "delivered", "failed")
	f.event(ancient)

	run, err := retention.NewWorker(pool, 0, nil).WithDuty(1).WithEventRetention(0).RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, run.Events+run.Deliveries+run.Attempts+run.Kept+run.EventBatches, "events are not even read")
	events, deliveries, attempts := f.rows()
	require.Equal(t, []int{2, 2, 4}, []int{events, deliveries, attempts})
}

// A backlog of many batches goes in one run, each batch starting where the
// last ended: every event is walked once, so the batches are the events
// over the batch size, plus each tenant's last, short one. The next run
// starts each tenant where this one left it and walks nothing again.
func TestEventRetentionWalksEachEventOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	a := newEventsFixture(t, pool, "events-backlog-a")
	b := newEventsFixture(t, pool, "events-backlog-b")
	old := time.Now().Add(-retention.DefaultEventRetention - time.Hour)
	for i := range 10 {
		a.event(old.Add(time.Duration(i)*time.Second), "delivered")
	}
	for i := range 7 {
		b.event(old.Add(time.Duration(i)*time.Second), "failed", "delivered")
	}
	stuck := b.event(old.Add(time.Minute), "pending")
	a.event(time.Now())

	const batch = 3
	w := retention.NewWorker(pool, batch, nil).WithDuty(1)
	run, err := w.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 17, run.Events)
	require.Equal(t, 10+14, run.Deliveries)
	require.Equal(t, 2*run.Deliveries, run.Attempts)
	require.Equal(t, 1, run.Kept)
	// a: 10 events, 4 batches (3, 3, 3, 1); b: 8 events, 3 (3, 3, 2).
	require.Equal(t, 4+3, run.EventBatches)

	// The next run walks no event it deleted; b's kept one is walked
	// again, and goes once its delivery has finished.
	run, err = w.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2}, []int{run.Events, run.Kept, run.EventBatches})
	_, err = pool.Exec(ctx, `UPDATE webhook_deliveries SET state = 'delivered' WHERE event_id = $1`, stuck)
	require.NoError(t, err)
	run, err = w.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, []int{1, 0, 2}, []int{run.Events, run.Kept, run.EventBatches})
	events, _, _ := a.rows()
	require.Equal(t, 1, events, "the recent one")
	events, deliveries, attempts := b.rows()
	require.Equal(t, []int{0, 0, 0}, []int{events, deliveries, attempts})
}

// A batch walks the next events after the id it is given, up to the
// cutoff's millisecond, deletes those with no pending delivery, and says
// where it ended and the first it kept.
func TestDeleteExpiredEventsResumes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	f := newEventsFixture(t, pool, "events-resume")
	old := time.Now().Add(-48 * time.Hour).Truncate(time.Millisecond)
	var made []string
	for i, state := range []string{"delivered", "pending", "delivered", "delivered", "delivered"} {
		made = append(made, f.event(old.Add(time.Duration(i)*time.Hour), state))
	}
	cutoff := old.Add(4 * time.Hour) // the fifth event's millisecond: kept

	b, err := event.DeleteExpiredEvents(ctx, pool, f.tenantID, made[0], cutoff, 2)
	require.NoError(t, err)
	require.Equal(t, event.ExpiredBatch{Scanned: 2, Last: made[2], FirstKept: made[1], Events: 1, Deliveries: 1, Attempts: 2}, b,
		"the second event's delivery is pending")
	b, err = event.DeleteExpiredEvents(ctx, pool, f.tenantID, b.Last, cutoff, 2)
	require.NoError(t, err)
	require.Equal(t, event.ExpiredBatch{Scanned: 1, Last: made[3], Events: 1, Deliveries: 1, Attempts: 2}, b)
	b, err = event.DeleteExpiredEvents(ctx, pool, f.tenantID, b.Last, cutoff, 2)
	require.NoError(t, err)
	require.Equal(t, event.ExpiredBatch{Last: made[3]}, b, "an empty batch ends where it started")
	require.Equal(t, []string{made[4], made[1], made[0]}, f.listed(), "the one at the cutoff, the pending one, the one before after")
}
