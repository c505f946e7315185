package intent_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/internal/ids"
)

type testBundle struct {
	pool     *pgxpool.Pool
	tenantID string
}

func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	return ctx, &testBundle{pool: pool, tenantID: dbtest.Tenant(t, pool, "intent test")}
}

// accept creates a pending charge without its job.
func (b *testBundle) accept(ctx context.Context, t *testing.T, key string) intent.Charge {
	t.Helper()
	return b.acceptWithJob(ctx, t, key, nil)
}

func TestAccept(t *testing.T) {
	t.Parallel()

	t.Run("WritesChargeEventAndRecordOnce", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		c := b.accept(ctx, t, "key-0000000000000001")

		got, err := intent.Get(ctx, b.pool, b.tenantID, c.ID)
		require.NoError(t, err)
		require.Equal(t, intent.StatePending, got.State)
		require.Equal(t, c.Metadata, got.Metadata)
		require.Equal(t, "cf_"+c.ID, got.ProviderKey)
		require.True(t, c.CreatedAt.Equal(got.CreatedAt))

		events, err := intent.AuditTrail(ctx, b.pool, b.tenantID, c.ID)
		require.NoError(t, err)
		require.Len(t, events, 1)
		require.Equal(t, intent.State(""), events[0].From)
		require.Equal(t, intent.StatePending, events[0].To)

		keyHash := sha256.Sum256([]byte("key-0000000000000001"))
		rec, err := intent.Idempotency(ctx, b.pool, b.tenantID, keyHash[:])
		require.NoError(t, err)
		require.Equal(t, c.ID, rec.ChargeID)
		require.Equal(t, 201, rec.StatusCode)

		// The same key again writes nothing.
		again := c
		again.ID = ids.New("ch", time.Now())
		again.ProviderKey = intent.ProviderKeyFor(again.ID)
		inserted, err := intent.Accept(ctx, b.pool, intent.Acceptance{
			Charge: again, Actor: "test", KeyHash: keyHash[:], Fingerprint: keyHash[:],
			StatusCode: 201, ResponseBody: []byte(`{}`), ExpiresAt: time.Now().Add(time.Hour),
		})
		require.NoError(t, err)
		require.False(t, inserted)
		_, err = intent.Get(ctx, b.pool, b.tenantID, again.ID)
		require.ErrorIs(t, err, intent.ErrNotFound)

		// AcceptOrReplay is the same statement, and returns the record the
		// key already has: the replay check and the write in one round trip.
		inserted, replayed, found, err := intent.AcceptOrReplay(ctx, b.pool, intent.Acceptance{
			Charge: again, Actor: "test", KeyHash: keyHash[:], Fingerprint: []byte("another request"),
			StatusCode: 201, ResponseBody: []byte(`{}`), ExpiresAt: time.Now().Add(time.Hour),
		})
		require.NoError(t, err)
		require.False(t, inserted)
		require.True(t, found)
		require.Equal(t, rec, replayed, "the first request's record, not this one's")
		_, err = intent.Get(ctx, b.pool, b.tenantID, again.ID)
		require.ErrorIs(t, err, intent.ErrNotFound)

		// A new key is inserted and has no record to return.
		fresh := again
		freshKey := sha256.Sum256([]byte("key-0000000000000002"))
		inserted, _, found, err = intent.AcceptOrReplay(ctx, b.pool, intent.Acceptance{
			Charge: fresh, Actor: "test", KeyHash: freshKey[:], Fingerprint: freshKey[:],
			StatusCode: 201, ResponseBody: []byte(`{}`), ExpiresAt: time.Now().Add(time.Hour),
		})
		require.NoError(t, err)
		require.True(t, inserted)
		require.False(t, found)
		_, err = intent.Get(ctx, b.pool, b.tenantID, fresh.ID)
		require.NoError(t, err)
	})

	t.Run("RefusesNonPending", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		_, err := intent.Accept(ctx, b.pool, intent.Acceptance{Charge: intent.Charge{State: intent.StateSucceeded}})
		require.ErrorIs(t, err, intent.ErrIllegalMove)
	})

	t.Run("UnknownIdempotencyKeyIsNotFound", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		_, err := intent.Idempotency(ctx, b.pool, b.tenantID, make([]byte, 32))
		require.ErrorIs(t, err, intent.ErrNotFound)
	})
}

