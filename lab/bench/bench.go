// Package bench measures the performance targets of docs/benchmarks.md, always as a
// ratio against a baseline run in the same process, against the same
// database, at the same concurrency — never as an absolute number, which
// would say more about the machine than about chargeflow:
//
//   - accept: POST /v1/charges through the real API (HTTP on loopback, the
//     real pool, the replay check, fresh keys) against intent.Accept's one statement
//     alone, sent straight from a pgx pool: the same writes in one round
//     trip and one commit;
//   - settle: the worker's pending → succeeded throughput against the fake
//     provider, against the accept throughput; and the backlog under a
//     sustained load, which must not grow;
//   - replay: the p99 of a replay under an accept load, against the p99 of
//     a primary-key select of the same record under the same load;
//   - duplicate storm: 200 concurrent requests with one key make one
//     charge and one provider call, and get no 5xx (a correctness check:
//     Report.Violations);
//   - memory: the API process's peak resident set.
//
// `chargeflow bench` runs it against child processes (StartProcesses); the
// Go benchmarks and the tests run it in process (StartInProcess).
// docs/benchmarks.md explains each number and records a run.
package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The targets of docs/benchmarks.md.
const (
	// AcceptTarget is the least API ÷ raw accept throughput.
	AcceptTarget = 0.8
	// MinimalTarget is the least API ÷ minimal design accept throughput.
	MinimalTarget = 1.0
	// SettleTarget is the least settle ÷ accept throughput.
	SettleTarget = 0.5
	// EndToEndTarget is the least rate the API and the worker sustain
	// together ÷ the API's accept-only rate.
	EndToEndTarget = 0.4
	// SlowProviderTarget is the least settle throughput against a provider
	// answering in 150–400 ms ÷ that against one answering at once.
	SlowProviderTarget = 0.9
	// ReplayTarget is the most replay p99 ÷ primary-key select p99.
	ReplayTarget = 2.0
	// MemoryTarget is the most resident memory of the API process.
	MemoryTarget = 100 << 20
)

// Options shape a Run.
type Options struct {
	// Duration is how long each measurement runs, split in alternated
	// parts: halves, or for accept quarters (acceptRounds). Default 10 s.
	Duration time.Duration
	// Concurrency lists the client concurrencies the accept and replay
	// measurements run at; settle runs at the first. Default 16 and 32.
	Concurrency []int
	// SustainDuration is how long the end-to-end rate found must hold,
	// backlog bounded. Default 60 s.
	SustainDuration time.Duration
	// Progress receives a line as each measurement starts.
	Progress io.Writer
}

// Report is what a Run measured.
type Report struct {
	Machine Machine        `json:"machine"`
	Options ReportOptions  `json:"options"`
	Accept  []AcceptResult `json:"accept"`
	Replay  []ReplayResult `json:"replay"`
	Settle  SettleResult   `json:"settle"`
	Storm   StormResult    `json:"duplicate_storm"`
	// Memory is nil when the API runs in the benchmark's own process.
	Memory *MemoryResult `json:"memory,omitempty"`
}

// Machine describes where the numbers were taken.
type Machine struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
	Postgres  string `json:"postgres"`
	// Autovacuum is the server's setting; with it off nothing analyzes the
	// tables as they grow (see runner.seed).
	Autovacuum bool `json:"autovacuum"`
	// API says how the API ran: "process" or "in-process".
	API               string `json:"api"`
	APIMaxConns       int    `json:"api_max_conns"`
	WorkerConcurrency int    `json:"worker_concurrency"`
	// ProviderLedger is the folder of the fake provider's ledger file.
	ProviderLedger string `json:"provider_ledger,omitempty"`
}

// ReportOptions are the options the report was taken with.
type ReportOptions struct {
	DurationSeconds        float64 `json:"duration_seconds"`
	SustainDurationSeconds float64 `json:"sustain_duration_seconds"`
	Concurrency            []int   `json:"concurrency"`
}

// MemoryResult is the API process's resident memory over the run.
type MemoryResult struct {
	// MaxRSS is the highest VmRSS sampled (every 100 ms) during the run;
	// PeakRSS is the kernel's VmHWM at the end, the true peak.
	MaxRSS  uint64 `json:"max_rss_bytes"`
	PeakRSS uint64 `json:"peak_rss_bytes"`
	Met     bool   `json:"met"`
}

// Violations lists the correctness failures of the run: the duplicate
// storm's. A missed performance target is not one.
func (r Report) Violations() []string {
	return r.Storm.Violations
}

// runner is one Run's state.
type runner struct {
	sys  *System
	opts Options
	// ops, when set, sizes each measured half in ops rather than time:
	// Go benchmarks run b.N of them.
	ops int64
	// admin is a small pool for setup, counts and the /proc sampling.
	admin *pgxpool.Pool
	load  loader
	// keyPrefix keeps this run's idempotency keys apart from any other's.
	keyPrefix string
}

