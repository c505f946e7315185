package scenario

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	chargeflow "github.com/chargeflow/chargeflow/client"
)

// refundReasons are the reasons the merchant gives, "" for none.
var refundReasons = []string{"", "requested_by_customer", "duplicate", "fraudulent"}

// refundPlan is what the merchant refunds of a succeeded charge of amount a:
// the amounts of its refunds, sent one after the other, 0 asking for the
// API's default (all that is left). Two plans end with a refund that cannot
// fit, which must be refused with refund_exceeds_charge and store nothing.
func refundPlan(kind int, a int64) []int64 {
	switch kind {
	case 0:
		return []int64{a / 4, a / 3} // two partial refunds
	case 1:
		return []int64{a / 2, a - a/2} // two partial refunds that add up to the charge
	case 2:
		return []int64{0, 1} // a full refund, then one unit more: nothing is left
	default:
		return []int64{a / 2, a} // half, then the whole: more than is left
	}
}

// refunder refunds charges the client saw acknowledged. Each charge waits in
// a goroutine of its own until the client reads it settled, so a charge held
// up for a minute (its job in a killed worker, waiting for River's rescue)
// holds up no other refund; at most slots charges talk to the API at once.
type refunder struct {
	slots chan struct{}
	wg    sync.WaitGroup

	mu       sync.Mutex
	started  int
	finished int
	// gaveUp says, for each charge whose refunds the client gave up on,
	// where it was and what it saw last.
	gaveUp []string
}

// giveUp records a charge whose refunds the client gave up on.
func (r *refunder) giveUp(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gaveUp = append(r.gaveUp, fmt.Sprintf(format, args...))
}

// gaveUpSummary counts the charges the client gave up on by where it was
// and what it saw last, most frequent first, with an example of each.
func (r *refunder) gaveUpSummary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return summarize(r.gaveUp)
}

func newRefunder(slots int) *refunder {
	return &refunder{slots: make(chan struct{}, slots)}
}

// refundLater refunds the charge a 201 acknowledged once the client reads
// it settled. The refunds' keys are the charge's key with a suffix.
func (s *system) refundLater(ctx context.Context, charge request, acked []byte) {
	s.later(ctx, charge, acked, s.refund)
}

// later runs fn on the charge a 201 acknowledged (its key, id and amount)
// in a goroutine of its own, which the refunder waits for and counts as
// finished when fn reports that every request it sent got a final answer.
// Refunds, captures and cancels are sent so.
func (s *system) later(ctx context.Context, charge request, acked []byte, fn func(ctx context.Context, chargeKey, id string, amount int64) bool) {
	var c struct {
		ID     string `json:"id"`
		Amount int64  `json:"amount"`
	}
	if err := json.Unmarshal(acked, &c); err != nil || c.ID == "" {
		s.client.unexpectedf("key %s: a 201 that is not a charge: %v", redactKey(charge.key), err)
		return
	}
	r := s.refunds
	r.mu.Lock()
	r.started++
	r.mu.Unlock()
	r.wg.Go(func() {
		if fn(ctx, charge.key, c.ID, c.Amount) {
			r.mu.Lock()
			r.finished++
			r.mu.Unlock()
		}
	})
}

// done is closed when every refund started has its final answer.
func (r *refunder) done() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(ch)
	}()
	return ch
}

// waitRefunds waits for every refund started, and says how many charges
// were to be refunded and how many got a final answer to each refund.
func (s *system) waitRefunds() (started, finished int) {
	s.refunds.wg.Wait()
	s.refunds.mu.Lock()
	defer s.refunds.mu.Unlock()
	return s.refunds.started, s.refunds.finished
}

// refund waits until the charge is settled, then sends its refunds: a plan
// for a succeeded charge, else one refund that must be refused as
// charge_not_refundable. Refunds of one charge go one after the other, so
// what is left of it is known before each: a refund that fits must be
// accepted, one that does not refused with refund_exceeds_charge, and
// anything else is an unexpected answer. (What is left only grows back when
// a refund fails, which only the negative control's broken worker makes
// happen.) It reports whether every refund got a final answer.
func (s *system) refund(ctx context.Context, chargeKey, id string, amount int64) bool {
	state, ok := s.awaitPatiently(ctx, "waiting for the charge to settle", id, s.awaitSettled)
	if !ok {
		return false
	}
	if state == "" {
		return true
	}
	plan := []int64{0}
	if state == "succeeded" {
		plan = refundPlan(s.intn(4), amount)
	}
	reason := refundReasons[s.intn(len(refundReasons))]
	left := amount
	for step, want := range plan {
		r := s.refundRequest(chargeKey, step, id, want, reason)
		a, ok := s.postPatiently(ctx, r, fmt.Sprintf("refund %d of the charge", step+1), id)
		if !ok {
			return false
		}
		if a.status != http.StatusCreated && a.code != codeChargeNotRefundable && a.code != codeRefundExceedsCharge {
			continue // post recorded it as unexpected
		}
		expect := codeChargeNotRefundable
		if state == "succeeded" {
			expect = codeRefundExceedsCharge
			if left > 0 && want <= left {
				expect = "" // accepted
			}
		}
		var got struct {
			Amount int64 `json:"amount"`
		}
		if a.status == http.StatusCreated {
			_ = json.Unmarshal(a.body, &got)
		}
		if a.code != expect || a.status == http.StatusCreated && want == 0 && got.Amount != left {
			s.client.unexpectedf("charge %s (%s, %d left): a refund of %d got %d %s, not %s",
				id, state, left, want, a.status, cmp.Or(a.code, fmt.Sprintf("for %d", got.Amount)), cmp.Or(expect, "201"))
		}
		left -= got.Amount
	}
	return true
}

