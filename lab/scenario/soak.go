package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// soakSendFaults are the faults of a call that moves money, each armed on
// charges and on refunds alike. Durations stay inside what the reconcilers
// are told (--max-apply-delay 2 s covers delayed_apply; key_expiry lasts as
// long as the reconcilers' --key-window), as a correct deployment's
// configuration would.
var soakSendFaults = []fakepsp.Rule{
	{Fault: fakepsp.FaultLatency, P: 0.05, MS: 150},
	{Fault: fakepsp.FaultDropBeforeApply, P: 0.03, MS: 100},
	{Fault: fakepsp.FaultApplyThenTimeout, P: 0.03, MS: 1500},
	{Fault: fakepsp.FaultApplyThenReset, P: 0.03},
	{Fault: fakepsp.FaultErrorBeforeApply, P: 0.02},
	{Fault: fakepsp.FaultErrorAfterApply, P: 0.02},
	{Fault: fakepsp.FaultNotProcessed, P: 0.03},
	{Fault: fakepsp.FaultDelayedApply, P: 0.02, MS: 1500},
	{Fault: fakepsp.FaultKeyExpiry, P: 0.02, MS: 3_600_000},
}

// soakLookupFaults are the lookups' faults (lookup_lag inside
// --max-apply-delay too).
var soakLookupFaults = []fakepsp.Rule{
	{On: fakepsp.OnLookup, Fault: fakepsp.FaultUnavailable, P: 0.05},
	{On: fakepsp.OnLookup, Fault: fakepsp.FaultLookupLag, P: 0.1, MS: 1500},
	{On: fakepsp.OnLookup, Fault: fakepsp.FaultLatency, P: 0.05, MS: 100},
}

// minRefundFaultRate is the least rate of a fault on refunds: there are
// fewer refunds than charges, and a short soak must still see each of their
// faults a dozen times.
const minRefundFaultRate = 0.03

// soakFaults is the soak's schedule: every fault kind of the fake provider
// at a low rate, on charges, refunds and lookups.
func soakFaults() string {
	var rules []fakepsp.Rule
	for _, on := range []string{fakepsp.OnCharge, fakepsp.OnRefund} {
		for _, rule := range soakSendFaults {
			rule.On = on
			if on == fakepsp.OnRefund {
				rule.P = max(rule.P, minRefundFaultRate)
			}
			rules = append(rules, rule)
		}
	}
	schedule, err := json.Marshal(fakepsp.Schedule{Seed: 1, Rules: append(rules, soakLookupFaults...)})
	if err != nil {
		panic(err) // a schedule of plain values always marshals
	}
	return string(schedule)
}

// soakMustFire is what a soak must have seen to count: every fault kind, on
// charges and on refunds, both refusals of a refund, refunds found and
// re-sent after an unknown outcome, every kind of kill, and the Postgres
// crash.
func soakMustFire() []string {
	out := []string{"kill:worker", "kill:reconciler", "kill:api", "postgres:restart",
		"refusals:" + codeChargeNotRefundable, "refusals:" + codeRefundExceedsCharge, "refunds:found", "refunds:re-attempted"}
	for _, rule := range soakSendFaults {
		out = append(out, "fault:"+rule.Fault, "fault:refund:"+rule.Fault)
	}
	for _, rule := range soakLookupFaults {
		if rule.Fault != fakepsp.FaultLatency { // counted with the calls' latency
			out = append(out, "fault:"+rule.Fault)
		}
	}
	return out
}

// replicasMustFire is the soak's list with the failover in place of the
// restart of PostgreSQL, and a kill of each API.
func replicasMustFire() []string {
	out := []string{"failover:primary_killed", "failover:promoted", "kill:api-0", "kill:api-1"}
	for _, name := range soakMustFire() {
		if name != "postgres:restart" {
			out = append(out, name)
		}
	}
	return out
}

// refundShare is the part of the soak's acknowledged charges the merchant
// refunds once they settle: with the refund plans, about one refund
// acknowledged per four charges, and some refused.
const refundShare = 0.25

