package scenario_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/scenario"
)

func TestCheckLedger(t *testing.T) {
	t.Parallel()

	charge := func(id, state string) scenario.ChargeRow {
		c := scenario.ChargeRow{ID: id, State: state, Amount: 100, Currency: "USD", ProviderKey: "cf_" + id}
		if state == "succeeded" {
			c.ProviderChargeID = "py_" + id
		}
		if state == "needs_review" {
			c.ReviewReason = "lookup_unavailable"
		}
		return c
	}
	entry := func(id, ref string) fakepsp.LedgerEntry {
		return fakepsp.LedgerEntry{ID: id, Reference: ref, IdempotencyKey: "cf_" + ref, Amount: 100, Currency: "USD", Status: "succeeded"}
	}

	// A refund of charge a: its row, and the provider's refund filed under
	// the provider charge.
	refund := func(id, state string, amount int64) scenario.ChargeRow {
		r := charge(id, state)
		r.ParentID, r.Amount = "a", amount
		if state == "succeeded" {
			r.ProviderChargeID = "rf_" + id
		}
		return r
	}
	refunded := func(refunds ...fakepsp.RefundEntry) fakepsp.LedgerEntry {
		e := entry("py_a", "a")
		e.Refunds = refunds
		return e
	}
	providerRefund := func(id, ref string, amount int64) fakepsp.RefundEntry {
		return fakepsp.RefundEntry{ID: id, Reference: ref, IdempotencyKey: "cf_" + ref, Charge: "py_a", Amount: amount, Currency: "USD", Status: "succeeded"}
	}

	t.Run("CleanRefunds", func(t *testing.T) {
		t.Parallel()
		rows := []scenario.ChargeRow{charge("a", "succeeded"), refund("r1", "succeeded", 60), refund("r2", "failed", 50), refund("r3", "succeeded", 40)}
		ledger := []fakepsp.LedgerEntry{refunded(providerRefund("rf_r1", "r1", 60), providerRefund("rf_r3", "r3", 40))}
		require.Empty(t, scenario.CheckLedger(rows, ledger))
	})

	t.Run("Clean", func(t *testing.T) {
		t.Parallel()
		charges := []scenario.ChargeRow{charge("a", "succeeded"), charge("b", "failed"), charge("c", "needs_review")}
		ledger := []fakepsp.LedgerEntry{entry("py_a", "a"), {ID: "py_b", Reference: "b", Status: "failed"}}
		require.Empty(t, scenario.CheckLedger(charges, ledger))
	})

	for name, tt := range map[string]struct {
		charges   []scenario.ChargeRow
		ledger    []fakepsp.LedgerEntry
		invariant string
	}{
		"DoubleCharge":        {[]scenario.ChargeRow{charge("a", "succeeded")}, []fakepsp.LedgerEntry{entry("py_a", "a"), entry("py_a2", "a")}, scenario.InvariantAtMostOnce},
		"SucceededUncharged":  {[]scenario.ChargeRow{charge("a", "succeeded")}, nil, scenario.InvariantSucceededCharged},
		"WrongAmount":         {[]scenario.ChargeRow{charge("a", "succeeded")}, []fakepsp.LedgerEntry{{ID: "py_a", Reference: "a", IdempotencyKey: "cf_a", Amount: 101, Currency: "USD", Status: "succeeded"}}, scenario.InvariantSucceededCharged},
		"WrongProviderCharge": {[]scenario.ChargeRow{charge("a", "succeeded")}, []fakepsp.LedgerEntry{entry("py_other", "a")}, scenario.InvariantSucceededCharged},
		"FalseFailure":        {[]scenario.ChargeRow{charge("a", "failed")}, []fakepsp.LedgerEntry{entry("py_a", "a")}, scenario.InvariantFailedUncharged},
		"Orphan":              {nil, []fakepsp.LedgerEntry{entry("py_z", "z")}, scenario.InvariantNoOrphans},
		"StillUnknown":        {[]scenario.ChargeRow{charge("a", "unknown")}, nil, scenario.InvariantTerminal},
		"ReviewWithoutReason": {[]scenario.ChargeRow{{ID: "a", State: "needs_review"}}, nil, scenario.InvariantTerminal},
		"DoubleRefund": {[]scenario.ChargeRow{charge("a", "succeeded"), refund("r1", "succeeded", 10)},
			[]fakepsp.LedgerEntry{refunded(providerRefund("rf_r1", "r1", 10), providerRefund("rf_r1b", "r1", 10))}, scenario.InvariantAtMostOnce},
		"FalselyFailedRefund": {[]scenario.ChargeRow{charge("a", "succeeded"), refund("r1", "failed", 10)},
			[]fakepsp.LedgerEntry{refunded(providerRefund("rf_r1", "r1", 10))}, scenario.InvariantFailedUncharged},
		"LostRefund": {[]scenario.ChargeRow{charge("a", "succeeded"), refund("r1", "succeeded", 10)},
			[]fakepsp.LedgerEntry{entry("py_a", "a")}, scenario.InvariantSucceededCharged},
		"OrphanRefund": {[]scenario.ChargeRow{charge("a", "succeeded")},
			[]fakepsp.LedgerEntry{refunded(providerRefund("rf_x", "x", 10))}, scenario.InvariantNoOrphans},
		"OverRefunded": {[]scenario.ChargeRow{charge("a", "succeeded"), refund("r1", "succeeded", 60), refund("r2", "succeeded", 60)},
			[]fakepsp.LedgerEntry{refunded(providerRefund("rf_r1", "r1", 60), providerRefund("rf_r2", "r2", 60))}, scenario.InvariantNotOverRefunded},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			violations := scenario.CheckLedger(tt.charges, tt.ledger)
			require.NotEmpty(t, violations)
			require.Equal(t, tt.invariant, violations[0].Invariant, "%v", violations)
		})
	}
}

