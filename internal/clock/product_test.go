//go:build !lab

package clock_test

import "testing"

// The product build reads no variable and has no Skew: the laboratory's
// variable set in its environment changes nothing.
func TestNowIsTheWallClock(t *testing.T) {
	t.Setenv("CHARGEFLOW_CLOCK_SKEW", "1h")
	between(t, 0)
}
