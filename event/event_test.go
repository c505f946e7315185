package event_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/event"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/resource"
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
	list := func() []event.Event {
		t.Helper()
		events, _, err := event.List(ctx, pool, event.ListParams{TenantID: tenant, Limit: 100})
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
		[]any{e.Charge.ID, e.Charge.State, e.Charge.Amount, e.Charge.ProviderChargeID, e.Charge.Kind})
	got, err := event.Get(ctx, pool, tenant, e.ID)
	require.NoError(t, err)
	require.Equal(t, e, got)
	_, err = event.Get(ctx, pool, dbtest.Tenant(t, pool, "other"), e.ID)
	require.ErrorIs(t, err, event.ErrNotFound, "another tenant's event")

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
		types = append(types, e.Type+" "+e.Charge.ID)
	}
	slices.Reverse(types) // oldest first
	require.Equal(t, []string{
		"charge.succeeded " + c.ID, "charge.failed " + declined.ID,
		"charge.needs_review " + reviewed.ID, "charge.needs_review " + reviewed.ID, "refund.succeeded " + refund.ID,
	}, types, "newest first, one per settling move")

	refunds, _, err := event.List(ctx, pool, event.ListParams{TenantID: tenant, Type: "refund.succeeded", Limit: 10})
	require.NoError(t, err)
	require.Len(t, refunds, 1)
	require.Equal(t, []any{intent.KindRefund, c.ID, int64(500)}, []any{refunds[0].Charge.Kind, refunds[0].Charge.ParentID, refunds[0].Charge.Amount})

	page, more, err := event.List(ctx, pool, event.ListParams{TenantID: tenant, Limit: 2})
	require.NoError(t, err)
	require.True(t, more)
	rest, more, err := event.List(ctx, pool, event.ListParams{TenantID: tenant, Limit: 10, StartingAfter: page[1].ID})
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
		require.NotContains(t, got, e.Charge.ID, "one event per settled charge")
		got[e.Charge.ID] = e.Type
		c, err := intent.Get(ctx, pool, tenant, e.Charge.ID)
		require.NoError(t, err)
		require.Equal(t, []any{c.State, c.Amount, c.ProviderChargeID, c.FailureCode},
			[]any{e.Charge.State, e.Charge.Amount, e.Charge.ProviderChargeID, e.Charge.FailureCode}, "the snapshot is its own row's")
	}
	require.Equal(t, want, got)

	var deliveries, jobs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE tenant_id = $1`, tenant).Scan(&deliveries))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'webhook.deliver' AND args->>'tenant_id' = $1`, tenant).Scan(&jobs))
	require.Equal(t, []int{2, 2}, []int{deliveries, jobs}, "the two charge.succeeded events, to the one subscribed endpoint")
}

// mustList is the tenant's events, newest first.
func mustList(ctx context.Context, t *testing.T, pool intent.DB, tenant string) []event.Event {
	t.Helper()
	events, _, err := event.List(ctx, pool, event.ListParams{TenantID: tenant, Limit: 100})
	require.NoError(t, err)
	return events
}

// A charge captured later has its own events — authorized, captured,
// canceled — whose snapshots say it was captured later and what its
// capture took, and its capture's or cancel's failure is an event of the
// operation, rendered as the operation's resource.
func TestEventsOfACaptureLater(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenant := dbtest.Tenant(t, pool, "capture events")
	settle := func(op intent.Charge, to intent.State) {
		t.Helper()
		dbtest.Walk(t, pool, op, "py_op", intent.StateSubmitting, to)
	}

	held := dbtest.Walk(t, pool, dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenant, Amount: 1000, CaptureLater: true}),
		"py_held", intent.StateSubmitting, intent.StateRequiresCapture)
	refused, err := dbtest.PendingOperation(pool, held, intent.KindCapture, 1000)
	require.NoError(t, err)
	settle(refused, intent.StateFailed)
	captured, err := dbtest.PendingOperation(pool, held, intent.KindCapture, 600)
	require.NoError(t, err)
	settle(captured, intent.StateSucceeded)

	released := dbtest.Walk(t, pool, dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenant, Amount: 500, CaptureLater: true}),
		"py_released", intent.StateSubmitting, intent.StateRequiresCapture)
	cancel, err := dbtest.PendingOperation(pool, released, intent.KindCancel, 500)
	require.NoError(t, err)
	settle(cancel, intent.StateSucceeded)

	events := mustList(ctx, t, pool, tenant)
	slices.Reverse(events) // oldest first
	var types []string
	for _, e := range events {
		types = append(types, e.Type+" "+e.Charge.ID)
	}
	require.Equal(t, []string{
		"charge.authorized " + held.ID, "capture.failed " + refused.ID, "charge.captured " + held.ID,
		"charge.authorized " + released.ID, "charge.canceled " + released.ID,
	}, types)
	for _, typ := range types {
		require.True(t, event.ValidType(typ[:strings.IndexByte(typ, ' ')]), typ)
	}

	failed := events[1].Resource().Data.(resource.Operation)
	require.Equal(t, resource.Operation{ID: refused.ID, Object: intent.KindCapture, Charge: held.ID, Amount: 1000, Currency: "USD",
		Status: intent.StateFailed, FailureCode: failed.FailureCode, Attempts: 1, CreatedAt: failed.CreatedAt, UpdatedAt: failed.UpdatedAt}, failed)
	require.Equal(t, "walked", *failed.FailureCode)

	authorized := events[0].Resource().Data.(resource.Charge)
	require.Equal(t, []any{intent.StateRequiresCapture, false, int64(0)}, []any{authorized.Status, authorized.Capture, authorized.AmountCaptured})
	capturedCharge := events[2].Resource().Data.(resource.Charge)
	require.Equal(t, []any{intent.StateSucceeded, false, int64(600)}, []any{capturedCharge.Status, capturedCharge.Capture, capturedCharge.AmountCaptured},
		"the snapshot holds what the capture took")
	current, err := intent.Get(ctx, pool, tenant, held.ID)
	require.NoError(t, err)
	require.Equal(t, resource.ChargeOf(current), capturedCharge, "the event's charge is the charge as the API shows it")
	canceled := events[4].Resource().Data.(resource.Charge)
	require.Equal(t, []any{intent.StateCanceled, false, int64(0)}, []any{canceled.Status, canceled.Capture, canceled.AmountCaptured})
}
