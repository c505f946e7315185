package ids_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/ids"
)

func TestNew(t *testing.T) {
	t.Parallel()

	now := time.Now()
	a := ids.New("ch", now)
	b := ids.New("ch", now.Add(time.Millisecond))
	require.True(t, ids.Valid("ch", a), a)
	require.Less(t, a, b, "ids sort by time")
	require.NotEqual(t, ids.New("ch", now), ids.New("ch", now))
	require.False(t, ids.Valid("tn", a))
	require.False(t, ids.Valid("ch", a[:len(a)-1]))
	require.False(t, ids.Valid("ch", strings.ToUpper(a)))
	require.False(t, ids.Valid("ch", "ch_"+strings.Repeat("z", 26)), "first digit overflows 128 bits")
	require.False(t, ids.Valid("ch", "ch_0000000000000000000000000u"[:29]))
}

// Floor sorts after every id of an earlier millisecond and before every id
// of its own millisecond or a later one.
func TestFloor(t *testing.T) {
	t.Parallel()

	at := time.UnixMilli(1_700_000_000_123)
	floor := ids.Floor("evt", at)
	require.Len(t, floor, len("evt_")+10)
	require.Equal(t, floor, ids.FloorOf(ids.New("evt", at)))
	for range 100 {
		require.Less(t, ids.New("evt", at.Add(-time.Millisecond)), floor)
		require.Greater(t, ids.New("evt", at), floor)
		require.Greater(t, ids.New("evt", at.Add(time.Millisecond)), floor)
	}
	before := ids.Floor("evt", at.Add(-time.Millisecond))
	require.Less(t, before+strings.Repeat("z", 16), floor, "the greatest id of the millisecond before is below it")
	require.Greater(t, floor+strings.Repeat("0", 16), floor, "the least id of its millisecond is above it")
}
