package accept

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
)

func TestReplayCache(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	key := func(s string) [32]byte { return sha256.Sum256([]byte(s)) }
	rec := func(id string, expires time.Time) intent.IdempotencyRecord {
		return intent.IdempotencyRecord{ChargeID: id, StatusCode: 201, ResponseBody: []byte(`{"id":"` + id + `"}`), ExpiresAt: expires}
	}

	t.Run("ServesUntilExpiry", func(t *testing.T) {
		t.Parallel()
		c := newReplayCache(4)
		c.put("tn_a", key("k1"), rec("ch_1", now.Add(time.Hour)))
		got, ok := c.get("tn_a", key("k1"), now)
		require.True(t, ok)
		require.Equal(t, "ch_1", got.ChargeID)
		_, ok = c.get("tn_a", key("k1"), now.Add(time.Hour))
		require.False(t, ok, "at its expiry the key is the database's to judge again")
	})

	t.Run("KeyedByTenant", func(t *testing.T) {
		t.Parallel()
		c := newReplayCache(4)
		c.put("tn_a", key("k1"), rec("ch_1", now.Add(time.Hour)))
		_, ok := c.get("tn_b", key("k1"), now)
		require.False(t, ok, "another tenant's key is another request")
	})

	t.Run("OldestMakesRoom", func(t *testing.T) {
		t.Parallel()
		c := newReplayCache(2)
		for _, k := range []string{"k1", "k2", "k3"} {
			c.put("tn_a", key(k), rec("ch_"+k, now.Add(time.Hour)))
		}
		_, ok := c.get("tn_a", key("k1"), now)
		require.False(t, ok)
		for _, k := range []string{"k2", "k3"} {
			got, ok := c.get("tn_a", key(k), now)
			require.True(t, ok)
			require.Equal(t, "ch_"+k, got.ChargeID)
		}
		c.put("tn_a", key("k3"), rec("ch_k3", now.Add(time.Hour))) // again: no second slot
		c.put("tn_a", key("k4"), rec("ch_k4", now.Add(time.Hour)))
		_, ok = c.get("tn_a", key("k2"), now)
		require.False(t, ok)
		_, ok = c.get("tn_a", key("k3"), now)
		require.True(t, ok)
		require.Len(t, c.index, 2)
	})

	t.Run("ReplayedKeysStay", func(t *testing.T) {
		t.Parallel()
		// A key being retried outlives any number of new records that
		// are never replayed; insertion order would have dropped it at
		// the third.
		c := newReplayCache(3)
		c.put("tn_a", key("retried"), rec("ch_retried", now.Add(time.Hour)))
		for i := range 20 {
			_, ok := c.get("tn_a", key("retried"), now)
			require.True(t, ok, "after %d new records", i)
			k := fmt.Sprintf("new-%d", i)
			c.put("tn_a", key(k), rec("ch_"+k, now.Add(time.Hour)))
		}
		// The newest two are what is left besides it: the others made
		// room in the order they came.
		_, ok := c.get("tn_a", key("new-19"), now)
		require.True(t, ok)
		_, ok = c.get("tn_a", key("new-18"), now)
		require.True(t, ok)
		_, ok = c.get("tn_a", key("new-17"), now)
		require.False(t, ok)
		require.Len(t, c.index, 3)

		// Once it is no longer retried, it goes like any other.
		for i := range 3 {
			k := fmt.Sprintf("later-%d", i)
			c.put("tn_a", key(k), rec("ch_"+k, now.Add(time.Hour)))
		}
		_, ok = c.get("tn_a", key("retried"), now)
		require.False(t, ok)
	})

	t.Run("NilKeepsNothing", func(t *testing.T) {
		t.Parallel()
		c := newReplayCache(0)
		require.Nil(t, c)
		c.put("tn_a", key("k1"), rec("ch_1", now.Add(time.Hour)))
		_, ok := c.get("tn_a", key("k1"), now)
		require.False(t, ok)
	})
}
