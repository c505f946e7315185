package outbox

import (
	"context"
	"slices"
	"sync"
	"time"

	"chargeflow/intent"
)

// claims moves the charges of concurrently running jobs from pending to
// submitting together: every job that asks while one claim statement is in
// flight waits, and the next statement claims them all (intent.ClaimPending:
// one round trip and one commit for the lot). Nobody waits on a timer: a
// job that asks when no claim is in flight is claimed at once, alone, so a
// quiet worker adds no latency, and a busy one batches as deep as its
// backlog (docs/architecture.md, "The outbox worker").
//
// Each charge keeps its own compare-and-set: the statement moves only rows
// still pending, and a job whose charge it did not move asks MoveCharge
// why, exactly as when it claimed alone. Crash safety is unchanged: every
// charge of a claim is submitting, committed, before any of their calls is
// sent.
type claims struct {
	db intent.DB

	mu       sync.Mutex
	queue    []*claimRequest
	claiming bool
}

// maxClaim bounds one claim statement.
const maxClaim = 128

// claimTimeout bounds one claim statement, whatever the context of the job
// that happens to run it.
const claimTimeout = 30 * time.Second

type claimRequest struct {
	ref intent.Ref
	// lead, when it receives, makes this request's job run the next claim.
	lead chan struct{}
	// done is closed once a claim took this request; charge, moved and
	// err are then set.
	done   chan struct{}
	charge intent.Charge
	moved  bool
	err    error
}

// claim moves ref's charge from pending to submitting with others asking
// at the same time. moved is false when the charge was not pending.
func (c *claims) claim(ctx context.Context, ref intent.Ref) (charge intent.Charge, moved bool, err error) {
	r := &claimRequest{ref: ref, lead: make(chan struct{}, 1), done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, r)
	if !c.claiming {
		c.claiming = true
		r.lead <- struct{}{}
	}
	c.mu.Unlock()
	for {
		select {
		case <-r.done:
			return r.charge, r.moved, r.err
		case <-r.lead:
			c.run(ctx)
		case <-ctx.Done():
			if c.withdraw(r) {
				return intent.Charge{}, false, ctx.Err()
			}
			// A claim took it already: its answer is moments away.
			<-r.done
			return r.charge, r.moved, r.err
		}
	}
}

// run claims the requests at the head of the queue in one statement, then
// hands the next claim to the job at the head of what is left.
func (c *claims) run(ctx context.Context) {
	c.mu.Lock()
	n := min(len(c.queue), maxClaim)
	batch := slices.Clone(c.queue[:n])
	c.queue = slices.Delete(c.queue, 0, n)
	c.mu.Unlock()

	refs := make([]intent.Ref, len(batch))
	for i, r := range batch {
		refs[i] = r.ref
	}
	stmtCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	moved, err := intent.ClaimPending(stmtCtx, c.db, refs, actor, "submit")
	cancel()
	// Two jobs of one charge in one claim: the row moved once, and only
	// the first job holds it; the second learns it is submitting, as it
	// would have after the first one's own statement.
	given := make(map[intent.Ref]bool, len(batch))
	for _, r := range batch {
		if c, ok := moved[r.ref]; ok && !given[r.ref] {
			r.charge, r.moved, given[r.ref] = c, true, true
		}
		r.err = err
		close(r.done)
	}

	c.mu.Lock()
	if len(c.queue) > 0 {
		c.queue[0].lead <- struct{}{}
	} else {
		c.claiming = false
	}
	c.mu.Unlock()
}

// withdraw takes r out of the queue if no claim has taken it yet, passing
// on the next claim if it was r's to run.
func (c *claims) withdraw(r *claimRequest) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.queue, r)
	if i < 0 {
		return false
	}
	c.queue = slices.Delete(c.queue, i, i+1)
	select {
	case <-r.lead:
		if len(c.queue) > 0 {
			c.queue[0].lead <- struct{}{}
		} else {
			c.claiming = false
		}
	default:
	}
	return true
}