// With two providers, each row is judged against the ledger of the account
// it is at, and every ledger together: a charge taken by both is caught
// even though each ledger alone holds it once.
func TestCheckLedgers(t *testing.T) {
	t.Parallel()

	// A charge at account, rerouted once when at the second (its key then
	// cf_<id>_1), and what a provider applied of it.
	charge := func(id, state, account string) scenario.ChargeRow {
		c := scenario.ChargeRow{ID: id, State: state, Amount: 100, Currency: "EUR", Provider: account, ProviderKey: "cf_" + id}
		if account == "secondary" {
			c.ProviderKey += "_1"
		}
		if state == "succeeded" {
			c.ProviderChargeID = "py_" + id + "_" + account
		}
		return c
	}
	entry := func(c scenario.ChargeRow, account string) fakepsp.LedgerEntry {
		return fakepsp.LedgerEntry{ID: "py_" + c.ID + "_" + account, Reference: c.ID, IdempotencyKey: charge(c.ID, "", account).ProviderKey,
			Amount: c.Amount, Currency: c.Currency, Status: "succeeded"}
	}
	ledgers := func(primary, secondary []fakepsp.LedgerEntry) []scenario.Ledger {
		return []scenario.Ledger{{Name: "A", Accounts: []string{"primary"}, Entries: primary}, {Name: "B", Accounts: []string{"secondary"}, Entries: secondary}}
	}
	invariants := func(violations []scenario.Violation) []string {
		var out []string
		for _, v := range violations {
			out = append(out, v.Invariant)
		}
		return out
	}

	atPrimary, atSecondary := charge("a", "succeeded", "primary"), charge("b", "succeeded", "secondary")
	failed, review := charge("c", "failed", "secondary"), charge("d", "needs_review", "primary")
	review.ReviewReason = "lookup_unavailable"

	t.Run("NoneFound", func(t *testing.T) {
		t.Parallel()
		rows := []scenario.ChargeRow{atPrimary, atSecondary, failed, review}
		require.Empty(t, scenario.CheckLedgers(rows, ledgers([]fakepsp.LedgerEntry{entry(atPrimary, "primary")},
			[]fakepsp.LedgerEntry{entry(atSecondary, "secondary")})))
	})

	for name, tt := range map[string]struct {
		rows               []scenario.ChargeRow
		primary, secondary []fakepsp.LedgerEntry
		invariants         []string
	}{
		// What reroute_on_timeout does: the first provider applied the
		// charge and lost the answer, the second took it again.
		"TakenByBothProviders": {[]scenario.ChargeRow{atSecondary}, []fakepsp.LedgerEntry{entry(atSecondary, "primary")},
			[]fakepsp.LedgerEntry{entry(atSecondary, "secondary")},
			[]string{scenario.InvariantOnceAcrossProviders, scenario.InvariantSucceededCharged}},
		"TwiceAtOneProvider": {[]scenario.ChargeRow{atPrimary}, []fakepsp.LedgerEntry{entry(atPrimary, "primary"), entry(atPrimary, "primary")}, nil,
			[]string{scenario.InvariantAtMostOnce, scenario.InvariantSucceededCharged}},
		"SucceededWhereItIsNot": {[]scenario.ChargeRow{atSecondary}, []fakepsp.LedgerEntry{entry(atSecondary, "primary")}, nil,
			[]string{scenario.InvariantSucceededCharged}},
		"SucceededAtAnAccountWithoutALedger": {[]scenario.ChargeRow{charge("e", "succeeded", "fakepsp")},
			[]fakepsp.LedgerEntry{entry(charge("e", "", "fakepsp"), "fakepsp")}, nil, []string{scenario.InvariantSucceededCharged}},
		"FailedButTakenByTheOther": {[]scenario.ChargeRow{failed}, []fakepsp.LedgerEntry{entry(failed, "primary")}, nil,
			[]string{scenario.InvariantFailedUncharged}},
		"OrphanAtTheSecond": {nil, nil, []fakepsp.LedgerEntry{entry(charge("z", "", "secondary"), "secondary")},
			[]string{scenario.InvariantNoOrphans}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			violations := scenario.CheckLedgers(tt.rows, ledgers(tt.primary, tt.secondary))
			require.ElementsMatch(t, tt.invariants, invariants(violations), "%v", violations)
		})
	}

	// One ledger for every account is the run with one provider, as
	// CheckLedger judges it: the same charge twice there is at-most-once,
	// never across providers.
	t.Run("OneProvider", func(t *testing.T) {
		t.Parallel()
		twice := []fakepsp.LedgerEntry{entry(atPrimary, "primary"), entry(atPrimary, "primary")}
		require.Equal(t, []string{scenario.InvariantAtMostOnce, scenario.InvariantSucceededCharged},
			invariants(scenario.CheckLedger([]scenario.ChargeRow{atPrimary}, twice)))
		require.Equal(t, scenario.CheckLedger([]scenario.ChargeRow{atPrimary}, twice),
			scenario.CheckLedgers([]scenario.ChargeRow{atPrimary}, []scenario.Ledger{{Name: "the provider", Entries: twice}}))
	})
}
