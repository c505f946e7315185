package fakepsp_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp"
)

// refundFaultBundle starts a provider with rules and a charge of 1000 to
// refund, made before the rules can touch it: rules on refunds do not act
// on charges.
func refundFaultBundle(t *testing.T, cfg fakepsp.Config, rules ...fakepsp.Rule) (*testBundle, psp.Charge) {
	t.Helper()

	cfg.Faults = faults(rules...)
	b := setup(t, cfg)
	return b, b.charge(t, visa("pk_1"))
}

// Every fault a charge can suffer, a refund can, through the same pipeline:
// each one here does to a refund what faults_test.go shows it does to a
// charge.
func TestRefundFaults(t *testing.T) {
	t.Parallel()

	t.Run("latency: delayed, then answered", func(t *testing.T) {
		t.Parallel()

		b, charge := refundFaultBundle(t, fakepsp.Config{}, always(fakepsp.OnRefund, fakepsp.FaultLatency, 150))
		started := time.Now()
		b.refund(t, "rk_slow", charge.ID, 100)
		require.GreaterOrEqual(t, time.Since(started), 150*time.Millisecond)
		require.Equal(t, map[string]int{fakepsp.FaultLatency: 1}, b.provider.Faults().Fired)
	})

	t.Run("latency: applied even when the client gave up", func(t *testing.T) {
		t.Parallel()

		b, charge := refundFaultBundle(t, fakepsp.Config{}, always(fakepsp.OnRefund, fakepsp.FaultLatency, 200))
		_, err := b.tryRefund(t, &http.Client{Timeout: 50 * time.Millisecond}, "rk_gave_up", refundBody(charge.ID, 100, "re_1"))
		require.Error(t, err)
		eventually(t, func() bool { return len(b.provider.Refunds()) == 1 }, "the refund is applied after the delay")
	})

	t.Run("drop_before_apply", func(t *testing.T) {
		t.Parallel()

		b, charge := refundFaultBundle(t, fakepsp.Config{}, always(fakepsp.OnRefund, fakepsp.FaultDropBeforeApply, 100))
		started := time.Now()
		_, err := b.tryRefund(t, b.http, "rk_dropped", refundBody(charge.ID, 100, "re_1"))
		require.Error(t, err, "no answer at all")
		require.GreaterOrEqual(t, time.Since(started), 100*time.Millisecond, "the connection was held first")
		require.False(t, b.refundFound(t, "rk_dropped"))
		require.Empty(t, b.refunds(t), "nothing was applied")
	})

	for _, fault := range []string{fakepsp.FaultApplyThenTimeout, fakepsp.FaultApplyThenReset} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()

			b, charge := refundFaultBundle(t, fakepsp.Config{}, always(fakepsp.OnRefund, fault, 300))
			_, err := b.tryRefund(t, &http.Client{Timeout: 100 * time.Millisecond}, "rk_lost", refundBody(charge.ID, 100, "re_1"))
			require.Error(t, err, "no answer at all")
			eventually(t, func() bool { return b.refundFound(t, "rk_lost") }, "the refund was applied all the same")
			require.Len(t, b.refunds(t), 1)
		})
	}

	t.Run("error_before_apply", func(t *testing.T) {
		t.Parallel()

		b, charge := refundFaultBundle(t, fakepsp.Config{}, always(fakepsp.OnRefund, fakepsp.FaultErrorBeforeApply, 0))
		resp := b.postRefund(t, "rk_500", refundBody(charge.ID, 100, "re_1"))
		require.Equal(t, http.StatusInternalServerError, resp.status)
		require.Equal(t, "internal_error", resp.errorCode(t))
		require.False(t, b.refundFound(t, "rk_500"))
		require.Empty(t, b.refunds(t))

		// Under the fake protocol's key rules nothing was saved: with the
		// fault off the key executes.
		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		resp = b.postRefund(t, "rk_500", refundBody(charge.ID, 100, "re_1"))
		require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
		require.Empty(t, resp.header.Get("Idempotent-Replayed"))
	})

	t.Run("error_after_apply", func(t *testing.T) {
		t.Parallel()

		b, charge := refundFaultBundle(t, fakepsp.Config{}, always(fakepsp.OnRefund, fakepsp.FaultErrorAfterApply, 0))
		body := refundBody(charge.ID, 100, "re_1")
		resp := b.postRefund(t, "rk_500", body)
		require.Equal(t, http.StatusInternalServerError, resp.status)
		require.Contains(t, string(resp.body), "the refund was applied")
		require.True(t, b.refundFound(t, "rk_500"), "the refund exists and the lookup shows it")

		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		resp = b.postRefund(t, "rk_500", body)
		require.Equal(t, http.StatusInternalServerError, resp.status, "the key replays its 500")
		require.Equal(t, "true", resp.header.Get("Idempotent-Replayed"))
		require.Len(t, b.refunds(t), 1)
	})

	t.Run("not_processed", func(t *testing.T) {
		t.Parallel()

		b, charge := refundFaultBundle(t, fakepsp.Config{}, always(fakepsp.OnRefund, fakepsp.FaultNotProcessed, 0))
		resp := b.postRefund(t, "rk_429", refundBody(charge.ID, 100, "re_1"))
		require.Equal(t, http.StatusTooManyRequests, resp.status)
		require.Equal(t, "rate_limited", resp.errorCode(t))
		require.Equal(t, "1", resp.header.Get("Retry-After"))
		require.False(t, b.refundFound(t, "rk_429"))
		require.Empty(t, b.refunds(t))
	})

	t.Run("delayed_apply", func(t *testing.T) {
		t.Parallel()

		// 3 s: long enough that the retry below arrives before it lands,
		// however slow the machine.
		b, charge := refundFaultBundle(t, fakepsp.Config{}, always(fakepsp.OnRefund, fakepsp.FaultDelayedApply, 3000))
		body := refundBody(charge.ID, 100, "re_rk_late")
		_, err := b.tryRefund(t, &http.Client{Timeout: 50 * time.Millisecond}, "rk_late", body)
		require.Error(t, err, "no answer at all")

		// Not applied yet: lookups say not found, and a retry under the key
		// is refused as in progress rather than applied a second time.
		require.False(t, b.refundFound(t, "rk_late"))
		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		resp := b.postRefund(t, "rk_late", body)
		require.Equal(t, http.StatusConflict, resp.status)
		require.Equal(t, "idempotency_key_in_use", resp.errorCode(t))
		require.Empty(t, b.refunds(t))

		eventually(t, func() bool { return b.refundFound(t, "rk_late") }, "the delayed refund is applied")
		refund := b.refund(t, "rk_late", charge.ID, 100)
		require.Equal(t, []string{refund.ID}, refundIDs(b.refunds(t)), "a retry now replays the delayed refund")
	})

	t.Run("key_expiry", func(t *testing.T) {
		t.Parallel()

		clock := newTestClock()
		b, charge := refundFaultBundle(t, fakepsp.Config{Now: clock.Now}, always(fakepsp.OnRefund, fakepsp.FaultKeyExpiry, 1000))
		first := b.refund(t, "rk_expiring", charge.ID, 100)
		clock.Advance(999 * time.Millisecond)
		require.Equal(t, first, b.refund(t, "rk_expiring", charge.ID, 100), "within the window the key replays")
		require.True(t, b.refundFound(t, "rk_expiring"))

		clock.Advance(time.Millisecond)
		require.False(t, b.refundFound(t, "rk_expiring"), "after the window the provider forgot the key")
		second := b.refund(t, "rk_expiring", charge.ID, 100)
		require.NotEqual(t, first.ID, second.ID, "the same key refunded again")
		require.Len(t, b.refunds(t), 2)
	})

	t.Run("key_prefix, and refund rules leave charges alone", func(t *testing.T) {
		t.Parallel()

		b, charge := refundFaultBundle(t, fakepsp.Config{},
			fakepsp.Rule{On: fakepsp.OnRefund, Fault: fakepsp.FaultErrorBeforeApply, P: 1, KeyPrefix: "boom-"},
			fakepsp.Rule{On: fakepsp.OnCharge, Fault: fakepsp.FaultNotProcessed, P: 1, KeyPrefix: "rk_"},
		)
		resp := b.postRefund(t, "boom-1", refundBody(charge.ID, 100, "re_1"))
		require.Equal(t, http.StatusInternalServerError, resp.status)
		b.refund(t, "rk_calm", charge.ID, 100)
		b.charge(t, visa("boom-2"))
		require.Equal(t, map[string]int{fakepsp.FaultErrorBeforeApply: 1}, b.provider.Faults().Fired,
			"the charge rule did not fire on a refund, nor the refund rule on a charge")
	})
}

