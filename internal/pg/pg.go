// Package pg names what chargeflow's stores need from a Postgres handle, so
// that one function serves a pool, a connection or a transaction alike: a
// caller that passes its pgx.Tx makes the call part of its transaction.
// Confirmed (confirm.go) tells a commit from one whose wait for the
// synchronous standby was cancelled.
//
// It imports nothing of chargeflow's, so every package may use it.
package pg

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Handle is a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Handle interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
