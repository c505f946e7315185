package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/submit"
	"github.com/chargeflow/chargeflow/webhook"
)

// Every move that settles a row writes one event in its own transaction,
// and nothing else does.
func TestEventsAreWrittenWithTheirMoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenant := dbtest.Tenant(t, pool, "events")
	move := func(db intent.DB, id string, from, to intent.State) {
		t.Helper()
		_, err := intent.MoveCharge(ctx, db, intent.Move{TenantID: tenant, ChargeID: id, From: from, To: to, Actor: "test", Reason: "test",
			CountAttempt: to == intent.StateSubmitting, ProviderChargeID: "py_1", FailureCode: "card_declined", ReviewReason: "lookup_unavailable", CheckAfter: 1})
		require.NoError(t, err)
	}
	list := func() []webhook.Event {
		t.Helper()
		events, _, err := webhook.List(ctx, pool, webhook.ListParams{TenantID: tenant, Limit: 100})
		require.NoError(t, err)
		return events
	}

	c := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenant, Amount: 1500})
	move(pool, c.ID, intent.StatePending, intent.StateSubmitting)
	move(pool, c.ID, intent.StateSubmitting, intent.StateUnknown)
	require.Empty(t, list(), "no event for a move that settles nothing")

	// A move rolled back leaves no event; committed, exactly one.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	move(tx, c.ID, intent.StateUnknown, intent.StateSucceeded)
	require.NoError(t, tx.Rollback(ctx))
	require.Empty(t, list(), "no event without its move")
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		move(tx, c.ID, intent.StateUnknown, intent.StateSucceeded)
		return nil
	}))
	events := list()
	require.Len(t, events, 1)
	e := events[0]
	require.True(t, ids.Valid("evt", e.ID), e.ID)
	require.Equal(t, "charge.succeeded", e.Type)
	require.Equal(t, []any{c.ID, intent.StateSucceeded, int64(1500), "py_1", intent.KindCharge},
		[]any{e.Object.ID, e.Object.State, e.Object.Amount, e.Object.ProviderChargeID, e.Object.Kind})
	got, err := webhook.Get(ctx, pool, tenant, e.ID)
	require.NoError(t, err)
	require.Equal(t, e, got)
	_, err = webhook.Get(ctx, pool, dbtest.Tenant(t, pool, "other"), e.ID)
	require.ErrorIs(t, err, webhook.ErrNotFound, "another tenant's event")

	// Every settling state, for charges and refunds; needs_review as often
	// as it happens.
	declined := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenant})
	move(pool, declined.ID, intent.StatePending, intent.StateFailed)
	reviewed := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenant})
	move(pool, reviewed.ID, intent.StatePending, intent.StateSubmitting)
	move(pool, reviewed.ID, intent.StateSubmitting, intent.StateUnknown)
	move(pool, reviewed.ID, intent.StateUnknown, intent.StateNeedsReview)
	move(pool, reviewed.ID, intent.StateNeedsReview, intent.StatePending)
	move(pool, reviewed.ID, intent.StatePending, intent.StateSubmitting)
	move(pool, reviewed.ID, intent.StateSubmitting, intent.StateUnknown)
	move(pool, reviewed.ID, intent.StateUnknown, intent.StateNeedsReview)
	refund := dbtest.PendingRefund(t, pool, c, 500)
	move(pool, refund.ID, intent.StatePending, intent.StateSubmitting)
	move(pool, refund.ID, intent.StateSubmitting, intent.StateSucceeded)

	var types []string
	for _, e := range list() {
		types = append(types, e.Type+" "+e.Object.ID)
	}
	slices.Reverse(types) // oldest first
	require.Equal(t, []string{
		"charge.succeeded " + c.ID, "charge.failed " + declined.ID,
		"charge.needs_review " + reviewed.ID, "charge.needs_review " + reviewed.ID, "refund.succeeded " + refund.ID,
	}, types, "newest first, one per settling move")

	refunds, _, err := webhook.List(ctx, pool, webhook.ListParams{TenantID: tenant, Type: "refund.succeeded", Limit: 10})
	require.NoError(t, err)
	require.Len(t, refunds, 1)
	require.Equal(t, []any{intent.KindRefund, c.ID, int64(500)}, []any{refunds[0].Object.Kind, refunds[0].Object.ParentID, refunds[0].Object.Amount})

	page, more, err := webhook.List(ctx, pool, webhook.ListParams{TenantID: tenant, Limit: 2})
	require.NoError(t, err)
	require.True(t, more)
	rest, more, err := webhook.List(ctx, pool, webhook.ListParams{TenantID: tenant, Limit: 10, StartingAfter: page[1].ID})
	require.NoError(t, err)
	require.False(t, more)
	require.Len(t, rest, 3)
}