// A refund's lookup by key draws the lookup rules, as a charge's does: it
// is eventually consistent under lookup_lag, and may be slow or fail.
func TestRefundLookupFaults(t *testing.T) {
	t.Parallel()

	t.Run("latency", func(t *testing.T) {
		t.Parallel()

		b, charge := refundFaultBundle(t, fakepsp.Config{}, always(fakepsp.OnLookup, fakepsp.FaultLatency, 150))
		b.refund(t, "rk_1", charge.ID, 100)
		started := time.Now()
		require.True(t, b.refundFound(t, "rk_1"))
		require.GreaterOrEqual(t, time.Since(started), 150*time.Millisecond)
	})

	t.Run("unavailable: 503", func(t *testing.T) {
		t.Parallel()

		b, charge := refundFaultBundle(t, fakepsp.Config{}, always(fakepsp.OnLookup, fakepsp.FaultUnavailable, 0))
		b.refund(t, "rk_1", charge.ID, 100)
		for _, key := range []string{"rk_1", "rk_never_sent"} {
			resp := b.refundLookup(t, key)
			require.Equal(t, http.StatusServiceUnavailable, resp.status)
			require.Equal(t, "1", resp.header.Get("Retry-After"))
		}
	})

	t.Run("unavailable: held, then dropped", func(t *testing.T) {
		t.Parallel()

		b, charge := refundFaultBundle(t, fakepsp.Config{}, always(fakepsp.OnLookup, fakepsp.FaultUnavailable, 150))
		b.refund(t, "rk_1", charge.ID, 100)
		started := time.Now()
		_, err := b.http.Get(b.url + "/v1/refunds/by-key/rk_1")
		require.Error(t, err, "no answer at all")
		require.GreaterOrEqual(t, time.Since(started), 150*time.Millisecond)
	})

	t.Run("lookup_lag", func(t *testing.T) {
		t.Parallel()

		clock := newTestClock()
		b, charge := refundFaultBundle(t, fakepsp.Config{Now: clock.Now}, always(fakepsp.OnLookup, fakepsp.FaultLookupLag, 500))
		refund := b.refund(t, "rk_fresh", charge.ID, 100)
		require.False(t, b.refundFound(t, "rk_fresh"), "a fresh refund is hidden")
		clock.Advance(499 * time.Millisecond)
		require.False(t, b.refundFound(t, "rk_fresh"))

		clock.Advance(time.Millisecond)
		resp := b.refundLookup(t, "rk_fresh")
		require.Equal(t, http.StatusOK, resp.status, "then shown")
		require.Contains(t, string(resp.body), refund.ID)
		require.Equal(t, 3, b.provider.Faults().Fired[fakepsp.FaultLookupLag])
	})
}
