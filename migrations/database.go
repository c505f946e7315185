package migrations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ConnectTimeout is how long a connection may take to be made, startup and
// authentication included, when the URL does not say (connect_timeout):
// without it a server that accepts connections and never answers holds a
// starting process forever.
const ConnectTimeout = 5 * time.Second

// CreateDatabase creates the database that connString names when it does not
// exist yet, by connecting to the server's maintenance database. Two processes
// racing to create it both succeed. Each connection is bounded by
// ConnectTimeout unless the URL sets connect_timeout.
func CreateDatabase(ctx context.Context, connString string) error {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return fmt.Errorf("parse database url: %w", err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = ConnectTimeout
	}
	name := cfg.Database
	if name == "" || name == "postgres" {
		return nil
	}

	// Most of the time the database exists: try it first, cheaply.
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("connect to database %q: %w", name, err)
	}

	admin := cfg.Copy()
	admin.Database = "postgres"
	adminConn, err := pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("connect to maintenance database to create %q: %w", name, err)
	}
	defer adminConn.Close(context.WithoutCancel(ctx))
	_, err = adminConn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505") { // duplicate_database, or the catalog race
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %q: %w", name, err)
	}
	return nil
}
