package fakepsp_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp"
)

// always is a rule that fires on every matching call.
func always(on, fault string, ms int) fakepsp.Rule {
	return fakepsp.Rule{On: on, Fault: fault, P: 1, MS: ms}
}

// lookupFinds reports whether a lookup of key finds a charge.
func (b *testBundle) lookupFinds(t *testing.T, key string) bool {
	t.Helper()

	_, err := b.client.Lookup(t.Context(), key)
	if err == nil {
		return true
	}
	require.ErrorIs(t, err, psp.ErrNotFound)
	return false
}

func TestFaultLatency(t *testing.T) {
	t.Parallel()

	t.Run("charge: delayed, then answered", func(t *testing.T) {
		t.Parallel()

		b := setup(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultLatency, 150))})
		started := time.Now()
		charge := b.charge(t, visa("pk_slow"))
		require.GreaterOrEqual(t, time.Since(started), 150*time.Millisecond)
		require.Equal(t, psp.StatusSucceeded, charge.Status)
		require.Equal(t, 1, b.provider.Faults().Fired[fakepsp.FaultLatency])
	})

	t.Run("charge: applied even when the client gave up", func(t *testing.T) {
		t.Parallel()

		b := setup(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultLatency, 200))})
		_, err := b.clientWithTimeout(50*time.Millisecond).Charge(t.Context(), visa("pk_gave_up"))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "timeout")
		eventually(t, func() bool { return len(b.provider.Ledger(false)) == 1 }, "the charge is applied after the delay")
	})

	t.Run("lookup: delayed, then answered", func(t *testing.T) {
		t.Parallel()

		b := setup(t, fakepsp.Config{Faults: faults(always(fakepsp.OnLookup, fakepsp.FaultLatency, 150))})
		b.charge(t, visa("pk_1"))
		started := time.Now()
		require.True(t, b.lookupFinds(t, "pk_1"))
		require.GreaterOrEqual(t, time.Since(started), 150*time.Millisecond)
	})
}

func TestFaultDropBeforeApply(t *testing.T) {
	t.Parallel()

	// The fault holds the connection a second: long enough for a client
	// that gives up sooner to have connected first, however loaded the
	// machine (a connect that times out is "not applied", rightly).
	b := setup(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultDropBeforeApply, 1000))})

	// The connection is closed without an answer: the client cannot know.
	started := time.Now()
	_, err := b.client.Charge(t.Context(), visa("pk_dropped"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
	require.GreaterOrEqual(t, time.Since(started), time.Second, "the connection was held first")

	// A client that gives up first sees a timeout.
	_, err = b.clientWithTimeout(300*time.Millisecond).Charge(t.Context(), visa("pk_dropped_2"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "timeout")

	// But nothing was applied.
	require.False(t, b.lookupFinds(t, "pk_dropped"))
	require.Empty(t, b.ledger(t, true))
	require.Equal(t, 2, b.provider.Faults().Fired[fakepsp.FaultDropBeforeApply])
}

func TestFaultApplyThenTimeout(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultApplyThenTimeout, 300))})

	_, err := b.clientWithTimeout(100*time.Millisecond).Charge(t.Context(), visa("pk_timeout"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "timeout")

	// The charge was applied all the same.
	eventually(t, func() bool { return b.lookupFinds(t, "pk_timeout") }, "the charge is visible to lookups")
	ledger := b.ledger(t, false)
	require.Len(t, ledger, 1)
	require.Equal(t, "pk_timeout", ledger[0].IdempotencyKey)

	// A patient client sees the connection dropped after the hold.
	_, err = b.client.Charge(t.Context(), visa("pk_timeout_2"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
	require.Len(t, b.ledger(t, false), 2)
}

func TestFaultApplyThenReset(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultApplyThenReset, 0))})

	_, err := b.client.Charge(t.Context(), visa("pk_reset"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")

	require.True(t, b.lookupFinds(t, "pk_reset"), "applied before the reset")
	require.Len(t, b.ledger(t, false), 1)
}

func TestFaultErrorBeforeApply(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultErrorBeforeApply, 0))})

	_, err := b.client.Charge(t.Context(), visa("pk_500"))
	pspErr := requirePSPError(t, err, psp.ErrUnknownOutcome, "status_500")
	require.Equal(t, "internal_error", pspErr.ProviderCode)

	require.False(t, b.lookupFinds(t, "pk_500"))
	require.Empty(t, b.ledger(t, true))
}

