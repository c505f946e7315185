//go:build lab

package reconciler_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/reconciler"
)

// Two reconcilers: A leases a charge, looks it up, and stalls past its
// lease; B leases it again, resolves it; A's write is refused by the fence
// and counted. One outcome.
func TestFencing(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	c := b.unknownCharge(ctx, t, 1500)
	b.chargeAtProvider(t, c, 1500, "pm_card_visa")

	var logs bytes.Buffer
	var logsMu sync.Mutex
	points, err := crashpoint.Parse(crashpoint.ReconcilerAfterLookupBeforeUpdate+"=pause:1500ms", 1,
		slog.New(slog.NewJSONHandler(writerFunc(func(p []byte) (int, error) { logsMu.Lock(); defer logsMu.Unlock(); return logs.Write(p) }), nil)))
	require.NoError(t, err)
	a := b.newReconciler(t, func(c *reconciler.Config) { c.ID = "a"; c.LeaseTTL = 300 * time.Millisecond; c.CrashPoints = points })
	other := b.newReconciler(t, func(c *reconciler.Config) { c.ID = "b" })

	done := make(chan reconciler.Result, 1)
	go func() {
		res, err := a.RunOnce(ctx)
		require.NoError(t, err)
		done <- res
	}()
	require.Eventually(t, func() bool {
		logsMu.Lock()
		defer logsMu.Unlock()
		return strings.Contains(logs.String(), "crashpoint fired")
	},
		10*time.Second, 5*time.Millisecond)

	// While A's lease is live, B cannot take the charge.
	res, err := other.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Leased)
	require.Eventually(t, func() bool {
		res, err = other.RunOnce(ctx)
		require.NoError(t, err)
		return res.Leased == 1
	}, 10*time.Second, 20*time.Millisecond, "after A's lease expires B takes it")
	require.Equal(t, 1, res.Succeeded)

	resA := <-done
	require.Equal(t, reconciler.Result{Leased: 1, Fenced: 1}, resA)
	require.Equal(t, 1, a.Totals().Fenced)

	events, err := intent.AuditTrail(ctx, b.pool, b.tenantID, c.ID)
	require.NoError(t, err)
	var resolutions []string
	for _, e := range events {
		if e.From == intent.StateUnknown {
			resolutions = append(resolutions, e.Actor+":"+string(e.To))
		}
	}
	require.Equal(t, []string{"reconciler:b:succeeded"}, resolutions, "one outcome, written by the live lease")
}
