package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/outbox"
)

// setup starts an in-process System on a fresh database. Tests keep its
// pools small: the suite shares one server's max_connections.
func setup(tb testing.TB, apiMaxConns, workerConcurrency int) *System {
	tb.Helper()
	sys, err := StartInProcess(context.Background(), InProcessConfig{
		DatabaseURL:       dbtest.URL(tb),
		LedgerDir:         tb.TempDir(),
		APIMaxConns:       apiMaxConns,
		WorkerConcurrency: workerConcurrency,
		WorkerMaxConns:    8,
	})
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, sys.Close(context.Background())) })
	return sys
}

// setupRunner adds a runner (which seeds and analyzes the database).
func setupRunner(tb testing.TB, sys *System, opts Options) *runner {
	tb.Helper()
	r, err := newRunner(context.Background(), sys, opts)
	require.NoError(tb, err)
	tb.Cleanup(r.admin.Close)
	return r
}

// TestRun runs every measurement for a fraction of a second: it proves the
// code works and the report is complete. It asserts no speed.
func TestRun(t *testing.T) {
	t.Parallel()
	// Jobs hold no connection while they wait on the provider, so many
	// can run on the small pool (the slow-provider drain needs them).
	sys := setup(t, 4, 64)

	rep, err := Run(context.Background(), sys, Options{Duration: 300 * time.Millisecond, SustainDuration: 300 * time.Millisecond, Concurrency: []int{2}})
	require.NoError(t, err)

	require.Len(t, rep.Accept, 1)
	accept := rep.Accept[0]
	require.Positive(t, accept.API.Ops)
	require.Positive(t, accept.Raw.Ops)
	require.Zero(t, accept.API.Failures, accept.API.FirstFailure)
	require.Zero(t, accept.Raw.Failures, accept.Raw.FirstFailure)
	require.Positive(t, accept.Ratio)
	require.Positive(t, accept.Minimal.Ops)
	require.Zero(t, accept.Minimal.Failures, accept.Minimal.FirstFailure)
	require.Positive(t, accept.MinimalRatio)

	require.Len(t, rep.Replay, 1)
	replay := rep.Replay[0]
	require.Positive(t, replay.Replay.Samples)
	require.Positive(t, replay.Select.Samples)
	require.Zero(t, replay.Replay.Failures, replay.Replay.FirstFailure)
	require.Zero(t, replay.Select.Failures, replay.Select.FirstFailure)
	require.Positive(t, replay.Replay.P99)
	require.Equal(t, 1.0, replay.FromMemory, "this API created every key the probe replays, and kept them")

	settle := rep.Settle
	require.Positive(t, settle.Backlog)
	require.Positive(t, settle.SettledPerSecond)
	require.Zero(t, settle.NotSucceeded)
	end := settle.EndToEnd
	require.NotEmpty(t, end.Probes)
	require.True(t, end.Confirmed.Drained, "the queue drains after the end-to-end run")
	require.Positive(t, end.Latency.Charges)
	require.Positive(t, end.Latency.P99)
	require.GreaterOrEqual(t, end.Latency.P99, end.Latency.P50)
	require.NotNil(t, settle.CPU, "CPU per settled charge is read on Linux with Postgres on this machine")
	require.Positive(t, settle.CPU.Postgres)
	require.Positive(t, settle.CPU.Worker)
	require.Positive(t, settle.Slow.Backlog)
	require.Positive(t, settle.Slow.SettledPerSecond)
	require.Zero(t, settle.Slow.NotSucceeded)
	require.Positive(t, settle.Slow.Ratio)
	require.Positive(t, settle.Slow.InstantPerSecond, "the instant drains beside the slow ones ran")
	require.Equal(t, 4, settle.Slow.Drains, "four slow drains, beside four instant ones")
	require.InDelta(t, settle.Slow.SettledPerSecond/settle.Slow.InstantPerSecond, settle.Slow.Ratio, 1e-9,
		"the slow drains are compared with the instant drains beside them")
	for name, b := range map[string]Batches{"settle": settle.Batches, "slow": settle.Slow.Batches, "instant": settle.Slow.InstantBatches} {
		require.True(t, b.Claim >= 1 && b.Claim <= outbox.MaxBatch, "%s: claim batch %.2f", name, b.Claim)
		require.True(t, b.Settle >= 1 && b.Settle <= outbox.MaxBatch, "%s: settle batch %.2f", name, b.Settle)
	}

	require.True(t, rep.Storm.Met, "violations: %v", rep.Storm.Violations)
	require.Equal(t, StormRequests, rep.Storm.Requests)
	require.Empty(t, rep.Violations())
	require.Nil(t, rep.Memory, "the API ran in this process")

	var table bytes.Buffer
	require.NoError(t, PrintTable(&table, rep))
	for _, row := range []string{"accept", "vs minimal design", "settle", "end to end", "latency", "slow provider", "replay p99", "duplicate storm", "memory", "CPU per settled charge", "settle batch"} {
		require.Contains(t, table.String(), row)
	}
	_, err = json.Marshal(rep)
	require.NoError(t, err)
}

