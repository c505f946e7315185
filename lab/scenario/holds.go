package scenario

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	chargeflow "github.com/chargeflow/chargeflow/client"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// The merchant's side of authorize now, capture later (docs/capture.md):
// charges created with "capture": false, then captured or canceled once
// the client reads them held. A crash point is armed per process at start
// and knows nothing of row kinds, so the scenarios that aim one at
// captures and cancels arm it once the authorizations have settled
// (operationsUnderCrash), as refundsUnderCrash does for refunds.

// heldRequest builds charge i of a named batch, to be captured later.
func (s *system) heldRequest(name string, i int) request {
	r := s.request(name, i)
	r.charge.CaptureLater = true
	return r
}

// acked is a request the API acknowledged, with its 201's body.
type acked struct {
	r    request
	body []byte
}

// ackedTraffic sends n charges built by build and returns those
// acknowledged.
func (s *system) ackedTraffic(ctx context.Context, n int, build func(i int) request) []acked {
	var mu sync.Mutex
	var out []acked
	s.client.load(ctx, n, 16, build, func(r request, a answer) {
		if a.status == http.StatusCreated {
			mu.Lock()
			out = append(out, acked{r, a.body})
			mu.Unlock()
		}
	})
	return out
}

// heldTraffic sends n charges to be captured later, waits for them to
// settle (held, or declined) and returns those acknowledged.
func (s *system) heldTraffic(ctx context.Context, name string, n int) ([]acked, error) {
	charges := s.ackedTraffic(ctx, n, func(i int) request { return s.heldRequest(name, i) })
	if !s.waitConverged(ctx, s.t.convergenceBound()) {
		return nil, errors.New("the authorizations did not settle")
	}
	return charges, nil
}

// laterAll runs op on every charge, each in a goroutine of its own (later),
// waits for them all, then lets everything settle with the faults still
// armed. what says, for an error, what every charge should have had.
func (s *system) laterAll(ctx context.Context, charges []acked, op func(ctx context.Context, chargeKey, id string, amount int64) bool, what string) error {
	for _, c := range charges {
		s.later(ctx, c.r, c.body, op)
	}
	if started, answered := s.waitRefunds(); answered < started {
		return fmt.Errorf("only %d of %d %s: %s", answered, started, what, s.refunds.gaveUpSummary())
	}
	s.settleUnderFaults(ctx)
	return nil
}

// operateAll is laterAll for captures and cancels.
func (s *system) operateAll(ctx context.Context, charges []acked, op func(ctx context.Context, chargeKey, id string, amount int64) bool) error {
	return s.laterAll(ctx, charges, op, "held charges had every capture and cancel answered")
}

// opStep is one capture or cancel the merchant sends of a held charge, and
// the refusal it expects ("" for a 201).
type opStep struct {
	cancel bool
	// amount is a capture's; 0 takes all that was authorized.
	amount  int64
	refusal string
}

func (st opStep) kind() string {
	if st.cancel {
		return kindCancel
	}
	return kindCapture
}

// operationPlan is what the merchant does with a held charge of amount a:
// steps sent one after the other, each waited for until it settled. Each
// plan ends with a capture or a cancel that must be refused
// charge_not_capturable: the charge was captured or released.
func operationPlan(kind int, a int64) []opStep {
	notCapturable := codeChargeNotCapturable
	switch kind {
	case 0: // capture all, then a cancel, too late
		return []opStep{{}, {cancel: true, refusal: notCapturable}}
	case 1: // capture half, then try to capture one more unit
		return []opStep{{amount: max(a/2, 1)}, {amount: 1, refusal: notCapturable}}
	case 2: // cancel, then try to capture
		return []opStep{{cancel: true}, {refusal: notCapturable}}
	default: // more than authorized, refused and nothing stored; then all
		return []opStep{{amount: a + 1, refusal: codeCaptureExceedsAuthorization}, {}, {cancel: true, refusal: notCapturable}}
	}
}

// opRequest builds step of a charge's captures and cancels: a key of its
// own, the charge's key with a suffix.
func (s *system) opRequest(chargeKey string, step int, id string, st opStep) request {
	key := fmt.Sprintf("%s-op-%d", chargeKey, step)
	r := request{path: capturePath, key: key, parent: chargeKey, chargeID: id}
	if st.cancel {
		r.path, r.cancel = cancelPath, &chargeflow.CancelParams{IdempotencyKey: key}
	} else {
		r.capture = &chargeflow.CaptureParams{Amount: st.amount, IdempotencyKey: key}
	}
	return r
}

