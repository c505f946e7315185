package scenario

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// The checker's side of authorize now, capture later (docs/capture.md). A
// charge captured later is authorized at its provider and held until a
// capture takes some or all of it, a cancel releases it, or its hold
// expires there. The provider's ledger lists each authorization with the
// capture or cancel applied to it (fakepsp.LedgerEntry.Operations) and
// says what it is now: held, captured (and by how much) or released (and
// why). A capture or a cancel is a row of its own, so CheckLedgers judges
// each as it judges a refund (at most one provider operation per row,
// succeeded ⇔ applied with its amount, key and charge, failed ⇒ not
// applied, none applied without a row); the invariants below are about
// the money held.

// The row kinds and the states of a held charge, as the database names
// them.
const (
	kindCharge  = "charge"
	kindCapture = "capture"
	kindCancel  = "cancel"
	// statusHeld is a charge authorized and held for a capture
	// (requires_capture), statusReleased one whose hold was released by a
	// cancel or by its expiry (canceled): the same words at the provider.
	statusHeld     = "requires_capture"
	statusReleased = "canceled"
)

// The invariants of held charges.
const (
	// InvariantCapturedOnce: no authorization captured twice — at most
	// one capture at the provider per charge, and at most one capture or
	// cancel of a charge succeeded in the database.
	InvariantCapturedOnce = "captured_at_most_once"
	// InvariantCaptureWithinAuth: nothing captured beyond its
	// authorization, at the provider (what its captures took) or in the
	// database (amount_captured, and a capture's amount).
	InvariantCaptureWithinAuth = "captured_within_authorization"
	// InvariantNoCaptureAfterRelease: no capture applied at the provider
	// once the hold was released, by a cancel or by its expiry, and no
	// capture succeeded in the database of a charge that ended released.
	InvariantNoCaptureAfterRelease = "no_capture_after_release"
	// InvariantHoldMatches: chargeflow's account of each held charge is
	// the provider's — requires_capture ⇔ the provider holds it, canceled
	// ⇔ it released it, succeeded ⇔ it captured exactly amount_captured —
	// and a succeeded capture or cancel moved its charge accordingly.
	InvariantHoldMatches = "hold_matches_provider"
)

// CaptureInvariants lists the invariants of held charges, in report order.
func CaptureInvariants() []string {
	return []string{InvariantCapturedOnce, InvariantCaptureWithinAuth, InvariantNoCaptureAfterRelease, InvariantHoldMatches}
}

// operationReference is our id of a capture or cancel the provider
// applied: the reference it was sent with, or, from a protocol that
// carries none (Stripe's capture and cancel), the one its idempotency key
// names (intent.ProviderKeyFor).
func operationReference(op fakepsp.OperationEntry) string {
	if op.Reference != "" {
		return op.Reference
	}
	if id, ok := strings.CutPrefix(op.IdempotencyKey, intent.ProviderKeyFor("")); ok {
		return id
	}
	return op.IdempotencyKey
}

// movedBy is what a provider charge moved: its amount, or of a charge
// captured later what was captured.
func movedBy(e fakepsp.LedgerEntry) int64 {
	if e.CaptureLater {
		return e.AmountCaptured
	}
	return e.Amount
}

// checkHolds checks the invariants of held charges, on each provider's
// ledger and on the rows.
func checkHolds(rows []ChargeRow, ledgers []Ledger, add func(invariant, subject, format string, args ...any)) {
	for _, l := range ledgers {
		for _, e := range l.Entries {
			if e.CaptureLater || len(e.Operations) > 0 {
				checkProviderHold(e, add)
			}
		}
	}
	byID := make(map[string]ChargeRow, len(rows))
	for _, c := range rows {
		byID[c.ID] = c
	}
	settled := map[string][]ChargeRow{} // the succeeded captures and cancels of each charge
	for _, op := range rows {
		if op.Kind != kindCapture && op.Kind != kindCancel {
			continue
		}
		parent, ok := byID[op.ParentID]
		if !ok {
			add(InvariantHoldMatches, op.ID, "a %s of charge %s, which has no row", op.Kind, op.ParentID)
			continue
		}
		if op.Kind == kindCapture && op.Amount > parent.Amount {
			add(InvariantCaptureWithinAuth, op.ID, "a capture of %d of charge %s, which authorized %d", op.Amount, parent.ID, parent.Amount)
		}
		if op.State != "succeeded" {
			continue
		}
		settled[parent.ID] = append(settled[parent.ID], op)
		switch {
		case op.Kind == kindCapture && parent.State == statusReleased:
			add(InvariantNoCaptureAfterRelease, op.ID, "capture succeeded, but its charge %s is canceled", parent.ID)
		case op.Kind == kindCapture && (parent.State != "succeeded" || parent.AmountCaptured != op.Amount):
			add(InvariantHoldMatches, op.ID, "capture of %d succeeded, but its charge %s is %s with %d captured", op.Amount, parent.ID, parent.State, parent.AmountCaptured)
		case op.Kind == kindCancel && parent.State != statusReleased:
			add(InvariantHoldMatches, op.ID, "cancel succeeded, but its charge %s is %s", parent.ID, parent.State)
		}
	}
	for _, c := range rows {
		if c.Kind != kindCharge {
			continue
		}
		if c.AmountCaptured > c.Amount {
			add(InvariantCaptureWithinAuth, c.ID, "%d captured of %d authorized", c.AmountCaptured, c.Amount)
		}
		if ops := settled[c.ID]; len(ops) > 1 {
			add(InvariantCapturedOnce, c.ID, "%d captures or cancels succeeded (%s)", len(ops), rowIDs(ops))
		}
		if c.AmountCaptured > 0 && !c.CaptureLater {
			add(InvariantHoldMatches, c.ID, "captured at once, with a capture of %d", c.AmountCaptured)
		}
	}
}