// refundRequest builds refund step of a charge: a key of its own, and the
// metadata canaries.
func (s *system) refundRequest(chargeKey string, step int, id string, amount int64, reason string) request {
	key := fmt.Sprintf("%s-refund-%d", chargeKey, step)
	return request{path: refundsPath, key: key, parent: chargeKey, refund: &chargeflow.RefundParams{Charge: id, Amount: amount,
		Reason: chargeflow.RefundReason(reason), Metadata: map[string]string{canaryMetadataKey: canaryMetadata(s.seed)}, IdempotencyKey: key}}
}

// awaitPatiently waits with await until row id (a charge, a capture, a
// cancel) is final, and again while the client is patient; when it gives
// up it records where it was (what) and what the row was then.
func (s *system) awaitPatiently(ctx context.Context, what, id string, await func(context.Context, string) (string, bool)) (string, bool) {
	waitFrom := time.Now()
	state, ok := await(ctx, id)
	for !ok && s.patient() && ctx.Err() == nil {
		state, ok = await(ctx, id)
	}
	if !ok {
		last, _ := s.lastState(ctx, id)
		s.refunds.giveUp("%s|%s still %s after %s", what, id, last, time.Since(waitFrom).Round(time.Second))
	}
	return state, ok
}

// postPatiently posts r until a final answer, again with the same key
// while the client is patient; when it gives up it records where it was
// (what, about row id) and the last answer it saw.
func (s *system) postPatiently(ctx context.Context, r request, what, id string) (answer, bool) {
	sentAt := time.Now()
	a := s.client.post(ctx, r)
	for a.status == 0 && s.patient() && ctx.Err() == nil {
		a = s.client.post(ctx, r) // the same key: safe
	}
	if a.status == 0 {
		s.refunds.giveUp("%s, last answer %s|%s after %s", what, a.last, id, time.Since(sentAt).Round(time.Second))
		return a, false
	}
	return a, true
}

// setChaos says the processes are being killed (on), or that they no
// longer are.
func (s *system) setChaos(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chaosOn = on
	if !on {
		s.chaosEnded = time.Now()
	}
}

// patient reports whether a client that ran out of its patience should
// wait once more: while the processes are being killed, and until its
// patience has passed again since they stopped. Under the chaos a charge
// has no bound on when it settles — a job whose worker is killed waits for
// River's rescuer, which runs on a leader that is itself killed every few
// seconds, and a loaded machine restarts processes slowly while the kills
// keep their pace — so the bound the run checks starts when the chaos
// ends: the clients' patience from then, and convergence after calm.
func (s *system) patient() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chaosOn || !s.chaosEnded.IsZero() && time.Since(s.chaosEnded) < s.client.giveUp
}

// lastState reads a charge's state from the database, for a client's
// account of why it gave up.
func (s *system) lastState(ctx context.Context, id string) (string, error) {
	var state string
	err := s.pool.QueryRow(ctx, `SELECT state FROM charges WHERE id = $1`, id).Scan(&state)
	if err != nil {
		return "unreadable", err
	}
	return state, nil
}

// summarize counts lines of the form "kind|example" by kind, most
// frequent first, each with its first example.
func summarize(lines []string) string {
	counts, example := map[string]int{}, map[string]string{}
	for _, l := range lines {
		kind, ex, _ := strings.Cut(l, "|")
		if counts[kind]++; counts[kind] == 1 {
			example[kind] = ex
		}
	}
	kinds := slices.SortedFunc(maps.Keys(counts), func(a, b string) int { return cmp.Compare(counts[b], counts[a]) })
	var b strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&b, "; %d %s (e.g. %s)", counts[k], k, example[k])
	}
	return strings.TrimPrefix(b.String(), "; ")
}

// awaitSettled waits until the charge is terminal or in review, as a
// merchant waits for a charge to succeed before refunding it, and returns
// its status: "" after an answer no charge the client saw acknowledged
// should get (recorded as unexpected), and false if it gave up.
func (s *system) awaitSettled(ctx context.Context, id string) (status string, final bool) {
	return s.client.awaitOutcome(ctx, id)
}
