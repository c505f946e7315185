package outbox

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// batcher runs the requests of concurrently running jobs together, as a
// database's group commit does: every request made while a batch is in
// flight waits, and the next batch takes them all (up to max). Nobody waits
// on a timer: a request made when no batch is in flight runs at once,
// alone, so a quiet worker adds no latency, and a busy one batches as deep
// as its backlog. The job whose request heads the queue runs the next
// batch; run answers each request of a batch, in order.
type batcher[T, R any] struct {
	run func(ctx context.Context, items []T) ([]R, error)
	max int

	mu      sync.Mutex
	queue   []*batchRequest[T, R]
	running bool
}

// batchTimeout bounds one batch, whatever the context of the job that
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

// do runs item in the next batch and returns its answer. A request whose
// context ends before a batch took it is withdrawn (ctx.Err()); once taken,
// its answer is moments away and is waited for.
func (b *batcher[T, R]) do(ctx context.Context, item T) (R, error) {
	var zero R
	// A run whose context ended (its job cancelled, the worker stopping)
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
func (b *batcher[T, R]) runNext(ctx context.Context) {
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
func (b *batcher[T, R]) handOff() {
	if len(b.queue) > 0 {
		b.queue[0].lead <- struct{}{}
	} else {
		b.running = false
	}
}

// withdraw takes r out of the queue if no batch has taken it yet, passing
// on the next batch if it was r's to run.
func (b *batcher[T, R]) withdraw(r *batchRequest[T, R]) bool {
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

// batchers spreads requests over several batchers, round robin, so that
// several batches can be in flight at once: one batch at a time would put
// all of a worker's settling on one database backend — one CPU of the
// server, however many it has, and a small share of it beside the API's
// many backends on a busy one.
type batchers[T, R any] struct {
	each []*batcher[T, R]
	next atomic.Uint64
}

func newBatchers[T, R any](n int, newOne func() *batcher[T, R]) *batchers[T, R] {
	b := &batchers[T, R]{each: make([]*batcher[T, R], max(n, 1))}
	for i := range b.each {
		b.each[i] = newOne()
	}
	return b
}

func (b *batchers[T, R]) do(ctx context.Context, item T) (R, error) {
	return b.each[b.next.Add(1)%uint64(len(b.each))].do(ctx, item)
}