// awaitHeld waits until the charge is authorized and held, or settled
// otherwise, as a merchant waits before it ships: its status, "" after an
// answer it should not get (recorded as unexpected), false if it gave up.
func (s *system) awaitHeld(ctx context.Context, id string) (string, bool) {
	return s.awaitPatiently(ctx, "waiting for the charge to be authorized", id, s.awaitSettled)
}

// operate captures or cancels a charge the client reads held, by one of
// the plans of operationPlan; a charge that is not held (declined, in
// review) gets one capture, which must be refused charge_not_capturable.
// It reports whether every request got a final answer.
func (s *system) operate(ctx context.Context, chargeKey, id string, amount int64) bool {
	state, ok := s.awaitHeld(ctx, id)
	if !ok || state == "" {
		return ok
	}
	plan := []opStep{{refusal: codeChargeNotCapturable}}
	if state == statusHeld {
		plan = operationPlan(s.intn(4), amount)
	}
	return s.runPlan(ctx, chargeKey, id, amount, plan)
}

// operateThird captures a third of every held charge, so that two such
// captures fit in its authorization: the negative control's plan.
func (s *system) operateThird(ctx context.Context, chargeKey, id string, amount int64) bool {
	state, ok := s.awaitHeld(ctx, id)
	if !ok || state != statusHeld {
		return ok
	}
	return s.runPlan(ctx, chargeKey, id, amount, []opStep{{amount: max(amount/3, 1)}})
}

// runPlan sends the steps of a charge of amount one after the other. Each
// must get the answer it expects; an accepted one must succeed, and leave
// its charge captured by its amount or released. A plan whose step went
// otherwise stops there: what the next expects no longer holds.
func (s *system) runPlan(ctx context.Context, chargeKey, id string, amount int64, plan []opStep) bool {
	for step, st := range plan {
		a, ok := s.postPatiently(ctx, s.opRequest(chargeKey, step, id, st), fmt.Sprintf("%s %d of the charge", st.kind(), step+1), id)
		if !ok {
			return false
		}
		if a.status != http.StatusCreated && !operationRefusals[a.code] {
			return true // post recorded it as unexpected
		}
		if a.code != st.refusal {
			s.client.unexpectedf("charge %s: a %s of %d (step %d) got %d %s, not %s", id, st.kind(), st.amount, step+1, a.status, a.code, cmp.Or(st.refusal, "201"))
			return true
		}
		if a.status != http.StatusCreated {
			continue
		}
		status, code, ok := s.settleOperation(ctx, id, amount, st, a.body)
		if !ok {
			return false
		}
		if status != "succeeded" {
			if status != "needs_review" {
				s.client.unexpectedf("charge %s: a %s of %d ended %s (%s)", id, st.kind(), st.amount, status, code)
			}
			return true
		}
	}
	return true
}

// settleOperation waits until the capture or cancel a 201 acknowledged
// (body) is succeeded, failed or in review, and returns its status and
// failure code. One that succeeded must have moved its charge: captured by
// its amount (all of amount when it named none), or released.
func (s *system) settleOperation(ctx context.Context, chargeID string, amount int64, st opStep, body []byte) (status, failureCode string, final bool) {
	var acked struct {
		ID     string `json:"id"`
		Amount int64  `json:"amount"`
	}
	if err := json.Unmarshal(body, &acked); err != nil || acked.ID == "" {
		s.client.unexpectedf("charge %s: a 201 that is not a %s: %v", chargeID, st.kind(), err)
		return "", "", true
	}
	status, ok := s.awaitPatiently(ctx, "waiting for the "+st.kind()+" to settle", acked.ID, func(ctx context.Context, id string) (string, bool) {
		op, final := s.client.awaitOperation(ctx, id, st.cancel)
		if op == nil {
			return "", final
		}
		failureCode = op.FailureCode
		return string(op.Status), final
	})
	if !ok || status != "succeeded" {
		return status, failureCode, ok
	}
	// A cancel's amount is what was authorized, as a capture's that named
	// none.
	if want := cmp.Or(st.amount, amount); acked.Amount != want {
		s.client.unexpectedf("%s %s of charge %s (%d) is of %d, not %d", st.kind(), acked.ID, chargeID, amount, acked.Amount, want)
	}
	c := s.client.readCharge(ctx, chargeID)
	switch {
	case c == nil:
	case st.cancel && c.Status != statusReleased:
		s.client.unexpectedf("cancel %s succeeded, but its charge %s reads %s", acked.ID, chargeID, c.Status)
	case !st.cancel && (c.Status != "succeeded" || c.AmountCaptured != acked.Amount):
		s.client.unexpectedf("capture %s of %d succeeded, but its charge %s reads %s with %d captured", acked.ID, acked.Amount, chargeID, c.Status, c.AmountCaptured)
	}
	return status, failureCode, true
}

