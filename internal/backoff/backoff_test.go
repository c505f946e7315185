package backoff_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/backoff"
)

func TestDelay(t *testing.T) {
	t.Parallel()
	within := func(t *testing.T, want, got time.Duration) {
		t.Helper()
		spread := time.Duration(backoff.Jitter * float64(want))
		require.GreaterOrEqual(t, got, want-spread)
		require.LessOrEqual(t, got, want+spread)
	}
	for _, tc := range []struct {
		attempt int
		want    time.Duration
	}{
		{0, time.Second}, // below 1 counts as the first
		{1, time.Second},
		{2, 2 * time.Second},
		{4, 8 * time.Second},
		{9, 256 * time.Second},
		{10, 5 * time.Minute}, // 512 s is past the ceiling
		{62, 5 * time.Minute},
		{1 << 20, 5 * time.Minute},
	} {
		for range 50 {
			within(t, tc.want, backoff.Delay(tc.attempt, time.Second, 5*time.Minute))
		}
	}

	// The jitter really spreads: fifty draws are not all equal.
	seen := map[time.Duration]bool{}
	for range 50 {
		seen[backoff.Delay(3, time.Second, time.Minute)] = true
	}
	require.Greater(t, len(seen), 1)
}
