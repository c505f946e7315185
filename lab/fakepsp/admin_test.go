package fakepsp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp"
)

// The admin client functions are what tests and the scenario runner use to
// drive a provider they reach only over HTTP, so they are checked against a
// real one: a schedule set through SetFaults is the one in force, FetchFaults
// reads it back with its counters, and a refusal carries the provider's
// reason.
func TestAdminClient(t *testing.T) {
	t.Parallel()

	t.Run("SetFaults then FetchFaults", func(t *testing.T) {
		t.Parallel()

		b := setup(t, fakepsp.Config{})
		schedule := fakepsp.Schedule{Seed: 3, Dedupe: ptr(false), Rules: []fakepsp.Rule{
			{On: fakepsp.OnCharge, Fault: fakepsp.FaultNotProcessed, P: 1, KeyPrefix: "busy"},
			{On: fakepsp.OnLookup, Fault: fakepsp.FaultLookupLag, P: 0.5, MS: 250},
		}}
		// A trailing slash, as in a configured base URL, is fine.
		require.NoError(t, fakepsp.SetFaults(t.Context(), b.url+"/", schedule))

		_, err := b.client.Charge(t.Context(), visa("busy-1"))
		requirePSPError(t, err, psp.ErrNotApplied, "status_429")

		want := fakepsp.FaultState{Seed: 3, Dedupe: false, Rules: schedule.Rules, Fired: map[string]int{fakepsp.FaultNotProcessed: 1}}
		require.Equal(t, want, b.provider.Faults())
		state, err := fakepsp.FetchFaults(t.Context(), b.url)
		require.NoError(t, err)
		require.Equal(t, want, state)

		// The empty schedule clears the faults and restores the configured
		// de-duplication.
		require.NoError(t, fakepsp.SetFaults(t.Context(), b.url, fakepsp.Schedule{}))
		state, err = fakepsp.FetchFaults(t.Context(), b.url)
		require.NoError(t, err)
		require.Equal(t, fakepsp.FaultState{Dedupe: true, Rules: []fakepsp.Rule{}, Fired: map[string]int{}}, state)
		b.charge(t, visa("busy-2"))
	})

	t.Run("a refused schedule says why and changes nothing", func(t *testing.T) {
		t.Parallel()

		b := setup(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultNotProcessed, 0))})
		before := b.provider.Faults()

		err := fakepsp.SetFaults(t.Context(), b.url, faults(fakepsp.Rule{On: fakepsp.OnLookup, Fault: fakepsp.FaultKeyExpiry, P: 1}))
		require.ErrorContains(t, err, "set faults: status 400")
		require.ErrorContains(t, err, "invalid_schedule")
		require.ErrorContains(t, err, "key_expiry")
		require.ErrorContains(t, err, "does not apply to")
		require.Equal(t, before, b.provider.Faults())
	})

	t.Run("not a provider", func(t *testing.T) {
		t.Parallel()

		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no such thing here", http.StatusNotFound)
		}))
		t.Cleanup(other.Close)

		err := fakepsp.SetFaults(t.Context(), other.URL, fakepsp.Schedule{})
		require.EqualError(t, err, "set faults: status 404: no such thing here")
		_, err = fakepsp.FetchFaults(t.Context(), other.URL)
		require.EqualError(t, err, "fetch faults: status 404: no such thing here")
		_, err = fakepsp.FetchLedger(t.Context(), other.URL, false)
		require.EqualError(t, err, "fetch ledger: status 404: no such thing here")
	})
}
