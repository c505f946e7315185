// Package dbtest gives each test its own freshly migrated Postgres database.
//
// Migrations run once into a template database keyed by a hash of the
// migration files (pgtestdb); each test then gets CREATE DATABASE … TEMPLATE,
// which takes tens of milliseconds. A failed test's database is kept and its
// URL is in the test log, so it can be inspected with psql.
//
// The server comes from DATABASE_URL (its database name is ignored), or the
// local default postgres://postgres@127.0.0.1:5432.
package dbtest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver pgtestdb connects with
	"github.com/peterldowns/pgtestdb"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/internal/pg"
	"github.com/chargeflow/chargeflow/migrations"
	"github.com/chargeflow/chargeflow/webhook"
)

// DefaultServer is the Postgres server tests use when DATABASE_URL is unset.
const DefaultServer = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// migrator adapts the migrations package to pgtestdb.
type migrator struct{}

func (migrator) Hash() (string, error) { return migrations.Hash() }

func (migrator) Migrate(ctx context.Context, _ *sql.DB, conf pgtestdb.Config) error {
	pool, err := pgxpool.New(ctx, conf.URL())
	if err != nil {
		return err
	}
	defer pool.Close()
	return migrations.Apply(ctx, pool, slog.New(slog.DiscardHandler))
}

// serverConfig turns DATABASE_URL into pgtestdb's config.
func serverConfig(t testing.TB) pgtestdb.Config {
	t.Helper()
	raw := os.Getenv("DATABASE_URL")
	if raw == "" {
		raw = DefaultServer
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("dbtest: parse DATABASE_URL: %v", err)
	}
	password, _ := u.User.Password()
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	options := u.Query()
	if options.Get("sslmode") == "" {
		options.Set("sslmode", "disable")
	}
	return pgtestdb.Config{
		DriverName:                "pgx",
		Host:                      u.Hostname(),
		Port:                      port,
		User:                      cmp.Or(u.User.Username(), "postgres"),
		Password:                  password,
		Database:                  "postgres",
		Options:                   options.Encode(),
		ForceTerminateConnections: true,
	}
}

// URL creates a fresh migrated database for the test and returns its URL.
func URL(t testing.TB) string {
	t.Helper()
	conf := pgtestdb.Custom(t, serverConfig(t), migrator{})
	return conf.URL()
}

// Empty creates a database with nothing in it, not even River's tables,
// and returns its URL: for tests of the migrations themselves. It is
// dropped when the test ends, or kept, with its URL in the log, when the
// test failed.
func Empty(t testing.TB) string {
	t.Helper()
	admin := Admin(t)
	name := fmt.Sprintf("chargeflow_empty_%d", time.Now().UnixNano())
	ctx := context.Background()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("dbtest: create empty database: %v", err)
	}
	conf := serverConfig(t)
	conf.Database = name
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dbtest: kept the failed test's database: %s", conf.URL())
			return
		}
		// Admin's connection is closed by a cleanup registered before this
		// one, so it runs after: cleanups run last first.
		if _, err := admin.Exec(context.Background(), "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("dbtest: drop %s: %v", name, err)
		}
	})
	return conf.URL()
}

// Pool creates a fresh migrated database and returns a pool on it, closed
// when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return NewPool(t, URL(t), 8)
}