func TestFaultErrorAfterApply(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultErrorAfterApply, 0))})

	_, err := b.client.Charge(t.Context(), visa("pk_500"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "status_500")

	// The charge exists and lookups show it.
	found, err := b.client.Lookup(t.Context(), "pk_500")
	require.NoError(t, err)
	require.Equal(t, psp.StatusSucceeded, found.Status)

	// With the fault switched off, the key still replays its 500.
	require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
	resp := b.postCharge(t, "pk_500", `{"amount":1000,"currency":"USD","payment_method":"pm_card_visa","reference":"ch_pk_500"}`)
	require.Equal(t, http.StatusInternalServerError, resp.status)
	require.Equal(t, "true", resp.header.Get("Idempotent-Replayed"))
	_, err = b.client.Charge(t.Context(), visa("pk_500"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "status_500")

	// Other keys are answered normally, and only one charge exists for it.
	b.charge(t, visa("pk_other"))
	ledger := b.ledger(t, false)
	require.Len(t, ledger, 2)
	require.Equal(t, found.ID, ledger[0].ID)
}

func TestFaultNotProcessed(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultNotProcessed, 0))})

	_, err := b.client.Charge(t.Context(), visa("pk_429"))
	pspErr := requirePSPError(t, err, psp.ErrNotApplied, "status_429")
	require.Equal(t, "rate_limited", pspErr.ProviderCode)

	resp := b.postCharge(t, "pk_429", `{"amount":1000,"currency":"USD","payment_method":"pm_card_visa","reference":"ch_1"}`)
	require.Equal(t, http.StatusTooManyRequests, resp.status)
	require.Equal(t, "1", resp.header.Get("Retry-After"))

	require.False(t, b.lookupFinds(t, "pk_429"))
	require.Empty(t, b.ledger(t, true))
}

func TestFaultDelayedApply(t *testing.T) {
	t.Parallel()

	// The charge lands 500 ms after the request; the client gives up long
	// before that.
	b := setup(t, fakepsp.Config{Faults: faults(fakepsp.Rule{On: fakepsp.OnCharge, Fault: fakepsp.FaultDelayedApply, P: 1, MS: 500, KeyPrefix: "pk_late"})})

	_, err := b.clientWithTimeout(50*time.Millisecond).Charge(t.Context(), visa("pk_late"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "timeout")

	// Not applied yet: lookups say not found, and a retry under the key
	// (with the fault switched off) is refused as in progress rather than
	// applied a second time.
	require.False(t, b.lookupFinds(t, "pk_late"))
	require.Empty(t, b.ledger(t, true))
	require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
	_, err = b.client.Charge(t.Context(), visa("pk_late"))
	pspErr := requirePSPError(t, err, psp.ErrUnknownOutcome, "status_409")
	require.Equal(t, "idempotency_key_in_use", pspErr.ProviderCode)

	// Later it appears, once.
	eventually(t, func() bool { return b.lookupFinds(t, "pk_late") }, "the delayed charge is applied")
	require.Len(t, b.ledger(t, false), 1)
	charge := b.charge(t, visa("pk_late"))
	require.Equal(t, b.ledger(t, false)[0].ID, charge.ID, "a retry now replays the delayed charge")
}

func TestFaultDelayedApplyAnswersNothingWhenMSPasses(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultDelayedApply, 100))})

	_, err := b.client.Charge(t.Context(), visa("pk_late"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
	eventually(t, func() bool { return b.lookupFinds(t, "pk_late") }, "the delayed charge is applied")
}

func TestFaultKeyExpiry(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setup(t, fakepsp.Config{Now: clock.Now, Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultKeyExpiry, 1000))})

	first := b.charge(t, visa("pk_expiring"))
	clock.Advance(999 * time.Millisecond)
	require.Equal(t, first, b.charge(t, visa("pk_expiring")), "within the window the key replays")
	require.True(t, b.lookupFinds(t, "pk_expiring"))

	clock.Advance(time.Millisecond)
	require.False(t, b.lookupFinds(t, "pk_expiring"), "after the window the provider forgot the key")
	second := b.charge(t, visa("pk_expiring"))
	require.NotEqual(t, first.ID, second.ID, "the same key charged again")

	ledger := b.ledger(t, false)
	require.Len(t, ledger, 2)
	var audit fakepsp.Audit
	b.getJSON(t, "/_admin/audit", &audit)
	require.Len(t, audit.Duplicates, 1)
	require.Equal(t, "pk_expiring", audit.Duplicates[0].IdempotencyKey)
}

