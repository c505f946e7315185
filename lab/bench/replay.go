package bench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/chargeflow/chargeflow/intent"
)

// replayKeys is how many finished requests the replay probe cycles
// through.
const replayKeys = 256

// probeConcurrency is how many probe clients measure latency while the
// background load runs: few, so that the probe measures the load rather
// than adding much of its own.
const probeConcurrency = 2

// ReplayResult compares a replay's latency with a single-row primary-key
// select, both measured while the API accepts new charges at Concurrency.
type ReplayResult struct {
	// Concurrency is the background accept load's.
	Concurrency int `json:"concurrency"`
	// Replay is POST /v1/charges with a finished key, end to end over
	// HTTP; Select is the primary-key read of that key's record, straight
	// from a pool of this process.
	Replay Latency `json:"replay"`
	Select Latency `json:"select"`
	// Background is the accept load that kept the system busy.
	Background Throughput `json:"background"`
	// FromMemory is the share of the probe's replays the API answered
	// from its replay cache rather than from a read of the record (its
	// replays metric, by source); -1 when the metric counted no replay
	// over the probe. The probe's keys
	// were all created by this API process, so anything under 1 is
	// records the cache let go while they were being retried.
	FromMemory float64 `json:"replays_from_memory"`
	// Ratio is Replay.P99 ÷ Select.P99; the target is at most ReplayTarget.
	Ratio float64 `json:"ratio_p99"`
	Met   bool    `json:"met"`
}

// Latency summarises a probe.
type Latency struct {
	Samples      int64   `json:"samples"`
	P50          float64 `json:"p50_ms"`
	P99          float64 `json:"p99_ms"`
	Failures     int64   `json:"failures"`
	FirstFailure string  `json:"first_failure,omitempty"`
}

func latencyOf(t tally) Latency {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return Latency{Samples: t.ops, P50: ms(t.percentile(0.50)), P99: ms(t.percentile(0.99)),
		Failures: t.failures, FirstFailure: t.firstFailure}
}

// measureReplay keeps concurrency clients accepting new charges through the
// API and, meanwhile, probes: replays of finished keys through the API,
// then primary-key selects of the same records straight from Postgres
// (replay, select, select, replay, half the duration each).
func (r *runner) measureReplay(ctx context.Context, concurrency int) (ReplayResult, error) {
	background := newAPIClient(r.sys, r.keyPrefix+fmt.Sprintf("replay-bg-%d-", concurrency), concurrency)
	defer background.http.CloseIdleConnections()
	probe := newAPIClient(r.sys, r.keyPrefix+fmt.Sprintf("replay-%d-", concurrency), probeConcurrency)
	defer probe.http.CloseIdleConnections()
	pool, err := openPool(ctx, r.sys.DatabaseURL, "bench-select", probeConcurrency)
	if err != nil {
		return ReplayResult{}, err
	}
	defer pool.Close()

	// The finished requests the probe replays.
	for i := range int64(replayKeys) {
		if err := probe.accept(ctx, i); err != nil {
			return ReplayResult{}, fmt.Errorf("create a charge to replay: %w", err)
		}
	}
	sourcesBefore, err := r.sys.replays(ctx)
	if err != nil {
		return ReplayResult{}, fmt.Errorf("read the API's replays metric: %w", err)
	}
	var next atomic.Int64
	replay := func(ctx context.Context, _ int64) error {
		a, err := probe.post(ctx, probe.key(next.Add(1)%replayKeys), false)
		if err != nil {
			return err
		}
		if a.status != http.StatusCreated || !a.replayed {
			return fmt.Errorf("replay answered %d (replayed %t): %.200s", a.status, a.replayed, a.body)
		}
		return nil
	}
	selectRecord := func(ctx context.Context, _ int64) error {
		keyHash := sha256.Sum256([]byte(probe.key(next.Add(1) % replayKeys)))
		_, err := intent.Idempotency(ctx, pool, r.sys.TenantID, keyHash[:])
		return err
	}

	res := ReplayResult{Concurrency: concurrency}
	var replays, selects, loads tally
	for _, step := range []struct {
		fn    op
		total *tally
	}{{replay, &replays}, {selectRecord, &selects}, {selectRecord, &selects}, {replay, &replays}} {
		r.load.run(ctx, loadOptions{concurrency: probeConcurrency, until: r.warmup()}, step.fn)
		stopLoad := make(chan struct{})
		loaded := make(chan tally, 1)
		go func() {
			loaded <- r.load.run(ctx, loadOptions{concurrency: concurrency, until: until{signal: stopLoad}}, background.accept)
		}()
		// The background load reaches its pace before the probe starts.
		time.Sleep(r.warmup().duration)
		t := r.load.run(ctx, loadOptions{concurrency: probeConcurrency, until: r.half(), record: true}, step.fn)
		close(stopLoad)
		*step.total = step.total.add(t)
		loads = loads.add(<-loaded)
		if err := ctx.Err(); err != nil {
			return ReplayResult{}, err
		}
	}
	sourcesAfter, err := r.sys.replays(ctx)
	if err != nil {
		return ReplayResult{}, fmt.Errorf("read the API's replays metric: %w", err)
	}
	res.FromMemory = sourcesAfter.memoryShare(sourcesBefore)
	res.Replay, res.Select = latencyOf(replays), latencyOf(selects)
	res.Background = throughputOf(loads)
	if res.Select.P99 > 0 {
		res.Ratio = res.Replay.P99 / res.Select.P99
	}
	res.Met = res.Ratio > 0 && res.Ratio <= ReplayTarget &&
		res.Replay.Failures == 0 && res.Select.Failures == 0 && res.Background.Failures == 0
	return res, nil
}
