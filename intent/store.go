package intent

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chargeflow/chargeflow/internal/pg"
)

// DB is what the store needs from a handle: a *pgxpool.Pool, a *pgx.Conn or
// a pgx.Tx. Passing a transaction makes the call part of it.
type DB = pg.Handle

const chargeColumns = `tenant_id, id, state, kind, coalesce(parent_id, ''), coalesce(reason, ''), amount_reserved, amount_refunded,
	amount, currency, coalesce(payment_method, ''), description, metadata,
	provider, provider_key, coalesce(provider_charge_id, ''), coalesce(failure_code, ''), coalesce(review_reason, ''),
	attempts, first_attempt_at, last_attempt_at, unknown_since, lookup_failures, next_check_at,
	coalesce(lease_owner, ''), lease_token, lease_expires_at, last_lookup_at, forced_check_at, created_at, updated_at,
	capture_later, coalesce(amount_captured, 0), coalesce(op_in_flight, '')`

// scanCharge reads chargeColumns, then any extra columns that follow them
// into extra.
func scanCharge(row pgx.Row, extra ...any) (Charge, error) {
	var c Charge
	var metadata []byte
	dest := append([]any{&c.TenantID, &c.ID, &c.State, &c.Kind, &c.ParentID, &c.Reason, &c.AmountReserved, &c.AmountRefunded, &c.Amount, &c.Currency, &c.PaymentMethod, &c.Description, &metadata,
		&c.Provider, &c.ProviderKey, &c.ProviderChargeID, &c.FailureCode, &c.ReviewReason,
		&c.Attempts, &c.FirstAttemptAt, &c.LastAttemptAt, &c.UnknownSince, &c.LookupFailures, &c.NextCheckAt,
		&c.LeaseOwner, &c.LeaseToken, &c.LeaseExpiresAt, &c.LastLookupAt, &c.ForcedCheckAt, &c.CreatedAt, &c.UpdatedAt,
		&c.CaptureLater, &c.AmountCaptured, &c.OpInFlight}, extra...)
	if err := row.Scan(dest...); err != nil {
		return Charge{}, err
	}
	return c, decodeMetadata(&c, metadata)
}

func decodeMetadata(c *Charge, metadata []byte) error {
	if err := json.Unmarshal(metadata, &c.Metadata); err != nil {
		return fmt.Errorf("charge %s: decode metadata: %w", c.ID, err)
	}
	return nil
}

// Acceptance is everything written when a charge is accepted.
type Acceptance struct {
	// Charge is the new charge; its State must be pending.
	Charge Charge
	// Actor is recorded on the creation entry.
	Actor string
	// KeyHash is sha256 of the client's idempotency key; the key itself is
	// never stored.
	KeyHash     []byte
	Fingerprint []byte
	// StatusCode and ResponseBody are what the client got, replayed byte for
	// byte to every retry with the same key.
	StatusCode   int
	ResponseBody []byte
	ExpiresAt    time.Time
	// Job, when set, is the job that carries the charge to its provider,
	// written by the same statement: the API's accept is then one round
	// trip and one commit.
	Job *JobRow
}

// JobRow is a row of River's job table that Accept writes in its own
// statement, so that a charge and the job that carries it commit together
// in one round trip. intent writes it as given and reads nothing into it;
// package submit builds it the way River's own insert would.
type JobRow struct {
	Kind        string
	Args        []byte
	Queue       string
	Priority    int
	MaxAttempts int
	// Metadata is the job's metadata object; nil is {}.
	Metadata []byte
	// WakeTopic, when set, makes the statement send pg_notify on the
	// channel "<current schema>.<WakeTopic>" with NotifyPayload, delivered
	// when it commits.
	WakeTopic   string
	WakePayload string
}