func TestFaultKeyExpirySurvivesARestart(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	first := setup(t, fakepsp.Config{Now: clock.Now, Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultKeyExpiry, 1000))})
	first.charge(t, visa("pk_expiring"))
	require.NoError(t, first.provider.Close())

	second := setup(t, fakepsp.Config{LedgerPath: first.ledgerPath, Now: clock.Now})
	require.True(t, second.lookupFinds(t, "pk_expiring"))
	clock.Advance(time.Second)
	require.False(t, second.lookupFinds(t, "pk_expiring"))
}

func TestDedupeOff(t *testing.T) {
	t.Parallel()

	t.Run("by configuration", func(t *testing.T) {
		t.Parallel()

		b := setup(t, fakepsp.Config{Dedupe: ptr(false)})
		first := b.charge(t, visa("pk_twice"))
		second := b.charge(t, visa("pk_twice"))
		require.NotEqual(t, first.ID, second.ID)
		require.Len(t, b.ledger(t, false), 2)

		found, err := b.client.Lookup(t.Context(), "pk_twice")
		require.NoError(t, err)
		require.Equal(t, second, found, "a lookup shows the latest charge for the key")
	})

	t.Run("through the admin endpoint, and back", func(t *testing.T) {
		t.Parallel()

		b := setup(t, fakepsp.Config{})
		resp := b.do(t, http.MethodPost, "/_admin/faults", nil, `{"seed":1,"dedupe":false,"rules":[]}`)
		require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
		require.False(t, b.provider.Faults().Dedupe)

		first := b.charge(t, visa("pk_twice"))
		second := b.charge(t, visa("pk_twice"))
		require.NotEqual(t, first.ID, second.ID)

		// A schedule without "dedupe" restores the configured default.
		resp = b.do(t, http.MethodPost, "/_admin/faults", nil, `{"rules":[]}`)
		require.Equal(t, http.StatusOK, resp.status)
		require.True(t, b.provider.Faults().Dedupe)
		require.Equal(t, second, b.charge(t, visa("pk_twice")))
		require.Len(t, b.ledger(t, false), 2)
	})
}

func TestFaultUnavailable(t *testing.T) {
	t.Parallel()

	t.Run("503", func(t *testing.T) {
		t.Parallel()

		b := setup(t, fakepsp.Config{Faults: faults(always(fakepsp.OnLookup, fakepsp.FaultUnavailable, 0))})
		b.charge(t, visa("pk_1"))
		_, err := b.client.Lookup(t.Context(), "pk_1")
		requirePSPError(t, err, psp.ErrUnknownOutcome, "status_503")
		_, err = b.client.Lookup(t.Context(), "pk_never_sent")
		requirePSPError(t, err, psp.ErrUnknownOutcome, "status_503")
	})

	t.Run("held, then dropped", func(t *testing.T) {
		t.Parallel()

		b := setup(t, fakepsp.Config{Faults: faults(always(fakepsp.OnLookup, fakepsp.FaultUnavailable, 200))})
		b.charge(t, visa("pk_1"))

		_, err := b.clientWithTimeout(50*time.Millisecond).Lookup(t.Context(), "pk_1")
		requirePSPError(t, err, psp.ErrUnknownOutcome, "timeout")

		started := time.Now()
		_, err = b.client.Lookup(t.Context(), "pk_1")
		requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
		require.GreaterOrEqual(t, time.Since(started), 200*time.Millisecond)
	})
}

func TestFaultLookupLag(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setup(t, fakepsp.Config{Now: clock.Now, Faults: faults(always(fakepsp.OnLookup, fakepsp.FaultLookupLag, 500))})

	charge := b.charge(t, visa("pk_fresh"))
	require.False(t, b.lookupFinds(t, "pk_fresh"), "a fresh charge is hidden")
	clock.Advance(499 * time.Millisecond)
	require.False(t, b.lookupFinds(t, "pk_fresh"))

	clock.Advance(time.Millisecond)
	found, err := b.client.Lookup(t.Context(), "pk_fresh")
	require.NoError(t, err)
	require.Equal(t, charge, found, "then shown")
	require.Equal(t, 3, b.provider.Faults().Fired[fakepsp.FaultLookupLag])
}

