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

// NextRetry implements river.ClientRetryPolicy: the delay counts from
// retryFrom.
func (p RetryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	return retryFrom(job).Add(backoff.Delay(job.Attempt, cmp.Or(p.Base, DefaultRetryBase), cmp.Or(p.Cap, DefaultRetryCap)))
}

// retryFrom is the time a failed attempt's retry delay counts from: this
// process's clock, or the attempt's start by the database's clock
// (attempted_at, which River stamps with now() when it takes the job) when
// that is later. River runs the retry once the database's clock reaches the
// time, but refuses one earlier than its own reading of this host's clock,
// so the host's clock is a floor: a worker whose clock is behind the
// database's still spaces its attempts, where counting from its clock alone
// would spend them at once; one ahead by S retries up to S late
// (docs/operations.md, "Clocks").
func retryFrom(job *rivertype.JobRow) time.Time {
	from := clock.Now()
	if now := time.Now(); now.After(from) { // River's floor: its own reading of the host's clock
		from = now
	}
	if at := job.AttemptedAt; at != nil && at.After(from) {
		from = *at
	}
	return from
}
