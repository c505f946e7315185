package scenario

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"chargeflow/fakepsp"
)

// ChargeRow is what the checker reads of each charge.
type ChargeRow struct {
	TenantID         string
	ID               string
	State            string
	Amount           int64
	Currency         string
	ProviderKey      string
	ProviderChargeID string
	ReviewReason     string
}

// ReadCharges reads every charge of the database.
func ReadCharges(ctx context.Context, db *pgxpool.Pool) ([]ChargeRow, error) {
	rows, err := db.Query(ctx, `SELECT tenant_id, id, state, amount, currency, provider_key,
		coalesce(provider_charge_id, ''), coalesce(review_reason, '') FROM charges`)
	if err != nil {
		return nil, fmt.Errorf("read charges: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ChargeRow, error) {
		var c ChargeRow
		err := row.Scan(&c.TenantID, &c.ID, &c.State, &c.Amount, &c.Currency, &c.ProviderKey, &c.ProviderChargeID, &c.ReviewReason)
		return c, err
	})
}

// Violation is one broken invariant, with the charge or ledger entry that
// breaks it.
type Violation struct {
	Invariant string
	Subject   string
	Detail    string
}

func (v Violation) String() string { return v.Invariant + " " + v.Subject + ": " + v.Detail }

// The invariants of docs/scenarios.md that compare the database with the ledger.
const (
	// InvariantAtMostOnce: at most one provider charge per charge.
	InvariantAtMostOnce = "at_most_one_provider_charge"
	// InvariantSucceededCharged: succeeded ⇔ exactly one provider charge
	// with the same amount and currency (and the stored provider charge id).
	InvariantSucceededCharged = "succeeded_iff_charged"
	// InvariantFailedUncharged: failed ⇒ no provider charge.
	InvariantFailedUncharged = "failed_implies_uncharged"
	// InvariantNoOrphans: no provider charge without a charge.
	InvariantNoOrphans = "no_orphan_provider_charge"
	// InvariantTerminal: every charge terminal, or needs_review with a reason.
	InvariantTerminal = "terminal_or_reviewed"
)

// LedgerInvariants lists the invariants CheckLedger checks, in report order.
func LedgerInvariants() []string {
	return []string{InvariantAtMostOnce, InvariantSucceededCharged, InvariantFailedUncharged, InvariantNoOrphans, InvariantTerminal}
}

// CheckLedger compares the charges with the provider's ledger and returns
// every violation. A charge that is not terminal is a violation of
// InvariantTerminal: call it once the system has converged.
func CheckLedger(charges []ChargeRow, ledger []fakepsp.LedgerEntry) []Violation {
	var violations []Violation
	add := func(invariant, subject, format string, args ...any) {
		violations = append(violations, Violation{Invariant: invariant, Subject: subject, Detail: fmt.Sprintf(format, args...)})
	}
	byReference := map[string][]fakepsp.LedgerEntry{}
	for _, e := range ledger {
		if e.Status != "succeeded" {
			continue
		}
		byReference[e.Reference] = append(byReference[e.Reference], e)
	}
	known := make(map[string]bool, len(charges))
	for _, c := range charges {
		known[c.ID] = true
		entries := byReference[c.ID]
		if len(entries) > 1 {
			add(InvariantAtMostOnce, c.ID, "%d provider charges (%s)", len(entries), ids(entries))
		}
		switch c.State {
		case "succeeded":
			if len(entries) != 1 {
				add(InvariantSucceededCharged, c.ID, "succeeded with %d provider charges", len(entries))
				break
			}
			e := entries[0]
			if e.Amount != c.Amount || e.Currency != c.Currency || e.ID != c.ProviderChargeID || e.IdempotencyKey != c.ProviderKey {
				add(InvariantSucceededCharged, c.ID, "charge %d %s %s, provider %d %s %s", c.Amount, c.Currency, c.ProviderChargeID, e.Amount, e.Currency, e.ID)
			}
		case "failed":
			if len(entries) > 0 {
				add(InvariantFailedUncharged, c.ID, "failed but charged (%s)", ids(entries))
			}
		case "needs_review":
			if c.ReviewReason == "" {
				add(InvariantTerminal, c.ID, "needs_review without a reason")
			}
		default:
			add(InvariantTerminal, c.ID, "still %s", c.State)
			if c.State == "pending" && len(entries) > 0 {
				add(InvariantSucceededCharged, c.ID, "pending but charged (%s)", ids(entries))
			}
		}
	}
	for ref, entries := range byReference {
		if !known[ref] {
			add(InvariantNoOrphans, ref, "provider charge without a charge (%s)", ids(entries))
		}
	}
	slices.SortFunc(violations, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.Invariant, b.Invariant), cmp.Compare(a.Subject, b.Subject))
	})
	return violations
}

func ids(entries []fakepsp.LedgerEntry) string {
	var out []string
	for _, e := range entries {
		out = append(out, e.ID)
	}
	return strings.Join(out, ",")
}