// soak sends the charges, and refunds a share of them, while a seeded
// schedule kills a worker or a reconciler every 150–500 ms, the API every
// 2–5 s (each once it has been ready a while: chaos), and crashes PostgreSQL once when a third of the charges are
// acknowledged. With a duration the charges are spread over it; without one
// they go as fast as the clients can send them. The chaos goes on while the
// refunds are sent, but for at most as long again as the charges took: a
// charge whose job a killed worker held waits up to a minute for River's
// rescue, a refund waits for its charge, and kills going on until the last
// refund would only feed that tail. Refunds still outstanding then go on
// under the provider's faults.
func soak(ctx context.Context, s *system) error {
	n := s.runner.cfg.Charges
	if n == 0 {
		n = s.charges(2000, 10000)
	}
	if err := s.rejectCard(ctx); err != nil {
		return err
	}
	chaos, stopChaos := context.WithCancel(ctx)
	chaosDone := make(chan error, 1)
	s.setChaos(true)
	go func() { chaosDone <- s.chaos(chaos, n) }()

	began := time.Now()
	pace := time.Duration(0)
	if d := s.runner.cfg.Duration; d > 0 {
		pace = d / time.Duration(n) * 16 // per client, 16 clients
	}
	s.client.load(ctx, n, 16, func(i int) request {
		if pace > 0 {
			time.Sleep(pace)
		}
		return s.request("soak", i)
	}, func(r request, a answer) {
		if a.status == http.StatusCreated && s.float() < refundShare {
			s.refundLater(ctx, r, a.body)
		}
	})
	// The chaos goes on while the refunds are sent, for at most as long
	// again as the charges took.
	select {
	case <-s.refunds.done():
	case <-time.After(time.Since(began)):
	}
	stopChaos()
	err := <-chaosDone
	s.setChaos(false)
	if err != nil {
		return err
	}
	s.logf("%d refunds acknowledged under the chaos; the rest follow as their charges settle", s.client.refundAckedCount())
	refunded, answered := s.waitRefunds()
	if got := s.client.ackedCount(); got < n {
		return fmt.Errorf("only %d of %d charges were acknowledged; the clients gave up on the rest", got, n)
	}
	if answered < refunded {
		return fmt.Errorf("only %d of %d charges to refund had every refund answered; the clients gave up on the rest: %s",
			answered, refunded, s.refunds.gaveUpSummary())
	}
	return nil
}

// A process is killed only once it has been ready for a while: an API for
// 2–5 s (drawn per kill), a worker or a reconciler for workerLife. The
// schedule counts from readiness, not from the last kill, so that on a
// machine too busy to start a process quickly the chaos slows with it
// instead of killing every process before it can do any work.
const workerLife = time.Second

// chaos kills processes on a seeded schedule until ctx is done.
func (s *system) chaos(ctx context.Context, n int) error {
	apiLife := func() time.Duration { return time.Duration(2000+s.intn(3000)) * time.Millisecond }
	nextAPI, nextAPILife := s.intn(len(s.apis)), apiLife()
	crashed := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Duration(150+s.intn(350)) * time.Millisecond):
		}
		if !crashed && s.client.ackedCount() >= n/3 {
			crashed = true
			pgChaos := func() error { return s.crashPostgres(ctx, 2*time.Second) }
			if s.ha != nil {
				pgChaos = func() error { return s.failOver(ctx) }
			}
			if err := pgChaos(); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			continue
		}
		if s.apis[nextAPI].upFor() >= nextAPILife {
			s.kill(s.apis[nextAPI], "api")
			if len(s.apis) > 1 { // which of them, too
				s.mu.Lock()
				s.kills[fmt.Sprintf("api-%d", nextAPI)]++
				s.mu.Unlock()
			}
			nextAPI, nextAPILife = s.intn(len(s.apis)), apiLife()
			continue
		}
		victims := append(append([]*proc(nil), s.workers...), s.reconcilers...)
		victim := victims[s.intn(len(victims))]
		if victim.upFor() < workerLife {
			continue // spared this time: it has not been working long enough
		}
		s.kill(victim, victim.args[0])
	}
}
