package ids_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chargeflow/internal/ids"
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
