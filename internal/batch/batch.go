// Package batch runs the requests of concurrent callers together, a batch
// to a statement, as a database's group commit does.
package batch

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Batcher runs the requests of concurrent callers together, as a
// database's group commit does: every request made while a batch is in
// flight waits, and the next batch takes them all (up to max). Nobody waits
// on a timer: a request made when no batch is in flight runs at once,
// alone, so a quiet process adds no latency, and a busy one batches as deep
// as its backlog. The caller whose request heads the queue runs the next
// batch; run answers each request of a batch, in order.
type Batcher[T, R any] struct {
	run func(ctx context.Context, items []T) ([]R, error)
	max int

	mu      sync.Mutex
	queue   []*batchRequest[T, R]
	running bool
}

// New is a Batcher of at most max requests a batch, each batch answered
// by run.
func New[T, R any](max int, run func(ctx context.Context, items []T) ([]R, error)) *Batcher[T, R] {
	return &Batcher[T, R]{run: run, max: max}
}

// batchTimeout bounds one batch, whatever the context of the caller that
// happens to run it.
const batchTimeout = 30 * time.Second

type batchRequest[T, R any] struct {
	item T
	// lead, when it receives, makes this request's job run the next batch.
	lead chan struct{}
	// done is closed once a batch took this request; res and err are set.
	done chan struct{}
	res  R
	err  error
}

// Do runs item in the next batch and returns its answer. A request whose
// context ends before a batch took it is withdrawn (ctx.Err()); once taken,
// its answer is moments away and is waited for.
func (b *Batcher[T, R]) Do(ctx context.Context, item T) (R, error) {
	var zero R
	// A request whose context ended (its job cancelled, its client gone)
	// writes nothing, as a transaction begun on that context would not.
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	r := &batchRequest[T, R]{item: item, lead: make(chan struct{}, 1), done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, r)
	if !b.running {
		b.running = true
		r.lead <- struct{}{}
	}
	b.mu.Unlock()
	for {
		select {
		case <-r.done:
			return r.res, r.err
		case <-r.lead:
			if ctx.Err() != nil {
				// Ended while queued: hand the batch to the next.
				b.mu.Lock()
				b.queue = slices.DeleteFunc(b.queue, func(q *batchRequest[T, R]) bool { return q == r })
				b.handOff()
				b.mu.Unlock()
				return zero, ctx.Err()
			}
			b.runNext(ctx)
		case <-ctx.Done():
			if b.withdraw(r) {
				return zero, ctx.Err()
			}
			<-r.done
			return r.res, r.err
		}
	}
}

// runNext runs the requests at the head of the queue as one batch, then
// hands the next batch to the request at the head of what is left.
func (b *Batcher[T, R]) runNext(ctx context.Context) {
	b.mu.Lock()
	n := min(len(b.queue), b.max)
	batch := slices.Clone(b.queue[:n])
	b.queue = slices.Delete(b.queue, 0, n)
	b.mu.Unlock()

	items := make([]T, len(batch))
	for i, r := range batch {
		items[i] = r.item
	}
	runCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	res, err := b.run(runCtx, items)
	cancel()
	for i, r := range batch {
		if err == nil {
			r.res = res[i]
		}
		r.err = err
		close(r.done)
	}

	b.mu.Lock()
	b.handOff()
	b.mu.Unlock()
}

// handOff gives the next batch to the request at the head of the queue, or
// notes that none is running. b.mu is held.
func (b *Batcher[T, R]) handOff() {
	if len(b.queue) > 0 {
		b.queue[0].lead <- struct{}{}
	} else {
		b.running = false
	}
}

// withdraw takes r out of the queue if no batch has taken it yet, passing
// on the next batch if it was r's to run.
func (b *Batcher[T, R]) withdraw(r *batchRequest[T, R]) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.queue, r)
	if i < 0 {
		return false
	}
	b.queue = slices.Delete(b.queue, i, i+1)
	select {
	case <-r.lead:
		b.handOff()
	default:
	}
	return true
}

// Spread spreads requests over several Batchers, round robin, so that
// several batches can be in flight at once: one batch at a time would put
// all of a process's batched writes on one database backend — one CPU of
// the server, however many it has, and a small share of it beside the
// other backends of a busy one.
type Spread[T, R any] struct {
	each []*Batcher[T, R]
	next atomic.Uint64
}

// NewSpread is n Batchers made by newOne.
func NewSpread[T, R any](n int, newOne func() *Batcher[T, R]) *Spread[T, R] {
	b := &Spread[T, R]{each: make([]*Batcher[T, R], max(n, 1))}
	for i := range b.each {
		b.each[i] = newOne()
	}
	return b
}

// Do runs item in the next batch of one of the Batchers.
func (b *Spread[T, R]) Do(ctx context.Context, item T) (R, error) {
	return b.each[b.next.Add(1)%uint64(len(b.each))].Do(ctx, item)
}

// Queued is how many requests wait for a batch to take them.
func (b *Batcher[T, R]) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// Idle reports that no request waits and no batch is in flight.
func (b *Batcher[T, R]) Idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue) == 0 && !b.running
}
