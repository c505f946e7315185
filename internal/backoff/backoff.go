// Package backoff spaces retries: the one rule for how long to wait before
// trying again, used by the outbox worker's job retries and the
// reconciler's failed lookups alike (docs/architecture.md, "Backoff").
//
// It imports nothing of chargeflow's, so every package may use it.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Jitter is the spread around each delay: ±10 %, so that many charges
// refused together (a provider outage) do not all come back together, while
// the n-th wait stays recognisably base·2^(n-1).
const Jitter = 0.1

// Delay is the wait before retry number attempt (1-based) of a failing
// streak: base·2^(attempt-1), at most ceiling, then spread by ±Jitter. An
// attempt below 1 counts as 1; a doubling that would pass ceiling (or
// overflow) is ceiling.
func Delay(attempt int, base, ceiling time.Duration) time.Duration {
	d := ceiling
	if shift := max(attempt, 1) - 1; shift < 62 && base <= ceiling>>shift {
		d = base << shift
	}
	return d + time.Duration((rand.Float64()*2-1)*Jitter*float64(d))
}
