package webhook_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/event"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/submit"
	"github.com/chargeflow/chargeflow/webhook"
)

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
	events, _, err := event.List(ctx, pool, event.ListParams{TenantID: tenant, Limit: 100})
	require.NoError(t, err)
	first := events[0]
	require.NoError(t, webhook.Record(ctx, pool, webhook.DeliverArgs{TenantID: tenant, EventID: first.ID, EndpointID: failing.ID},
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
