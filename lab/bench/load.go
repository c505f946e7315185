package bench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// op is one unit of work of a load: one request, one transaction, one
// query. seq is unique across every op of a Run, so ops use it for fresh
// idempotency keys.
type op func(ctx context.Context, seq int64) error

// until says when a load stops: after a duration, after a number of ops
// (what a Go benchmark's b.N asks for), or when a signal channel is
// closed. In-flight ops always finish: a load never cancels a request, it
// stops issuing new ones.
type until struct {
	duration time.Duration
	count    int64
	signal   <-chan struct{}
}

// tally is what one load measured.
type tally struct {
	ops      int64
	failures int64
	elapsed  time.Duration
	// latencies are sorted; only loads that record them have any.
	latencies []time.Duration
	// firstFailure is the text of the first failed op, for the report.
	firstFailure string
}

// perSecond is the rate of successful ops.
func (t tally) perSecond() float64 {
	if t.elapsed <= 0 {
		return 0
	}
	return float64(t.ops) / t.elapsed.Seconds()
}

// add merges two legs of the same measurement.
func (t tally) add(o tally) tally {
	t.ops += o.ops
	t.failures += o.failures
	t.elapsed += o.elapsed
	t.latencies = append(t.latencies, o.latencies...)
	slices.Sort(t.latencies)
	if t.firstFailure == "" {
		t.firstFailure = o.firstFailure
	}
	return t
}

// percentile is the q-quantile (0 < q ≤ 1) of the recorded latencies, by
// the nearest-rank method.
func (t tally) percentile(q float64) time.Duration {
	n := len(t.latencies)
	if n == 0 {
		return 0
	}
	rank := int(q*float64(n)+0.999999) - 1
	return t.latencies[min(max(rank, 0), n-1)]
}

// loader runs loads. Its sequence numbers keep every op's keys unique
// across the whole run.
type loader struct {
	seq atomic.Int64
}

// loadOptions shape one load.
type loadOptions struct {
	concurrency int
	until       until
	// record keeps every op's latency (for percentiles).
	record bool
	// limiter, when set, paces the ops (an open-loop offered rate); the
	// workers still never exceed concurrency ops in flight.
	limiter *rate.Limiter
}

// run drives fn from o.concurrency workers in a closed loop until o.until,
// or until ctx is done. A failed op is counted and the load goes on.
func (l *loader) run(ctx context.Context, o loadOptions, fn op) tally {
	type workerTally struct {
		ops, failures int64
		latencies     []time.Duration
		firstFailure  string
	}
	var (
		stop     atomic.Bool
		tickets  atomic.Int64
		wg       sync.WaitGroup
		results  = make([]workerTally, o.concurrency)
		start    = time.Now()
		deadline = start.Add(o.until.duration)
	)
	if o.until.duration > 0 {
		timer := time.AfterFunc(o.until.duration, func() { stop.Store(true) })
		defer timer.Stop()
	}
	if o.until.signal != nil {
		finished := make(chan struct{})
		defer close(finished)
		go func() {
			select {
			case <-o.until.signal:
				stop.Store(true)
			case <-finished:
			}
		}()
	}
	counted := o.until.duration == 0 && o.until.signal == nil
	for w := range o.concurrency {
		wg.Go(func() {
			r := &results[w]
			for !stop.Load() && ctx.Err() == nil {
				if counted && tickets.Add(1) > o.until.count {
					return
				}
				if o.limiter != nil {
					if err := o.limiter.Wait(ctx); err != nil {
						return
					}
					if o.until.duration > 0 && time.Now().After(deadline) {
						return
					}
				}
				began := time.Now()
				err := fn(ctx, l.seq.Add(1))
				if err != nil {
					r.failures++
					if r.firstFailure == "" {
						r.firstFailure = err.Error()
					}
					continue
				}
				r.ops++
				if o.record {
					r.latencies = append(r.latencies, time.Since(began))
				}
			}
		})
	}
	wg.Wait()
	t := tally{elapsed: time.Since(start)}
	for _, r := range results {
		t.ops += r.ops
		t.failures += r.failures
		t.latencies = append(t.latencies, r.latencies...)
		if t.firstFailure == "" {
			t.firstFailure = r.firstFailure
		}
	}
	slices.Sort(t.latencies)
	return t
}
