package migrations_test

import (
	"context"
	"embed"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/event"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/migrations"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/submit"
	"github.com/chargeflow/chargeflow/tenant"
	"github.com/chargeflow/chargeflow/webhook"
)

// v0015 is the migration history before the baseline, frozen as it was
// when databases were migrated with it.
//
//go:embed testdata/v0015/*.sql
var v0015 embed.FS

// migrateV0015 migrates db as chargeflow did before the baseline: River's
// migrations, then each file of testdata/v0015 in its own transaction,
// recorded in chargeflow_migrations; through the file named last.
func migrateV0015(t *testing.T, pool *pgxpool.Pool, last string) {
	t.Helper()
	ctx := context.Background()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	require.NoError(t, err)
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS chargeflow_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`)
	require.NoError(t, err)
	entries, err := fs.ReadDir(v0015, "testdata/v0015")
	require.NoError(t, err)
	for _, entry := range entries {
		name := strings.TrimSuffix(entry.Name(), ".sql")
		version, err := strconv.Atoi(name[:4])
		require.NoError(t, err)
		body, err := fs.ReadFile(v0015, path.Join("testdata/v0015", entry.Name()))
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO chargeflow_migrations (version, name) VALUES ($1, $2)`, version, name)
			return err
		}), name)
		if name == last {
			return
		}
	}
	require.Equal(t, "0015_endpoint_idempotency", last, "no file %s", last)
}

// apply runs today's migrator on pool.
func apply(t *testing.T, pool *pgxpool.Pool) error {
	t.Helper()
	return migrations.Apply(context.Background(), pool, slog.New(slog.DiscardHandler))
}

