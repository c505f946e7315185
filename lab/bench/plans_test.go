package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/event"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/submit"
	"github.com/chargeflow/chargeflow/webhook"
)

// planSeed is the size of the seeded table the plans are checked on:
// beyond intent.ExactCountLimit, so the census takes its large-table path.
const planSeed = 120_000

// recorder keeps every statement run through its pool, with its arguments.
type recorder struct {
	mu    sync.Mutex
	calls []recorded
}

type recorded struct {
	sql  string
	args []any
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, recorded{data.SQL, data.Args})
	return ctx
}

func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns the statements recorded since the last call.
func (r *recorder) take() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls := r.calls
	r.calls = nil
	return calls
}

// bigTables are the tables that grow with the charges.
var bigTables = map[string]bool{"charges": true, "charge_audit": true, "idempotency_keys": true, "events": true,
	"river_job": true, "webhook_deliveries": true, "webhook_attempts": true}

// TestQueryPlansStayFlat runs every listing and sweep query, as the code
// sends it, on a seeded database under plan_cache_mode =
// force_generic_plan — the plan Postgres settles on for a prepared
// statement after a few executions, and the only one behind a pooler — with
// EXPLAIN ANALYZE, and fails on a sequential scan of a table that grows
// with the charges or on a filter that throws away most of the rows it
// reads. Either makes the query's cost grow with the table.
func TestQueryPlansStayFlat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := dbtest.URL(t)
	seedPool := dbtest.NewPool(t, url, 2)
	tenants, err := Seed(ctx, seedPool, planSeed, DefaultSeedShape, nil)
	require.NoError(t, err)

	rec := &recorder{}
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 2
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// Real values to run each statement with: a tenant's newest charge and
	// one with refunds, an event, a cursor half way down a tenant's list.
	tenant := tenants[0]
	var newest, mid, withRefunds, midEvent, eventID string
	require.NoError(t, seedPool.QueryRow(ctx, `SELECT
		(SELECT id FROM charges WHERE tenant_id = $1 ORDER BY id DESC LIMIT 1),
		(SELECT id FROM charges WHERE tenant_id = $1 ORDER BY id DESC OFFSET 500 LIMIT 1),
		(SELECT parent_id FROM charges WHERE tenant_id = $1 AND parent_id IS NOT NULL LIMIT 1),
		(SELECT id FROM events WHERE tenant_id = $1 ORDER BY id DESC OFFSET 50 LIMIT 1),
		(SELECT id FROM events WHERE tenant_id = $1 LIMIT 1)`, tenant).Scan(&newest, &mid, &withRefunds, &midEvent, &eventID))

	type check struct {
		name string
		run  func(db intent.DB) error
	}
	var checks []check
	list := func(name string, p intent.ListParams) {
		checks = append(checks, check{name, func(db intent.DB) error { _, _, err := intent.List(ctx, db, p); return err }})
	}
	for _, cursor := range []string{"", mid} {
		page := map[string]string{"": "first page", mid: "deep page"}[cursor]
		list("charges, "+page, intent.ListParams{TenantID: tenant, Kind: intent.KindCharge, Limit: 10, StartingAfter: cursor})
		for _, state := range intent.States() {
			list(fmt.Sprintf("charges ?status=%s, %s", state, page),
				intent.ListParams{TenantID: tenant, Kind: intent.KindCharge, State: state, Limit: 10, StartingAfter: cursor})
			list(fmt.Sprintf("operators ?status=%s, %s", state, page),
				intent.ListParams{AllTenants: true, State: state, Limit: 20, StartingAfter: cursor})
			list(fmt.Sprintf("operators ?tenant&status=%s, %s", state, page),
				intent.ListParams{AllTenants: true, TenantID: tenant, State: state, Limit: 20, StartingAfter: cursor})
		}
		list("operators, "+page, intent.ListParams{AllTenants: true, Limit: 20, StartingAfter: cursor})
		list("operators ?tenant, "+page, intent.ListParams{AllTenants: true, TenantID: tenant, Limit: 20, StartingAfter: cursor})
		list("refunds of a charge, "+page, intent.ListParams{TenantID: tenant, Kind: intent.KindRefund, ParentID: withRefunds, Limit: 10,
			StartingAfter: map[string]string{"": "", mid: "re_7zzzzzzzzzzzzzzzzzzzzzzzzz"}[cursor]})
		eventCursor := map[string]string{"": "", mid: midEvent}[cursor]
		checks = append(checks, check{"events, " + page, func(db intent.DB) error {
			_, _, err := event.List(ctx, db, event.ListParams{TenantID: tenant, Limit: 10, StartingAfter: eventCursor})
			return err
		}})
		for _, typ := range event.Types {
			checks = append(checks, check{"events ?type=" + typ + ", " + page, func(db intent.DB) error {
				_, _, err := event.List(ctx, db, event.ListParams{TenantID: tenant, Type: typ, Limit: 10, StartingAfter: eventCursor})
				return err
			}})
		}
	}
	checks = append(checks,
		check{"get", func(db intent.DB) error { _, err := intent.Get(ctx, db, tenant, newest); return err }},
		check{"find (operators)", func(db intent.DB) error { _, err := intent.Find(ctx, db, newest); return err }},
		check{"audit trail", func(db intent.DB) error { _, err := intent.AuditTrail(ctx, db, tenant, newest); return err }},
		check{"event", func(db intent.DB) error { _, err := event.Get(ctx, db, tenant, eventID); return err }},
		check{"delivery log", func(db intent.DB) error { _, err := webhook.Log(ctx, db, tenant, eventID); return err }},
		check{"reconciler lease", func(db intent.DB) error {
			_, err := intent.Lease(ctx, db, intent.LeaseParams{Owner: "plans", Providers: []string{"fakepsp"}, TTL: time.Minute, Limit: 10,
				StaleSubmitting: time.Second})
			return err
		}},
		check{"reconciler lag", func(db intent.DB) error {
			_, err := intent.ReconcileLag(ctx, db, []string{"fakepsp"}, time.Second)
			return err
		}},
		check{"stranded-pending sweep", func(db intent.DB) error {
			_, err := submit.LockStranded(ctx, db.(pgx.Tx), submit.StrandedParams{Providers: []string{"fakepsp"}, OlderThan: time.Second, Limit: 10})
			return err
		}},
		check{"census (metrics, operator page)", func(db intent.DB) error { _, err := intent.TakeCensus(ctx, db); return err }},
		check{"retention batch", func(db intent.DB) error {
			_, _, err := intent.DeleteExpiredIdempotency(ctx, db, time.Time{}, time.Now(), 1000)
			return err
		}},
		check{"retention batch, resumed", func(db intent.DB) error {
			_, _, err := intent.DeleteExpiredIdempotency(ctx, db, time.Now().Add(-30*24*time.Hour), time.Now(), 1000)
			return err
		}},
		// The seeded events are all made at seeding, so a cutoff of now
		// makes every one of them past it: the batch walks and deletes a
		// full thousand, as on a backlog.
		check{"event retention batch", func(db intent.DB) error {
			b, err := event.DeleteExpiredEvents(ctx, db, tenant, "", time.Now(), 1000)
			if err == nil && b.Events != 1000 {
				err = fmt.Errorf("deleted %d events, not a full batch", b.Events)
			}
			return err
		}},
		check{"event retention batch, resumed", func(db intent.DB) error {
			_, err := event.DeleteExpiredEvents(ctx, db, tenant, midEvent, time.Now(), 1000)
			return err
		}},
	)

	explain, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer explain.Release()
	_, err = explain.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	for _, c := range checks {
		// Run it for real (in a transaction rolled back), to record the
		// statements it sends, then explain each.
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		rec.take()
		err = c.run(tx)
		calls := rec.take()
		require.NoError(t, tx.Rollback(ctx))
		require.NoError(t, err, c.name)
		require.NotEmpty(t, calls, c.name)
		for _, call := range calls {
			for _, problem := range generic(t, explain.Conn(), call) {
				t.Errorf("%s: %s\n%s", c.name, problem, call.sql)
			}
		}
	}
}

