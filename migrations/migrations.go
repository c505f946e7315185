// Package migrations holds chargeflow's schema as embedded SQL files and
// applies it, River's own tables included.
//
// The schema is two kinds of file (docs/architecture.md, "Migrations"):
//
//   - sql/NNNN_name.sql, the versioned migrations: tables, indexes,
//     constraints and data. Each is applied once, in version order, in its
//     own transaction, and recorded in chargeflow_migrations.
//     0001_baseline is the schema as it stood before the first release.
//   - functions/name.sql: one SQL function with the triggers that call it,
//     defined once and written to be applied again (CREATE OR REPLACE).
//     A file is applied when its text differs from the text recorded in
//     chargeflow_functions (by its hash), and after any migration, which
//     may have remade a table its triggers are on; files go in name order,
//     each in its own transaction. A function is read in one place and
//     changed in one place: its file.
//
// Apply is safe to run twice and from several processes at once: the whole
// run holds a Postgres advisory lock, and River's migrations go first (the
// baseline indexes river_job, and our workers need River's tables).
package migrations

import (
	"bytes"
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

	"github.com/chargeflow/chargeflow/internal/logx"
)

//go:embed sql/*.sql functions/*.sql
var files embed.FS

// lockKey is the advisory lock every migrating process takes first, so that
// two `chargeflow migrate` runs apply each file exactly once.
const lockKey int64 = 0x63686172676566 // "chargef"

// ErrNotCurrent means the database is missing migrations or functions this
// binary expects.
var ErrNotCurrent = errors.New("migrations: database schema is not current")

// Migration is one versioned SQL file of sql/.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// functionFile is one file of functions/: a function and the triggers that
// call it, applied again whenever its text changes.
type functionFile struct {
	// Name is the file's name without .sql: the function's name.
	Name string
	SQL  string
}

// hash is what chargeflow_functions records of the file's text.
func (f functionFile) hash() []byte {
	sum := sha256.Sum256([]byte(f.SQL))
	return sum[:]
}

// embedded returns the files of one embedded directory, names without
// .sql, in name order.
func embedded(dir string) (names, bodies []string, err error) {
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("read embedded %s: %w", dir, err)
	}
	for _, entry := range entries {
		body, err := fs.ReadFile(files, path.Join(dir, entry.Name()))
		if err != nil {
			return nil, nil, fmt.Errorf("read embedded %s: %w", path.Join(dir, entry.Name()), err)
		}
		names = append(names, strings.TrimSuffix(entry.Name(), ".sql"))
		bodies = append(bodies, string(body))
	}
	return names, bodies, nil
}

