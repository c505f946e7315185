// Package migrations holds chargeflow's schema as embedded SQL files and
// applies it, River's own tables included.
//
// Apply is safe to run twice and from several processes at once: the whole
// run holds a Postgres advisory lock, River's migrations go first (our schema
// does not depend on them, but our workers do), then every file of sql/ that
// is not yet recorded in chargeflow_migrations, each in its own transaction.
package migrations

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed sql/*.sql
var files embed.FS

// lockKey is the advisory lock every migrating process takes first, so that
// two `chargeflow migrate` runs apply each file exactly once.
const lockKey int64 = 0x63686172676566 // "chargef"

// ErrNotCurrent means the database is missing migrations this binary expects.
var ErrNotCurrent = errors.New("migrations: database schema is not current")

// Migration is one embedded SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns the embedded migrations in version order.
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(files, "sql")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var all []Migration
	for _, entry := range entries {
		name := entry.Name()
		prefix, _, ok := strings.Cut(name, "_")
		version, err := strconv.Atoi(prefix)
		if !ok || err != nil || version <= 0 {
			return nil, fmt.Errorf("migration file %q: name must start with a positive version and an underscore", name)
		}
		body, err := fs.ReadFile(files, path.Join("sql", name))
		if err != nil {
			return nil, fmt.Errorf("read migration %q: %w", name, err)
		}
		all = append(all, Migration{Version: version, Name: strings.TrimSuffix(name, ".sql"), SQL: string(body)})
	}
	slices.SortFunc(all, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(all); i++ {
		if all[i].Version == all[i-1].Version {
			return nil, fmt.Errorf("migrations %q and %q share version %d", all[i-1].Name, all[i].Name, all[i].Version)
		}
	}
	return all, nil
}

// Hash identifies the fully migrated schema: every embedded file and River's
// migration versions. Test databases are cloned from a template keyed by it.
func Hash() (string, error) {
	all, err := All()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range all {
		fmt.Fprintf(h, "%d\n%s\n%s\n", m.Version, m.Name, m.SQL)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err != nil {
		return "", fmt.Errorf("river migrator: %w", err)
	}
	for _, m := range migrator.AllVersions() {
		fmt.Fprintf(h, "river %d %s\n", m.Version, m.SQLUp)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Apply brings the database up to date. It logs each migration it applies.
func Apply(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	all, err := All()
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection for migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	defer func() {
		// A fresh context: the lock must be released even if ctx is done,
		// otherwise the pooled connection would keep holding it.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockKey)
	}()

	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("apply river migrations: %w", err)
	}
	for _, v := range res.Versions {
		logger.InfoContext(ctx, "applied river migration", "version", v.Version, "name", v.Name)
	}

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS chargeflow_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("create chargeflow_migrations: %w", err)
	}
	applied, err := appliedVersions(ctx, conn.Conn())
	if err != nil {
		return err
	}
	for _, m := range all {
		if applied[m.Version] {
			continue
		}
		if err := applyOne(ctx, conn.Conn(), m); err != nil {
			return err
		}
		logger.InfoContext(ctx, "applied migration", "version", m.Version, "name", m.Name)
	}
	return nil
}

func applyOne(ctx context.Context, conn *pgx.Conn, m Migration) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("apply migration %s: %w", m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO chargeflow_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			return fmt.Errorf("record migration %s: %w", m.Name, err)
		}
		return nil
	})
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func appliedVersions(ctx context.Context, db querier) (map[int]bool, error) {
	rows, err := db.Query(ctx, "SELECT version FROM chargeflow_migrations")
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	applied := make(map[int]bool, len(versions))
	for _, v := range versions {
		applied[v] = true
	}
	return applied, nil
}

// Check reports ErrNotCurrent unless every embedded migration and every River
// migration has been applied. /readyz calls it.
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	all, err := All()
	if err != nil {
		return err
	}
	applied, err := appliedVersions(ctx, pool)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
			return fmt.Errorf("%w: chargeflow_migrations is missing (run chargeflow migrate)", ErrNotCurrent)
		}
		return err
	}
	for _, m := range all {
		if !applied[m.Version] {
			return fmt.Errorf("%w: migration %s is not applied", ErrNotCurrent, m.Name)
		}
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	res, err := migrator.Validate(ctx, nil)
	if err != nil {
		return fmt.Errorf("validate river migrations: %w", err)
	}
	if !res.OK {
		return fmt.Errorf("%w: river: %s", ErrNotCurrent, strings.Join(res.Messages, "; "))
	}
	return nil
}