func TestDatabaseEnforcesStateMachine(t *testing.T) {
	t.Parallel()

	t.Run("TransitionsTableMatchesGo", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		rows, err := b.pool.Query(ctx, `SELECT from_state, to_state FROM charge_transitions`)
		require.NoError(t, err)
		inDB, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (intent.Transition, error) {
			var tr intent.Transition
			return tr, row.Scan(&tr.From, &tr.To)
		})
		require.NoError(t, err)
		less := func(a, b intent.Transition) int {
			return strings.Compare(string(a.From)+">"+string(a.To), string(b.From)+">"+string(b.To))
		}
		inGo := intent.Transitions()
		slices.SortFunc(inDB, less)
		slices.SortFunc(inGo, less)
		require.Equal(t, inGo, inDB)
	})

	// Every pair of states that is not a legal move is refused by the
	// database itself, even when SQL bypasses MoveCharge.
	t.Run("IllegalMoveRefusedInSQL", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		for _, from := range intent.States() {
			for _, to := range intent.States() {
				if from == to || intent.CanMove(from, to) {
					continue
				}
				c := b.accept(ctx, t, fmt.Sprintf("illegal-%s-%s-0001", from, to))
				// Put the row in `from` without the trigger's blessing, then
				// try the illegal move with plain SQL.
				tx, err := b.pool.Begin(ctx)
				require.NoError(t, err)
				_, err = tx.Exec(ctx, `ALTER TABLE charges DISABLE TRIGGER charges_guard`)
				require.NoError(t, err)
				_, err = tx.Exec(ctx, `UPDATE charges SET state = $1, provider_charge_id = 'py_x', failure_code = 'x',
					review_reason = 'x', next_check_at = now(), unknown_since = now(),
					capture_later = true, amount_captured = amount WHERE id = $2`, string(from), c.ID)
				require.NoError(t, err)
				_, err = tx.Exec(ctx, `ALTER TABLE charges ENABLE TRIGGER charges_guard`)
				require.NoError(t, err)
				_, err = tx.Exec(ctx, `UPDATE charges SET state = $1 WHERE id = $2`, string(to), c.ID)
				var pgErr *pgconn.PgError
				require.ErrorAs(t, err, &pgErr, "%s -> %s", from, to)
				require.Equal(t, "CF001", pgErr.Code, "%s -> %s", from, to)
				require.NoError(t, tx.Rollback(ctx))
			}
		}
	})

	t.Run("ChargeBornPending", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		id := ids.New("ch", time.Now())
		_, err := b.pool.Exec(ctx, `INSERT INTO charges (tenant_id, id, state, amount, currency, payment_method, provider,
			provider_key, provider_charge_id, created_at, updated_at)
			VALUES ($1, $2, 'succeeded', 1, 'USD', 'pm', 'p', 'k', 'py', now(), now())`, b.tenantID, id)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "CF001", pgErr.Code)
	})

	t.Run("MoneyAndKeyImmutable", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		c := b.accept(ctx, t, "immutable-000000001")
		for _, set := range []string{"amount = 2", "currency = 'EUR'", "provider_key = 'other'", "payment_method = 'pm_x'"} {
			_, err := b.pool.Exec(ctx, `UPDATE charges SET `+set+` WHERE id = $1`, c.ID)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, set)
			require.Equal(t, "CF002", pgErr.Code, set)
		}
	})

	t.Run("EventsAppendOnly", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		c := b.accept(ctx, t, "append-only-0000001")
		for _, stmt := range []string{`UPDATE charge_audit SET reason = 'edited' WHERE charge_id = $1`, `DELETE FROM charge_audit WHERE charge_id = $1`} {
			_, err := b.pool.Exec(ctx, stmt, c.ID)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, stmt)
			require.Equal(t, "CF003", pgErr.Code, stmt)
		}
	})

	// The tenant's foreign keys gave way to a check when a charge is born
	// and a tenant that can never go (charges_guard, tenants_kept): the
	// same guarantee, no shared row lock per write.
	t.Run("ChargeNeedsItsTenant", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		_, err := b.pool.Exec(ctx, `INSERT INTO charges (tenant_id, id, state, amount, currency, payment_method, provider,
			provider_key, created_at, updated_at)
			VALUES ($1, $2, 'pending', 1, 'USD', 'pm', 'p', 'k', now(), now())`, ids.New("tn", time.Now()), ids.New("ch", time.Now()))
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "23503", pgErr.Code)
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM charges`).Scan(&n))
		require.Zero(t, n)
	})

	// A provider key is derived from its charge's id, never chosen: two
	// charges can never share one (charges_provider_key_of_id).
	t.Run("ProviderKeyIsTheChargesOwn", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		id := ids.New("ch", time.Now())
		_, err := b.pool.Exec(ctx, `INSERT INTO charges (tenant_id, id, state, amount, currency, payment_method, provider,
			provider_key, created_at, updated_at)
			VALUES ($1, $2, 'pending', 1, 'USD', 'pm', 'p', $3, now(), now())`, b.tenantID, id, intent.ProviderKeyFor(ids.New("ch", time.Now())))
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "charges_provider_key_of_id", pgErr.ConstraintName)
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM charges`).Scan(&n))
		require.Zero(t, n)
	})

	t.Run("TenantsAreKept", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		b.accept(ctx, t, "tenant-kept-0000001")
		for _, stmt := range []string{`DELETE FROM tenants WHERE id = $1`, `UPDATE tenants SET id = 'tn_00000000000000000000000000' WHERE id = $1`} {
			_, err := b.pool.Exec(ctx, stmt, b.tenantID)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, stmt)
			require.Equal(t, "CF011", pgErr.Code, stmt)
		}
		_, err := b.pool.Exec(ctx, `UPDATE tenants SET rate_limit = 5 WHERE id = $1`, b.tenantID)
		require.NoError(t, err, "a tenant's other columns still change")
	})

	// The audit trail names legal moves only, checked against
	// charge_transitions without locking it.
	t.Run("AuditRowNamesALegalMove", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		c := b.accept(ctx, t, "audit-legal-000001")
		insert := `INSERT INTO charge_audit (tenant_id, charge_id, from_state, to_state, actor, reason, attempt)
			VALUES ($1, $2, $3, $4, 'test', 'test', 0)`
		_, err := b.pool.Exec(ctx, insert, b.tenantID, c.ID, "succeeded", "pending")
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "charge_audit_legal_move", pgErr.ConstraintName)
		for _, tr := range intent.Transitions() {
			_, err := b.pool.Exec(ctx, insert, b.tenantID, c.ID, string(tr.From), string(tr.To))
			require.NoError(t, err, "%s -> %s", tr.From, tr.To)
		}
	})

	t.Run("TerminalStatesNeedTheirFacts", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		c := b.accept(ctx, t, "facts-000000000001")
		_, err := b.pool.Exec(ctx, `UPDATE charges SET state = 'submitting' WHERE id = $1`, c.ID)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `UPDATE charges SET state = 'succeeded' WHERE id = $1`, c.ID)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "charges_succeeded_has_provider_charge", pgErr.ConstraintName)
	})
}

