package outbox

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// BreakerConfig configures the circuit breaker a worker keeps for each
// provider account (docs/routing.md, "Failover"). An account's breaker
// opens on failures: calls whose answer proved nothing was applied, and
// calls whose outcome is unknown (timeouts, resets, 5xx). While it is open
// the worker sends the account nothing: a charge of a tenant whose route
// has another account moves there, any other row waits for a retry. After
// OpenFor it lets HalfOpenCalls through; one success closes it.
type BreakerConfig struct {
	// ConsecutiveFailures opens the breaker on that many failures in a
	// row. Default 5.
	ConsecutiveFailures uint32
	// FailureRatio opens it when at least that share of the calls of the
	// last Window failed, once there were MinCalls of them. Defaults 0.5,
	// 20 and 10 s.
	FailureRatio float64
	MinCalls     uint32
	Window       time.Duration
	// OpenFor is how long it stays open before letting a call through.
	// Default 15 s.
	OpenFor time.Duration
	// HalfOpenCalls is how many calls a half-open breaker lets through.
	// Default 1.
	HalfOpenCalls uint32
}

// DefaultBreaker is the BreakerConfig zero fields take.
func DefaultBreaker() BreakerConfig {
	return BreakerConfig{ConsecutiveFailures: 5, FailureRatio: 0.5, MinCalls: 20, Window: 10 * time.Second,
		OpenFor: 15 * time.Second, HalfOpenCalls: 1}
}

func (c BreakerConfig) withDefaults() BreakerConfig {
	d := DefaultBreaker()
	c.ConsecutiveFailures = cmp.Or(c.ConsecutiveFailures, d.ConsecutiveFailures)
	c.FailureRatio = cmp.Or(c.FailureRatio, d.FailureRatio)
	c.MinCalls = cmp.Or(c.MinCalls, d.MinCalls)
	c.Window = cmp.Or(c.Window, d.Window)
	c.OpenFor = cmp.Or(c.OpenFor, d.OpenFor)
	c.HalfOpenCalls = cmp.Or(c.HalfOpenCalls, d.HalfOpenCalls)
	return c
}

// errCallFailed is what a breaker is told of a failed call: the outcome
// itself stays with the run.
var errCallFailed = errors.New("provider call failed")

// breakers holds one breaker per provider account, made on first use.
type breakers struct {
	cfg    BreakerConfig
	logger *slog.Logger

	mu sync.Mutex
	m  map[string]*gobreaker.TwoStepCircuitBreaker[struct{}]
}

func newBreakers(cfg BreakerConfig, logger *slog.Logger) *breakers {
	return &breakers{cfg: cfg.withDefaults(), logger: logger, m: map[string]*gobreaker.TwoStepCircuitBreaker[struct{}]{}}
}

func (b *breakers) get(name string) *gobreaker.TwoStepCircuitBreaker[struct{}] {
	b.mu.Lock()
	defer b.mu.Unlock()
	cb, ok := b.m[name]
	if !ok {
		cfg := b.cfg
		cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
			Name:        name,
			MaxRequests: cfg.HalfOpenCalls,
			Interval:    cfg.Window,
			Timeout:     cfg.OpenFor,
			ReadyToTrip: func(c gobreaker.Counts) bool {
				return c.ConsecutiveFailures >= cfg.ConsecutiveFailures ||
					(c.Requests >= cfg.MinCalls && float64(c.TotalFailures) >= cfg.FailureRatio*float64(c.Requests))
			},
			// A run cut short by the worker's own stop says nothing of
			// the provider.
			IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
			OnStateChange: func(name string, from, to gobreaker.State) {
				level := slog.LevelInfo
				if to == gobreaker.StateOpen {
					level = slog.LevelWarn
				}
				b.logger.Log(context.Background(), level, "provider circuit "+to.String(), "provider", name, "was", from.String())
			},
		})
		b.m[name] = cb
	}
	return cb
}

// allow asks name's breaker for a call: done reports its outcome (nil
// for an answer, errCallFailed or context.Canceled otherwise), and an
// error means the breaker is open, or half-open with its calls taken.
func (b *breakers) allow(name string) (done func(error), err error) {
	return b.get(name).Allow()
}

// usable reports whether name's breaker would let a call through now.
func (b *breakers) usable(name string) bool {
	return b.get(name).State() != gobreaker.StateOpen
}

// state names name's breaker's state: closed, half-open or open.
func (b *breakers) state(name string) string { return b.get(name).State().String() }
