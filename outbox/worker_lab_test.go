//go:build lab

package outbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/outbox"
)

// TestRerunFindsSubmittingUnderTheNegativeControl is TestRerunFindsSubmitting
// with the lab build's broken mode (lab.go) on.
func TestRerunFindsSubmittingUnderTheNegativeControl(t *testing.T) {
	t.Parallel()

	// The negative control: the broken mode re-sends, and with the
	// provider's de-duplication off that is a second charge in the ledger.
	t.Run("BrokenModeResends", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t, func(o *setupOpts) { o.noStart = true; o.lab = outbox.Lab{ResendOnRerun: true} })
		b.faults(t, noDedupe())

		c := b.accept(ctx, t, "pm_card_visa", 1)
		_, err := intent.MoveCharge(ctx, b.pool, intent.Move{TenantID: c.TenantID, ChargeID: c.ID, From: intent.StatePending,
			To: intent.StateSubmitting, Actor: "test", Reason: "crashed_mid_call", CountAttempt: true})
		require.NoError(t, err)
		require.NoError(t, b.river.Start(ctx))
		b.waitFor(ctx, t, c.ID, intent.StateSucceeded)
		require.Len(t, b.ledger(t), 1, "it sent although an earlier attempt may have been applied")
	})
}
