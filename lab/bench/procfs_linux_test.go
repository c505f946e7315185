//go:build linux

package bench

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProcfs reads this process's memory and CPU from /proc, which only
// Linux has (elsewhere the report leaves those columns out).
func TestProcfs(t *testing.T) {
	t.Parallel()
	mem, err := processMemory(0)
	require.Error(t, err, "pid 0 has no /proc entry")
	require.Zero(t, mem)

	m := startMemorySampler(os.Getpid(), time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	maxRSS, peak, err := m.finish()
	require.NoError(t, err)
	require.Positive(t, maxRSS)
	require.GreaterOrEqual(t, peak, maxRSS)
	m.halt() // a second stop is harmless

	cpu, err := processCPU(os.Getpid())
	require.NoError(t, err)
	require.GreaterOrEqual(t, cpu, time.Duration(0))
}
