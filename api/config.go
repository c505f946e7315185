package api

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/chargeflow/chargeflow/webhook"
)

// The range of Config.IdempotencyTTL.
const (
	MinIdempotencyTTL = time.Hour
	MaxIdempotencyTTL = 7 * 24 * time.Hour
)

// MaxRateLimit bounds Config.RateLimit: far above any real tenant's rate,
// and low enough that twice it (the default burst) is an exact int.
const MaxRateLimit = 1e9

// check refuses a configuration that would start and then misbehave: a
// negative rate limit refuses every request, a negative timeout fails every
// query, a provider name the schema does not allow fails every accept. It
// runs after the defaults are filled in, so zero means "default" and only
// what a person set can be wrong.
func (cfg Config) check() error {
	var errs []error
	refuse := func(format string, args ...any) { errs = append(errs, fmt.Errorf("api: "+format, args...)) }
	if math.IsNaN(cfg.RateLimit) || cfg.RateLimit <= 0 || cfg.RateLimit > MaxRateLimit {
		refuse("rate limit %v is not a number of requests per second from 0 to %v", cfg.RateLimit, float64(MaxRateLimit))
	}
	if cfg.RateBurst < 0 {
		refuse("rate burst %d is negative", cfg.RateBurst)
	}
	if cfg.AuthFailureLimit < 0 {
		refuse("authentication failure limit %d is negative", cfg.AuthFailureLimit)
	}
	if cfg.MaxBodyBytes < 0 {
		refuse("max body bytes %d is negative", cfg.MaxBodyBytes)
	}
	if !validMaxAmount(cfg.MaxAmount) {
		refuse("max amount %d is below 100 (one major unit) or overflows when scaled to %d decimals", cfg.MaxAmount, maxDigits)
	}
	if cfg.IdempotencyTTL < MinIdempotencyTTL || cfg.IdempotencyTTL > MaxIdempotencyTTL {
		refuse("idempotency TTL %s is outside 1h–168h", cfg.IdempotencyTTL)
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"auth cache TTL", cfg.AuthCacheTTL}, {"database timeout", cfg.DBTimeout}} {
		if d.value < 0 {
			refuse("%s %s is negative", d.name, d.value)
		}
	}
	if err := webhook.CheckPorts(cfg.WebhookPorts); err != nil {
		refuse("%v", err)
	}
	if len(cfg.Provider) > 64 {
		refuse("provider name %q is longer than 64 bytes, which the charges table refuses", cfg.Provider)
	}
	return errors.Join(errs...)
}