// generic explains call's statement with its generic plan, executed with
// call's arguments in a transaction rolled back, and returns what is wrong
// with the plan.
func generic(t *testing.T, conn *pgx.Conn, call recorded) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, tx.Rollback(ctx)) }()
	stmt, err := tx.Prepare(ctx, "plan_under_test", call.sql)
	require.NoError(t, err)
	defer func() { _ = conn.Deallocate(ctx, "plan_under_test") }()
	// EXECUTE's arguments are a utility statement's, so they go as
	// literals; the generic plan does not depend on them anyway.
	require.Len(t, call.args, len(stmt.ParamOIDs), call.sql)
	literals := make([]string, len(call.args))
	for i, arg := range call.args {
		literals[i] = literal(t, arg)
	}
	query := `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE plan_under_test`
	if len(literals) > 0 {
		query += "(" + strings.Join(literals, ", ") + ")"
	}
	var out []byte
	require.NoError(t, tx.QueryRow(ctx, query).Scan(&out), call.sql)
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(out, &plans))
	require.Len(t, plans, 1)
	return plans[0].Plan.problems()
}

// planNode is a node of EXPLAIN's JSON output, the fields the check reads.
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Rows     float64    `json:"Actual Rows"`
	Loops    float64    `json:"Actual Loops"`
	Removed  float64    `json:"Rows Removed by Filter"`
	Recheck  float64    `json:"Rows Removed by Index Recheck"`
	Plans    []planNode `json:"Plans"`
}

// problems lists the nodes, run at least once, that scan a big table
// sequentially or keep fewer rows than they throw away, beyond the few
// hundred of a state on the way (the stranded-pending sweep reads every
// pending charge to find the rare one without a job).
func (n planNode) problems() []string {
	var out []string
	if n.Loops > 0 {
		if n.Type == "Seq Scan" && bigTables[n.Relation] {
			out = append(out, fmt.Sprintf("sequential scan of %s", n.Relation))
		}
		removed, kept := (n.Removed+n.Recheck)*n.Loops, n.Rows*n.Loops
		if removed > 500 && removed > kept {
			out = append(out, fmt.Sprintf("%s of %s%s keeps %.0f rows and throws %.0f away", n.Type, n.Relation,
				map[bool]string{true: " (" + n.Index + ")"}[n.Index != ""], kept, removed))
		}
	}
	for _, child := range n.Plans {
		out = append(out, child.problems()...)
	}
	return out
}

// literal writes a statement argument as SQL.
func literal(t *testing.T, arg any) string {
	t.Helper()
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	switch v := arg.(type) {
	case nil:
		return "NULL"
	case string:
		return quote(v)
	case int, int32, int64:
		return fmt.Sprint(v)
	case bool:
		return fmt.Sprint(v)
	case time.Time:
		return quote(v.UTC().Format(time.RFC3339Nano))
	case time.Duration:
		return quote(fmt.Sprintf("%d microseconds", v.Microseconds()))
	case []byte:
		return quote(fmt.Sprintf("\\x%x", v))
	case []string:
		items := make([]string, len(v))
		for i, item := range v {
			items[i] = `"` + item + `"`
		}
		return quote("{" + strings.Join(items, ",") + "}")
	}
	t.Fatalf("no literal for %T", arg)
	return ""
}
