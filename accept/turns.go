package accept

import (
	"context"
	"sync"
)

// turns lets one request at a time per key go on, the others waiting in
// arrival order without holding anything else. The refunds, captures and
// cancels of one charge take turns (Acceptor.Turn): each must wait for the
// previous one's commit on the charge's row anyway, and waiting here rather
// than on the row keeps every other request's database connections free,
// so a hot charge cannot starve the pool and turn contention into
// unavailability. Across API processes the row lock still orders them
// (intent.LockForRefund), with at most one waiter per process.
type turns struct {
	mu sync.Mutex
	m  map[string]*turn
}

// turn is one key's queue: holding its token is having the turn.
type turn struct {
	token chan struct{}
	refs  int
}

func newTurns() *turns { return &turns{m: map[string]*turn{}} }

// wait blocks until key's turn comes or ctx is done, and returns the
// function that passes the turn on.
func (t *turns) wait(ctx context.Context, key string) (release func(), err error) {
	t.mu.Lock()
	q := t.m[key]
	if q == nil {
		q = &turn{token: make(chan struct{}, 1)}
		t.m[key] = q
	}
	q.refs++
	t.mu.Unlock()

	leave := func() {
		t.mu.Lock()
		if q.refs--; q.refs == 0 {
			delete(t.m, key)
		}
		t.mu.Unlock()
	}
	select {
	case q.token <- struct{}{}:
		return func() { <-q.token; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}
