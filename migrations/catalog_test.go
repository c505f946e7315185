package migrations_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/pg"
)

// catalogQueries read, from the catalogs, every part of the current schema
// a migration can make, each as text a diff shows: a line per object,
// columns by position, definitions as Postgres prints them back.
var catalogQueries = []string{
	`SELECT format('relation %s kind=%s persistence=%s rls=%s replica=%s options=%s', relname, relkind, relpersistence,
		relrowsecurity, relreplident, reloptions)
	FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind NOT IN ('i', 'I')`,
	`SELECT format('column %s.%s %s %s notnull=%s default=%s identity=%s generated=%s collation=%s', c.relname,
		lpad((row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum))::text, 3, '0'), a.attname,
		format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid), a.attidentity,
		a.attgenerated, a.attcollation::regcollation)
	FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
	LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')
	  AND a.attnum > 0 AND NOT a.attisdropped`,
	`SELECT format('constraint %s.%s %s deferrable=%s deferred=%s validated=%s', coalesce(conrelid::regclass::text,
		contypid::regtype::text), conname, pg_get_constraintdef(oid), condeferrable, condeferred, convalidated)
	FROM pg_constraint WHERE connamespace = current_schema()::regnamespace`,
	`SELECT format('index %s', indexdef) FROM pg_indexes WHERE schemaname = current_schema()`,
	`SELECT format('function %s %s', p.oid::regprocedure, CASE WHEN p.prokind IN ('f', 'p') THEN pg_get_functiondef(p.oid)
		ELSE p.prokind::text END)
	FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace`,
	`SELECT format('trigger %s.%s %s enabled=%s', tgrelid::regclass, tgname, pg_get_triggerdef(oid), tgenabled)
	FROM pg_trigger WHERE NOT tgisinternal AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = current_schema()::regnamespace)`,
	`SELECT format('sequence %s %s start=%s min=%s max=%s increment=%s cycle=%s cache=%s', sequencename, data_type,
		start_value, min_value, max_value, increment_by, cycle, cache_size)
	FROM pg_sequences WHERE schemaname = current_schema()`,
	`SELECT format('type %s %s %s', t.typname, t.typtype, coalesce(
		(SELECT string_agg(enumlabel, ',' ORDER BY enumsortorder) FROM pg_enum WHERE enumtypid = t.oid),
		format_type(t.typbasetype, t.typtypmod)))
	FROM pg_type t WHERE t.typnamespace = current_schema()::regnamespace AND t.typtype IN ('e', 'd', 'r', 'm')`,
	`SELECT format('view %s %s', viewname, definition) FROM pg_views WHERE schemaname = current_schema()`,
	`SELECT format('policy %s.%s %s %s %s %s', tablename, policyname, cmd, roles, qual, with_check)
	FROM pg_policies WHERE schemaname = current_schema()`,
	`SELECT format('rule %s.%s %s', tablename, rulename, definition) FROM pg_rules WHERE schemaname = current_schema()`,
	`SELECT format('comment %s %s', pg_describe_object(classoid, objoid, objsubid), description)
	FROM pg_description WHERE objoid >= 16384`, // FirstNormalObjectId: not the system's own
	`SELECT format('extension %s %s', extname, extversion) FROM pg_extension`,
}

// catalog is the schema of db's current schema as sorted lines of text.
func catalog(t *testing.T, db pg.Handle) []string {
	t.Helper()
	var lines []string
	for _, q := range catalogQueries {
		rows, err := db.Query(context.Background(), q)
		require.NoError(t, err, q)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err, q)
		lines = append(lines, got...)
	}
	require.Greater(t, len(lines), 100, "the catalog queries read next to nothing")
	slices.Sort(lines)
	return lines
}

// requireSameCatalog fails with the lines of one catalog that the other
// lacks, rather than with both catalogs whole.
func requireSameCatalog(t *testing.T, want, got []string, msg string) {
	t.Helper()
	var diff []string
	for _, line := range want {
		if !slices.Contains(got, line) {
			diff = append(diff, "- "+line)
		}
	}
	for _, line := range got {
		if !slices.Contains(want, line) {
			diff = append(diff, "+ "+line)
		}
	}
	require.Empty(t, diff, msg)
	require.Equal(t, want, got, msg) // and each as many times
}

// bookkeeping are the migrator's own tables: what they hold is the record
// of migrating, not data.
var bookkeeping = []string{"chargeflow_migrations", "chargeflow_functions"}

// rows is every row of every table of db's current schema but the
// migrator's own, as text, keyed by table, and every sequence's position.
func rows(t *testing.T, db pg.Handle) map[string][]string {
	t.Helper()
	ctx := context.Background()
	r, err := db.Query(ctx, `SELECT relname FROM pg_class
		WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'p') AND NOT relname = ANY ($1)`, bookkeeping)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	all := map[string][]string{}
	for _, table := range tables {
		var got []string
		require.NoError(t, db.QueryRow(ctx, fmt.Sprintf(`SELECT coalesce(array_agg(t::text ORDER BY t::text), '{}') FROM %s t`,
			pgx.Identifier{table}.Sanitize())).Scan(&got))
		all[table] = got
	}
	r, err = db.Query(ctx, `SELECT format('%s %s', sequencename, last_value) FROM pg_sequences WHERE schemaname = current_schema()`)
	require.NoError(t, err)
	all["sequences"], err = pgx.CollectRows(r, pgx.RowTo[string])
	require.NoError(t, err)
	slices.Sort(all["sequences"])
	return all
}