// armed is what operationsUnderCrash arms once the held charges settled:
// the environment of the workers, of the first reconciler, and of each
// API in turn (crash points, a broken mode).
type armed struct {
	workers, reconciler []string
	apis                [][]string
}

// operationsUnderCrash sends charges to be captured later with every
// crash point disarmed and waits for them to settle; then it restarts the
// processes arm names with their environment and captures or cancels every
// charge held (op), so that every crash cuts a capture or a cancel. A
// reconciler armed to die at every few lookups settles little; the others,
// unarmed, keep the unknown captures and cancels settling, as an unarmed
// API keeps answering the clients' retries.
func operationsUnderCrash(short, full int, op func(*system) func(ctx context.Context, chargeKey, id string, amount int64) bool,
	arm armed) func(ctx context.Context, s *system) error {
	return func(ctx context.Context, s *system) error {
		charges, err := s.heldTraffic(ctx, "held", s.charges(short, full))
		if err != nil {
			return fmt.Errorf("%w before the crash points were armed", err)
		}
		if len(arm.workers) > 0 {
			if err := s.restartWith(ctx, s.workers, arm.workers...); err != nil {
				return err
			}
		}
		if len(arm.reconciler) > 0 {
			if err := s.restartWith(ctx, s.reconcilers[:1], arm.reconciler...); err != nil {
				return err
			}
		}
		for i, env := range arm.apis {
			if err := s.restartWith(ctx, s.apis[i:i+1], env...); err != nil {
				return err
			}
		}
		return s.operateAll(ctx, charges, op(s))
	}
}

// operateEach is operationsUnderCrash's op for the crash scenarios.
func operateEach(s *system) func(ctx context.Context, chargeKey, id string, amount int64) bool {
	return s.operate
}

// capturesRacingCancels sends charges to be captured later and, once each
// is read held, a capture and a cancel of it at the same moment, under keys
// of their own, from two clients (through two APIs when the scenario runs
// two).
func capturesRacingCancels(short, full int) func(ctx context.Context, s *system) error {
	return func(ctx context.Context, s *system) error {
		charges, err := s.heldTraffic(ctx, "race", s.charges(short, full))
		if err != nil {
			return err
		}
		return s.operateAll(ctx, charges, s.race)
	}
}

