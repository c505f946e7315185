package scenario

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/fakepsp"
	"github.com/chargeflow/chargeflow/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
)

// Replacing the provider's schedule resets its fired counters, so the runner
// must add them to the run's counts first; otherwise a scenario's MustFire
// check would miss every fault that fired before the faults were calmed.
func TestSetFaultsHarvestsFiredFirst(t *testing.T) {
	t.Parallel()

	provider := fakepsptest.Start(t, fakepsp.Config{Faults: fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{
		{On: fakepsp.OnCharge, Fault: fakepsp.FaultNotProcessed, P: 1},
	}}})
	s := &system{psp: &proc{addr: provider.URL}, fired: map[string]int{}}

	client := psp.NewClient(psp.Config{BaseURL: provider.URL})
	for _, key := range []string{"pk_1", "pk_2"} {
		_, err := client.Charge(t.Context(), psp.ChargeRequest{Key: key, Amount: 100, Currency: "USD",
			PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_" + key})
		require.ErrorIs(t, err, psp.ErrNotApplied)
	}

	require.NoError(t, s.setFaults(t.Context(), fakepsp.Schedule{Seed: 1}))
	require.Equal(t, map[string]int{"fault:" + fakepsp.FaultNotProcessed: 2}, s.fired)
	require.Empty(t, provider.Server.Faults().Rules, "the new schedule is in force")

	// The final harvest adds nothing twice.
	require.NoError(t, s.harvestFaults(t.Context()))
	require.Equal(t, map[string]int{"fault:" + fakepsp.FaultNotProcessed: 2}, s.fired)
}
