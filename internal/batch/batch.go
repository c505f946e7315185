// Package batch runs the requests of concurrent callers together, a batch
// to a statement, as a database's group commit does.
package batch

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Batcher runs the requests of concurrent callers together, as a
// database's group commit does: every request made while a batch is in
// flight waits, and the next batch takes them all (up to max). Nobody waits
// on a timer: a request made when no batch is in flight runs at once,
// alone, so a quiet process adds no latency, and a busy one batches as deep
// as its backlog. The caller whose request heads the queue runs the next
// batch; run answers each request of a batch, in order.
//
// Made by NewParallel, a Batcher runs more than one batch at a time only
// when it must: another batch starts beside those in flight when a full
// one (max requests) is waiting, so batches stay as deep as the load
// allows and the database's other backends are used only when one
// statement at a time cannot keep up.
type Batcher[T, R any] struct {
	run      func(ctx context.Context, items []T) ([]R, error)
	max      int
	parallel int

	mu      sync.Mutex
	queue   []*batchRequest[T, R]
	running int
}

// New is a Batcher of at most max requests a batch, one batch at a time,
// each answered by run.
func New[T, R any](max int, run func(ctx context.Context, items []T) ([]R, error)) *Batcher[T, R] {
	return NewParallel(max, 1, run)
}

// NewParallel is New, running up to parallel batches at once: a batch
// beyond the first starts only when max requests are waiting.
func NewParallel[T, R any](maxItems, parallel int, run func(ctx context.Context, items []T) ([]R, error)) *Batcher[T, R] {
	return &Batcher[T, R]{run: run, max: maxItems, parallel: max(parallel, 1)}
}

// batchTimeout bounds one batch, whatever the context of the caller that
// happens to run it.
const batchTimeout = 30 * time.Second

type batchRequest[T, R any] struct {
	item T
	// lead, when it receives, makes this request's caller run the next
	// batch; leads records that it was sent (b.mu).
	lead  chan struct{}
	leads bool
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
	if b.running == 0 || (len(b.queue) >= b.max && b.running < b.parallel) {
		// This request starts a batch: the first one, or one more beside
		// those in flight because a full batch waits. It holds a turn (a
		// running count) from here until its batch hands on or ends.
		b.running++
		r.leads = true
		r.lead <- struct{}{}
	}
	b.mu.Unlock()
	for {
		select {
		case <-r.done:
			b.passTurn(ctx, r)
			return r.res, r.err
		case <-r.lead:
			if ctx.Err() != nil {
				// Ended while queued: hand the turn on, and go unless a
				// batch already took the request.
				b.mu.Lock()
				queued := slices.Contains(b.queue, r)
				b.queue = slices.DeleteFunc(b.queue, func(q *batchRequest[T, R]) bool { return q == r })
				b.handOff()
				b.mu.Unlock()
				if queued {
					return zero, ctx.Err()
				}
				<-r.done
				return r.res, r.err
			}
			b.runNext(ctx)
		case <-ctx.Done():
			if b.withdraw(r) {
				return zero, ctx.Err()
			}
			<-r.done
			b.passTurn(ctx, r)
			return r.res, r.err
		}
	}
}

// passTurn runs or hands on the turn r was given while another turn's
// batch took it (only with more than one turn: NewParallel).
func (b *Batcher[T, R]) passTurn(ctx context.Context, r *batchRequest[T, R]) {
	select {
	case <-r.lead:
		b.runNext(ctx)
	default:
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
	if n == 0 {
		// Another turn took this request's batch (one that started beside
		// it): nothing is left for this one.
		b.mu.Lock()
		b.handOff()
		b.mu.Unlock()
		return
	}

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

// handOff gives the turn that just ended to the first queued request not
// already holding one, or ends it. b.mu is held.
func (b *Batcher[T, R]) handOff() {
	for _, q := range b.queue {
		if !q.leads {
			q.leads = true
			q.lead <- struct{}{}
			return
		}
	}
	b.running--
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
	return len(b.queue) == 0 && b.running == 0
}
