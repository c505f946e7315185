package bench

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chargeflow/chargeflow/event"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/lab/internal/childproc"
	"github.com/chargeflow/chargeflow/retention"
	"github.com/chargeflow/chargeflow/submit"
)

// ScaleOptions configure a scale run (docs/benchmarks.md, "At scale").
type ScaleOptions struct {
	// ServerURL names the Postgres server; each size gets a fresh
	// database on it, dropped at the end unless Keep.
	ServerURL string
	// Empty and Size are the two sizes compared, in charges.
	Empty, Size int
	// Samples is how many times each operation runs at each size.
	Samples int
	// Concurrency and Window shape the accept throughput measured with and
	// without retention running.
	Concurrency int
	Window      time.Duration
	// RetentionDuty is the retention run's duty (retention.DefaultDuty
	// when 0).
	RetentionDuty float64
	Keep          bool
	Progress      io.Writer
}

// ScaleReport is an operation's cost at both sizes, and the disk.
type ScaleReport struct {
	Empty, Size int
	Ops         []ScaleOp
	Retention   [2]RetentionRun
	Bytes       [2]DiskUse
}

// ScaleOp is one operation's latency at the two sizes.
type ScaleOp struct {
	Name string
	// P50 and P99 at Empty and at Size.
	P50, P99 [2]time.Duration
}

// RetentionRun is one run of the retention job over a seeded backlog,
// with accepts running beside it.
type RetentionRun struct {
	Deleted int
	Batches int
	// Busy is the time spent in delete statements; Wall includes the
	// rests between batches.
	Busy, Wall time.Duration
	// OneAttempt says the run finished inside its timeout.
	OneAttempt bool
	// PerRecord is Busy / Deleted.
	PerRecord time.Duration
	// AcceptsAlone and AcceptsDuring are accept throughputs (per second)
	// without retention and while it ran; Ratio is During / Alone, 0 when
	// the run took less than a second.
	AcceptsAlone, AcceptsDuring, Ratio float64
}

// DiskUse is the size of each table that grows with the charges, with its
// indexes and TOAST, as seeded (every idempotency record kept) and after
// retention.
type DiskUse struct {
	// Charges is the number of charges (not refunds) measured.
	Charges   int64
	Tables    map[string]int64
	PerCharge float64
	// PerChargeAfterRetention counts idempotency records only as long as
	// they live.
	PerChargeAfterRetention float64
}

// scaleTables are the tables that grow with the charges.
var scaleTables = []string{"charges", "charge_audit", "idempotency_keys", "events"}

// Scale seeds a database of o.Empty charges and one of o.Size, and runs
// every operation a merchant, an operator or the system triggers on each,
// then retention over each one's expired records while accepts run.
func Scale(ctx context.Context, o ScaleOptions) (ScaleReport, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	o.Samples = max(o.Samples, 20)
	o.Concurrency = max(o.Concurrency, 1)
	if o.Window <= 0 {
		o.Window = 5 * time.Second
	}
	rep := ScaleReport{Empty: o.Empty, Size: o.Size}
	for i, n := range []int{o.Empty, o.Size} {
		ops, run, disk, err := scaleOne(ctx, o, n)
		if err != nil {
			return ScaleReport{}, fmt.Errorf("at %d charges: %w", n, err)
		}
		for j, op := range ops {
			if i == 0 {
				rep.Ops = append(rep.Ops, ScaleOp{Name: op.Name})
			}
			rep.Ops[j].P50[i], rep.Ops[j].P99[i] = op.P50[0], op.P99[0]
		}
		rep.Retention[i], rep.Bytes[i] = run, disk
	}
	return rep, nil
}