// race sends a capture of all of the charge and a cancel of it at once.
// Exactly one must be accepted and succeed, leaving the charge captured or
// released; the other must be refused, operation_in_progress while the
// first is in flight or charge_not_capturable once it settled, with
// nothing stored. A charge not held gets both refused
// charge_not_capturable.
func (s *system) race(ctx context.Context, chargeKey, id string, amount int64) bool {
	state, ok := s.awaitHeld(ctx, id)
	if !ok || state == "" {
		return ok
	}
	steps := []opStep{{}, {cancel: true}}
	answers := make([]answer, len(steps))
	answered := make([]bool, len(steps))
	start := make(chan struct{})
	var wg sync.WaitGroup
	// The goroutine started last tends to run first once both are woken:
	// which one that is is drawn, so each kind wins its share of races.
	order := []int{0, 1}
	if s.intn(2) == 0 {
		order = []int{1, 0}
	}
	for _, i := range order {
		st := steps[i]
		wg.Go(func() {
			<-start
			answers[i], answered[i] = s.postPatiently(ctx, s.opRequest(chargeKey, i, id, st), "the racing "+st.kind(), id)
		})
	}
	close(start)
	wg.Wait()
	if !answered[0] || !answered[1] {
		return false
	}
	var won []int
	for i, a := range answers {
		switch {
		case a.status == http.StatusCreated:
			won = append(won, i)
		case a.code == codeOperationInProgress || a.code == codeChargeNotCapturable:
			s.fire("race:" + a.code)
		case operationRefusals[a.code]:
			s.client.unexpectedf("charge %s: the racing %s got %d %s", id, steps[i].kind(), a.status, a.code)
		}
	}
	if state != statusHeld {
		if len(won) > 0 {
			s.client.unexpectedf("charge %s, %s: a %s of it was accepted", id, state, steps[won[0]].kind())
		}
		return true
	}
	if len(won) != 1 {
		s.client.unexpectedf("charge %s: %d of a capture and a cancel sent at once were accepted", id, len(won))
	}
	succeeded := 0
	for _, i := range won {
		status, code, ok := s.settleOperation(ctx, id, amount, steps[i], answers[i].body)
		if !ok {
			return false
		}
		if status == "succeeded" {
			succeeded++
			s.fire("race:" + steps[i].kind() + "_won")
		} else if status != "needs_review" {
			s.client.unexpectedf("charge %s: the winning %s ended %s (%s)", id, steps[i].kind(), status, code)
		}
	}
	if succeeded > 1 {
		s.client.unexpectedf("charge %s: both the capture and the cancel succeeded", id)
	}
	return true
}

// The hold window of hold-expires-during-capture: the fake provider
// releases each authorization that long after it made it, and the
// reconcilers are told so (--hold-window); they look a held charge up from
// holdMargin before that, and again every holdRecheck. The window outlasts
// the sending of the charges and their settling, so that every hold is
// read before it expires.
const (
	holdWindow  = 8 * time.Second
	holdMargin  = time.Second
	holdRecheck = time.Second
)

// holdExpiresDuringCapture is the scenario of holds that expire while
// captures and cancels are sent and in flight: some reach the provider
// late (latency), some are applied after the client gave up
// (delayed_apply), both deciding at the provider after the expiry.
func holdExpiresDuringCapture() Scenario {
	window := []string{"--hold-window", holdWindow.String()}
	return Scenario{
		Name: "hold-expires-during-capture",
		Summary: "holds of " + holdWindow.String() + " at the provider; each captured or canceled around its expiry, some slowed or applied late there: " +
			"nothing captured after the release, expired holds released by the reconciler's sweep",
		ProviderFlags: window,
		ReconcilerFlagsFor: func(int) []string {
			return append(slices.Clone(window), "--hold-margin", holdMargin.String(), "--hold-recheck", holdRecheck.String())
		},
		// The provider draws the rules in order: two captures in five are
		// applied late, a quarter held before it decides; cancels are held
		// too. Only the late ones must fire: the moments alone bring
		// captures to the provider about when their holds expire.
		Faults: `{"seed": 31, "rules": [{"on": "capture", "fault": "delayed_apply", "p": 0.4, "ms": 1500},
			{"on": "capture", "fault": "latency", "p": 0.4, "ms": 700},
			{"on": "cancel", "fault": "latency", "p": 0.4, "ms": 700}]}`,
		Run:      holdsExpire(40, 100),
		MustFire: []string{"hold:capture_in_time", "hold:refused_expired", "hold:released_by_sweep", "fault:delayed_apply"},
	}
}

// aroundExpiry are the moments, from a hold's expiry at the provider, at
// which hold-expires-during-capture captures or cancels a held charge, and
// what it sends then; the held charges take them in turn. Some are applied
// in time; some reach the provider about when the hold expires, held there
// by its latency or applied late (delayed_apply); some are accepted after
// the expiry but before the hold sweep releases the charge, and refused
// hold_expired there; some come after the sweep (charge_not_capturable).
var aroundExpiry = []struct {
	offset time.Duration
	step   opStep
}{
	{-2000 * time.Millisecond, opStep{}},
	{-1500 * time.Millisecond, opStep{cancel: true}},
	{-600 * time.Millisecond, opStep{amount: -2}},
	{-250 * time.Millisecond, opStep{}},
	{150 * time.Millisecond, opStep{}},
	{300 * time.Millisecond, opStep{cancel: true}},
	{1200 * time.Millisecond, opStep{amount: -2}},
	{2500 * time.Millisecond, opStep{}},
}