func TestMoveCharge(t *testing.T) {
	t.Parallel()

	t.Run("MovesAndAppendsEvent", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.accept(ctx, t, "move-0000000000001")

		got, err := intent.MoveCharge(ctx, b.pool, intent.Move{
			TenantID: b.tenantID, ChargeID: c.ID, From: intent.StatePending, To: intent.StateSubmitting,
			Actor: "worker", Reason: "submit", CountAttempt: true,
		})
		require.NoError(t, err)
		require.Equal(t, intent.StateSubmitting, got.State)
		require.Equal(t, 1, got.Attempts)
		require.NotNil(t, got.FirstAttemptAt)
		require.NotNil(t, got.LastAttemptAt)

		got, err = intent.MoveCharge(ctx, b.pool, intent.Move{
			TenantID: b.tenantID, ChargeID: c.ID, From: intent.StateSubmitting, To: intent.StateUnknown,
			Actor: "worker", Reason: "timeout", CheckAfter: 90 * time.Second,
		})
		require.NoError(t, err)
		require.Equal(t, intent.StateUnknown, got.State)
		require.NotNil(t, got.NextCheckAt)
		require.NotNil(t, got.UnknownSince)
		require.InDelta(t, 90, got.NextCheckAt.Sub(*got.UnknownSince).Seconds(), 0.001)

		got, err = intent.MoveCharge(ctx, b.pool, intent.Move{
			TenantID: b.tenantID, ChargeID: c.ID, From: intent.StateUnknown, To: intent.StateSucceeded,
			Actor: "reconciler:r1", Reason: "lookup_found", ProviderChargeID: "py_123",
		})
		require.NoError(t, err)
		require.Equal(t, "py_123", got.ProviderChargeID)
		require.Nil(t, got.NextCheckAt)

		events, err := intent.AuditTrail(ctx, b.pool, b.tenantID, c.ID)
		require.NoError(t, err)
		var moves []string
		for _, e := range events {
			moves = append(moves, fmt.Sprintf("%s>%s:%s:%d", e.From, e.To, e.Reason, e.Attempt))
		}
		require.Equal(t, []string{">pending:accepted:0", "pending>submitting:submit:1", "submitting>unknown:timeout:1", "unknown>succeeded:lookup_found:1"}, moves)
	})

	t.Run("SendTimesAreTheMovesToSubmitting", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.accept(ctx, t, "sends-000000000001")
		other := b.accept(ctx, t, "sends-000000000002")

		sends, err := intent.SendTimes(ctx, b.pool, b.tenantID, c.ID)
		require.NoError(t, err)
		require.Empty(t, sends, "never sent")

		var moved []intent.Charge
		for _, m := range []struct{ from, to intent.State }{
			{intent.StatePending, intent.StateSubmitting}, {intent.StateSubmitting, intent.StatePending},
			{intent.StatePending, intent.StateSubmitting}, {intent.StateSubmitting, intent.StateUnknown},
		} {
			got, err := intent.MoveCharge(ctx, b.pool, intent.Move{TenantID: b.tenantID, ChargeID: c.ID, From: m.from, To: m.to,
				Actor: "worker", Reason: "test", CountAttempt: m.to == intent.StateSubmitting})
			require.NoError(t, err)
			if m.to == intent.StateSubmitting {
				moved = append(moved, got)
			}
		}
		_, err = intent.MoveCharge(ctx, b.pool, intent.Move{TenantID: b.tenantID, ChargeID: other.ID, From: intent.StatePending,
			To: intent.StateSubmitting, Actor: "worker", Reason: "test", CountAttempt: true})
		require.NoError(t, err)

		sends, err = intent.SendTimes(ctx, b.pool, b.tenantID, c.ID)
		require.NoError(t, err)
		require.Len(t, sends, 2, "one per attempt, none of another charge's")
		for i, send := range sends {
			require.False(t, send.Before(*moved[i].LastAttemptAt), "recorded in the move's transaction, before the request left")
			require.WithinDuration(t, *moved[i].LastAttemptAt, send, time.Second)
		}
		require.True(t, sends[0].Before(sends[1]), "oldest first")
	})

	t.Run("CompareAndSetNeverOverwrites", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.accept(ctx, t, "cas-00000000000001")

		move := intent.Move{TenantID: b.tenantID, ChargeID: c.ID, From: intent.StatePending, To: intent.StateSubmitting, Actor: "worker", Reason: "submit"}
		_, err := intent.MoveCharge(ctx, b.pool, move)
		require.NoError(t, err)
		_, err = intent.MoveCharge(ctx, b.pool, move)
		require.ErrorIs(t, err, intent.ErrConflict)
		var conflict *intent.ConflictError
		require.ErrorAs(t, err, &conflict)
		require.Equal(t, intent.StateSubmitting, conflict.Current)

		events, err := intent.AuditTrail(ctx, b.pool, b.tenantID, c.ID)
		require.NoError(t, err)
		require.Len(t, events, 2, "a lost compare-and-set appends no event")
	})

	t.Run("StaleLeaseTokenIsFenced", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.accept(ctx, t, "fence-000000000001")
		_, err := b.pool.Exec(ctx, `UPDATE charges SET lease_token = 7 WHERE id = $1`, c.ID)
		require.NoError(t, err)

		move := intent.Move{TenantID: b.tenantID, ChargeID: c.ID, From: intent.StatePending, To: intent.StateFailed,
			Actor: "reconciler:r1", Reason: "test", FailureCode: "x", LeaseToken: 6}
		_, err = intent.MoveCharge(ctx, b.pool, move)
		require.ErrorIs(t, err, intent.ErrFenced)
		require.NotErrorIs(t, err, intent.ErrConflict)

		move.LeaseToken = 7
		got, err := intent.MoveCharge(ctx, b.pool, move)
		require.NoError(t, err)
		require.Equal(t, intent.StateFailed, got.State)
		require.Equal(t, int64(7), got.LeaseToken, "moves never lower the token")
	})

	t.Run("IllegalMoveRefusedInGo", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.accept(ctx, t, "illegal-go-0000001")

		_, err := intent.MoveCharge(ctx, b.pool, intent.Move{TenantID: b.tenantID, ChargeID: c.ID,
			From: intent.StatePending, To: intent.StateSucceeded, Actor: "x", Reason: "x", ProviderChargeID: "py"})
		require.ErrorIs(t, err, intent.ErrIllegalMove)
	})

	t.Run("MissingChargeIsNotFound", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		_, err := intent.MoveCharge(ctx, b.pool, intent.Move{TenantID: b.tenantID, ChargeID: ids.New("ch", time.Now()),
			From: intent.StatePending, To: intent.StateSubmitting, Actor: "x", Reason: "x"})
		require.ErrorIs(t, err, intent.ErrNotFound)
	})
}

