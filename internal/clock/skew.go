//go:build lab

// The laboratory's half of the package, compiled only with -tags lab:
// cmd/chargeflow reads CHARGEFLOW_CLOCK_SKEW and calls Skew before a role
// starts, and logs the offset, so that a scenario can prove it was applied.

package clock

import (
	"sync/atomic"
	"time"
)

var skew atomic.Int64

func offset() time.Duration { return time.Duration(skew.Load()) }

// Skew makes Now read d ahead of the wall clock (behind, when d is
// negative) from now on.
func Skew(d time.Duration) { skew.Store(int64(d)) }

// Offset is how far Now is from the wall clock: what Skew set.
func Offset() time.Duration { return offset() }
