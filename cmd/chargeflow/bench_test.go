package main

import (
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chargeflow/bench"
)

// `chargeflow bench` end to end, for a fraction of a second per
// measurement, with this test binary standing in for chargeflow (the API,
// the worker and the fake provider are its children). It proves the
// command works and reports every measurement; it asserts no speed.
func TestBenchCommand(t *testing.T) {
	t.Parallel()
	p := start(t, []string{"DATABASE_URL=" + serverURL()}, "bench",
		"--duration", "300ms", "--sustain", "300ms", "--concurrency", "2", "--api-max-conns", "4", "--worker-concurrency", "64",
		"--json", "--dir", t.TempDir())
	select {
	case <-p.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("chargeflow bench still running after 3 minutes:\n%s", p.stderr.String())
	}
	require.NoError(t, p.err, "stderr:\n%s", p.stderr.String())

	var rep bench.Report
	require.NoError(t, json.Unmarshal([]byte(p.stdout.String()), &rep), "stdout:\n%s", p.stdout.String())
	require.Equal(t, "process", rep.Machine.API)
	require.Len(t, rep.Accept, 1)
	require.Positive(t, rep.Accept[0].API.Ops)
	require.Positive(t, rep.Accept[0].Raw.Ops)
	require.Len(t, rep.Replay, 1)
	require.Positive(t, rep.Replay[0].Replay.Samples)
	require.Positive(t, rep.Settle.SettledPerSecond)
	require.Positive(t, rep.Settle.Slow.SettledPerSecond, "the drain against a slow provider ran")
	require.NotEmpty(t, rep.Settle.EndToEnd.Probes, "the end-to-end search ran")
	require.Positive(t, rep.Accept[0].Minimal.Ops, "the minimal design was measured")
	require.True(t, rep.Storm.Met, "storm violations: %v", rep.Storm.Violations)
	if runtime.GOOS == "linux" {
		require.NotNil(t, rep.Memory, "the API's memory is read from /proc")
		require.Positive(t, rep.Memory.PeakRSS)
		require.NotNil(t, rep.Accept[0].CPU)
		require.NotNil(t, rep.Settle.CPU, "CPU per settled charge: the worker, the provider and Postgres from /proc")
		require.Positive(t, rep.Settle.CPU.Worker)
	}
}

func TestParseConcurrency(t *testing.T) {
	t.Parallel()
	levels, err := parseConcurrency("16, 32")
	require.NoError(t, err)
	require.Equal(t, []int{16, 32}, levels)
	for _, bad := range []string{"", "0", "16,", "x", "-4"} {
		_, err := parseConcurrency(bad)
		require.Error(t, err, bad)
	}
}