// scaleOne measures one size in its own database.
func scaleOne(ctx context.Context, o ScaleOptions, n int) (_ []ScaleOp, _ RetentionRun, _ DiskUse, err error) {
	name := "chargeflow_scale_" + strings.ToLower(ids.New("db", time.Now())[3:])
	url, drop, err := childproc.FreshDatabase(ctx, o.ServerURL, name)
	if err != nil {
		return nil, RetentionRun{}, DiskUse{}, err
	}
	if o.Keep {
		fmt.Fprintf(o.Progress, "database %s kept\n", name)
	} else {
		defer func() { err = errors.Join(err, drop(context.WithoutCancel(ctx))) }()
	}
	if err := migrate(ctx, url); err != nil {
		return nil, RetentionRun{}, DiskUse{}, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, RetentionRun{}, DiskUse{}, err
	}
	cfg.MaxConns = int32(o.Concurrency + 4)
	cfg.MinConns = cfg.MaxConns
	// The operations run as the system's roles run them.
	app.NoJIT(cfg.ConnConfig.RuntimeParams)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, RetentionRun{}, DiskUse{}, err
	}
	defer pool.Close()
	if err := holdConnections(ctx, pool, int(cfg.MaxConns)); err != nil {
		return nil, RetentionRun{}, DiskUse{}, err
	}
	fmt.Fprintf(o.Progress, "seeding %d charges\n", n)
	tenants, err := Seed(ctx, pool, n, DefaultSeedShape, o.Progress)
	if err != nil {
		return nil, RetentionRun{}, DiskUse{}, err
	}
	disk, err := diskUse(ctx, pool)
	if err != nil {
		return nil, RetentionRun{}, DiskUse{}, err
	}
	ops, err := measureOps(ctx, pool, tenants, n, o.Samples)
	if err != nil {
		return nil, RetentionRun{}, DiskUse{}, err
	}
	run, err := measureRetention(ctx, pool, tenants[0], o)
	if err != nil {
		return nil, RetentionRun{}, DiskUse{}, err
	}
	if _, err := pool.Exec(ctx, `VACUUM FULL idempotency_keys`); err != nil {
		return nil, RetentionRun{}, DiskUse{}, err
	}
	after, err := diskUse(ctx, pool)
	if err != nil {
		return nil, RetentionRun{}, DiskUse{}, err
	}
	disk.PerChargeAfterRetention = after.PerCharge
	return ops, run, disk, nil
}

// holdConnections opens n connections before anything is measured, so
// that a server shared with other work (max_connections reached) fails the
// run at its start, after a minute of retries, not half way through.
func holdConnections(ctx context.Context, pool *pgxpool.Pool, n int) error {
	deadline := time.Now().Add(time.Minute)
	var held []*pgxpool.Conn
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	for len(held) < n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("open %d connections: %w", n, err)
			}
			time.Sleep(time.Second)
			continue
		}
		held = append(held, c)
	}
	return nil
}

func diskUse(ctx context.Context, db *pgxpool.Pool) (DiskUse, error) {
	d := DiskUse{Tables: map[string]int64{}}
	var total int64
	for _, table := range scaleTables {
		var size int64
		if err := db.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass)`, table).Scan(&size); err != nil {
			return DiskUse{}, fmt.Errorf("size of %s: %w", table, err)
		}
		d.Tables[table] = size
		total += size
	}
	// The accepts of the measurements add charges to the seeded n.
	var charges int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM charges WHERE kind = 'charge'`).Scan(&charges); err != nil {
		return DiskUse{}, err
	}
	d.Charges = charges
	d.PerCharge = float64(total) / float64(max(charges, 1))
	return d, nil
}

// sample is a charge picked at random, with what its operations need.
type sample struct {
	TenantID, ID string
}

// pick runs query, a TABLESAMPLE of about 20 × samples rows of a table of
// about n, for at most samples rows.
func pick(ctx context.Context, db *pgxpool.Pool, what, query string, n, samples int) ([]sample, error) {
	rows, err := db.Query(ctx, query, min(100, 100*float64(20*samples)/float64(n)), samples)
	if err != nil {
		return nil, fmt.Errorf("pick %s: %w", what, err)
	}
	picked, err := pgx.CollectRows(rows, pgx.RowToStructByPos[sample])
	if err != nil {
		return nil, fmt.Errorf("pick %s: %w", what, err)
	}
	if len(picked) == 0 {
		return nil, fmt.Errorf("pick %s: none", what)
	}
	return picked, nil
}