// recorded is what the migrator's own tables say, but for the times.
func recorded(t *testing.T, db *pgxpool.Pool) []string {
	t.Helper()
	ctx := context.Background()
	q := `SELECT format('%s %s', version, name) FROM chargeflow_migrations`
	var functions bool
	require.NoError(t, db.QueryRow(ctx, `SELECT to_regclass('chargeflow_functions') IS NOT NULL`).Scan(&functions))
	if functions {
		q += ` UNION ALL SELECT format('%s %s', name, encode(sha256, 'hex')) FROM chargeflow_functions`
	}
	r, err := db.Query(ctx, q+` ORDER BY 1`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	return got
}

// The history the migrator recognises is the one kept as test data, and
// none of today's migrations reuses one of its names.
func TestBeforeBaselineIsTheFrozenHistory(t *testing.T) {
	t.Parallel()
	entries, err := fs.ReadDir(v0015, "testdata/v0015")
	require.NoError(t, err)
	var names []string
	for _, entry := range entries {
		names = append(names, strings.TrimSuffix(entry.Name(), ".sql"))
	}
	require.Equal(t, names, migrations.BeforeBaseline)
	all, err := migrations.All()
	require.NoError(t, err)
	for _, m := range all {
		require.NotContains(t, migrations.BeforeBaseline, m.Name)
	}
}

// TestUpgradeFromV0015 takes a database migrated with the fifteen
// migrations before the baseline and holding rows of every table, migrates
// it with today's migrator, and finds the schema of a database migrated
// afresh and every row it held.
func TestUpgradeFromV0015(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old := dbtest.NewPool(t, dbtest.Empty(t), 4)
	migrateV0015(t, old, "0015_endpoint_idempotency")
	// Today's code writes the audit trail into charge_audit, the name
	// 0002_charge_audit gives charge_events; while it seeds, a view of that
	// name stands for the table an older build wrote into.
	// So do the columns 0005_capture adds to charges, at the values that
	// migration gives a charge accepted before it.
	_, err := old.Exec(ctx, `CREATE VIEW charge_audit AS SELECT * FROM charge_events;
		ALTER TABLE charges ADD COLUMN capture_later boolean NOT NULL DEFAULT false,
			ADD COLUMN amount_captured bigint, ADD COLUMN op_in_flight text`)
	require.NoError(t, err)
	seed(t, old)
	_, err = old.Exec(ctx, `DROP VIEW charge_audit;
		ALTER TABLE charges DROP COLUMN capture_later, DROP COLUMN amount_captured, DROP COLUMN op_in_flight`)
	require.NoError(t, err)
	before := rows(t, old)
	before["charge_audit"] = before["charge_events"]
	delete(before, "charge_events")
	for i, seq := range before["sequences"] {
		before["sequences"][i] = strings.Replace(seq, "charge_events_id_seq", "charge_audit_id_seq", 1)
	}
	for table, got := range before {
		if !strings.HasPrefix(table, "river_") || table == "river_job" {
			require.NotEmpty(t, got, "the seed wrote nothing into %s", table)
		}
	}
	require.ErrorIs(t, migrations.Check(ctx, old), migrations.ErrNotCurrent, "before the upgrade")
	// Tables a migration after the baseline adds start empty.
	before["admin_audit"] = []string{}
	before["sequences"] = append(before["sequences"], "admin_audit_id_seq ")
	slices.Sort(before["sequences"])
	before["provider_accounts"], before["tenant_routes"] = []string{}, []string{}
	// And a charge gains its route number, 0: it is at the account it was
	// accepted for; and it was captured at once, with no operation on it.
	for i, row := range before["charges"] {
		before["charges"][i] = strings.TrimSuffix(row, ")") + ",0,f,,)"
	}
	// The state machine gains the moves of a charge captured later.
	for _, move := range []string{"needs_review,canceled", "needs_review,requires_capture", "requires_capture,canceled",
		"requires_capture,succeeded", "submitting,canceled", "submitting,requires_capture", "unknown,canceled",
		"unknown,requires_capture"} {
		before["charge_transitions"] = append(before["charge_transitions"], "("+move+")")
	}
	slices.Sort(before["charge_transitions"])

	require.NoError(t, apply(t, old))
	require.NoError(t, migrations.Check(ctx, old))
	fresh := dbtest.Pool(t)
	requireSameCatalog(t, catalog(t, fresh), catalog(t, old), "the upgraded schema (+) against a fresh one (-)")
	require.Equal(t, recorded(t, fresh), recorded(t, old))
	require.Equal(t, before, rows(t, old), "a row changed or went in the upgrade")

	// And the upgraded database works: a move writes its event.
	c := dbtest.PendingCharge(t, old, dbtest.Charge{TenantID: dbtest.Tenant(t, old, "after the upgrade")})
	_, err = intent.MoveCharge(ctx, old, intent.Move{TenantID: c.TenantID, ChargeID: c.ID, From: intent.StatePending,
		To: intent.StateFailed, Actor: "test", Reason: "test", FailureCode: "card_declined"})
	require.NoError(t, err)
	events, _, err := event.List(ctx, old, event.ListParams{TenantID: c.TenantID, Limit: 10})
	require.NoError(t, err)
	require.Len(t, events, 1)
}

// A database that stopped part-way through the history before the
// baseline is refused, says what to do, and is left as it was.
func TestUpgradeRefusesPartOfTheHistory(t *testing.T) {
	t.Parallel()
	old := dbtest.NewPool(t, dbtest.Empty(t), 4)
	migrateV0015(t, old, "0009_endpoint_events")
	want := catalog(t, old)
	history := recorded(t, old)

	err := apply(t, old)
	require.ErrorIs(t, err, migrations.ErrHistoryTooOld)
	require.ErrorContains(t, err, "0009_endpoint_events")
	require.ErrorContains(t, err, "migrate it first with a build of commit 7a21fa4")
	requireSameCatalog(t, want, catalog(t, old), "the refused database changed")
	require.Equal(t, history, recorded(t, old))
	require.Len(t, history, 9)
}

// Migrating a migrated database changes nothing: no migration and no
// function file is applied again.
func TestApplyTwiceChangesNothing(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t, dbtest.Empty(t), 4)
	require.NoError(t, apply(t, pool))
	schema, history := catalog(t, pool), appliedAt(t, pool)

	require.NoError(t, apply(t, pool))
	requireSameCatalog(t, schema, catalog(t, pool), "the second migrate changed the schema")
	require.Equal(t, history, appliedAt(t, pool), "a file was applied again")
	requireSameCatalog(t, catalog(t, dbtest.Pool(t)), schema, "the schema migrated here (+) against the template's (-)")
}

// appliedAt is when each migration and function file was applied.
func appliedAt(t *testing.T, db *pgxpool.Pool) map[string]time.Time {
	t.Helper()
	r, err := db.Query(context.Background(), `SELECT name, applied_at FROM chargeflow_migrations
		UNION ALL SELECT name, applied_at FROM chargeflow_functions`)
	require.NoError(t, err)
	at := map[string]time.Time{}
	var name string
	var when time.Time
	_, err = pgx.ForEachRow(r, []any{&name, &when}, func() error { at[name] = when; return nil })
	require.NoError(t, err)
	require.NotEmpty(t, at)
	return at
}