func TestFaultKeyPrefix(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{Faults: faults(fakepsp.Rule{On: fakepsp.OnCharge, Fault: fakepsp.FaultErrorBeforeApply, P: 1, KeyPrefix: "boom-"})})

	_, err := b.client.Charge(t.Context(), visa("boom-1"))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "status_500")
	b.charge(t, visa("calm-1"))
	require.Equal(t, map[string]int{fakepsp.FaultErrorBeforeApply: 1}, b.provider.Faults().Fired)
}

func TestFaultFirstRuleThatFiresWins(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{Faults: faults(
		fakepsp.Rule{On: fakepsp.OnCharge, Fault: fakepsp.FaultNotProcessed, P: 0},
		always(fakepsp.OnCharge, fakepsp.FaultErrorBeforeApply, 0),
		always(fakepsp.OnCharge, fakepsp.FaultApplyThenReset, 0),
	)})

	for i := range 3 {
		_, err := b.client.Charge(t.Context(), visa(fmt.Sprintf("pk_%d", i)))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "status_500")
	}
	require.Equal(t, map[string]int{fakepsp.FaultErrorBeforeApply: 3}, b.provider.Faults().Fired)
	require.Empty(t, b.ledger(t, true))
}

func TestSeededScheduleIsReproducible(t *testing.T) {
	t.Parallel()

	schedule := fakepsp.Schedule{Seed: 42, Rules: []fakepsp.Rule{
		{On: fakepsp.OnCharge, Fault: fakepsp.FaultNotProcessed, P: 0.2},
		{On: fakepsp.OnCharge, Fault: fakepsp.FaultErrorBeforeApply, P: 0.2},
		{On: fakepsp.OnCharge, Fault: fakepsp.FaultErrorAfterApply, P: 0.2},
		{On: fakepsp.OnLookup, Fault: fakepsp.FaultUnavailable, P: 0.3},
	}}

	// run sends the same sequential stream of charges and lookups and
	// returns the statuses seen and the fired counters.
	run := func(b *testBundle) ([]string, map[string]int) {
		var statuses []string
		for i := range 30 {
			key := fmt.Sprintf("pk_%02d", i)
			resp := b.postCharge(t, key, fmt.Sprintf(`{"amount":%d,"currency":"USD","payment_method":"pm_card_visa","reference":"ch_%d"}`, 100+i, i))
			statuses = append(statuses, fmt.Sprintf("charge %s %d", key, resp.status))
			resp = b.do(t, http.MethodGet, "/v1/charges/by-key/"+key, nil, "")
			statuses = append(statuses, fmt.Sprintf("lookup %s %d", key, resp.status))
		}
		return statuses, b.provider.Faults().Fired
	}

	first := setup(t, fakepsp.Config{Faults: schedule})
	second := setup(t, fakepsp.Config{Faults: schedule})
	firstStatuses, firstFired := run(first)
	secondStatuses, secondFired := run(second)

	require.Equal(t, firstStatuses, secondStatuses)
	require.Equal(t, firstFired, secondFired)
	require.Len(t, firstFired, 4, "every fault fired at least once in this stream: %v", firstFired)
	joined := strings.Join(firstStatuses, "\n")
	for _, status := range []string{" 200", " 429", " 500", " 503", " 404"} {
		require.Contains(t, joined, status)
	}

	// Setting the schedule again reseeds it: the fired faults repeat on
	// fresh keys too.
	require.NoError(t, second.provider.SetFaults(schedule))
	fresh := setup(t, fakepsp.Config{})
	require.NoError(t, fresh.provider.SetFaults(schedule))
	_, againFired := run(fresh)
	require.Equal(t, firstFired, againFired)

	// A different seed gives a different sequence.
	other := schedule
	other.Seed = 7
	third := setup(t, fakepsp.Config{Faults: other})
	thirdStatuses, _ := run(third)
	require.NotEqual(t, firstStatuses, thirdStatuses)
}