// measureOps times each operation o.Samples times, one at a time.
func measureOps(ctx context.Context, db *pgxpool.Pool, tenants []string, n, samples int) ([]ScaleOp, error) {
	// Charges spread over the table: TABLESAMPLE reads a share of its pages.
	picked, err := pick(ctx, db, "charges", `SELECT tenant_id, id FROM charges TABLESAMPLE SYSTEM ($1) WHERE kind = 'charge' LIMIT $2`, n, samples)
	if err != nil {
		return nil, err
	}
	// Replays read the records retention has not deleted yet: those of the
	// newest charges (SeedShape.ExpiredKeys).
	keyed, err := pick(ctx, db, "idempotency records", `SELECT tenant_id, charge_id FROM idempotency_keys TABLESAMPLE SYSTEM ($1) LIMIT $2`, n, samples)
	if err != nil {
		return nil, err
	}
	tenant := tenants[0]
	// The cursor of a page half way down the tenant's charges.
	var deep string
	if err := db.QueryRow(ctx, `SELECT id FROM charges WHERE tenant_id = $1 AND kind = 'charge' AND id > 'ch' AND id < 'ci'
		ORDER BY id DESC OFFSET (SELECT count(*) / 2 FROM charges WHERE tenant_id = $1) LIMIT 1`, tenant).Scan(&deep); err != nil {
		return nil, fmt.Errorf("deep cursor: %w", err)
	}
	acceptor := &rawAcceptor{pool: db, tenantID: tenant, keyPrefix: "scale-" + ids.New("k", time.Now()) + "-"}
	var seq int64
	inTx := func(fn func(tx pgx.Tx) error) error {
		tx, err := db.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		return fn(tx)
	}
	type operation struct {
		name string
		run  func(s sample) error
	}
	replays := 0
	operations := []operation{
		{"accept (one statement, with its job)", func(sample) error { seq++; return acceptor.accept(ctx, seq) }},
		{"replay (read the idempotency record)", func(sample) error {
			s := keyed[replays%len(keyed)]
			replays++
			key := sha256.Sum256([]byte("key-" + s.ID))
			_, err := intent.Idempotency(ctx, db, s.TenantID, key[:])
			return err
		}},
		{"get a charge", func(s sample) error { _, err := intent.Get(ctx, db, s.TenantID, s.ID); return err }},
		{"list charges, first page", func(s sample) error {
			_, _, err := intent.List(ctx, db, intent.ListParams{TenantID: s.TenantID, Kind: intent.KindCharge, Limit: 10})
			return err
		}},
		{"list charges, deep page", func(sample) error {
			_, _, err := intent.List(ctx, db, intent.ListParams{TenantID: tenant, Kind: intent.KindCharge, Limit: 10, StartingAfter: deep})
			return err
		}},
		{"list charges ?status=failed", func(s sample) error {
			_, _, err := intent.List(ctx, db, intent.ListParams{TenantID: s.TenantID, Kind: intent.KindCharge, State: intent.StateFailed, Limit: 10})
			return err
		}},
		{"operators: needs_review queue", func(sample) error {
			_, _, err := intent.List(ctx, db, intent.ListParams{AllTenants: true, State: intent.StateNeedsReview, Limit: 50})
			return err
		}},
		{"operators: pending, every tenant", func(sample) error {
			_, _, err := intent.List(ctx, db, intent.ListParams{AllTenants: true, State: intent.StatePending, Limit: 20})
			return err
		}},
		{"list events, first page", func(s sample) error {
			_, _, err := event.List(ctx, db, event.ListParams{TenantID: s.TenantID, Limit: 10})
			return err
		}},
		{"reconciler lease (rolled back)", func(sample) error {
			return inTx(func(tx pgx.Tx) error {
				_, err := intent.Lease(ctx, tx, intent.LeaseParams{Owner: "scale", Providers: []string{"fakepsp"}, TTL: time.Minute, Limit: 10,
					StaleSubmitting: 15 * time.Second})
				return err
			})
		}},
		{"reconciler lag", func(sample) error {
			_, err := intent.ReconcileLag(ctx, db, []string{"fakepsp"}, 15*time.Second)
			return err
		}},
		{"stranded-pending sweep (rolled back)", func(sample) error {
			return inTx(func(tx pgx.Tx) error {
				_, err := submit.LockStranded(ctx, tx, submit.StrandedParams{Providers: []string{"fakepsp"}, OlderThan: time.Minute, Limit: 100})
				return err
			})
		}},
		{"metrics: charges by state", func(sample) error { _, err := intent.TakeCensus(ctx, db); return err }},
	}
	var out []ScaleOp
	for _, op := range operations {
		latencies := make([]time.Duration, 0, samples)
		for i := range samples {
			began := time.Now()
			if err := op.run(picked[i%len(picked)]); err != nil {
				return nil, fmt.Errorf("%s: %w", op.name, err)
			}
			latencies = append(latencies, time.Since(began))
		}
		slices.Sort(latencies)
		t := tally{latencies: latencies}
		out = append(out, ScaleOp{Name: op.name, P50: [2]time.Duration{t.percentile(0.5)}, P99: [2]time.Duration{t.percentile(0.99)}})
	}
	return out, nil
}