// Accept writes the idempotency record, the charge, its creation entry and,
// with a.Job, the job that carries it, in one statement. It reports
// false, and writes nothing, when the tenant already used the key; the
// caller then reads that record with Idempotency, or calls AcceptOrReplay,
// which returns it.
//
// Run on a pool, the statement is its own transaction: one round trip, one
// commit. If another transaction is inserting the same key, Postgres makes
// this one wait for it to end: after its commit Accept reports false, after
// its rollback Accept inserts. With a lock_timeout on the session the wait
// ends in an error instead (SQLSTATE 55P03).
func Accept(ctx context.Context, db DB, a Acceptance) (bool, error) {
	inserted, _, _, err := AcceptOrReplay(ctx, db, a)
	return inserted, err
}

// AcceptOrReplay is Accept, and the replay check in the same statement: when
// the tenant already used the key and that record is committed, it writes
// nothing and returns the record (found). One round trip answers a first
// attempt and a retry alike (docs/api.md, "Accepting a charge"). Neither
// inserted nor found means the key's first request committed while this
// statement waited on it: read the record with Idempotency.
func AcceptOrReplay(ctx context.Context, db DB, a Acceptance) (inserted bool, rec IdempotencyRecord, found bool, err error) {
	c := a.Charge
	if c.State != StatePending {
		return false, rec, false, fmt.Errorf("%w: a charge is accepted pending, not %q", ErrIllegalMove, c.State)
	}
	metadata, err := json.Marshal(c.Metadata)
	if err != nil {
		return false, rec, false, fmt.Errorf("encode metadata: %w", err)
	}
	if c.Metadata == nil {
		metadata = []byte("{}")
	}
	var job JobRow
	if a.Job != nil {
		job = *a.Job
		if job.MaxAttempts < 1 {
			return false, rec, false, fmt.Errorf("accept charge: job max attempts %d, want at least 1", job.MaxAttempts)
		}
	}
	if job.Metadata == nil {
		job.Metadata = []byte("{}")
	}
	// notified is read only so that Postgres runs the notified CTE: a
	// plain SELECT in WITH runs only when something refers to it. The
	// record a committed request left is read in the statement's snapshot
	// first, with ReplayRecord's lock, so that a replay's commit too waits
	// for the synchronous standby; only when there is none does the insert
	// run (and, if a request with the key is still in flight, wait for it
	// and insert nothing).
	var n, notified int
	var fingerprint, body []byte
	var chargeID *string
	var status *int
	var created, expires *time.Time
	err = db.QueryRow(ctx, `
WITH existing AS (
	SELECT fingerprint, coalesce(charge_id, endpoint_id), status_code, response_body, created_at, expires_at
	FROM idempotency_keys WHERE tenant_id = $1 AND key_hash = $2 FOR KEY SHARE
), idem AS (
	INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, charge_id, status_code, response_body, created_at, expires_at)
	SELECT $1, $2, $3, $4, $5, $6, $7, $8 WHERE NOT EXISTS (SELECT 1 FROM existing)
	ON CONFLICT (tenant_id, key_hash) DO NOTHING
	RETURNING tenant_id, charge_id
), charge AS (
	INSERT INTO charges (tenant_id, id, state, amount, currency, payment_method, description, metadata,
		provider, provider_key, created_at, updated_at, kind, parent_id, reason, capture_later)
	SELECT tenant_id, charge_id, 'pending', $9, $10, nullif($11, ''), $12, $13, $14, $15, $7, $7,
		$25, nullif($26, ''), nullif($27, ''), $28 FROM idem
	RETURNING tenant_id, id
), audit AS (
	INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt)
	SELECT tenant_id, id, NULL, 'pending', $16, 'accepted', 0 FROM charge
), job AS (
	INSERT INTO river_job (args, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags)
	SELECT $17::jsonb, $18, $19, $20::jsonb, $21, $22, now(), 'available', '{}' FROM charge WHERE $17::jsonb IS NOT NULL
	RETURNING 1
), notified AS (
	SELECT pg_notify(coalesce(current_schema(), '') || '.' || $23, $24) FROM job WHERE $23 <> ''
)
SELECT (SELECT count(*) FROM idem), (SELECT count(*) FROM notified), e.*
FROM (SELECT 1) one LEFT JOIN existing e ON true`,
		c.TenantID, a.KeyHash, a.Fingerprint, c.ID, a.StatusCode, a.ResponseBody, c.CreatedAt, a.ExpiresAt,
		c.Amount, c.Currency, c.PaymentMethod, c.Description, metadata, c.Provider, c.ProviderKey, a.Actor,
		job.Args, job.Kind, job.MaxAttempts, job.Metadata, job.Priority, job.Queue,
		job.WakeTopic, job.WakePayload, cmp.Or(c.Kind, KindCharge), c.ParentID, c.Reason, c.CaptureLater,
	).Scan(&n, &notified, &fingerprint, &chargeID, &status, &body, &created, &expires)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "CF010":
		return false, rec, false, fmt.Errorf("accept refund of %s: %w", c.ParentID, ErrNotRefundable)
	case errors.As(err, &pgErr) && pgErr.ConstraintName == "charges_refunds_within_amount":
		return false, rec, false, fmt.Errorf("accept refund of %s: %w", c.ParentID, ErrRefundExceedsCharge)
	case errors.As(err, &pgErr) && operationRefusals[pgErr.Code] != nil:
		return false, rec, false, fmt.Errorf("accept %s of %s: %w", c.Kind, c.ParentID, operationRefusals[pgErr.Code])
	case err != nil:
		if _, inTx := db.(pgx.Tx); !inTx {
			err = CommitFailed(err) // the statement is its own transaction
		}
		return false, rec, false, fmt.Errorf("accept charge: %w", err)
	}
	if chargeID != nil {
		rec = IdempotencyRecord{Fingerprint: fingerprint, ChargeID: *chargeID, StatusCode: *status, ResponseBody: body,
			CreatedAt: *created, ExpiresAt: *expires}
	}
	return n == 1, rec, chargeID != nil, nil
}

