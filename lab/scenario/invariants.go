package scenario

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// ChargeRow is what the checker reads of each row of charges: a charge,
// or a refund, a capture or a cancel of one (Kind, ParentID).
type ChargeRow struct {
	TenantID string
	ID       string
	// Kind is "charge", "refund", "capture" or "cancel".
	Kind     string
	ParentID string
	State    string
	Amount   int64
	Currency string
	// CaptureLater marks a charge authorized only (docs/capture.md), and
	// AmountCaptured is what its capture took (0 when none did).
	CaptureLater   bool
	AmountCaptured int64
	// Provider names the provider account the row is at (a refund's is
	// its charge's): which ledger holds what the row says was applied.
	Provider         string
	ProviderKey      string
	ProviderChargeID string
	ReviewReason     string
}

// ReadCharges reads every charge of the database.
func ReadCharges(ctx context.Context, db *pgxpool.Pool) ([]ChargeRow, error) {
	rows, err := db.Query(ctx, `SELECT tenant_id, id, kind, coalesce(parent_id, ''), state, amount, currency, capture_later,
		coalesce(amount_captured, 0), provider, provider_key, coalesce(provider_charge_id, ''), coalesce(review_reason, '') FROM charges`)
	if err != nil {
		return nil, fmt.Errorf("read charges: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ChargeRow, error) {
		var c ChargeRow
		err := row.Scan(&c.TenantID, &c.ID, &c.Kind, &c.ParentID, &c.State, &c.Amount, &c.Currency, &c.CaptureLater,
			&c.AmountCaptured, &c.Provider, &c.ProviderKey, &c.ProviderChargeID, &c.ReviewReason)
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

// The invariants of docs/scenarios.md that compare the database with the
// ledgers. Each holds for a refund, a capture and a cancel as for a
// charge: at most one provider refund (capture, cancel) per row, succeeded
// ⇔ applied, failed ⇒ not applied, none applied at the provider without a
// row; a held or released charge is one authorization (captures.go for
// the invariants of what it holds). With several providers (a tenant
// routed through provider accounts, docs/routing.md) each is judged
// against every ledger.
const (
	// InvariantAtMostOnce: at most one provider charge per charge at any
	// one provider.
	InvariantAtMostOnce = "at_most_one_provider_charge"
	// InvariantOnceAcrossProviders: no charge taken by more than one
	// provider: nothing de-duplicates across accounts, so only a move
	// made on proof keeps a charge from being taken twice.
	InvariantOnceAcrossProviders = "at_most_one_provider_per_charge"
	// InvariantSucceededCharged: succeeded ⇔ exactly one provider charge
	// in all the ledgers, in the ledger of the account the row is at, with
	// the same amount and currency (and the stored provider charge id).
	InvariantSucceededCharged = "succeeded_iff_charged"
	// InvariantFailedUncharged: failed ⇒ no provider charge in any ledger.
	InvariantFailedUncharged = "failed_implies_uncharged"
	// InvariantNoOrphans: no provider charge, in any ledger, without a
	// charge.
	InvariantNoOrphans = "no_orphan_provider_charge"
	// InvariantTerminal: every charge terminal, or needs_review with a reason.
	InvariantTerminal = "terminal_or_reviewed"
	// InvariantNotOverRefunded: the provider's refunds of a charge never
	// add up to more than the charge moved (of a charge captured later,
	// what was captured).
	InvariantNotOverRefunded = "not_over_refunded"
)

// LedgerInvariants lists the invariants CheckLedger checks, in report order.
func LedgerInvariants() []string {
	return append([]string{InvariantAtMostOnce, InvariantOnceAcrossProviders, InvariantSucceededCharged, InvariantFailedUncharged, InvariantNoOrphans,
		InvariantTerminal, InvariantNotOverRefunded}, CaptureInvariants()...)
}

// applied is one thing the provider applied, as the checker compares it
// with a row: a charge (an authorization too, held or released), a refund,
// a capture or a cancel. stored is the provider's id the row keeps for it:
// a charge's or a refund's own, an operation's charge's (the answer to a
// capture or cancel is the charge as it left it). status is the
// provider's, captured what a capture took of a charge captured later.
type applied struct {
	id, stored, key, reference, currency, status string
	amount, captured                             int64
}

// appliedByReference flattens the ledger: every charge that moved money or
// holds or held it for a capture, every refund, capture and cancel, by our
// reference. It reports charges refunded beyond what they moved on the way.
func appliedByReference(ledger []fakepsp.LedgerEntry, add func(invariant, subject, format string, args ...any)) map[string][]applied {
	out := map[string][]applied{}
	for _, e := range ledger {
		if e.Status == "succeeded" || e.CaptureLater && (e.Status == statusHeld || e.Status == statusReleased) {
			out[e.Reference] = append(out[e.Reference], applied{id: e.ID, stored: e.ID, key: e.IdempotencyKey, reference: e.Reference,
				currency: e.Currency, status: string(e.Status), amount: e.Amount, captured: e.AmountCaptured})
		}
		var refunded int64
		for _, r := range e.Refunds {
			refunded += r.Amount
			out[r.Reference] = append(out[r.Reference], applied{id: r.ID, stored: r.ID, key: r.IdempotencyKey, reference: r.Reference,
				currency: r.Currency, status: string(r.Status), amount: r.Amount})
		}
		if moved := movedBy(e); refunded > moved {
			add(InvariantNotOverRefunded, e.Reference, "provider charge %s of %d (%d moved) refunded %d", e.ID, e.Amount, moved, refunded)
		}
		for _, op := range e.Operations {
			ref := operationReference(op)
			out[ref] = append(out[ref], applied{id: op.ID, stored: op.Charge, key: op.IdempotencyKey, reference: ref,
				currency: op.Currency, status: string(op.Status), amount: op.Amount})
		}
	}
	return out
}

// Ledger is one provider's ledger, and which rows it answers for.
type Ledger struct {
	// Name names the provider in a violation's detail.
	Name string
	// Accounts are the names in charges.provider of the rows sent to this
	// provider; none is every row's (a run with one provider).
	Accounts []string
	Entries  []fakepsp.LedgerEntry
}

// holds reports whether l answers for rows at provider.
func (l Ledger) holds(provider string) bool {
	return len(l.Accounts) == 0 || slices.Contains(l.Accounts, provider)
}

// CheckLedger compares the charges with the provider's ledger and returns
// every violation. A charge that is not terminal is a violation of
// InvariantTerminal: call it once the system has converged.
func CheckLedger(charges []ChargeRow, ledger []fakepsp.LedgerEntry) []Violation {
	return CheckLedgers(charges, []Ledger{{Name: "the provider", Entries: ledger}})
}

// CheckLedgers is CheckLedger for a run with several providers: what each
// row says was applied must be in the ledger of the account it is at, and
// nowhere else.
func CheckLedgers(charges []ChargeRow, ledgers []Ledger) []Violation {
	var violations []Violation
	add := func(invariant, subject, format string, args ...any) {
		violations = append(violations, Violation{Invariant: invariant, Subject: subject, Detail: fmt.Sprintf(format, args...)})
	}
	// What each provider applied, and all of it together.
	each := make([]map[string][]applied, len(ledgers))
	byReference := map[string][]applied{}
	for i, l := range ledgers {
		each[i] = appliedByReference(l.Entries, add)
		for ref, entries := range each[i] {
			byReference[ref] = append(byReference[ref], entries...)
		}
	}
	known := make(map[string]bool, len(charges))
	for _, c := range charges {
		known[c.ID] = true
		entries := byReference[c.ID]
		var takers []string
		for i, l := range ledgers {
			at := each[i][c.ID]
			if len(at) > 1 {
				add(InvariantAtMostOnce, c.ID, "%d provider charges at %s (%s)", len(at), l.Name, ids(at))
			}
			if len(at) > 0 {
				takers = append(takers, l.Name+" ("+ids(at)+")")
			}
		}
		if len(takers) > 1 {
			add(InvariantOnceAcrossProviders, c.ID, "taken by %d providers: %s", len(takers), strings.Join(takers, ", "))
		}
		at := slices.IndexFunc(ledgers, func(l Ledger) bool { return l.holds(c.Provider) })
		var here []applied
		if at >= 0 {
			here = each[at][c.ID]
		}
		switch c.State {
		case "succeeded":
			if len(entries) != 1 {
				add(InvariantSucceededCharged, c.ID, "succeeded, applied %d times at the providers", len(entries))
				break
			}
			if len(here) != 1 {
				add(InvariantSucceededCharged, c.ID, "succeeded at %s, but applied by another provider (%s)", c.Provider, ids(entries))
				break
			}
			e := here[0]
			if e.amount != c.Amount || e.currency != c.Currency || e.stored != c.ProviderChargeID || e.key != c.ProviderKey {
				add(InvariantSucceededCharged, c.ID, "row %d %s %s, provider %d %s %s", c.Amount, c.Currency, c.ProviderChargeID, e.amount, e.currency, e.stored)
			}
			switch {
			case c.Kind != kindCharge:
			case c.CaptureLater && (e.status != "succeeded" || e.captured != c.AmountCaptured):
				add(InvariantHoldMatches, c.ID, "captured %d, but the provider holds it %s with %d captured", c.AmountCaptured, e.status, e.captured)
			case !c.CaptureLater && e.status != "succeeded":
				add(InvariantSucceededCharged, c.ID, "captured at once, but the provider holds it %s", e.status)
			}
		case statusHeld, statusReleased:
			// Held for a capture, or released: the provider must say so
			// of the one authorization it made, at the account the row is at.
			if len(here) != 1 || len(entries) != 1 {
				add(InvariantHoldMatches, c.ID, "%s at %s, authorized %d times there and %d at the providers (%s)", c.State, c.Provider, len(here), len(entries), ids(entries))
				break
			}
			e := here[0]
			if e.status != c.State || e.amount != c.Amount || e.currency != c.Currency || e.stored != c.ProviderChargeID || e.key != c.ProviderKey {
				add(InvariantHoldMatches, c.ID, "row %s %d %s %s, provider %s %d %s %s", c.State, c.Amount, c.Currency, c.ProviderChargeID,
					e.status, e.amount, e.currency, e.stored)
			}
		case "failed":
			if len(entries) > 0 {
				add(InvariantFailedUncharged, c.ID, "failed but applied at the provider (%s)", ids(entries))
			}
		case "needs_review":
			if c.ReviewReason == "" {
				add(InvariantTerminal, c.ID, "needs_review without a reason")
			}
		default:
			add(InvariantTerminal, c.ID, "still %s", c.State)
			if c.State == "pending" && len(entries) > 0 {
				add(InvariantSucceededCharged, c.ID, "pending but applied at the provider (%s)", ids(entries))
			}
		}
	}
	for ref, entries := range byReference {
		if !known[ref] {
			add(InvariantNoOrphans, ref, "applied at the provider without a row (%s)", ids(entries))
		}
	}
	checkHolds(charges, ledgers, add)
	slices.SortFunc(violations, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.Invariant, b.Invariant), cmp.Compare(a.Subject, b.Subject))
	})
	return violations
}

func ids(entries []applied) string {
	var out []string
	for _, e := range entries {
		out = append(out, e.id)
	}
	return strings.Join(out, ",")
}