// NewPool opens a pool of at most maxConns connections on url, closed when
// the test ends.
func NewPool(t testing.TB, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("dbtest: parse url: %v", err)
	}
	cfg.MaxConns = maxConns
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("dbtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Admin opens a superuser connection to the server (the postgres database),
// for tests that must act on a test database from outside: refuse its
// connections, terminate its sessions.
func Admin(t testing.TB) *pgx.Conn {
	t.Helper()
	conf := serverConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, conf.URL())
	if err != nil {
		t.Fatalf("dbtest: admin connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// DatabaseName returns the database a URL names.
func DatabaseName(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("dbtest: parse url: %v", err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// ListenRiverInserts listens, on a connection of its own, to the channel
// River's insert notifications use on pool's database, and returns the
// channel and a function that waits (10 s at most) for the next
// notification on it.
func ListenRiverInserts(t testing.TB, pool *pgxpool.Pool) (string, func() *pgconn.Notification) {
	t.Helper()
	ctx := context.Background()
	listener, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatalf("dbtest: connect listener: %v", err)
	}
	t.Cleanup(func() { _ = listener.Close(context.Background()) })
	var channel string
	if err := listener.QueryRow(ctx, `SELECT current_schema() || '.river_insert'`).Scan(&channel); err != nil {
		t.Fatalf("dbtest: read schema: %v", err)
	}
	if _, err := listener.Exec(ctx, `LISTEN `+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatalf("dbtest: listen: %v", err)
	}
	return channel, func() *pgconn.Notification {
		t.Helper()
		waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := listener.WaitForNotification(waitCtx)
		if err != nil {
			t.Fatalf("dbtest: no notification on %s: %v", channel, err)
		}
		return n
	}
}

// Tenant inserts a tenant called name and returns its id: what a test needs
// before it can write a charge.
func Tenant(t testing.TB, db pg.Handle, name string) string {
	t.Helper()
	id := ids.New("tn", time.Now())
	if _, err := db.Exec(context.Background(), `INSERT INTO tenants (id, name) VALUES ($1, $2)`, id, name); err != nil {
		t.Fatalf("dbtest: insert tenant: %v", err)
	}
	return id
}

// Charge describes a charge for PendingCharge; zero fields take 1,000 USD
// paid with pm_card_visa.
type Charge struct {
	TenantID      string
	Amount        int64
	Currency      string
	PaymentMethod string
	Metadata      map[string]string
	// Key is the idempotency key; default the charge's id.
	Key string
	// Provider is the provider (account) it goes to; default fakepsp.
	Provider string
	// Job, when set, makes the job row the accept statement writes.
	Job func(chargeID string) *intent.JobRow
	// CaptureLater accepts it to be authorized only (docs/capture.md).
	CaptureLater bool
}

// PendingCharge accepts a charge as the API does — its idempotency record,
// the charge (pending, at spec.Provider) and its creation event, and its job
// row when spec.Job says so — on db (a pool, or a test's transaction).
func PendingCharge(t testing.TB, db pg.Handle, spec Charge) intent.Charge {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	id := ids.New("ch", now)
	c := intent.Charge{
		TenantID: spec.TenantID, ID: id, State: intent.StatePending,
		Amount: cmp.Or(spec.Amount, 1000), Currency: cmp.Or(spec.Currency, "USD"),
		PaymentMethod: cmp.Or(spec.PaymentMethod, "pm_card_visa"), Metadata: spec.Metadata,
		Provider: cmp.Or(spec.Provider, "fakepsp"), ProviderKey: intent.ProviderKeyFor(id), CreatedAt: now, UpdatedAt: now,
		CaptureLater: spec.CaptureLater,
	}
	keyHash := sha256.Sum256([]byte(cmp.Or(spec.Key, id)))
	a := intent.Acceptance{Charge: c, Actor: "test", KeyHash: keyHash[:], Fingerprint: keyHash[:],
		StatusCode: 201, ResponseBody: []byte(`{"id":"` + id + `"}`), ExpiresAt: now.Add(time.Hour)}
	if spec.Job != nil {
		a.Job = spec.Job(id)
	}
	inserted, err := intent.Accept(context.Background(), db, a)
	if err != nil || !inserted {
		t.Fatalf("dbtest: accept charge: inserted %v, err %v", inserted, err)
	}
	return c
}

// Walk moves c along states as the worker and the reconciler would, each
// move with the facts its state needs (a review reason, the provider's
// charge id providerChargeID, a failure code), and returns it as stored.
func Walk(t testing.TB, db pg.Handle, c intent.Charge, providerChargeID string, states ...intent.State) intent.Charge {
	t.Helper()
	ctx := context.Background()
	from := cmp.Or(c.State, intent.StatePending)
	for _, to := range states {
		m := intent.Move{TenantID: c.TenantID, ChargeID: c.ID, From: from, To: to, Actor: "test", Reason: "test",
			CountAttempt: to == intent.StateSubmitting}
		switch to {
		case intent.StateNeedsReview:
			m.ReviewReason = "lookup_unavailable"
		case intent.StateSucceeded, intent.StateRequiresCapture, intent.StateCanceled:
			m.ProviderChargeID = providerChargeID
		case intent.StateFailed:
			m.FailureCode = "walked"
		}
		if _, err := intent.MoveCharge(ctx, db, m); err != nil {
			t.Fatalf("dbtest: walk %s %s -> %s: %v", c.ID, from, to, err)
		}
		from = to
	}
	found, err := intent.Find(ctx, db, c.ID)
	if err != nil {
		t.Fatalf("dbtest: walk %s: %v", c.ID, err)
	}
	return found
}

// PendingRefund accepts a refund of amount of the succeeded charge parent
// as the API does, on db; the database reserves it on the charge.
func PendingRefund(t testing.TB, db pg.Handle, parent intent.Charge, amount int64) intent.Charge {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	id := ids.New("re", now)
	r := intent.Charge{
		TenantID: parent.TenantID, ID: id, State: intent.StatePending, Kind: intent.KindRefund, ParentID: parent.ID,
		Amount: amount, Currency: parent.Currency, Provider: parent.Provider, ProviderKey: intent.ProviderKeyFor(id),
		CreatedAt: now, UpdatedAt: now,
	}
	keyHash := sha256.Sum256([]byte(id))
	inserted, err := intent.Accept(context.Background(), db, intent.Acceptance{Charge: r, Actor: "test", KeyHash: keyHash[:],
		Fingerprint: keyHash[:], StatusCode: 201, ResponseBody: []byte(`{"id":"` + id + `"}`), ExpiresAt: now.Add(time.Hour)})
	if err != nil || !inserted {
		t.Fatalf("dbtest: accept refund: inserted %v, err %v", inserted, err)
	}
	return r
}

// PendingOperation accepts a capture or cancel (kind) of amount of the
// held charge parent as the API does, on db, under an idempotency key of
// its own, and returns the database's refusal, if any.
func PendingOperation(db pg.Handle, parent intent.Charge, kind intent.Kind, amount int64) (intent.Charge, error) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	id := ids.New(kind.IDPrefix(), now)
	op := intent.Charge{
		TenantID: parent.TenantID, ID: id, State: intent.StatePending, Kind: kind, ParentID: parent.ID,
		Amount: amount, Currency: parent.Currency, Provider: parent.Provider, ProviderKey: intent.ProviderKeyFor(id),
		CreatedAt: now, UpdatedAt: now,
	}
	keyHash := sha256.Sum256([]byte(id))
	inserted, err := intent.Accept(context.Background(), db, intent.Acceptance{Charge: op, Actor: "test", KeyHash: keyHash[:],
		Fingerprint: keyHash[:], StatusCode: 201, ResponseBody: []byte(`{"id":"` + id + `"}`), ExpiresAt: now.Add(time.Hour)})
	if err == nil && !inserted {
		err = fmt.Errorf("dbtest: accept %s: its key was used before", kind)
	}
	return op, err
}

// WebhookEndpoint creates an endpoint of tenantID, as the API does, under
// an idempotency key of its own.
func WebhookEndpoint(t testing.TB, db webhook.Store, tenantID, url string, events []string) webhook.Endpoint {
	t.Helper()
	e := webhook.NewEndpoint(tenantID, url, events, time.Now())
	key := sha256.Sum256([]byte(e.ID))
	_, created, err := webhook.CreateEndpoint(context.Background(), db, webhook.Creation{Endpoint: e, KeyHash: key[:],
		Fingerprint: key[:], StatusCode: 201, ResponseBody: []byte(`{}`), ExpiresAt: e.CreatedAt.Add(time.Hour)})
	if err != nil || !created {
		t.Fatalf("create webhook endpoint: created %v, %v", created, err)
	}
	return e
}

// RiverJob is what a row of river_job says, but for its id and times: two
// rows of the same job, one written by River's client and one by our SQL,
// compare equal.
type RiverJob struct {
	Args, Kind, Metadata, Queue, State, Tags string
	MaxAttempts, Priority, Attempt           int
	UniqueKeyNull, UniqueStatesNull          bool
	AttemptedAtNull, ErrorsNull, Finalized   bool
	ScheduledNotLater                        bool
}

// RiverJobs reads every row of river_job on db, in id order.
func RiverJobs(t testing.TB, db pg.Handle) []RiverJob {
	t.Helper()
	rows, err := db.Query(context.Background(), `
SELECT args::text, kind, metadata::text, queue, state::text, tags::text, max_attempts, priority, attempt,
	unique_key IS NULL, unique_states IS NULL, attempted_at IS NULL, errors IS NULL, finalized_at IS NOT NULL,
	scheduled_at <= now()
FROM river_job ORDER BY id`)
	if err != nil {
		t.Fatalf("dbtest: read river_job: %v", err)
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RiverJob, error) {
		var j RiverJob
		err := row.Scan(&j.Args, &j.Kind, &j.Metadata, &j.Queue, &j.State, &j.Tags, &j.MaxAttempts, &j.Priority, &j.Attempt,
			&j.UniqueKeyNull, &j.UniqueStatesNull, &j.AttemptedAtNull, &j.ErrorsNull, &j.Finalized, &j.ScheduledNotLater)
		return j, err
	})
	if err != nil {
		t.Fatalf("dbtest: read river_job: %v", err)
	}
	return jobs
}