// TestEventsOfABatchedMove moves six charges in one statement, as the
// worker's settles do: the trigger runs once for the statement and still
// writes one event per row it settled, none for the rows it moved to a
// state that settles nothing, each with its own row's snapshot, and the
// deliveries of only the events an endpoint subscribes to.
func TestEventsOfABatchedMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenant := dbtest.Tenant(t, pool, "batched events")
	dbtest.WebhookEndpoint(t, pool, tenant, "https://merchant.example/hooks", []string{"charge.succeeded"})

	var moves []intent.Move
	want := map[string]string{} // charge id → event type
	for i := range 6 {
		c := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenant, Amount: int64(100 + i)})
		_, err := intent.MoveCharge(ctx, pool, intent.Move{TenantID: tenant, ChargeID: c.ID, From: intent.StatePending,
			To: intent.StateSubmitting, Actor: "test", Reason: "test", CountAttempt: true})
		require.NoError(t, err)
		m := intent.Move{TenantID: tenant, ChargeID: c.ID, From: intent.StateSubmitting, Actor: "test", Reason: "test"}
		switch i % 3 {
		case 0:
			m.To, m.ProviderChargeID = intent.StateSucceeded, fmt.Sprintf("py_%d", i)
			want[c.ID] = "charge.succeeded"
		case 1:
			m.To, m.FailureCode = intent.StateFailed, "card_declined"
			want[c.ID] = "charge.failed"
		case 2:
			m.To, m.CheckAfter = intent.StateUnknown, time.Minute
		}
		moves = append(moves, m)
	}
	require.Empty(t, mustList(ctx, t, pool, tenant), "the claims settled nothing")

	moved, err := intent.MoveMany(ctx, pool, moves)
	require.NoError(t, err)
	require.Len(t, moved, 6)

	got := map[string]string{}
	for _, e := range mustList(ctx, t, pool, tenant) {
		require.NotContains(t, got, e.Object.ID, "one event per settled charge")
		got[e.Object.ID] = e.Type
		c, err := intent.Get(ctx, pool, tenant, e.Object.ID)
		require.NoError(t, err)
		require.Equal(t, []any{c.State, c.Amount, c.ProviderChargeID, c.FailureCode},
			[]any{e.Object.State, e.Object.Amount, e.Object.ProviderChargeID, e.Object.FailureCode}, "the snapshot is its own row's")
	}
	require.Equal(t, want, got)

	var deliveries, jobs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE tenant_id = $1`, tenant).Scan(&deliveries))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'webhook.deliver' AND args->>'tenant_id' = $1`, tenant).Scan(&jobs))
	require.Equal(t, []int{2, 2}, []int{deliveries, jobs}, "the two charge.succeeded events, to the one subscribed endpoint")
}

// TestDeliverJobsMatchRiverInsert holds the webhook.deliver rows the events
// triggers write in SQL (events_on_moves for a charge's move,
// decide_deliveries for an endpoint's disabling) to the rows River's client
// writes for the same jobs (InsertTx into webhook.Queue with
// webhook.MaxAttempts and chargeflow's middleware, as submit's
// TestRowMatchesRiverInsert does for charge.submit): if a River upgrade
// changes what its insert writes, this fails before a worker misreads a job.
func TestDeliverJobsMatchRiverInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenant := dbtest.Tenant(t, pool, "deliver jobs")
	dbtest.WebhookEndpoint(t, pool, tenant, "https://merchant.example/all", []string{"*"})
	failing := dbtest.WebhookEndpoint(t, pool, tenant, "https://merchant.example/failing", []string{"charge.succeeded"})

	c := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenant})
	for _, m := range []intent.Move{
		{From: intent.StatePending, To: intent.StateSubmitting, CountAttempt: true},
		{From: intent.StateSubmitting, To: intent.StateSucceeded, ProviderChargeID: "py_1"},
	} {
		m.TenantID, m.ChargeID, m.Actor, m.Reason = tenant, c.ID, "test", "test"
		_, err := intent.MoveCharge(ctx, pool, m)
		require.NoError(t, err)
	}
	event := mustList(ctx, t, pool, tenant)[0]
	require.NoError(t, webhook.Record(ctx, pool, webhook.DeliverArgs{TenantID: tenant, EventID: event.ID, EndpointID: failing.ID},
		webhook.Outcome{Attempt: 1, Final: true, Error: webhook.AttemptConnectionFailed}))

	written := dbtest.RiverJobs(t, pool)
	require.Len(t, written, 3, "the charge's event to both endpoints, the disabling's to the other")
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: submit.Middleware()})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, job := range written {
			var args webhook.DeliverArgs
			require.NoError(t, json.Unmarshal([]byte(job.Args), &args))
			if _, err := client.InsertTx(ctx, tx, args, &river.InsertOpts{Queue: webhook.Queue, MaxAttempts: webhook.MaxAttempts}); err != nil {
				return err
			}
		}
		return nil
	}))

	inserted := dbtest.RiverJobs(t, pool)[len(written):]
	require.Equal(t, inserted, written, "the triggers' jobs differ from River's own")
	for _, job := range written {
		require.Equal(t, []any{webhook.KindDeliver, webhook.Queue, "available", webhook.MaxAttempts},
			[]any{job.Kind, job.Queue, job.State, job.MaxAttempts})
	}
}

// mustList is the tenant's events, newest first.
func mustList(ctx context.Context, t *testing.T, pool intent.DB, tenant string) []webhook.Event {
	t.Helper()
	events, _, err := webhook.List(ctx, pool, webhook.ListParams{TenantID: tenant, Limit: 100})
	require.NoError(t, err)
	return events
}
