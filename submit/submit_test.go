package submit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/submit"
)

type testBundle struct {
	pool     *pgxpool.Pool
	tenantID string
}

func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	return ctx, &testBundle{pool: pool, tenantID: dbtest.Tenant(t, pool, "submit test")}
}

// queue makes a Queue on an insert-only River client with our middleware.
func (b *testBundle) queue(t *testing.T, cfg submit.Config) *submit.Queue {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Middleware: submit.Middleware()})
	require.NoError(t, err)
	cfg.River = client
	q, err := submit.NewQueue(cfg)
	require.NoError(t, err)
	return q
}

// accept accepts a pending charge the way the API does, its job row (if
// any) written by the same statement.
func (b *testBundle) accept(_ context.Context, t *testing.T, key string, job func(chargeID string) *intent.JobRow) intent.Charge {
	t.Helper()
	return dbtest.PendingCharge(t, b.pool, dbtest.Charge{TenantID: b.tenantID, Key: key, Job: job})
}

// TestRowMatchesRiverInsert holds the charge.submit row that the accept
// statement writes itself (Queue.Row) to the row River's client writes for
// the same job (Queue.Enqueue, River's InsertTx with the same middleware),
// under the same span: if a River upgrade changes what its insert writes,
// this fails before a worker misreads a job.
func TestRowMatchesRiverInsert(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	ctx, span := sdktrace.NewTracerProvider().Tracer("test").Start(ctx, "accept")
	defer span.End()
	q := b.queue(t, submit.Config{MaxAttempts: 7})

	c := b.accept(ctx, t, "key-0000000000000001", func(id string) *intent.JobRow {
		row, err := q.Row(ctx, submit.ChargeArgs{TenantID: b.tenantID, ChargeID: id}, time.Now())
		require.NoError(t, err)
		return row
	})
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return q.Enqueue(ctx, tx, submit.ChargeArgs{TenantID: b.tenantID, ChargeID: c.ID})
	}))

	jobs := dbtest.RiverJobs(t, b.pool)
	require.Len(t, jobs, 2)
	require.Equal(t, jobs[1], jobs[0], "Accept's job (first) differs from River's (second)")
	require.Contains(t, jobs[0].Metadata, span.SpanContext().TraceID().String())
	require.Equal(t, "charge.submit", jobs[0].Kind)
	require.Equal(t, "available", jobs[0].State)
	require.Equal(t, 7, jobs[0].MaxAttempts)
}

// TestRowNotifies proves that a row asked to notify sends River's insert
// notification, on River's channel with River's payload, and that the
// queue asks for it at most once per cooldown. A sentinel notification
// sent between two charges tells them apart: notifications arrive in
// commit order.
func TestRowNotifies(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	channel, next := dbtest.ListenRiverInserts(t, b.pool)
	q := b.queue(t, submit.Config{WakeCooldown: time.Hour})
	row := func(id string) *intent.JobRow {
		row, err := q.Row(ctx, submit.ChargeArgs{TenantID: b.tenantID, ChargeID: id}, time.Now())
		require.NoError(t, err)
		return row
	}

	b.accept(ctx, t, "key-0000000000000001", row)
	n := next()
	require.Equal(t, channel, n.Channel)
	require.True(t, strings.HasSuffix(channel, ".river_insert"), channel)
	require.JSONEq(t, `{"queue": "default"}`, n.Payload)

	b.accept(ctx, t, "key-0000000000000002", row)
	_, err := b.pool.Exec(ctx, `SELECT pg_notify($1, 'sentinel')`, channel)
	require.NoError(t, err)
	require.Equal(t, "sentinel", next().Payload, "the second charge notified within the cooldown")
	require.Equal(t, submit.DefaultMaxAttempts, q.MaxAttempts())
}

// A queue refuses a max attempts that would make River discard a job
// before its first run.
func TestNewQueueRefusesBadConfig(t *testing.T) {
	t.Parallel()
	_, err := submit.NewQueue(submit.Config{})
	require.Error(t, err)
	_, b := setup(t)
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{})
	require.NoError(t, err)
	_, err = submit.NewQueue(submit.Config{River: client, MaxAttempts: -1})
	require.ErrorContains(t, err, "max attempts")
}
