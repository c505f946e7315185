package scenario

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
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

// A convergence goes on while the backlog shrinks, stops when a bound
// passes with nothing settling, and stops at maxStalls bounds however it
// goes.
func TestConvergence(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	const bound = 10 * time.Second

	c := newConvergence(bound, start)
	require.Equal(t, waiting, c.observe(100, at(0)))
	require.Equal(t, waiting, c.observe(90, at(9*time.Second)), "settling: the wait goes on")
	require.Equal(t, waiting, c.observe(90, at(18*time.Second)), "a bound from the last progress, not from the start")
	require.Equal(t, stalled, c.observe(90, at(19*time.Second)), "nothing settled for a bound: stuck")

	c = newConvergence(bound, start)
	require.Equal(t, waiting, c.observe(5, at(0)))
	require.Equal(t, waiting, c.observe(-1, at(5*time.Second)), "a failed count is no progress")
	require.Equal(t, waiting, c.observe(7, at(6*time.Second)), "more unsettled (a refund accepted) is no progress")
	require.Equal(t, stalled, c.observe(7, at(bound)))

	c = newConvergence(bound, start)
	n := 1000
	var v verdict
	for d := time.Duration(0); v == waiting; d += time.Second {
		n--
		v = c.observe(n, at(d))
	}
	require.Equal(t, stalled, v, "progress forever still ends")
	require.Equal(t, 1000-maxStalls*int(bound/time.Second)-1, n, "at maxStalls bounds")

	c = newConvergence(bound, start)
	require.Equal(t, waiting, c.observe(3, at(0)))
	require.Equal(t, converged, c.observe(0, at(time.Hour)), "settled is settled, however late it is seen")
}

// hold-expires-during-capture needs the reconcilers to sweep the holds the
// provider releases: its provider and its reconcilers are told the same
// window, which the fake adapter and the Stripe adapter both declare.
func TestHoldScenarioDeclaresTheProvidersWindow(t *testing.T) {
	t.Parallel()
	sc, ok := Find("hold-expires-during-capture")
	require.True(t, ok)
	require.Subset(t, sc.ReconcilerFlags(0), sc.ProviderFlags, "the reconcilers declare the provider's hold window")
}