// LockForRefund takes the row lock of the charge a refund names, in tx,
// waiting for it as long as ctx allows rather than the session's
// lock_timeout. A refund's accept takes that lock anyway (the refund
// trigger updates the charge's sums), and concurrent refunds of one charge
// queue on it: their wait is contention that ends in a real answer, not
// a sign that the key is held by a request still in flight, which is what
// the session's short lock_timeout is for. The lock wait is bounded by
// ctx; every other wait of tx keeps the session's timeout. A charge that
// does not exist locks nothing, and the accept then refuses the refund.
func LockForRefund(ctx context.Context, tx pgx.Tx, tenantID, chargeID string) error {
	b := &pgx.Batch{}
	b.Queue(`SET LOCAL lock_timeout = 0`)
	b.Queue(`SELECT 1 FROM charges WHERE tenant_id = $1 AND id = $2 FOR NO KEY UPDATE`, tenantID, chargeID)
	b.Queue(`SET LOCAL lock_timeout TO DEFAULT`)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("lock charge %s for a refund: %w", chargeID, err)
	}
	return nil
}

// IdempotencyRecord is what a finished request stored under its key.
type IdempotencyRecord struct {
	Fingerprint []byte
	// ChargeID is the charge or refund the request created, or the webhook
	// endpoint ("we_…", package webhook): one key space for every
	// idempotent POST of a tenant.
	ChargeID     string
	StatusCode   int
	ResponseBody []byte
	CreatedAt    time.Time
	ExpiresAt    time.Time
}

// Idempotency reads the record a tenant stored under a key hash: one
// primary-key read. It returns ErrNotFound when the key is new.
//
// A record past its expiry is still returned until the retention job deletes
// it: remembering a key longer than promised never charges twice.
func Idempotency(ctx context.Context, db DB, tenantID string, keyHash []byte) (IdempotencyRecord, error) {
	return idempotency(ctx, db, tenantID, keyHash, "")
}