// measureRetention runs the retention job once over the seeded backlog
// while accepts run at o.Concurrency, and the accepts alone before and
// after it for as long.
func measureRetention(ctx context.Context, db *pgxpool.Pool, tenantID string, o ScaleOptions) (RetentionRun, error) {
	acceptor := &rawAcceptor{pool: db, tenantID: tenantID, keyPrefix: "retention-" + ids.New("k", time.Now()) + "-"}
	var l loader
	load := func(u until) tally {
		return l.run(ctx, loadOptions{concurrency: o.Concurrency, until: u}, acceptor.accept)
	}
	before := load(until{duration: o.Window})
	done := make(chan struct{})
	var run retention.Run
	var runErr error
	go func() {
		defer close(done)
		runCtx, cancel := context.WithTimeout(ctx, retention.DefaultTimeout)
		defer cancel()
		run, runErr = retention.NewWorker(db, 0, nil).WithDuty(o.RetentionDuty).RunOnce(runCtx)
	}()
	during := load(until{signal: done})
	<-done
	after := load(until{duration: o.Window})
	if errors.Is(runErr, context.DeadlineExceeded) {
		runErr = nil // reported as OneAttempt false
	} else if runErr != nil {
		return RetentionRun{}, fmt.Errorf("retention: %w", runErr)
	}
	if f := before.failures + during.failures + after.failures; f > 0 {
		return RetentionRun{}, fmt.Errorf("accepts failed %d times: %s", f, cmpOr(before.firstFailure, during.firstFailure, after.firstFailure))
	}
	r := RetentionRun{Deleted: run.Deleted, Batches: run.Batches, Busy: run.Busy, Wall: run.Wall,
		OneAttempt: run.Wall < retention.DefaultTimeout && !run.TimedOut}
	if r.Deleted > 0 {
		r.PerRecord = r.Busy / time.Duration(r.Deleted)
	}
	r.AcceptsAlone = before.add(after).perSecond()
	r.AcceptsDuring = during.perSecond()
	// A run shorter than a second says nothing about its neighbours.
	if r.AcceptsAlone > 0 && run.Wall >= time.Second {
		r.Ratio = r.AcceptsDuring / r.AcceptsAlone
	}
	return r, nil
}

func cmpOr(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// PrintScale writes the report as a table.
func PrintScale(w io.Writer, r ScaleReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "operation\tp50 at %d\tp99 at %d\tp50 at %d\tp99 at %d\t\n", r.Empty, r.Empty, r.Size, r.Size)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
	for _, op := range r.Ops {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", op.Name, ms(op.P50[0]), ms(op.P99[0]), ms(op.P50[1]), ms(op.P99[1]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "retention\tat %d\tat %d\t\n", r.Empty, r.Size)
	row := func(name string, f func(RetentionRun) string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", name, f(r.Retention[0]), f(r.Retention[1]))
	}
	row("expired records deleted", func(x RetentionRun) string { return fmt.Sprint(x.Deleted) })
	row("batches", func(x RetentionRun) string { return fmt.Sprint(x.Batches) })
	row("in delete statements", func(x RetentionRun) string { return x.Busy.Round(time.Millisecond).String() })
	row("wall (with rests)", func(x RetentionRun) string { return x.Wall.Round(time.Millisecond).String() })
	row("per record", func(x RetentionRun) string { return fmt.Sprintf("%.1f µs", float64(x.PerRecord.Nanoseconds())/1000) })
	row("one attempt, inside its timeout", func(x RetentionRun) string { return fmt.Sprint(x.OneAttempt) })
	row("accepts/s alone", func(x RetentionRun) string { return fmt.Sprintf("%.0f", x.AcceptsAlone) })
	row("accepts/s during retention", func(x RetentionRun) string { return fmt.Sprintf("%.0f", x.AcceptsDuring) })
	row("during / alone", func(x RetentionRun) string {
		if x.Ratio == 0 {
			return "— (run < 1 s)"
		}
		return fmt.Sprintf("%.3f", x.Ratio)
	})
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "disk (with indexes)\tat %d\tat %d\t\n", r.Empty, r.Size)
	for _, table := range scaleTables {
		fmt.Fprintf(tw, "%s\t%.1f MB\t%.1f MB\t\n", table, float64(r.Bytes[0].Tables[table])/1e6, float64(r.Bytes[1].Tables[table])/1e6)
	}
	fmt.Fprintf(tw, "bytes per charge, as seeded\t%.0f\t%.0f\t\n", r.Bytes[0].PerCharge, r.Bytes[1].PerCharge)
	fmt.Fprintf(tw, "bytes per charge, after retention\t%.0f\t%.0f\t\n", r.Bytes[0].PerChargeAfterRetention, r.Bytes[1].PerChargeAfterRetention)
	return tw.Flush()
}
