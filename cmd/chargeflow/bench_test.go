//go:build lab

package main

import (
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/bench"
)

// benchJSON runs `chargeflow bench --json` with args, this test binary
// standing in for chargeflow, and decodes its report.
func benchJSON[R any](t *testing.T, timeout time.Duration, args ...string) R {
	t.Helper()
	p := start(t, []string{"DATABASE_URL=" + serverURL()}, append(append([]string{"bench"}, args...), "--json")...)
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("chargeflow bench %s still running after %s:\n%s", strings.Join(args, " "), timeout, p.stderr.String())
	}
	require.NoError(t, p.err, "stderr:\n%s", p.stderr.String())
	var rep R
	require.NoError(t, json.Unmarshal([]byte(p.stdout.String()), &rep), "stdout:\n%s", p.stdout.String())
	return rep
}

// `chargeflow bench` end to end, for a fraction of a second per
// measurement, with this test binary standing in for chargeflow (the API,
// the worker and the fake provider are its children). It proves the
// command works and reports every measurement; it asserts no speed.
func TestBenchCommand(t *testing.T) {
	t.Parallel()
	rep := benchJSON[bench.Report](t, 3*time.Minute,
		"--duration", "300ms", "--sustain", "300ms", "--concurrency", "2", "--api-max-conns", "4", "--worker-concurrency", "64",
		"--dir", t.TempDir())
	require.Equal(t, "process", rep.Machine.API)
	require.Len(t, rep.Accept, 1)
	require.Positive(t, rep.Accept[0].API.Ops)
	require.Positive(t, rep.Accept[0].Raw.Ops)
	require.Len(t, rep.Replay, 1)
	require.Positive(t, rep.Replay[0].Replay.Samples)
	require.Equal(t, 1.0, rep.Replay[0].FromMemory, "read from the API process's /metrics")
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
		require.NotNil(t, rep.Settle.Slow.CPU, "CPU per settled charge over the slow drains, each worker read while it ran")
		require.NotNil(t, rep.Settle.Slow.InstantCPU)
		require.Positive(t, rep.Settle.Slow.CPU.Provider)
		if _, err := os.Stat("/dev/shm"); err == nil {
			require.True(t, strings.HasPrefix(rep.Machine.ProviderLedger, "/dev/shm/"), "the fake provider's ledger in memory: %q", rep.Machine.ProviderLedger)
			_, err := os.Stat(rep.Machine.ProviderLedger)
			require.ErrorIs(t, err, os.ErrNotExist, "removed with the run")
		}
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

// `chargeflow bench --rates` end to end: one rate for a fraction of a
// second, the API and worker as processes, the accept batches read from
// the API's /metrics. It asserts no speed.
func TestBenchRatesCommand(t *testing.T) {
	t.Parallel()
	rep := benchJSON[bench.RatesReport](t, 2*time.Minute, "--rates", "60", "--duration", "500ms",
		"--api-max-conns", "4", "--worker-concurrency", "64", "--dir", t.TempDir())
	require.Equal(t, "process", rep.Machine.API)
	require.Len(t, rep.Probes, 1)
	probe := rep.Probes[0]
	require.Equal(t, 60.0, probe.OfferedPerSecond)
	require.Positive(t, probe.Accepted.Ops)
	require.Equal(t, probe.Accepted.Ops, probe.Charges, "every charge accepted was settled")
	require.GreaterOrEqual(t, probe.AcceptBatch, 1.0, "read from the API process's /metrics")
	if runtime.GOOS == "linux" {
		require.NotNil(t, probe.CPU)
		require.Positive(t, probe.CPU.API)
		require.Positive(t, probe.CPU.Worker)
		require.Positive(t, probe.CPU.Postgres)
	}
}

func TestParseRates(t *testing.T) {
	t.Parallel()
	rates, err := parseRates("200, 1000,1500.5")
	require.NoError(t, err)
	require.Equal(t, []float64{200, 1000, 1500.5}, rates)
	for _, bad := range []string{"", "0", "200,", "x", "-4", "NaN", "Inf"} {
		_, err := parseRates(bad)
		require.Error(t, err, bad)
	}
}

// `chargeflow bench --scale` end to end at a small size, so the command
// that measures the system at millions of charges cannot rot: both
// databases seeded, every operation timed at both sizes, retention run
// over the expired records with accepts beside it, the disk measured. It
// asserts no speed.
func TestBenchScaleCommand(t *testing.T) {
	t.Parallel()
	rep := benchJSON[bench.ScaleReport](t, 5*time.Minute, "--scale", "5000", "--samples", "20",
		"--duration", "300ms", "--concurrency", "2")
	require.Equal(t, 1000, rep.Empty)
	require.Equal(t, 5000, rep.Size)
	require.Len(t, rep.Ops, 13)
	for _, op := range rep.Ops {
		for i := range 2 {
			require.Positive(t, op.P50[i], op.Name)
			require.GreaterOrEqual(t, op.P99[i], op.P50[i], op.Name)
		}
	}
	for i, n := range []int{rep.Empty, rep.Size} {
		run := rep.Retention[i]
		// Every charge but those of the last day (the records' lifetime)
		// left an expired record; a refund's record too.
		require.Greater(t, run.Deleted, n*9/10, "at %d", n)
		require.True(t, run.OneAttempt, "at %d", n)
		require.Positive(t, run.AcceptsAlone)
		require.Positive(t, rep.Bytes[i].PerCharge)
		require.Positive(t, rep.Bytes[i].PerChargeAfterRetention)
		require.GreaterOrEqual(t, rep.Bytes[i].Charges, int64(n))
	}
}