// ReplayRecord is Idempotency for a replay: it also takes a key-share lock
// on the record, which writes WAL, so that the statement's commit (or that
// of the transaction db is) waits for the synchronous standby like any
// write. A replay is then answered only once the standby has the record,
// even one whose first commit was cancelled while it waited
// (pg.ErrCommitUnconfirmed) and so became visible here first. The lock
// blocks nothing but the record's deletion.
func ReplayRecord(ctx context.Context, db DB, tenantID string, keyHash []byte) (IdempotencyRecord, error) {
	return idempotency(ctx, db, tenantID, keyHash, " FOR KEY SHARE")
}

func idempotency(ctx context.Context, db DB, tenantID string, keyHash []byte, lock string) (IdempotencyRecord, error) {
	var r IdempotencyRecord
	err := db.QueryRow(ctx, `SELECT fingerprint, coalesce(charge_id, endpoint_id), status_code, response_body, created_at, expires_at
		FROM idempotency_keys WHERE tenant_id = $1 AND key_hash = $2`+lock, tenantID, keyHash).
		Scan(&r.Fingerprint, &r.ChargeID, &r.StatusCode, &r.ResponseBody, &r.CreatedAt, &r.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return IdempotencyRecord{}, ErrNotFound
	}
	if err != nil {
		return IdempotencyRecord{}, fmt.Errorf("read idempotency record: %w", err)
	}
	return r, nil
}

// DeleteExpiredIdempotency deletes at most limit idempotency records that
// expired before now and not before from, oldest first, and reports how
// many it deleted and the latest expiry among them. A caller deleting a
// backlog passes that expiry back as the next call's from: the index scan
// then starts where the last batch ended instead of walking, from the
// start, the index entries of every record the run already deleted (they
// stay until vacuum), which made one run's cost grow with the square of
// its backlog.
func DeleteExpiredIdempotency(ctx context.Context, db DB, from, now time.Time, limit int) (int, time.Time, error) {
	var n int
	var last *time.Time
	// The rows are found through the expiry index and deleted by their
	// physical address (a TID scan), so each is touched once: no row lock
	// written first, no primary-key probe per row. Nothing else locks or
	// updates these rows (an accept that meets an existing key reads it),
	// and the address is read and used within one statement's snapshot.
	err := db.QueryRow(ctx, `
WITH gone AS (
	DELETE FROM idempotency_keys WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM idempotency_keys WHERE expires_at >= $1 AND expires_at < $2
		ORDER BY expires_at LIMIT $3))
	RETURNING expires_at
)
SELECT count(*), max(expires_at) FROM gone`, from, now, limit).Scan(&n, &last)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("delete expired idempotency records: %w", err)
	}
	if last == nil {
		return 0, from, nil
	}
	return n, *last, nil
}

// Get reads one charge of a tenant. Another tenant's id is ErrNotFound.
func Get(ctx context.Context, db DB, tenantID, id string) (Charge, error) {
	c, err := scanCharge(db.QueryRow(ctx, `SELECT `+chargeColumns+` FROM charges WHERE tenant_id = $1 AND id = $2`, tenantID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Charge{}, fmt.Errorf("charge %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Charge{}, fmt.Errorf("read charge %s: %w", id, err)
	}
	return c, nil
}

// ListParams selects a page of a tenant's charges, newest first.
type ListParams struct {
	// TenantID names the tenant; it is required unless AllTenants is set
	// (operators only).
	TenantID   string
	AllTenants bool
	// State filters by state; "" lists every state.
	State State
	// Kind filters by kind; "" lists charges and refunds alike (operators
	// resolve both). ParentID, when set, lists the refunds of that charge.
	Kind     Kind
	ParentID string
	// Limit is the page size.
	Limit int
	// StartingAfter is the id of the last charge of the previous page.
	StartingAfter string
}

// List returns a page of charges and whether more follow it.
func List(ctx context.Context, db DB, p ListParams) ([]Charge, bool, error) {
	if p.TenantID == "" && !p.AllTenants {
		return nil, false, errors.New("intent: list charges of which tenant?")
	}
	query, args, err := listQuery(p)
	if err != nil {
		return nil, false, err
	}
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, false, fmt.Errorf("list charges: %w", err)
	}
	charges, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Charge, error) { return scanCharge(row) })
	if err != nil {
		return nil, false, fmt.Errorf("list charges: %w", err)
	}
	if len(charges) > p.Limit {
		return charges[:p.Limit], true, nil
	}
	return charges, false, nil
}

