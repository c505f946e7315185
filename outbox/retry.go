package outbox

import (
	"cmp"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/chargeflow/chargeflow/internal/backoff"
	"github.com/chargeflow/chargeflow/internal/clock"
)

// Defaults of RetryPolicy.
const (
	DefaultRetryBase = time.Second
	DefaultRetryCap  = 5 * time.Minute
)

// RetryPolicy spaces the attempts of a charge.submit job whose provider call
// was provably not applied, by the one backoff rule (internal/backoff):
// Base·2^(attempt-1), at most Cap, spread ±10 % so that a provider coming
// back is not hit by every charge at once. With the defaults (1 s, 5 min)
// and 10 attempts a charge the provider keeps refusing fails as
// provider_unavailable after about eight and a half minutes.
type RetryPolicy struct {
	Base time.Duration
	Cap  time.Duration
}

// NextRetry implements river.ClientRetryPolicy. The delay counts from the
// attempt's start as the database's clock wrote it (River sets attempted_at
// to now() when it takes the job), and River makes the job available again
// when the database's clock reaches the time returned, so no worker's clock
// enters the spacing: a worker whose clock is behind would otherwise spend
// the attempts at once (docs/operations.md, "Clocks").
func (p RetryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	return RetryFrom(job).Add(backoff.Delay(job.Attempt, cmp.Or(p.Base, DefaultRetryBase), cmp.Or(p.Cap, DefaultRetryCap)))
}

// RetryFrom is when a job's attempt began by the database's clock, the
// time a retry's delay counts from; a job River has not stamped (never
// taken) counts from this process's clock.
func RetryFrom(job *rivertype.JobRow) time.Time {
	if job.AttemptedAt != nil {
		return *job.AttemptedAt
	}
	return clock.Now()
}