func TestList(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)

	var ids []string
	for i := range 5 {
		ids = append(ids, b.accept(ctx, t, fmt.Sprintf("list-%014d", i)).ID)
		time.Sleep(2 * time.Millisecond) // ids order by millisecond
	}
	slices.Reverse(ids)

	page, more, err := intent.List(ctx, b.pool, intent.ListParams{TenantID: b.tenantID, Limit: 2})
	require.NoError(t, err)
	require.True(t, more)
	require.Equal(t, ids[:2], chargeIDs(page))

	page, more, err = intent.List(ctx, b.pool, intent.ListParams{TenantID: b.tenantID, Limit: 2, StartingAfter: ids[1]})
	require.NoError(t, err)
	require.True(t, more)
	require.Equal(t, ids[2:4], chargeIDs(page))

	page, more, err = intent.List(ctx, b.pool, intent.ListParams{TenantID: b.tenantID, Limit: 2, StartingAfter: ids[3]})
	require.NoError(t, err)
	require.False(t, more)
	require.Equal(t, ids[4:], chargeIDs(page))

	page, _, err = intent.List(ctx, b.pool, intent.ListParams{TenantID: b.tenantID, Limit: 10, State: intent.StateFailed})
	require.NoError(t, err)
	require.Empty(t, page)

	page, _, err = intent.List(ctx, b.pool, intent.ListParams{TenantID: "tn_00000000000000000000000000", Limit: 10})
	require.NoError(t, err)
	require.Empty(t, page, "another tenant sees nothing")
}