// listQuery writes the one statement of p's filter combination: a filter
// not given is absent from the text, never "($n = ” OR column = $n)",
// whose generic plan (the one Postgres settles on after a few executions
// of a prepared statement, or the only one behind a pooler) cannot use an
// index for the column and reads the table instead. State and kind are
// written as literals, checked against their closed sets, so that a plan
// made for any parameter values still sees which partial index covers the
// state (docs/architecture.md, "Query shapes").
func listQuery(p ListParams) (string, []any, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if p.TenantID != "" {
		where = append(where, "tenant_id = "+arg(p.TenantID))
	}
	if p.State != "" {
		if !p.State.Valid() {
			return "", nil, fmt.Errorf("intent: list charges in state %q: no such state", p.State)
		}
		where = append(where, "state = '"+string(p.State)+"'")
	}
	// A kind is also a range of ids ("ch_…" or "re_…"): with it the index
	// scan starts at the newest id of the kind instead of walking every id
	// of the other kind first (all "re_" ids sort after all "ch_" ids, so a
	// merchant's charge listing would step over every refund).
	switch p.Kind {
	case "":
	case KindCharge:
		where = append(where, "kind = 'charge' AND id > 'ch' AND id < 'ci'")
	case KindRefund:
		where = append(where, "kind = 'refund' AND id > 're' AND id < 'rf'")
	case KindCapture:
		where = append(where, "kind = 'capture' AND id > 'cp' AND id < 'cq'")
	case KindCancel:
		where = append(where, "kind = 'cancel' AND id > 'cx' AND id < 'cy'")
	default:
		return "", nil, fmt.Errorf("intent: list charges of kind %q: no such kind", p.Kind)
	}
	if p.ParentID != "" {
		where = append(where, "parent_id = "+arg(p.ParentID))
	}
	if p.StartingAfter != "" {
		where = append(where, "id < "+arg(p.StartingAfter))
	}
	switch {
	case p.TenantID != "":
		// The primary key, charges_tenant_state_id or charges_refunds_of.
	case p.State == StatePending || p.State == StateSubmitting || p.State == StateUnknown:
		// Every tenant's charges in a state on the way: a small set
		// whatever the table's size, read whole through the partial index
		// of its sweep and sorted, never found by walking charges_id.
		// needs_review, failed and canceled have partial indexes on id
		// (0001_baseline, 0005_capture); succeeded is most of the table,
		// so charges_id finds a page of it at once.
		var cursor string
		if p.StartingAfter != "" {
			cursor = "\n\t\tWHERE id < $1"
		}
		return `WITH inflight AS MATERIALIZED (SELECT ` + chargeColumns + ` FROM charges WHERE state = '` + string(p.State) + `')
		SELECT * FROM inflight` + cursor + `
		ORDER BY id DESC LIMIT ` + arg(p.Limit+1), args, nil
	}
	query := `SELECT ` + chargeColumns + ` FROM charges`
	if len(where) > 0 {
		query += "\n\t\tWHERE " + strings.Join(where, " AND ")
	}
	return query + "\n\t\tORDER BY id DESC LIMIT " + arg(p.Limit+1), args, nil
}

