//go:build lab

package clock_test

import (
	"testing"
	"time"

	"github.com/chargeflow/chargeflow/internal/clock"
)

// Skew offsets Now either way, and a zero skew is the wall clock again. The
// skew is the process's, so this test does not run in parallel.
func TestSkew(t *testing.T) {
	t.Cleanup(func() { clock.Skew(0) })
	between(t, 0)
	clock.Skew(4 * time.Minute)
	between(t, 4*time.Minute)
	clock.Skew(-10 * time.Minute)
	between(t, -10*time.Minute)
	clock.Skew(0)
	between(t, 0)
}