// holdsExpire sends charges to be captured later and captures or cancels
// each held one around the moment its hold expires at the provider (read
// from the provider's ledger), at the moments of aroundExpiry, each
// drawn 100 ms either way. Then every hold must end: captured, or released
// (canceled) by a cancel or by the sweep.
func holdsExpire(short, full int) func(ctx context.Context, s *system) error {
	return func(ctx context.Context, s *system) error {
		charges, err := s.heldTraffic(ctx, "hold", s.charges(short, full))
		if err != nil {
			return err
		}
		ledger, err := fakepsp.FetchLedger(ctx, s.psp.url(), true)
		if err != nil {
			return err
		}
		expires := map[string]time.Time{}
		for _, e := range ledger {
			expires[e.Reference] = e.HoldExpiresAt
		}
		var turn atomic.Int64
		err = s.operateAll(ctx, charges, func(ctx context.Context, chargeKey, id string, amount int64) bool {
			return s.operateAround(ctx, chargeKey, id, amount, expires[id], &turn)
		})
		return errors.Join(err, s.waitHoldsEnded(ctx))
	}
}

// operateAround sends one capture or cancel of a held charge at the next
// moment of aroundExpiry (turn counts them) from expiry, the end of its hold
// at the provider; a half capture (amount -2 there) takes half the charge.
// Accepted, it must succeed or fail hold_expired; refused, it must be
// charge_not_capturable and answered after the expiry (only the
// provider's release lets the sweep release the charge). A charge not
// held gets one capture, which must be refused charge_not_capturable.
func (s *system) operateAround(ctx context.Context, chargeKey, id string, amount int64, expiry time.Time, turn *atomic.Int64) bool {
	state, ok := s.awaitHeld(ctx, id)
	if !ok || state == "" {
		return ok
	}
	if state != statusHeld {
		return s.runPlan(ctx, chargeKey, id, amount, []opStep{{refusal: codeChargeNotCapturable}})
	}
	if expiry.IsZero() {
		s.client.unexpectedf("charge %s is held, but the provider's ledger has no hold of it", id)
		return true
	}
	moment := aroundExpiry[int(turn.Add(1)-1)%len(aroundExpiry)]
	st := moment.step
	if st.amount < 0 {
		st.amount = max(amount/2, 1)
	}
	at := expiry.Add(moment.offset + time.Duration(s.intn(200)-100)*time.Millisecond)
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Until(at)):
	}
	a, ok := s.postPatiently(ctx, s.opRequest(chargeKey, 0, id, st), "the "+st.kind()+" around expiry", id)
	if !ok {
		return false
	}
	switch {
	case a.status == http.StatusCreated:
		status, code, ok := s.settleOperation(ctx, id, amount, st, a.body)
		if !ok {
			return false
		}
		switch {
		case status == "succeeded":
			s.fire("hold:" + st.kind() + "_in_time")
		case status == "failed" && code == "hold_expired":
			s.fire("hold:refused_expired")
		case status == "needs_review":
			s.fire("hold:review")
		default:
			s.client.unexpectedf("charge %s: a %s sent %s from its hold's expiry ended %s (%s)", id, st.kind(), at.Sub(expiry).Round(time.Millisecond), status, code)
		}
	case a.code == codeChargeNotCapturable && time.Now().After(expiry):
		s.fire("hold:not_capturable_after_release")
	case operationRefusals[a.code]:
		s.client.unexpectedf("charge %s: a %s sent %s from its hold's expiry got %d %s", id, st.kind(), at.Sub(expiry).Round(time.Millisecond), a.status, a.code)
	}
	return true
}

// waitHoldsEnded waits until no charge is held any more: every hold
// expired by now, so each charge must be captured or released, the
// released ones by a cancel or by the reconciler's hold sweep.
func (s *system) waitHoldsEnded(ctx context.Context) error {
	deadline := time.Now().Add(s.t.convergenceBound())
	for {
		var held int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM charges WHERE state = $1`, statusHeld).Scan(&held); err != nil {
			return err
		}
		if held == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d charges still held %s after their holds expired at the provider: the hold sweep did not release them",
				held, s.t.convergenceBound())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
