package outbox

import (
	"cmp"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/chargeflow/chargeflow/internal/backoff"
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

// NextRetry implements river.ClientRetryPolicy.
func (p RetryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	return time.Now().Add(backoff.Delay(job.Attempt, cmp.Or(p.Base, DefaultRetryBase), cmp.Or(p.Cap, DefaultRetryCap)))
}
