package scenario

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// The skews of clock-skew, each the wall clock internal/clock reads in a
// role (CHARGEFLOW_CLOCK_SKEW, honoured by the lab build only). The workers'
// is inside the five minutes a receiver allows a webhook's timestamp
// (chargeflow.DefaultWebhookTolerance), which is the bound a worker's clock
// has; the API's is as large the other way. The reconcilers' are past every
// window of a run (leases of 5 s, an apply window of seconds, two minutes of
// unknown age): a reconciler deciding by its own clock would take leases
// that are not expired, or prove not-found too soon, and re-send.
const (
	apiSkew        = 4 * time.Minute
	workerSkew     = -4 * time.Minute
	reconcilerSkew = 10 * time.Minute
)

// clockSkewScenario: every role's clock off, differently; charges, refunds
// and webhooks under kills.
func clockSkewScenario() Scenario {
	return Scenario{
		Name: "clock-skew",
		Summary: "the API's clock 4 min ahead, the workers' 4 min behind, one reconciler's 10 min ahead and the other's 10 min behind; " +
			"charges, refunds and webhooks while processes are killed",
		Faults:      webhookFaults,
		Webhooks:    &WebhookPlan{},
		Reconcilers: 2,
		APIEnv:      []string{skewEnv(apiSkew)},
		WorkerEnv:   []string{skewEnv(workerSkew), "CHARGEFLOW_CRASHPOINTS=" + crashPerBatch("worker.after_save_before_commit")},
		ReconcilerEnvFor: func(i int) []string {
			if i == 0 {
				return []string{skewEnv(reconcilerSkew)}
			}
			return []string{skewEnv(-reconcilerSkew)}
		},
		Run: clockSkew(20, 100),
		MustFire: []string{
			// Each role logged its offset, and the offsets reached what
			// the roles wrote and signed.
			"clock:api", "clock:worker", "clock:reconciler-0", "clock:reconciler-1",
			"clock:created_ahead", "webhooks:skewed",
			// The skewed reconcilers did the reconciling, kills happened.
			"clock:reconciler-0:moves", "clock:reconciler-1:moves",
			"crashpoint:worker.after_save_before_commit", "kill:reconciler", "kill:api",
			"refunds:found",
		},
		// A worker killed mid-job leaves its job to River's rescue.
		Slow: true,
	}
}

func skewEnv(d time.Duration) string { return "CHARGEFLOW_CLOCK_SKEW=" + d.String() }

// clockSkew sends charges and refunds each one as it settles, while the
// API and the reconcilers are killed in turn, then counts what
// proves the skews were in force: each role's "clock skewed" line with its
// offset, the charges whose created_at (the API's clock) is ahead of their
// acceptance in the audit trail (the database's), and the moves each
// skewed reconciler made. The deliveries the receiver found signed far
// from its clock are "webhooks:skewed" (checkWebhooks).
func clockSkew(short, full int) func(ctx context.Context, s *system) error {
	return func(ctx context.Context, s *system) error {
		chaos, stopChaos := context.WithCancel(ctx)
		chaosDone := make(chan struct{})
		s.setChaos(true)
		go func() {
			defer close(chaosDone)
			s.skewChaos(chaos)
		}()
		s.traffic(ctx, "skew", s.charges(short, full), func(r request, a answer) {
			if a.status == http.StatusCreated {
				s.refundLater(ctx, r, a.body)
			}
		})
		refunded, answered := s.waitRefunds()
		stopChaos()
		<-chaosDone
		s.setChaos(false)
		if answered < refunded {
			return fmt.Errorf("only %d of %d charges to refund had every refund answered: %s", answered, refunded, s.refunds.gaveUpSummary())
		}
		s.settleUnderFaults(ctx)
		return s.countSkews(ctx)
	}
}

// skewChaos kills the API and the reconcilers in turn, each once it has
// been ready a while, one every second or so, until ctx is done and each
// role was killed at least once, or 30 s more have passed (the workers die
// at their crash point): in a short run the traffic can be over before a
// random draw would have come to every role.
func (s *system) skewChaos(ctx context.Context) {
	victims := append([]*proc{s.api}, s.reconcilers...)
	next := 0
	var overtime time.Time // when ctx ended: the kills still missing get 30 s
	for {
		s.mu.Lock()
		done := s.kills["api"] > 0 && s.kills["reconciler"] > 0
		s.mu.Unlock()
		if ctx.Err() != nil {
			if overtime.IsZero() {
				overtime = time.Now()
			}
			if done || time.Since(overtime) > 30*time.Second {
				return
			}
		}
		time.Sleep(time.Duration(500+s.intn(700)) * time.Millisecond)
		victim := victims[next]
		life := workerLife
		if s.isAPI(victim) {
			life = 2 * time.Second
		}
		if victim.upFor() < life {
			continue
		}
		s.kill(victim, victim.args[0])
		next = (next + 1) % len(victims)
	}
}

// countSkews counts into the run's fired counts what shows each skew was in
// force (clockSkew).
func (s *system) countSkews(ctx context.Context) error {
	logged := map[string][]string{
		"clock:api":          {`"role":"api"`, `"offset":"` + apiSkew.String() + `"`},
		"clock:worker":       {`"role":"worker"`, `"offset":"` + workerSkew.String() + `"`},
		"clock:reconciler-0": {`"role":"reconciler"`, `"offset":"` + reconcilerSkew.String() + `"`},
		"clock:reconciler-1": {`"role":"reconciler"`, `"offset":"` + (-reconcilerSkew).String() + `"`},
	}
	counts := map[string]int{}
	for name, match := range logged {
		n, err := countInLogs(s.dir, append([]string{`"msg":"clock skewed"`}, match...)...)
		if err != nil {
			return err
		}
		counts[name] = n
	}
	// A charge's created_at is the API's clock, its acceptance in the
	// audit trail the database's: ahead by the API's skew, less the time
	// the accept took.
	var ahead int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM charges c JOIN charge_audit a
		ON (a.tenant_id, a.charge_id) = (c.tenant_id, c.id) AND a.from_state IS NULL
		WHERE c.created_at > a.created_at + make_interval(secs => $1)`, (apiSkew - time.Minute).Seconds()).Scan(&ahead); err != nil {
		return err
	}
	counts["clock:created_ahead"] = ahead
	for i := range s.reconcilers {
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM charge_audit WHERE actor = $1`,
			fmt.Sprintf("reconciler:reconciler-%d", i)).Scan(&n); err != nil {
			return err
		}
		counts[fmt.Sprintf("clock:reconciler-%d:moves", i)] = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, n := range counts {
		s.fired[name] += n
	}
	return nil
}
