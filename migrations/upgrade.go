package migrations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// beforeBaseline are the migrations that built the schema during
// development, until 0001_baseline took their place: a database that
// recorded every one of them holds the baseline's tables exactly
// (migrations/testdata/v0015 keeps the files, and the upgrade test
// compares the two schemas).
var beforeBaseline = []string{
	"0001_charges",
	"0002_event_lease_token",
	"0003_stranded_pending",
	"0004_operators",
	"0005_operator_sessions",
	"0006_refunds",
	"0007_events",
	"0008_webhook_endpoints",
	"0009_endpoint_events",
	"0010_lock_free_writes",
	"0011_listing_indexes",
	"0012_plpgsql_event_functions",
	"0013_narrow_audit_key",
	"0014_events_per_statement",
	"0015_endpoint_idempotency",
}

// baseline is the migration that took the place of beforeBaseline.
const baseline = "0001_baseline"

// lastBeforeBaseline is the commit of github.com/chargeflow/chargeflow whose
// build migrates any database of the history before the baseline to its end.
const lastBeforeBaseline = "7a21fa4"

// ErrHistoryTooOld means the database records only part of the migrations
// before the baseline: it must be taken to their end by an older build, or
// made afresh.
var ErrHistoryTooOld = errors.New("migrations: the database's migrations predate the baseline and stop short of 0015_endpoint_idempotency")

// upgradeHistory records the baseline in place of the migrations before it when
// the database recorded all of them, and changes nothing else: the tables
// are already the baseline's, and Apply then applies every function file.
// A database that recorded only some of them is refused (ErrHistoryTooOld):
// nothing was released at such a point, so no database is expected there
// but a developer's.
func upgradeHistory(ctx context.Context, conn *pgx.Conn, all []Migration, logger *slog.Logger) error {
	i := slices.IndexFunc(all, func(m Migration) bool { return m.Name == baseline })
	if i < 0 {
		return fmt.Errorf("migrations: no %s among the embedded migrations", baseline)
	}
	base := all[i]
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		applied, err := appliedVersions(ctx, tx)
		if err != nil {
			return err
		}
		var old, other []string
		for version, name := range applied {
			if version >= 1 && version <= len(beforeBaseline) && beforeBaseline[version-1] == name {
				old = append(old, name)
			} else {
				other = append(other, name)
			}
		}
		if len(old) == 0 {
			return nil
		}
		slices.Sort(old)
		slices.Sort(other)
		switch {
		case len(other) > 0:
			return fmt.Errorf("migrations: the database records the migrations before the baseline and also %s, which this build does not know",
				strings.Join(other, ", "))
		case len(old) < len(beforeBaseline):
			return fmt.Errorf("%w (its last is %s): migrate it first with a build of commit %s, which applies the rest, "+
				"then with this one; or, since nothing was released at that point, drop the database and migrate afresh",
				ErrHistoryTooOld, old[len(old)-1], lastBeforeBaseline)
		}
		if _, err := tx.Exec(ctx, "DELETE FROM chargeflow_migrations"); err != nil {
			return fmt.Errorf("replace the migrations before the baseline: %w", err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO chargeflow_migrations (version, name) VALUES ($1, $2)", base.Version, base.Name); err != nil {
			return fmt.Errorf("record %s: %w", base.Name, err)
		}
		logger.InfoContext(ctx, "recorded the baseline in place of the migrations before it; no table changed",
			"replaced", len(beforeBaseline), "name", base.Name)
		return nil
	})
}
