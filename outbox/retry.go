package outbox

import (
	"math/rand/v2"
	"time"

	"github.com/riverqueue/river/rivertype"
)

// RetryPolicy spaces the attempts of a charge.submit job whose provider call
// was provably not applied: Base·2^(attempt-1), at most Cap, with up to ±10 %
// jitter so that a provider coming back is not hit by every charge at once.
// With the defaults (1 s, 5 min) and 10 attempts a charge the provider keeps
// refusing fails as provider_unavailable after about eight and a half minutes.
type RetryPolicy struct {
	Base time.Duration
	Cap  time.Duration
}

// NextRetry implements river.ClientRetryPolicy.
func (p RetryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	base, ceiling := p.Base, p.Cap
	if base <= 0 {
		base = time.Second
	}
	if ceiling <= 0 {
		ceiling = 5 * time.Minute
	}
	delay := ceiling
	if shift := job.Attempt - 1; shift >= 0 && shift < 32 {
		delay = min(base<<shift, ceiling)
	}
	jitter := time.Duration((rand.Float64()*0.2 - 0.1) * float64(delay))
	return time.Now().Add(delay + jitter)
}