// checkProviderHold checks one authorization as the provider reports it:
// captured at most once, within what it authorized, and never after its
// release by a cancel or by the end of its hold.
func checkProviderHold(e fakepsp.LedgerEntry, add func(invariant, subject, format string, args ...any)) {
	ops := slices.SortedFunc(slices.Values(e.Operations), func(a, b fakepsp.OperationEntry) int { return a.CreatedAt.Compare(b.CreatedAt) })
	var captures []fakepsp.OperationEntry
	var captured int64
	// released is when the hold was released: its first cancel, or the
	// end of its window, whichever came first.
	released := e.HoldExpiresAt
	for _, op := range ops {
		if op.Type == kindCancel && (released.IsZero() || op.CreatedAt.Before(released)) {
			released = op.CreatedAt
		}
	}
	for _, op := range ops {
		if op.Type != kindCapture {
			continue
		}
		captures = append(captures, op)
		captured += op.Amount
		if !released.IsZero() && !op.CreatedAt.Before(released) {
			add(InvariantNoCaptureAfterRelease, e.Reference, "provider capture %s of %d at %s, after the hold of %s was released at %s",
				op.ID, op.Amount, op.CreatedAt.Format(time.RFC3339Nano), e.ID, released.Format(time.RFC3339Nano))
		}
	}
	if len(captures) > 1 {
		add(InvariantCapturedOnce, e.Reference, "provider charge %s captured %d times (%s)", e.ID, len(captures), operationIDs(captures))
	}
	if most := max(captured, e.AmountCaptured); most > e.Amount {
		add(InvariantCaptureWithinAuth, e.Reference, "provider charge %s authorized %d, captured %d", e.ID, e.Amount, most)
	}
	if !e.CaptureLater && len(ops) > 0 {
		add(InvariantHoldMatches, e.Reference, "provider charge %s captured at once, with %d captures or cancels", e.ID, len(ops))
	}
}

func operationIDs(ops []fakepsp.OperationEntry) string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = op.ID
	}
	return fmt.Sprint(out)
}

func rowIDs(rows []ChargeRow) string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	slices.Sort(out)
	return fmt.Sprint(out)
}

// operationsFired counts what happened to captures, cancels and holds:
// "captures:found" and "captures:re-attempted", the captures and cancels
// whose outcome was unknown, found by a lookup or proven not applied and
// sent again (the proof that a crash cut one and its path recovered);
// "captures:review", those handed to a person; "hold:released_by_sweep",
// the held charges the reconciler's hold sweep found released at the
// provider and moved to canceled.
func (s *system) operationsFired(ctx context.Context, fired map[string]int) error {
	var found, reattempted, review, released int
	if err := s.pool.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE c.kind IN ('capture', 'cancel') AND e.reason LIKE 'lookup_found_%'),
		count(*) FILTER (WHERE c.kind IN ('capture', 'cancel') AND e.reason = 'proven_not_found'),
		count(*) FILTER (WHERE c.kind IN ('capture', 'cancel') AND e.to_state = 'needs_review'),
		count(*) FILTER (WHERE c.kind = 'charge' AND e.reason = 'hold_released')
		FROM charge_audit e JOIN charges c ON c.id = e.charge_id`).Scan(&found, &reattempted, &review, &released); err != nil {
		return err
	}
	fired["captures:found"], fired["captures:re-attempted"] = found, reattempted
	fired["captures:review"], fired["hold:released_by_sweep"] = review, released
	return nil
}
