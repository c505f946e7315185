// Package census counts the charges in each state, over every tenant
// (intent.TakeCensus), for the API's charges gauge and the operator's
// page, which share its bound on how often it queries: a caller that finds
// the last count older than Config.MaxAge counts again, so a process that
// nobody scrapes or looks at never queries, and many scrapers and
// operators cost one query per MaxAge.
package census

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chargeflow/chargeflow/intent"
)

// Timeout bounds the count query of one collection, so a slow database
// makes a scrape miss the gauge rather than hang.
const Timeout = 2 * time.Second

// Config is everything a Census needs. Zero values take the defaults.
type Config struct {
	// DB is where charges are counted.
	DB intent.DB
	// MaxAge is how old the counts may be before a caller counts again.
	// Counting reads the whole charges table, so this bounds its cost
	// however often, and by however many scrapers, the API is scraped.
	// Default 15 s.
	MaxAge time.Duration
}

// Defaults is the configuration New fills zero fields from.
func Defaults() Config { return Config{MaxAge: 15 * time.Second} }

// Census is the charges counted by state, at most once per MaxAge.
type Census struct {
	cfg Config

	mu     sync.Mutex
	at     time.Time
	last   intent.Census
	loaded bool
}

// New fills in defaults and refuses a negative MaxAge.
func New(cfg Config) (*Census, error) {
	if cfg.DB == nil {
		return nil, errors.New("census: DB is required")
	}
	cfg.MaxAge = cmp.Or(cfg.MaxAge, Defaults().MaxAge)
	if cfg.MaxAge < 0 {
		return nil, fmt.Errorf("census: charge count max age %s is negative", cfg.MaxAge)
	}
	return &Census{cfg: cfg}, nil
}

// Counts returns the counts by state and when they were counted, counting
// again (bounded by Timeout) when the last count is older than MaxAge.
func (c *Census) Counts(ctx context.Context) (intent.Census, time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loaded && time.Since(c.at) < c.cfg.MaxAge {
		return c.last, c.at, nil
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	census, err := intent.TakeCensus(ctx, c.cfg.DB)
	if err != nil {
		return intent.Census{}, time.Time{}, err
	}
	c.last, c.at, c.loaded = census, time.Now(), true
	return census, c.at, nil
}
