package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chargeflow/chargeflow/internal/app"
)

// The Go benchmarks measure the same things as `chargeflow bench`, in
// process (the API's memory cannot be told apart, so it is not measured),
// sized by b.N instead of a duration:
//
//	go test -run '^$' -bench . ./bench/
//	go test -run '^$' -bench 'Accept(Ratio)?$' -benchtime 20000x ./bench/
//
// They report the ratios of docs/benchmarks.md with b.ReportMetric. They open pools
// as large as their concurrency: run them alone, not beside the test suite.

// benchBundle is an in-process System and a runner on it.
type benchBundle struct {
	sys    *System
	runner *runner
}

func benchSetup(b *testing.B, apiMaxConns, workerConcurrency int, opts Options) benchBundle {
	sys := setup(b, apiMaxConns, workerConcurrency)
	return benchBundle{sys: sys, runner: setupRunner(b, sys, opts)}
}

// benchConcurrency are the client concurrencies of the benchmarks.
var benchConcurrency = []int{16, 32}

// BenchmarkAccept is POST /v1/charges through the API: loopback HTTP,
// strict parsing, the replay check, then one statement that is its own
// transaction (intent.Accept with the job).
func BenchmarkAccept(b *testing.B) {
	bb := benchSetup(b, app.Defaults().APIPool.MaxConns, 1, Options{})
	for _, c := range benchConcurrency {
		b.Run(fmt.Sprintf("clients=%d", c), func(b *testing.B) {
			client := newAPIClient(bb.sys, fmt.Sprintf("%saccept-%d-%d-", bb.runner.keyPrefix, c, b.N), c)
			defer client.http.CloseIdleConnections()
			runThroughput(b, bb.runner, c, client.accept)
		})
	}
}

// BenchmarkAcceptRawBaseline is the same writes in one statement: one round
// trip, one commit.
func BenchmarkAcceptRawBaseline(b *testing.B) {
	bb := benchSetup(b, 1, 1, Options{})
	for _, c := range benchConcurrency {
		b.Run(fmt.Sprintf("clients=%d", c), func(b *testing.B) {
			pool, err := openPool(context.Background(), bb.sys.DatabaseURL, "bench-raw", c)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			raw := &rawAcceptor{pool: pool, tenantID: bb.sys.TenantID, keyPrefix: fmt.Sprintf("%sraw-%d-%d-", bb.runner.keyPrefix, c, b.N)}
			runThroughput(b, bb.runner, c, raw.accept)
		})
	}
}

// runThroughput warms up, then runs b.N ops from c workers and reports
// their rate and this process's CPU per op (the API's included).
func runThroughput(b *testing.B, r *runner, c int, fn op) {
	ctx := context.Background()
	r.load.run(ctx, loadOptions{concurrency: c, until: until{duration: 300 * time.Millisecond}}, fn)
	b.ResetTimer()
	cpu := selfCPU()
	t := r.load.run(ctx, loadOptions{concurrency: c, until: until{count: int64(b.N)}}, fn)
	b.StopTimer()
	if t.failures > 0 {
		b.Fatalf("%d of %d failed; first: %s", t.failures, b.N, t.firstFailure)
	}
	b.ReportMetric(t.perSecond(), "charges/s")
	b.ReportMetric(float64(selfCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkAcceptRatio runs the raw baseline and the API alternately, b.N
// charges each, and reports API ÷ raw (target: at least 0.8).
func BenchmarkAcceptRatio(b *testing.B) {
	bb := benchSetup(b, app.Defaults().APIPool.MaxConns, 1, Options{Duration: 3 * time.Second})
	for _, c := range benchConcurrency {
		b.Run(fmt.Sprintf("clients=%d", c), func(b *testing.B) {
			bb.runner.ops = int64(b.N)
			res, err := bb.runner.measureAccept(context.Background(), c)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.Ratio, "ratio")
			b.ReportMetric(res.API.PerSecond, "api-charges/s")
			b.ReportMetric(res.Raw.PerSecond, "raw-charges/s")
		})
	}
}

// BenchmarkReplay replays finished requests while c clients accept new
// charges, and selects the same records by primary key under the same
// load; it reports both p99s and their ratio (target: at most 2).
func BenchmarkReplay(b *testing.B) {
	bb := benchSetup(b, app.Defaults().APIPool.MaxConns, 1, Options{Duration: 3 * time.Second})
	for _, c := range benchConcurrency {
		b.Run(fmt.Sprintf("clients=%d", c), func(b *testing.B) {
			bb.runner.ops = int64(b.N)
			res, err := bb.runner.measureReplay(context.Background(), c)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(res.Ratio, "ratio-p99")
			b.ReportMetric(res.Replay.P50, "replay-p50-ms")
			b.ReportMetric(res.Replay.P99, "replay-p99-ms")
			b.ReportMetric(res.Select.P50, "select-p50-ms")
			b.ReportMetric(res.Select.P99, "select-p99-ms")
		})
	}
}

// BenchmarkSettle builds a backlog of b.N pending charges through the API
// (on top of the seed's), then times the worker carrying them to succeeded
// against the fake provider (its start-up included).
func BenchmarkSettle(b *testing.B) {
	bb := benchSetup(b, app.Defaults().APIPool.MaxConns, app.Defaults().Worker.Concurrency, Options{})
	ctx := context.Background()
	const c = 16
	client := newAPIClient(bb.sys, fmt.Sprintf("%ssettle-%d-", bb.runner.keyPrefix, b.N), c)
	defer client.http.CloseIdleConnections()
	before, err := bb.runner.counts(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if t := bb.runner.load.run(ctx, loadOptions{concurrency: c, until: until{count: int64(b.N)}}, client.accept); t.failures > 0 {
		b.Fatalf("fill: %s", t.firstFailure)
	}
	// The seed's pending charges settle too.
	want := int64(b.N) + before.unsettled
	b.ResetTimer()
	stop, err := bb.sys.StartWorker(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			b.Error(err)
		}
	}()
	for {
		now, err := bb.runner.counts(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if now.unsettled == 0 {
			if settled := now.succeeded - before.succeeded; settled != want {
				b.Fatalf("%d of %d succeeded", settled, want)
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(want)/b.Elapsed().Seconds(), "settled/s")
}

// BenchmarkDuplicateStorm sends StormRequests concurrent requests with one
// key, b.N times, and fails on any violation.
func BenchmarkDuplicateStorm(b *testing.B) {
	bb := benchSetup(b, app.Defaults().APIPool.MaxConns, 4, Options{})
	ctx := context.Background()
	stop, err := bb.sys.StartWorker(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			b.Error(err)
		}
	}()
	for b.Loop() {
		res, err := bb.runner.measureStorm(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if !res.Met {
			b.Fatalf("violations: %v", res.Violations)
		}
	}
}