// A function file whose text differs from the one the database recorded is
// applied again, triggers included, and until it is the database is not
// current: here a function altered and its trigger dropped by hand, with
// the record made stale as an edit of the file would.
func TestChangedFunctionIsAppliedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	want := catalog(t, pool)
	_, err := pool.Exec(ctx, `
CREATE OR REPLACE FUNCTION tenants_kept() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN OLD; END $$;
DROP TRIGGER tenants_kept ON tenants;
UPDATE chargeflow_functions SET sha256 = '\x00' WHERE name = 'tenants_kept'`)
	require.NoError(t, err)
	require.NotEqual(t, want, catalog(t, pool))
	err = migrations.Check(ctx, pool)
	require.ErrorIs(t, err, migrations.ErrNotCurrent)
	require.ErrorContains(t, err, "function tenants_kept")

	require.NoError(t, apply(t, pool))
	require.NoError(t, migrations.Check(ctx, pool))
	requireSameCatalog(t, want, catalog(t, pool), "the function and its trigger applied again")
	_, err = pool.Exec(ctx, `DELETE FROM tenants WHERE id = $1`, dbtest.Tenant(t, pool, "kept"))
	require.ErrorContains(t, err, "cannot be deleted", "the trigger is back")
}

// seed fills a database with rows of every table of ours, written as the
// product writes them: tenants and keys, an operator and a session,
// charges in every state with their audit entries and submit jobs, refunds,
// endpoints, events with their deliveries, attempts and webhook.deliver
// jobs, and an endpoint disabled with its event.
func seed(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	tn, _, err := tenant.Create(ctx, pool, "before the baseline")
	require.NoError(t, err)
	_, _, err = tenant.Create(ctx, pool, "a second tenant")
	require.NoError(t, err)
	op, _, err := operator.Create(ctx, pool, "ada", operator.RoleAdmin)
	require.NoError(t, err)
	_, err = operator.StartSession(ctx, pool, op, time.Hour)
	require.NoError(t, err)

	everything := dbtest.WebhookEndpoint(t, pool, tn.ID, "https://merchant.example/all", []string{"*"})
	failing := dbtest.WebhookEndpoint(t, pool, tn.ID, "https://merchant.example/failing", []string{"charge.succeeded"})

	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: submit.Middleware()})
	require.NoError(t, err)
	queue, err := submit.NewQueue(submit.Config{River: client})
	require.NoError(t, err)
	accept := func() intent.Charge {
		return dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tn.ID, Metadata: map[string]string{"order": "1"},
			Job: func(id string) *intent.JobRow {
				row, err := queue.Row(ctx, submit.ChargeArgs{TenantID: tn.ID, ChargeID: id}, time.Now())
				require.NoError(t, err)
				return row
			}})
	}
	move := func(c intent.Charge, states ...intent.State) {
		from := c.State
		for _, to := range states {
			_, err := intent.MoveCharge(ctx, pool, intent.Move{TenantID: c.TenantID, ChargeID: c.ID, From: from, To: to,
				Actor: "test", Reason: "test", CountAttempt: to == intent.StateSubmitting, ProviderChargeID: "py_" + c.ID,
				FailureCode: "card_declined", ReviewReason: "lookup_unavailable", CheckAfter: time.Minute})
			require.NoError(t, err)
			from = to
		}
	}

	accept() // pending
	move(accept(), intent.StateSubmitting)
	move(accept(), intent.StateFailed)
	move(accept(), intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)
	unknown := accept()
	move(unknown, intent.StateSubmitting, intent.StateUnknown)
	_, err = intent.ForceCheck(ctx, pool, intent.ForcedCheck{ChargeID: unknown.ID, Actor: "operator:ada"})
	require.NoError(t, err)
	paid := accept()
	move(paid, intent.StateSubmitting, intent.StateSucceeded)
	paid.State = intent.StateSucceeded
	move(dbtest.PendingRefund(t, pool, paid, 300), intent.StateSubmitting, intent.StateSucceeded)
	dbtest.PendingRefund(t, pool, paid, 200)

	// The paid charge's event went to both endpoints: one delivered, the
	// other failed for good, which disables it and writes its own event.
	var eventID string
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM events WHERE object_id = $1`, paid.ID).Scan(&eventID))
	require.NoError(t, webhook.Record(ctx, pool, webhook.DeliverArgs{TenantID: tn.ID, EventID: eventID, EndpointID: everything.ID},
		webhook.Outcome{Attempt: 1, Delivered: true, Status: 200, Duration: time.Millisecond}))
	require.NoError(t, webhook.Record(ctx, pool, webhook.DeliverArgs{TenantID: tn.ID, EventID: eventID, EndpointID: failing.ID},
		webhook.Outcome{Attempt: 1, Final: true, Error: webhook.AttemptConnectionFailed}))
	var disabled int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE type = 'webhook_endpoint.disabled'`).Scan(&disabled))
	require.Equal(t, 1, disabled)
}
