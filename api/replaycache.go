package api

import (
	"sync"
	"time"

	"chargeflow/intent"
)

// replayCache keeps the idempotency records this process wrote or read, so
// that a retry is answered without a database read (docs/api.md,
// "Replays"). A record never changes once written, so a copy answers as the
// row would; a copy is used only before the record's expiry, after which
// the key is the database's to judge again. The oldest entry makes room
// for a new one. A nil cache keeps nothing.
type replayCache struct {
	mu      sync.Mutex
	entries map[replayKey]intent.IdempotencyRecord
	// ring holds the keys in the order they were added; next is the slot
	// the next one takes, evicting the key there.
	ring []replayKey
	next int
}

type replayKey struct {
	tenantID string
	keyHash  [32]byte
}

// newReplayCache keeps up to size records; nil when size is not positive.
func newReplayCache(size int) *replayCache {
	if size <= 0 {
		return nil
	}
	return &replayCache{entries: make(map[replayKey]intent.IdempotencyRecord, size), ring: make([]replayKey, 0, size)}
}

// get returns the record a tenant stored under a key hash, if this process
// has it and it has not expired at now.
func (c *replayCache) get(tenantID string, keyHash [32]byte, now time.Time) (intent.IdempotencyRecord, bool) {
	if c == nil {
		return intent.IdempotencyRecord{}, false
	}
	c.mu.Lock()
	rec, ok := c.entries[replayKey{tenantID, keyHash}]
	c.mu.Unlock()
	if !ok || !now.Before(rec.ExpiresAt) {
		return intent.IdempotencyRecord{}, false
	}
	return rec, true
}

// put keeps a committed record.
func (c *replayCache) put(tenantID string, keyHash [32]byte, rec intent.IdempotencyRecord) {
	if c == nil {
		return
	}
	k := replayKey{tenantID, keyHash}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[k]; ok {
		c.entries[k] = rec
		return
	}
	if len(c.ring) < cap(c.ring) {
		c.ring = append(c.ring, k)
	} else {
		delete(c.entries, c.ring[c.next])
		c.ring[c.next] = k
		c.next = (c.next + 1) % len(c.ring)
	}
	c.entries[k] = rec
}