// SendTimes returns when each attempt of a charge was sent, oldest first:
// the times of its moves to submitting, each committed just before its
// request left.
func SendTimes(ctx context.Context, db DB, tenantID, chargeID string) ([]time.Time, error) {
	rows, err := db.Query(ctx, `SELECT created_at FROM charge_audit
		WHERE tenant_id = $1 AND charge_id = $2 AND to_state = 'submitting' ORDER BY id`, tenantID, chargeID)
	if err != nil {
		return nil, fmt.Errorf("send times of %s: %w", chargeID, err)
	}
	sends, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return nil, fmt.Errorf("send times of %s: %w", chargeID, err)
	}
	return sends, nil
}

// AuditTrail returns a charge's audit trail, oldest first. Every charge has at
// least its creation entry, so none means the charge is not the tenant's.
func AuditTrail(ctx context.Context, db DB, tenantID, chargeID string) ([]AuditEntry, error) {
	rows, err := db.Query(ctx, `SELECT id, tenant_id, charge_id, coalesce(from_state, ''), to_state, actor, reason,
		attempt, coalesce(evidence, ''), coalesce(action, ''), created_at
		FROM charge_audit WHERE tenant_id = $1 AND charge_id = $2 ORDER BY id`, tenantID, chargeID)
	if err != nil {
		return nil, fmt.Errorf("read the audit trail of %s: %w", chargeID, err)
	}
	entries, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AuditEntry, error) {
		var e AuditEntry
		err := row.Scan(&e.ID, &e.TenantID, &e.ChargeID, &e.From, &e.To, &e.Actor, &e.Reason, &e.Attempt, &e.Evidence, &e.Action, &e.CreatedAt)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the audit trail of %s: %w", chargeID, err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("charge %s: %w", chargeID, ErrNotFound)
	}
	return entries, nil
}

// Find reads one charge by its id alone, whatever its tenant: for
// operators, never for merchants (who use Get). Ids are unique across
// tenants (80 random bits each).
func Find(ctx context.Context, db DB, id string) (Charge, error) {
	c, err := scanCharge(db.QueryRow(ctx, `SELECT `+chargeColumns+` FROM charges WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Charge{}, fmt.Errorf("charge %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Charge{}, fmt.Errorf("read charge %s: %w", id, err)
	}
	return c, nil
}

// KeyInFlight reports whether another transaction holds the tenant's
// idempotency key right now: it inserted the key and has not ended (a
// request still in its transaction, or one whose commit waits for the
// synchronous standby). It tells a lock timeout of that request's key —
// request_in_progress — from one on any other lock an accept may wait for
// (a sibling refund's charge row, PostgreSQL's queue of notifications),
// which says nothing of the key. The probe inserts the key alone, waiting
// at most wait, and never commits: a key free or committed ends in an
// error of the probe's own or in nothing inserted, both rolled back.
func KeyInFlight(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, tenantID string, keyHash []byte, wait time.Duration) (bool, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("probe idempotency key: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, fmt.Sprintf("%dms", max(wait.Milliseconds(), 1))); err != nil {
		return false, fmt.Errorf("probe idempotency key: %w", err)
	}
	// The endpoint named exists nowhere: if the key is free, the insert
	// fails its foreign key once the unique index has let it through.
	_, err = tx.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, key_hash, fingerprint, endpoint_id, status_code, response_body,
		created_at, expires_at) VALUES ($1, $2, $2, 'we_probe', 200, '', now(), now() + interval '1 second')
		ON CONFLICT (tenant_id, key_hash) DO NOTHING`, tenantID, keyHash)
	var pgErr *pgconn.PgError
	switch {
	case err == nil, errors.As(err, &pgErr) && pgErr.Code == "23503":
		return false, nil
	case errors.As(err, &pgErr) && pgErr.Code == "55P03":
		return true, nil
	}
	return false, fmt.Errorf("probe idempotency key: %w", err)
}