// TestRates offers two rates to the whole system for a fraction of a second
// each: every probe carries its charges, reads every process's CPU, and
// the report prints and encodes. It asserts no speed.
func TestRates(t *testing.T) {
	t.Parallel()
	sys := setup(t, 4, 64)

	rep, err := Rates(context.Background(), sys, RatesOptions{Rates: []float64{40, 80}, Duration: 500 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, rep.Probes, 2)
	for i, p := range rep.Probes {
		require.Equal(t, []float64{40, 80}[i], p.OfferedPerSecond)
		require.Positive(t, p.Accepted.Ops, "probe %d", i)
		require.Zero(t, p.Accepted.Failures, p.Accepted.FirstFailure)
		require.True(t, p.Drained, "probe %d: the backlog drains after the load", i)
		require.Equal(t, p.Accepted.Ops, p.Charges, "probe %d: every charge accepted was settled, and only those", i)
		require.NotNil(t, p.CPU, "CPU is read on Linux with Postgres on this machine")
		require.Positive(t, p.CPU.Postgres)
		require.Positive(t, p.CPU.Worker, "in process, the worker's share is this process's")
		require.Zero(t, p.AcceptBatch, "an API in this process has no metrics endpoint to read")
	}
	require.NotEmpty(t, rep.Machine.Postgres)

	var table bytes.Buffer
	require.NoError(t, PrintRates(&table, rep))
	require.Contains(t, table.String(), "CPU per charge")
	_, err = json.Marshal(rep)
	require.NoError(t, err)

	_, err = Rates(context.Background(), sys, RatesOptions{Rates: []float64{100, 0}})
	require.ErrorContains(t, err, "not positive")
	_, err = Rates(context.Background(), sys, RatesOptions{})
	require.ErrorContains(t, err, "no rates")
}

// TestRawAcceptMakesTheAPIsWrites checks that the baseline writes what an
// accepted charge writes: the same rows in the same four tables, and a job
// the worker accepts.
func TestRawAcceptMakesTheAPIsWrites(t *testing.T) {
	t.Parallel()
	sys := setup(t, 2, 2)
	ctx := context.Background()
	pool, err := openPool(ctx, sys.DatabaseURL, "test", 2)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	rows := func() []int {
		var charges, events, jobs, records int
		require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM charges), (SELECT count(*) FROM charge_audit),
			(SELECT count(*) FROM river_job WHERE kind = 'charge.submit' AND state = 'available'), (SELECT count(*) FROM idempotency_keys)`).
			Scan(&charges, &events, &jobs, &records))
		return []int{charges, events, jobs, records}
	}

	raw := &rawAcceptor{pool: pool, tenantID: sys.TenantID, keyPrefix: "raw-test-key-"}
	require.NoError(t, raw.accept(ctx, 1))
	require.Equal(t, []int{1, 1, 1, 1}, rows(), "a charge, its event, its job, its idempotency record")
	require.ErrorContains(t, raw.accept(ctx, 1), "already taken")
	require.Equal(t, []int{1, 1, 1, 1}, rows(), "a taken key writes nothing")
	client := newAPIClient(sys, "api-test-idempotency-key-", 1)
	require.NoError(t, client.accept(ctx, 1))
	require.Equal(t, []int{2, 2, 2, 2}, rows(), "the API writes the same rows")

	keyHash := sha256.Sum256([]byte("raw-test-key-1"))
	rec, err := intent.Idempotency(ctx, pool, sys.TenantID, keyHash[:])
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, rec.StatusCode)

	stop, err := sys.StartWorker(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, stop()) })
	r := &runner{sys: sys, admin: pool}
	state, err := r.waitSettled(ctx, rec.ChargeID, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, string(intent.StateSucceeded), state, "the worker carries a raw-written charge to the provider like any other")
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var tl tally
	for i := 1; i <= 100; i++ {
		tl.latencies = append(tl.latencies, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 50*time.Millisecond, tl.percentile(0.50))
	require.Equal(t, 99*time.Millisecond, tl.percentile(0.99))
	require.Equal(t, 100*time.Millisecond, tl.percentile(1))
	require.Zero(t, tally{}.percentile(0.99))
}

func TestCount(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567"} {
		require.Equal(t, want, count(in))
	}
}

// TestMinimalDesignInsertsOneUniqueJob checks the second baseline does what
// it stands for: one River job per idempotency key, in its own queue (no
// worker of ours takes it), and a repeated key inserts nothing.
func TestMinimalDesignInsertsOneUniqueJob(t *testing.T) {
	t.Parallel()
	sys := setup(t, 2, 2)
	ctx := context.Background()
	pool, err := openPool(ctx, sys.DatabaseURL, "test", 2)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client, stop, err := startMinimal(pool, "minimal-test-key-", 1)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, stop(context.Background())) })
	jobs := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = $1`, minimalQueue).Scan(&n))
		return n
	}

	accept := minimalAccept(client)
	require.NoError(t, accept(ctx, 1))
	require.NoError(t, accept(ctx, 2))
	require.Equal(t, 2, jobs())
	require.ErrorIs(t, accept(ctx, 1), errMinimalDuplicate)
	require.Equal(t, 2, jobs(), "a repeated key inserts no job")
	var charges int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM charges`).Scan(&charges))
	require.Zero(t, charges, "the minimal design writes no charge row")
}

// TestBatchesCountsStatements makes a drain's moves in statements of known
// sizes and requires the batches read back from the audit trail: three
// claims of 1, 99 and the rest of the seed's charges, and two settling
// transactions of half each.
func TestBatchesCountsStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sys := setup(t, 2, 2)
	r := setupRunner(t, sys, Options{})

	rows, err := r.admin.Query(ctx, `SELECT id FROM charges WHERE tenant_id = $1 AND state = 'pending' ORDER BY id`, sys.TenantID)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, ids, seedCharges)

	moves := func(ids []string, from, to intent.State) []intent.Move {
		ms := make([]intent.Move, len(ids))
		for i, id := range ids {
			ms[i] = intent.Move{TenantID: sys.TenantID, ChargeID: id, From: from, To: to, Actor: "test", Reason: "test"}
			if to == intent.StateSucceeded {
				ms[i].ProviderChargeID = "ch_" + id
			}
		}
		return ms
	}
	for _, part := range [][]string{ids[:1], ids[1:100], ids[100:]} {
		moved, err := intent.MoveMany(ctx, r.admin, moves(part, intent.StatePending, intent.StateSubmitting))
		require.NoError(t, err)
		require.Len(t, moved, len(part))
	}
	half := len(ids) / 2
	for _, part := range [][]string{ids[:half], ids[half:]} {
		err := pgx.BeginFunc(ctx, r.admin, func(tx pgx.Tx) error {
			moved, err := intent.MoveMany(ctx, tx, moves(part, intent.StateSubmitting, intent.StateSucceeded))
			require.Len(t, moved, len(part))
			return err
		})
		require.NoError(t, err)
	}

	got, err := r.batches(ctx)
	require.NoError(t, err)
	require.InDelta(t, float64(seedCharges)/3, got.Claim, 1e-9)
	require.InDelta(t, float64(seedCharges)/2, got.Settle, 1e-9)
}
