package pg_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/internal/pg"
)

// TestConfirmedRefusesACancelledSyncWait cancels commits that wait for a
// synchronous standby that does not answer, and checks what each way of
// committing then reports: the server says COMMIT and the row is there, yet
// Confirmed fails; outside Confirmed the warning reaches the unwatched hook.
func TestConfirmedRefusesACancelledSyncWait(t *testing.T) {
	t.Parallel()
	server := dbtest.SyncStandbyServer(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(server.URL("postgres"))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = "confirm-test"
	var unwatched atomic.Int64
	pg.Observe(cfg.ConnConfig, func(*pgconn.Notice) { unwatched.Add(1) })
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, `CREATE TABLE t (n int PRIMARY KEY)`)
	require.NoError(t, err)
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n))
		return n
	}

	server.Vanish()
	cancelled := func(fn func(context.Context) error, confirm bool) error {
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			if confirm {
				err = pg.Confirmed(ctx, fn)
			} else {
				err = fn(ctx)
			}
		}()
		require.Equal(t, 1, server.CancelWaitsUntil("confirm-test", done))
		return err
	}
	insert := func(n int) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := pool.Exec(ctx, `INSERT INTO t VALUES ($1)`, n)
			return err
		}
	}

	// A statement that is its own transaction.
	require.ErrorIs(t, cancelled(insert(1), true), pg.ErrCommitUnconfirmed)
	require.Equal(t, 1, count(), "the server committed it locally")
	require.Zero(t, unwatched.Load())

	// An explicit transaction's commit.
	err = cancelled(func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO t VALUES (2)`)
			return err
		})
	}, true)
	require.ErrorIs(t, err, pg.ErrCommitUnconfirmed)
	require.Equal(t, 2, count())

	// A query whose rows are read: the warning comes with its end.
	err = cancelled(func(ctx context.Context) error {
		var n int
		return pool.QueryRow(ctx, `INSERT INTO t VALUES (3) RETURNING n`).Scan(&n)
	}, true)
	require.ErrorIs(t, err, pg.ErrCommitUnconfirmed)

	// Outside Confirmed, pgx reports success, which is why Confirmed
	// exists; the hook hears of it.
	require.NoError(t, cancelled(insert(4), false))
	require.Equal(t, int64(1), unwatched.Load())
	require.Equal(t, 4, count())

	// With the standby back, nothing waits and Confirmed passes.
	server.Return()
	require.NoError(t, pg.Confirmed(ctx, insert(5)))
	require.Equal(t, int64(1), unwatched.Load())
}

func TestCancelledSyncWaitRecognisesOnlyThatWarning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		n    pgconn.Notice
		want bool
	}{
		{"cancel", pgconn.Notice{SeverityUnlocalized: "WARNING", Code: "01000",
			Message: "canceling wait for synchronous replication due to user request",
			Detail:  "The transaction has already committed locally, but might not have been replicated to the standby."}, true},
		{"termination", pgconn.Notice{SeverityUnlocalized: "WARNING", Code: "57P01",
			Message: "canceling the wait for synchronous replication and terminating connection due to administrator command",
			Detail:  "The transaction has already committed locally, but might not have been replicated to the standby."}, true},
		{"another warning", pgconn.Notice{SeverityUnlocalized: "WARNING", Code: "25P01", Message: "there is no transaction in progress"}, false},
		{"a notice", pgconn.Notice{SeverityUnlocalized: "NOTICE", Code: "00000", Message: "synchronous replication is off"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, pg.CancelledSyncWait(&tc.n))
		})
	}
}
