package clock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/clock"
)

// between requires that Now, offset by the package's Offset, falls between
// two readings of the wall clock taken around it: exact, whatever the
// machine's speed.
func between(t *testing.T, want time.Duration) {
	t.Helper()
	require.Equal(t, want, clock.Offset())
	before := time.Now()
	got := clock.Now()
	after := time.Now()
	// Round(0) drops the monotonic reading: the wall clocks are compared,
	// as another process or the database would compare them.
	require.False(t, got.Round(0).Before(before.Add(want).Round(0)), "Now %s is before %s", got, before.Add(want))
	require.False(t, got.Round(0).After(after.Add(want).Round(0)), "Now %s is after %s", got, after.Add(want))
}