// All returns the embedded migrations in version order.
func All() ([]Migration, error) {
	names, bodies, err := embedded("sql")
	if err != nil {
		return nil, err
	}
	var all []Migration
	for i, name := range names {
		prefix, _, ok := strings.Cut(name, "_")
		version, err := strconv.Atoi(prefix)
		if !ok || err != nil || version <= 0 {
			return nil, fmt.Errorf("migration file %q: name must start with a positive version and an underscore", name)
		}
		all = append(all, Migration{Version: version, Name: name, SQL: bodies[i]})
	}
	slices.SortFunc(all, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(all); i++ {
		if all[i].Version == all[i-1].Version {
			return nil, fmt.Errorf("migrations %q and %q share version %d", all[i-1].Name, all[i].Name, all[i].Version)
		}
	}
	return all, nil
}

// functionFiles returns the embedded function files in name order.
func functionFiles() ([]functionFile, error) {
	names, bodies, err := embedded("functions")
	if err != nil {
		return nil, err
	}
	all := make([]functionFile, len(names))
	for i, name := range names {
		all[i] = functionFile{Name: name, SQL: bodies[i]}
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
	functions, err := functionFiles()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, m := range all {
		fmt.Fprintf(h, "%d\n%s\n%s\n", m.Version, m.Name, m.SQL)
	}
	for _, f := range functions {
		fmt.Fprintf(h, "function %s\n%s\n", f.Name, f.SQL)
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

// Apply brings the database up to date: River's migrations, a migration
// history from before the baseline recorded as the baseline (upgrade.go),
// the versioned migrations not yet applied, then the function files that
// changed. It logs one line at INFO, what it applied or that nothing was
// due, and each file it applies at DEBUG.
func Apply(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	all, err := All()
	if err != nil {
		return err
	}
	functions, err := functionFiles()
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

	// River logs each of its migrations at INFO; ours below says the same
	// at DEBUG.
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(logx.Quieter(logger.Handler()))})
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("apply river migrations: %w", err)
	}
	for _, v := range res.Versions {
		logger.DebugContext(ctx, "applied river migration", "version", v.Version, "name", v.Name)
	}

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS chargeflow_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("create chargeflow_migrations: %w", err)
	}
	if err := upgradeHistory(ctx, conn.Conn(), all, logger); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS chargeflow_functions (
		name       text PRIMARY KEY,
		sha256     bytea NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("create chargeflow_functions: %w", err)
	}
	applied, err := appliedVersions(ctx, conn.Conn())
	if err != nil {
		return err
	}
	ran, migrated, refreshed := false, 0, 0
	for _, m := range all {
		if name, ok := applied[m.Version]; ok {
			if name != m.Name {
				return fmt.Errorf("migrations: version %d is recorded as %s, but this build's is %s", m.Version, name, m.Name)
			}
			continue
		}
		if err := applyOne(ctx, conn.Conn(), m); err != nil {
			return err
		}
		ran, migrated = true, migrated+1
		logger.DebugContext(ctx, "applied migration", "version", m.Version, "name", m.Name)
	}

	recorded, err := appliedFunctions(ctx, conn.Conn())
	if err != nil {
		return err
	}
	for _, f := range functions {
		if !ran && bytes.Equal(recorded[f.Name], f.hash()) {
			continue
		}
		if err := applyFunction(ctx, conn.Conn(), f); err != nil {
			return err
		}
		refreshed++
		logger.DebugContext(ctx, "applied function", "name", f.Name)
	}
	if len(res.Versions) == 0 && migrated == 0 && refreshed == 0 {
		logger.InfoContext(ctx, "database is up to date")
		return nil
	}
	logger.InfoContext(ctx, "database migrated", "river_migrations", len(res.Versions), "migrations", migrated, "functions", refreshed)
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

// applyFunction applies one function file and records its hash, in one
// transaction. A file's triggers are on one table, so the transaction locks
// one table and cannot deadlock with the application's writes.
func applyFunction(ctx context.Context, conn *pgx.Conn, f functionFile) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, f.SQL); err != nil {
			return fmt.Errorf("apply function %s: %w", f.Name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO chargeflow_functions (name, sha256) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET sha256 = excluded.sha256, applied_at = now()`, f.Name, f.hash()); err != nil {
			return fmt.Errorf("record function %s: %w", f.Name, err)
		}
		return nil
	})
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// appliedVersions returns the name recorded for each applied version.
func appliedVersions(ctx context.Context, db querier) (map[int]string, error) {
	rows, err := db.Query(ctx, "SELECT version, name FROM chargeflow_migrations")
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	applied := map[int]string{}
	var version int
	var name string
	if _, err := pgx.ForEachRow(rows, []any{&version, &name}, func() error {
		applied[version] = name
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	return applied, nil
}

// appliedFunctions returns the hash recorded for each applied function file.
func appliedFunctions(ctx context.Context, db querier) (map[string][]byte, error) {
	rows, err := db.Query(ctx, "SELECT name, sha256 FROM chargeflow_functions")
	if err != nil {
		return nil, fmt.Errorf("read applied functions: %w", err)
	}
	recorded := map[string][]byte{}
	var name string
	var sum []byte
	if _, err := pgx.ForEachRow(rows, []any{&name, &sum}, func() error {
		recorded[name] = slices.Clone(sum)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read applied functions: %w", err)
	}
	return recorded, nil
}

// Check reports ErrNotCurrent unless every embedded migration, every
// function file as embedded and every River migration has been applied.
// /readyz calls it.
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	all, err := All()
	if err != nil {
		return err
	}
	functions, err := functionFiles()
	if err != nil {
		return err
	}
	applied, err := appliedVersions(ctx, pool)
	if err != nil {
		return missingTable(err)
	}
	for _, m := range all {
		if applied[m.Version] != m.Name {
			return fmt.Errorf("%w: migration %s is not applied (run chargeflow migrate)", ErrNotCurrent, m.Name)
		}
	}
	recorded, err := appliedFunctions(ctx, pool)
	if err != nil {
		return missingTable(err)
	}
	for _, f := range functions {
		if !bytes.Equal(recorded[f.Name], f.hash()) {
			return fmt.Errorf("%w: function %s is not applied as this build has it (run chargeflow migrate)", ErrNotCurrent, f.Name)
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

// missingTable turns the error of reading a bookkeeping table that does not
// exist into ErrNotCurrent.
func missingTable(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return fmt.Errorf("%w: %s (run chargeflow migrate)", ErrNotCurrent, pgErr.Message)
	}
	return err
}
