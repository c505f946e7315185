package scenario

import (
	"context"
	"fmt"
	"time"
)

// soakFaults injects every fault kind of the fake provider at a low rate.
// Durations stay inside what the reconcilers are told (--max-apply-delay
// 2 s covers delayed_apply and lookup_lag; key_expiry lasts as long as the
// reconcilers' --key-window), as a correct deployment's configuration would.
const soakFaults = `{"seed": 1, "rules": [
	{"on": "charge", "fault": "latency", "p": 0.05, "ms": 150},
	{"on": "charge", "fault": "drop_before_apply", "p": 0.03, "ms": 100},
	{"on": "charge", "fault": "apply_then_timeout", "p": 0.03, "ms": 1500},
	{"on": "charge", "fault": "apply_then_reset", "p": 0.03},
	{"on": "charge", "fault": "error_before_apply", "p": 0.02},
	{"on": "charge", "fault": "error_after_apply", "p": 0.02},
	{"on": "charge", "fault": "not_processed", "p": 0.03},
	{"on": "charge", "fault": "delayed_apply", "p": 0.02, "ms": 1500},
	{"on": "charge", "fault": "key_expiry", "p": 0.02, "ms": 3600000},
	{"on": "lookup", "fault": "unavailable", "p": 0.05},
	{"on": "lookup", "fault": "lookup_lag", "p": 0.1, "ms": 1500},
	{"on": "lookup", "fault": "latency", "p": 0.05, "ms": 100}]}`

// soakMustFire is what a soak must have seen to count: every fault kind,
// every kind of kill, and the Postgres crash.
func soakMustFire() []string {
	out := []string{"kill:worker", "kill:reconciler", "kill:api", "postgres:restart"}
	for _, fault := range []string{"latency", "drop_before_apply", "apply_then_timeout", "apply_then_reset", "error_before_apply",
		"error_after_apply", "not_processed", "delayed_apply", "key_expiry", "unavailable", "lookup_lag"} {
		out = append(out, "fault:"+fault)
	}
	return out
}

// soak sends the charges while a seeded schedule kills a worker or a
// reconciler every 150–500 ms, the API every 2–5 s, and crashes PostgreSQL
// once when a third of the charges are acknowledged. With a duration the
// charges are spread over it; without one they go as fast as the clients
// can send them.
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
	go func() { chaosDone <- s.chaos(chaos, n) }()

	pace := time.Duration(0)
	if d := s.runner.cfg.Duration; d > 0 {
		pace = d / time.Duration(n) * 16 // per client, 16 clients
	}
	s.client.load(ctx, n, 16, func(i int) request {
		if pace > 0 {
			time.Sleep(pace)
		}
		return s.request("soak", i)
	}, nil)
	stopChaos()
	if err := <-chaosDone; err != nil {
		return err
	}
	if got := s.client.ackedCount(); got < n {
		return fmt.Errorf("only %d of %d charges were acknowledged; the clients gave up on the rest", got, n)
	}
	return nil
}

// chaos kills processes on a seeded schedule until ctx is done.
func (s *system) chaos(ctx context.Context, n int) error {
	nextAPIKill := time.Now().Add(time.Duration(2000+s.intn(3000)) * time.Millisecond)
	crashed := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Duration(150+s.intn(350)) * time.Millisecond):
		}
		if !crashed && s.client.ackedCount() >= n/3 {
			crashed = true
			if err := s.crashPostgres(ctx, 2*time.Second); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			continue
		}
		if time.Now().After(nextAPIKill) {
			s.kill(s.api, "api")
			nextAPIKill = time.Now().Add(time.Duration(2000+s.intn(3000)) * time.Millisecond)
			continue
		}
		victims := append(append([]*proc(nil), s.workers...), s.reconcilers...)
		victim := victims[s.intn(len(victims))]
		role := "worker"
		if victim.args[0] == "reconciler" {
			role = "reconciler"
		}
		s.kill(victim, role)
	}
}