func chargeIDs(cs []intent.Charge) []string {
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.ID)
	}
	return ids
}

func TestCanMove(t *testing.T) {
	t.Parallel()

	require.True(t, intent.CanMove(intent.StateUnknown, intent.StatePending))
	require.False(t, intent.CanMove(intent.StateSucceeded, intent.StateFailed))
	for _, s := range intent.States() {
		require.True(t, s.Valid())
		if s.Terminal() {
			for _, to := range intent.States() {
				require.False(t, intent.CanMove(s, to), "%s is terminal", s)
			}
		}
	}
	require.False(t, intent.State("done").Valid())
	require.False(t, errors.Is(nil, intent.ErrConflict))
}

// acceptWithJob accepts a charge the way the API does; with job, the job
// row is written by the same statement.
func (b *testBundle) acceptWithJob(_ context.Context, t *testing.T, key string, job *intent.JobRow) intent.Charge {
	t.Helper()
	return dbtest.PendingCharge(t, b.pool, dbtest.Charge{TenantID: b.tenantID, Key: key, Metadata: map[string]string{"order": "A-1"},
		Job: func(string) *intent.JobRow { return job }})
}

// Accept writes the job row it is given, as given, in its statement, and
// none without one (package submit holds the row to River's own insert).
func TestAcceptWritesJobRow(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	b.accept(ctx, t, "key-0000000000000001")
	c := b.acceptWithJob(ctx, t, "key-0000000000000002", &intent.JobRow{
		Kind: "test.kind", Args: []byte(`{"n": 1}`), Queue: "q", Priority: 2, MaxAttempts: 3,
	})

	var kind, args, metadata, queue, state string
	var priority, maxAttempts, jobs int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&jobs))
	require.Equal(t, 1, jobs, "one job: the charge accepted without a job row has none")
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT kind, args::text, metadata::text, queue, state::text, priority, max_attempts
		FROM river_job`).Scan(&kind, &args, &metadata, &queue, &state, &priority, &maxAttempts))
	require.Equal(t, []any{"test.kind", `{"n": 1}`, "{}", "q", "available", 2, 3},
		[]any{kind, args, metadata, queue, state, priority, maxAttempts})

	_, err := intent.Accept(ctx, b.pool, intent.Acceptance{Charge: c, Job: &intent.JobRow{Kind: "test.kind", MaxAttempts: 0}})
	require.ErrorContains(t, err, "max attempts")
}

// TestSQLIdsAreIds checks that the ids Postgres makes (chargeflow_id: event
// ids, written by trigger) have internal/ids' layout: valid, distinct, and
// led by the milliseconds of their making, as ids.New's are.
func TestSQLIdsAreIds(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)

	before := ids.New("evt", time.Now())
	rows, err := b.pool.Query(ctx, `SELECT chargeflow_id('evt') FROM generate_series(1, 2000)`)
	require.NoError(t, err)
	made, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	after := ids.New("evt", time.Now().Add(time.Millisecond))

	seen := map[string]bool{}
	for _, id := range made {
		require.True(t, ids.Valid("evt", id), id)
		require.False(t, seen[id], "duplicate %s", id)
		seen[id] = true
		// The first 10 digits are two zero bits and the 48 bits of
		// milliseconds: they sort between ids made just before and after.
		require.GreaterOrEqual(t, id[:14], before[:14], id)
		require.LessOrEqual(t, id[:14], after[:14], id)
	}
}

// TestMoveManyTakesOnlyWhatItNames checks that a claim made by MoveMany
// moves a charge only under its own tenant, and only if pending.
func TestMoveManyTakesOnlyWhatItNames(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)

	mine := b.accept(ctx, t, "claim-mine-000000001")
	other := dbtest.Tenant(t, b.pool, "another tenant")
	claim := func(tenantID, chargeID string) intent.Move {
		return intent.Move{TenantID: tenantID, ChargeID: chargeID, From: intent.StatePending, To: intent.StateSubmitting,
			Actor: "worker", Reason: "submit", CountAttempt: true}
	}
	moved, err := intent.MoveMany(ctx, b.pool, []intent.Move{
		claim(other, mine.ID),                        // someone else's name for it
		claim(b.tenantID, ids.New("ch", time.Now())), // no such charge
	})
	require.NoError(t, err)
	require.Empty(t, moved)
	got, err := intent.Get(ctx, b.pool, b.tenantID, mine.ID)
	require.NoError(t, err)
	require.Equal(t, intent.StatePending, got.State)

	moved, err = intent.MoveMany(ctx, b.pool, []intent.Move{claim(b.tenantID, mine.ID)})
	require.NoError(t, err)
	require.Len(t, moved, 1)
	c := moved[intent.Ref{TenantID: b.tenantID, ChargeID: mine.ID}]
	require.Equal(t, intent.StateSubmitting, c.State)
	require.Equal(t, 1, c.Attempts)
	require.NotNil(t, c.FirstAttemptAt)
	events, err := intent.AuditTrail(ctx, b.pool, b.tenantID, mine.ID)
	require.NoError(t, err)
	require.Equal(t, intent.StateSubmitting, events[len(events)-1].To)
	require.Equal(t, "worker", events[len(events)-1].Actor)
}

// TestMoveManyRefusesWhatMoveChargeRefuses checks MoveMany's checks before
// any SQL: the state machine, the facts of the target state, distinct and
// unfenced moves; nothing is written when one move of the lot is refused.
func TestMoveManyRefusesWhatMoveChargeRefuses(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)

	c := b.accept(ctx, t, "move-many-000000001")
	ok := intent.Move{TenantID: b.tenantID, ChargeID: c.ID, From: intent.StatePending, To: intent.StateSubmitting,
		Actor: "worker", Reason: "submit", CountAttempt: true}
	illegal := ok
	illegal.To = intent.StateSucceeded
	noFacts := ok
	noFacts.From, noFacts.To = intent.StateSubmitting, intent.StateFailed
	fenced := ok
	fenced.LeaseToken = 7
	for name, moves := range map[string][]intent.Move{
		"illegal move":     {ok, illegal},
		"missing facts":    {noFacts},
		"a fenced move":    {fenced},
		"one charge twice": {ok, ok},
	} {
		_, err := intent.MoveMany(ctx, b.pool, moves)
		require.Error(t, err, name)
	}
	got, err := intent.Get(ctx, b.pool, b.tenantID, c.ID)
	require.NoError(t, err)
	require.Equal(t, intent.StatePending, got.State, "nothing was moved")

	moved, err := intent.MoveMany(ctx, b.pool, []intent.Move{ok})
	require.NoError(t, err)
	require.Equal(t, intent.StateSubmitting, moved[intent.Ref{TenantID: b.tenantID, ChargeID: c.ID}].State)
}

// TestMoveManyWritesWhatMoveChargeWrites checks that each move of a mixed
// batch writes its own facts, exactly as MoveCharge writes them. Each path
// of moves is walked twice, on twin charges: one twin alone by MoveCharge,
// the other in one MoveMany statement per step with the other paths' twins.
// The rows and their audit trails must match. A statement that read one
// move's facts for another (its place in the batch's arrays) fails here.
func TestMoveManyWritesWhatMoveChargeWrites(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)

	claim := intent.Move{From: intent.StatePending, To: intent.StateSubmitting, Reason: "submit", CountAttempt: true}
	paths := [][]intent.Move{
		{claim, {From: intent.StateSubmitting, To: intent.StateSucceeded, Reason: "provider_succeeded", ProviderChargeID: "py_many_1"}},
		{claim, {From: intent.StateSubmitting, To: intent.StateFailed, Reason: "provider_declined", FailureCode: "card_declined", Evidence: "declined twice"}},
		{claim, {From: intent.StateSubmitting, To: intent.StateUnknown, Reason: "unknown:timeout", CheckAfter: 90 * time.Second},
			{From: intent.StateUnknown, To: intent.StateNeedsReview, Reason: "amount_mismatch", ReviewReason: "amount_mismatch"}},
		{claim, {From: intent.StateSubmitting, To: intent.StateUnknown, Reason: "unknown:reset", CheckAfter: 3 * time.Second, ProviderChargeID: "py_many_4"},
			{From: intent.StateUnknown, To: intent.StateSucceeded, Reason: "lookup_found", ProviderChargeID: "py_many_4"}},
		{claim, {From: intent.StateSubmitting, To: intent.StatePending, Reason: "not_applied:refused"}},
		{{From: intent.StatePending, To: intent.StateFailed, Reason: "attempts_exhausted", FailureCode: "provider_unavailable"}},
	}
	type twin struct{ alone, batched string }
	twins := make([]twin, len(paths))
	for i := range paths {
		twins[i] = twin{b.accept(ctx, t, fmt.Sprintf("many-alone-%012d", i)).ID, b.accept(ctx, t, fmt.Sprintf("many-batch-%012d", i)).ID}
	}
	for step := 0; ; step++ {
		var batch []intent.Move
		for i, path := range paths {
			if step >= len(path) {
				continue
			}
			m := path[step]
			m.TenantID, m.Actor = b.tenantID, "worker"
			m.ChargeID = twins[i].alone
			_, err := intent.MoveCharge(ctx, b.pool, m)
			require.NoError(t, err, "path %d, step %d", i, step)
			m.ChargeID = twins[i].batched
			batch = append(batch, m)
		}
		if len(batch) == 0 {
			break
		}
		moved, err := intent.MoveMany(ctx, b.pool, batch)
		require.NoError(t, err)
		require.Len(t, moved, len(batch), "step %d", step)
		for _, m := range batch {
			stored, err := intent.Get(ctx, b.pool, b.tenantID, m.ChargeID)
			require.NoError(t, err)
			require.Equal(t, facts(stored), facts(moved[intent.Ref{TenantID: b.tenantID, ChargeID: m.ChargeID}]),
				"MoveMany returns the row as stored")
		}
	}

	for i, tw := range twins {
		alone, err := intent.Get(ctx, b.pool, b.tenantID, tw.alone)
		require.NoError(t, err)
		batched, err := intent.Get(ctx, b.pool, b.tenantID, tw.batched)
		require.NoError(t, err)
		require.Equal(t, facts(alone), facts(batched), "path %d", i)
		require.Equal(t, paths[i][len(paths[i])-1].To, batched.State)

		aloneEvents, err := intent.AuditTrail(ctx, b.pool, b.tenantID, tw.alone)
		require.NoError(t, err)
		batchedEvents, err := intent.AuditTrail(ctx, b.pool, b.tenantID, tw.batched)
		require.NoError(t, err)
		require.Equal(t, eventFacts(aloneEvents), eventFacts(batchedEvents), "path %d", i)
	}
}

// facts is what a move writes on a charge, without its ids and times; a
// time is kept as whether it is set, and the check's delay as the gap
// between unknown_since and next_check_at.
func facts(c intent.Charge) []any {
	var checkAfter time.Duration
	if c.UnknownSince != nil && c.NextCheckAt != nil {
		checkAfter = c.NextCheckAt.Sub(*c.UnknownSince).Round(time.Second)
	}
	return []any{c.State, c.Attempts, c.ProviderChargeID, c.FailureCode, c.ReviewReason, c.LookupFailures,
		c.FirstAttemptAt != nil, c.LastAttemptAt != nil, c.UnknownSince != nil, c.NextCheckAt != nil, checkAfter,
		c.LeaseOwner, c.LeaseExpiresAt != nil}
}

// eventFacts is a charge's audit trail without ids and times.
func eventFacts(events []intent.AuditEntry) [][]any {
	var out [][]any
	for _, e := range events {
		out = append(out, []any{e.From, e.To, e.Actor, e.Reason, e.Attempt, e.Evidence, e.Action})
	}
	return out
}

// KeyInFlight tells a key another transaction holds from one that is free
// or committed, and writes nothing either way.
func TestKeyInFlight(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	hash := func(key string) []byte { h := sha256.Sum256([]byte(key)); return h[:] }

	free, err := intent.KeyInFlight(ctx, b.pool, b.tenantID, hash("in-flight-free-0001"), 50*time.Millisecond)
	require.NoError(t, err)
	require.False(t, free)

	b.accept(ctx, t, "in-flight-done-0001")
	committed, err := intent.KeyInFlight(ctx, b.pool, b.tenantID, hash("in-flight-done-0001"), 50*time.Millisecond)
	require.NoError(t, err)
	require.False(t, committed)

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	c := dbtest.PendingCharge(t, tx, dbtest.Charge{TenantID: b.tenantID, Key: "in-flight-held-0001"})
	held, err := intent.KeyInFlight(ctx, b.pool, b.tenantID, hash("in-flight-held-0001"), 50*time.Millisecond)
	require.NoError(t, err)
	require.True(t, held)
	require.NoError(t, tx.Rollback(ctx))

	var records int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&records))
	require.Equal(t, 1, records, "the probes wrote nothing")
	_, err = intent.Get(ctx, b.pool, b.tenantID, c.ID)
	require.ErrorIs(t, err, intent.ErrNotFound)
}