func TestParseSchedule(t *testing.T) {
	t.Parallel()

	t.Run("valid", func(t *testing.T) {
		t.Parallel()

		schedule, err := fakepsp.ParseSchedule([]byte(`{
			"seed": 7, "dedupe": false,
			"rules": [
				{"on": "charge", "fault": "apply_then_timeout", "p": 0.3, "ms": 2000},
				{"on": "lookup", "fault": "lookup_lag", "p": 1, "ms": 500, "key_prefix": "ch_"},
				{"on": "lookup", "fault": "latency", "p": 0, "ms": 10},
				{"on": "refund", "fault": "delayed_apply", "p": 0.1, "ms": 300, "key_prefix": "rk_"}
			]
		}`))
		require.NoError(t, err)
		require.Equal(t, fakepsp.Schedule{Seed: 7, Dedupe: ptr(false), Rules: []fakepsp.Rule{
			{On: "charge", Fault: "apply_then_timeout", P: 0.3, MS: 2000},
			{On: "lookup", Fault: "lookup_lag", P: 1, MS: 500, KeyPrefix: "ch_"},
			{On: "lookup", Fault: "latency", P: 0, MS: 10},
			{On: "refund", Fault: "delayed_apply", P: 0.1, MS: 300, KeyPrefix: "rk_"},
		}}, schedule)
	})

	tests := []struct {
		name string
		json string
	}{
		{"not json", `seed=1`},
		{"empty", ``},
		{"trailing data", `{"rules":[]} {}`},
		{"unknown top-level field", `{"rules":[],"speed":1}`},
		{"unknown rule field", `{"rules":[{"on":"charge","fault":"latency","p":1,"ms":1,"every":3}]}`},
		{"unknown fault", `{"rules":[{"on":"charge","fault":"meteor_strike","p":1}]}`},
		{"missing p", `{"rules":[{"on":"charge","fault":"latency","ms":100}]}`},
		{"p above one", `{"rules":[{"on":"charge","fault":"latency","p":1.5}]}`},
		{"p below zero", `{"rules":[{"on":"charge","fault":"latency","p":-0.1}]}`},
		{"negative ms", `{"rules":[{"on":"charge","fault":"latency","p":1,"ms":-1}]}`},
		{"ms too large", `{"rules":[{"on":"charge","fault":"latency","p":1,"ms":3600001}]}`},
		{"missing on", `{"rules":[{"fault":"latency","p":1}]}`},
		{"unknown on", `{"rules":[{"on":"authorize","fault":"latency","p":1}]}`},
		{"lookup fault on refund", `{"rules":[{"on":"refund","fault":"lookup_lag","p":1}]}`},
		{"unavailable on refund", `{"rules":[{"on":"refund","fault":"unavailable","p":1}]}`},
		{"charge fault on lookup", `{"rules":[{"on":"lookup","fault":"apply_then_reset","p":1}]}`},
		{"lookup fault on charge", `{"rules":[{"on":"charge","fault":"lookup_lag","p":1}]}`},
		{"unavailable on charge", `{"rules":[{"on":"charge","fault":"unavailable","p":1}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			_, err := fakepsp.ParseSchedule([]byte(tt.json))
			require.ErrorIs(t, err, fakepsp.ErrInvalidSchedule)
		})
	}
}

func TestAdminFaults(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})

	var state fakepsp.FaultState
	b.getJSON(t, "/_admin/faults", &state)
	require.Equal(t, fakepsp.FaultState{Dedupe: true, Rules: []fakepsp.Rule{}, Fired: map[string]int{}}, state)

	resp := b.do(t, http.MethodPost, "/_admin/faults", nil, `{"rules":[{"on":"charge","fault":"meteor_strike","p":1}]}`)
	require.Equal(t, http.StatusBadRequest, resp.status)
	require.Equal(t, "invalid_schedule", resp.errorCode(t))
	require.Contains(t, string(resp.body), "meteor_strike")

	resp = b.do(t, http.MethodPost, "/_admin/faults", nil, `{"seed":3,"rules":[{"on":"charge","fault":"not_processed","p":1,"key_prefix":"busy"}]}`)
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)

	_, err := b.client.Charge(t.Context(), visa("busy-1"))
	requirePSPError(t, err, psp.ErrNotApplied, "status_429")
	b.charge(t, visa("calm-1"))

	b.getJSON(t, "/_admin/faults", &state)
	require.Equal(t, fakepsp.FaultState{
		Seed:   3,
		Dedupe: true,
		Rules:  []fakepsp.Rule{{On: "charge", Fault: "not_processed", P: 1, KeyPrefix: "busy"}},
		Fired:  map[string]int{"not_processed": 1},
	}, state)
}