func newRunner(ctx context.Context, sys *System, opts Options) (*runner, error) {
	opts.Duration = cmp.Or(opts.Duration, 10*time.Second)
	opts.SustainDuration = cmp.Or(opts.SustainDuration, time.Minute)
	if len(opts.Concurrency) == 0 {
		opts.Concurrency = []int{16, 32}
	}
	for _, c := range opts.Concurrency {
		if c < 1 {
			return nil, fmt.Errorf("bench: concurrency %d is not positive", c)
		}
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	admin, err := openPool(ctx, sys.DatabaseURL, "bench", 2)
	if err != nil {
		return nil, err
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	r := &runner{sys: sys, opts: opts, admin: admin, keyPrefix: "bench-" + hex.EncodeToString(nonce[:]) + "-"}
	if err := r.seed(ctx); err != nil {
		admin.Close()
		return nil, err
	}
	return r, nil
}

// analyzeTables refreshes the planner's statistics of the tables a charge
// touches.
const analyzeTables = `ANALYZE charges, idempotency_keys, charge_audit, river_job, tenants`

// seedCharges is how many charges seed writes before anything is measured.
const seedCharges = 500

// seed writes a few charges and analyzes the tables. Postgres plans a
// session's foreign-key checks (idempotency_keys → charges, charge_audit →
// charges) the first time they run and keeps the plan until the table's
// statistics change: planned against an empty, never-analyzed charges
// table, the check is a sequential scan, and every accept then costs time
// in proportion to the table. In production autovacuum analyzes the table
// within a minute and the plans are remade; a benchmark on a fresh database
// (or a server with autovacuum off) would otherwise measure that scan.
// ANALYZE invalidates the plans every open session holds.
func (r *runner) seed(ctx context.Context) error {
	pool, err := openPool(ctx, r.sys.DatabaseURL, "bench-seed", 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	raw := &rawAcceptor{pool: pool, tenantID: r.sys.TenantID, keyPrefix: r.keyPrefix + "seed-"}
	if t := r.load.run(ctx, loadOptions{concurrency: 2, until: until{count: seedCharges}}, raw.accept); t.failures > 0 {
		return fmt.Errorf("seed the database: %s", t.firstFailure)
	}
	if _, err := r.admin.Exec(ctx, analyzeTables); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}

// warmup is how long each leg warms its pools and caches before it is
// measured.
func (r *runner) warmup() until {
	return until{duration: min(time.Second, r.opts.Duration/10)}
}

// half is one of a measurement's two alternated halves.
func (r *runner) half() until { return r.part(2) }

// part is one of a measurement's n alternated parts.
func (r *runner) part(n int) until {
	if r.ops > 0 {
		return until{count: max(r.ops/int64(n), 1)}
	}
	return until{duration: r.opts.Duration / time.Duration(n)}
}

// machine describes where the run measures.
func (r *runner) machine(ctx context.Context) (Machine, error) {
	sys := r.sys
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), API: sys.Mode,
		APIMaxConns: sys.APIMaxConns, WorkerConcurrency: sys.WorkerConcurrency, ProviderLedger: sys.ProviderLedger}
	if err := r.admin.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('autovacuum')::bool`).
		Scan(&m.Postgres, &m.Autovacuum); err != nil {
		return m, fmt.Errorf("read the server's settings: %w", err)
	}
	return m, nil
}

// Run measures every target against sys and reports. A measurement that
// cannot be carried out is an error; a missed target or a violated
// invariant is in the report.
func Run(ctx context.Context, sys *System, opts Options) (Report, error) {
	r, err := newRunner(ctx, sys, opts)
	if err != nil {
		return Report{}, err
	}
	defer r.admin.Close()
	opts, progress := r.opts, r.opts.Progress

	rep := Report{
		Options: ReportOptions{DurationSeconds: opts.Duration.Seconds(), SustainDurationSeconds: opts.SustainDuration.Seconds(),
			Concurrency: opts.Concurrency},
	}
	if rep.Machine, err = r.machine(ctx); err != nil {
		return rep, err
	}
	var sampler *memorySampler
	if sys.APIPID != 0 {
		sampler = startMemorySampler(sys.APIPID, 100*time.Millisecond)
		defer sampler.halt()
	}

	for _, c := range opts.Concurrency {
		fmt.Fprintf(progress, "accept: API vs raw transaction, %d clients, %s\n", c, 2*opts.Duration)
		res, err := r.measureAccept(ctx, c)
		if err != nil {
			return rep, fmt.Errorf("accept at %d: %w", c, err)
		}
		rep.Accept = append(rep.Accept, res)
	}
	for _, c := range opts.Concurrency {
		fmt.Fprintf(progress, "replay: replay vs primary-key select under %d accepting clients, %s\n", c, 2*opts.Duration)
		res, err := r.measureReplay(ctx, c)
		if err != nil {
			return rep, fmt.Errorf("replay at %d: %w", c, err)
		}
		rep.Replay = append(rep.Replay, res)
	}
	fmt.Fprintf(progress, "settle: backlog and drain; the end-to-end rate searched and held %s; the drain again with a slow provider; %d clients\n", opts.SustainDuration, opts.Concurrency[0])
	settle, stopWorker, err := r.measureSettle(ctx, opts.Concurrency[0])
	if err != nil {
		return rep, fmt.Errorf("settle: %w", err)
	}
	rep.Settle = settle
	fmt.Fprintf(progress, "duplicate storm: %d concurrent requests, one key\n", StormRequests)
	rep.Storm, err = r.measureStorm(ctx)
	err = errors.Join(err, stopWorker())
	if err != nil {
		return rep, fmt.Errorf("duplicate storm: %w", err)
	}

	if sampler != nil {
		maxRSS, peak, err := sampler.finish()
		if err != nil {
			return rep, fmt.Errorf("read the API's memory: %w", err)
		}
		rep.Memory = &MemoryResult{MaxRSS: maxRSS, PeakRSS: peak, Met: peak < MemoryTarget}
	}
	return rep, nil
}
