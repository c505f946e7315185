package accept

import (
	"sync"
	"time"

	"github.com/chargeflow/chargeflow/intent"
)

// replayCache keeps the idempotency records this process wrote or read, so
// that a retry is answered without a database read (docs/api.md,
// "Replays"). A record never changes once written, so a copy answers as the
// row would; a copy is used only before the record's expiry, after which
// the key is the database's to judge again.
//
// When full, a new record takes the slot of one that has not been replayed
// since the clock hand last passed it (the CLOCK, or second-chance, policy):
// a key that is being retried stays while a stream of new charges passes
// through. Evicting in insertion order instead dropped the keys in use as
// often as any other, and each such retry then went to Postgres behind the
// accepts. A nil cache keeps nothing.
type replayCache struct {
	mu    sync.Mutex
	index map[replayKey]int // the slot each cached key is in
	slots []replaySlot
	hand  int // the slot the next eviction looks at first
}

type replayKey struct {
	tenantID string
	keyHash  [32]byte
}

type replaySlot struct {
	key replayKey
	rec intent.IdempotencyRecord
	// replayed is set when the record answers a retry, and cleared when
	// the hand passes it over.
	replayed bool
}

// newReplayCache keeps up to size records; nil when size is not positive.
func newReplayCache(size int) *replayCache {
	if size <= 0 {
		return nil
	}
	return &replayCache{index: make(map[replayKey]int, size), slots: make([]replaySlot, 0, size)}
}

// get returns the record a tenant stored under a key hash, if this process
// has it and it has not expired at now.
func (c *replayCache) get(tenantID string, keyHash [32]byte, now time.Time) (intent.IdempotencyRecord, bool) {
	if c == nil {
		return intent.IdempotencyRecord{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.index[replayKey{tenantID, keyHash}]
	if !ok || !now.Before(c.slots[i].rec.ExpiresAt) {
		return intent.IdempotencyRecord{}, false
	}
	c.slots[i].replayed = true
	return c.slots[i].rec, true
}

// put keeps a committed record.
func (c *replayCache) put(tenantID string, keyHash [32]byte, rec intent.IdempotencyRecord) {
	if c == nil {
		return
	}
	k := replayKey{tenantID, keyHash}
	c.mu.Lock()
	defer c.mu.Unlock()
	if i, ok := c.index[k]; ok {
		c.slots[i].rec = rec
		return
	}
	if len(c.slots) < cap(c.slots) {
		c.index[k] = len(c.slots)
		c.slots = append(c.slots, replaySlot{key: k, rec: rec})
		return
	}
	// Each pass over a replayed slot clears it, so the hand stops within
	// one turn, and the turns are paid for by the replays that set them.
	for c.slots[c.hand].replayed {
		c.slots[c.hand].replayed = false
		c.hand = (c.hand + 1) % len(c.slots)
	}
	delete(c.index, c.slots[c.hand].key)
	c.slots[c.hand] = replaySlot{key: k, rec: rec}
	c.index[k] = c.hand
	c.hand = (c.hand + 1) % len(c.slots)
}
