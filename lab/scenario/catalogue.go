package scenario

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	chargeflow "github.com/chargeflow/chargeflow/client"
)

// Scenario is one entry of the catalogue.
type Scenario struct {
	Name    string
	Summary string
	// PrivatePostgres runs the scenario on a PostgreSQL of its own, which
	// it may crash.
	PrivatePostgres bool
	// HAPostgres runs the scenario on a primary and a synchronous standby
	// under pg_auto_failover (scripts/ha-postgres), reached through a
	// multi-host URL; the scenario may kill the primary.
	HAPostgres bool
	// Partitions runs the scenario in a network lab (lab/netlab): every
	// process, the provider and the monitor and nodes of HAPostgres each in
	// a network namespace of its own, so that Run may cut links between
	// them. Where namespaces cannot be made the scenario is not run, and
	// its report says why.
	Partitions bool
	// APIs is how many API processes run behind the client's round robin
	// (default 1).
	APIs int
	// FullOnly leaves the scenario out of `run all --short` (what make test
	// runs): it is run by name, or in the full catalogue.
	FullOnly bool
	// Faults is the fake provider's schedule at start (JSON), and
	// ProviderFlags its extra flags (a hold window, a lab mode).
	Faults        string
	ProviderFlags []string
	// Workers and Reconcilers are how many of each run (default 1).
	Workers     int
	Reconcilers int
	// APIEnv and WorkerEnv are extra environment (crash points, broken
	// modes). Crash points are disarmed when the chaos ends; broken modes
	// are not.
	APIEnv    []string
	WorkerEnv []string
	// ReconcilerFlagsFor and ReconcilerEnvFor give reconciler i its extra
	// flags and environment.
	ReconcilerFlagsFor func(i int) []string
	ReconcilerEnvFor   func(i int) []string
	// Run drives the traffic and the chaos, and returns when they are done.
	Run func(ctx context.Context, s *system) error
	// MustFire names what must have happened for the run to prove
	// anything: "crashpoint:<point>", "fault:<name>", "kill:<role>",
	// "postgres:restart", "fenced_refusals".
	MustFire []string
	// AllowedStatus, when set, says which statuses the client may see.
	AllowedStatus func(status int) bool
	// ExpectViolation marks the negative control: it passes only if the
	// checker finds a violation, and each invariant of MustCatch reports
	// one.
	ExpectViolation bool
	MustCatch       []string
	// BrokenReplays answers every replay 409 request_in_progress
	// (brokenReplays): the history check's negative control.
	BrokenReplays bool
	// Webhooks, when set, makes the run a merchant's webhooks too: an
	// endpoint for every event on a receiver the runner serves, and
	// InvariantWebhooks checked (lab/scenario/webhooks.go).
	Webhooks *WebhookPlan
	// Routed runs a second fake provider and routes the tenant's charges
	// through two provider accounts, one on each (docs/routing.md): the
	// ledgers of both are checked, and Faults act on the first
	// (outage.go).
	Routed bool
	// Slow marks a scenario that takes a minute or more mostly waiting
	// (for River's rescue of a job): `run --parallel` starts it first and
	// outside its slots, so the rest run alongside it instead of after it.
	Slow bool
}

// ReconcilerEnv is reconciler i's extra environment.
func (sc Scenario) ReconcilerEnv(i int) []string {
	if sc.ReconcilerEnvFor == nil {
		return nil
	}
	return sc.ReconcilerEnvFor(i)
}

// ReconcilerFlags are reconciler i's extra flags.
func (sc Scenario) ReconcilerFlags(i int) []string {
	if sc.ReconcilerFlagsFor == nil {
		return nil
	}
	return sc.ReconcilerFlagsFor(i)
}

// The canaries: values sent through every run that must never reach a log.
const (
	canaryMetadataKey = "canary_meta_key"
	canaryCard        = "4242424242424242"
	canaryCardGrouped = "4242 4242 4242 4242"
)

func keyPrefix(seed uint64) string         { return fmt.Sprintf("cfkey-%d-", seed) }
func canaryDescription(seed uint64) string { return fmt.Sprintf("canary-desc-%d", seed) }
func canaryMetadata(seed uint64) string    { return fmt.Sprintf("canary-meta-%d", seed) }
func (s *system) key(name string, i int) string {
	return fmt.Sprintf("%s%s-%06d", keyPrefix(s.seed), name, i)
}

// paymentMethods are the fake provider's test cards, weighted towards success.
var paymentMethods = []string{"pm_card_visa", "pm_card_visa", "pm_card_mastercard", "pm_card_visa",
	"pm_card_chargeDeclined", "pm_card_chargeDeclinedInsufficientFunds", "pm_card_chargeDeclinedExpiredCard", "pm_card_visa"}

var currencies = []string{"USD", "EUR", "GBP", "JPY", "CHF"}

// request builds charge i of a named batch: a fresh key, a seeded body
// carrying the canaries.
func (s *system) request(name string, i int) request {
	amount := int64(100 + s.intn(100000))
	currency := currencies[s.intn(len(currencies))]
	method := paymentMethods[s.intn(len(paymentMethods))]
	return charge(s.key(name, i), chargeflow.ChargeParams{Amount: amount, Currency: currency, PaymentMethod: method,
		Description: canaryDescription(s.seed), Metadata: map[string]string{canaryMetadataKey: canaryMetadata(s.seed), "n": fmt.Sprint(i)}})
}

// charge is a charge request under a key.
func charge(key string, p chargeflow.ChargeParams) request {
	p.IdempotencyKey = key
	return request{path: chargesPath, key: key, charge: &p}
}

// traffic sends n charges through 16 concurrent clients; done, when set,
// gets each one's final answer.
func (s *system) traffic(ctx context.Context, name string, n int, done func(request, answer)) {
	s.trafficFrom(ctx, name, 0, n, done)
}

// trafficFrom sends the charges numbered from to from+n-1.
func (s *system) trafficFrom(ctx context.Context, name string, from, n int, done func(request, answer)) {
	s.client.load(ctx, n, 16, func(i int) request { return s.request(name, from+i) }, done)
}

// midTraffic sends n charges and runs event a third of the way in: the
// first third is sent and answered, then the rest is sent while event
// runs. The event therefore always meets traffic in flight, however fast
// the API answers; waiting on a count of acknowledgements beside one
// stream of traffic could see the whole stream finish first.
func (s *system) midTraffic(ctx context.Context, name string, n int, event func() error) error {
	first := n / 3
	s.trafficFrom(ctx, name, 0, first, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.trafficFrom(ctx, name, first, n-first, nil)
	}()
	err := event()
	<-done
	return err
}

// rejectCard sends a request with a card number in it, which must be
// refused (and never logged).
func (s *system) rejectCard(ctx context.Context) error {
	status, _, _ := s.client.send(ctx, charge(s.key("card", 0), chargeflow.ChargeParams{Amount: 100, Currency: "USD",
		PaymentMethod: "pm_card_visa", Description: "card " + canaryCardGrouped}))
	if status != http.StatusBadRequest {
		return fmt.Errorf("a body with a card number got %d, not 400", status)
	}
	status, _, _ = s.client.send(ctx, charge(s.key("card", 1), chargeflow.ChargeParams{Amount: 100, Currency: "USD", PaymentMethod: canaryCard}))
	if status != http.StatusBadRequest {
		return fmt.Errorf("a card number as payment method got %d, not 400", status)
	}
	return nil
}

// charges picks the short or the full count.
func (s *system) charges(short, full int) int {
	if s.runner.cfg.Short {
		return short
	}
	return full
}

// standard is the shape of most scenarios: refuse a card number, send the
// traffic, and let the system settle with its faults still armed, so that
// crash points keep firing on re-attempts too.
func standard(short, full int) func(ctx context.Context, s *system) error {
	return func(ctx context.Context, s *system) error {
		if err := s.rejectCard(ctx); err != nil {
			return err
		}
		s.traffic(ctx, "charge", s.charges(short, full), nil)
		s.settleUnderFaults(ctx)
		return nil
	}
}

// crash arms a crash point so that every incarnation dies at its sixth hit:
// certain to fire, and each incarnation still gets five calls through.
func crash(point string) []string {
	return []string{"CHARGEFLOW_CRASHPOINTS=" + point + "=exit#6"}
}

// crashPerBatch arms a point that a worker hits once per settling
// transaction, not once per charge: the answers that arrive together
// commit in one (docs/architecture.md, "The outbox worker"), so a short run
// may make only a few. Every incarnation dies at its second: its first
// commits, and the second is certain to come while charges remain.
func crashPerBatch(point string) string {
	return point + "=exit#2"
}

// Catalogue lists every scenario, in the order `run all` runs them.
func Catalogue() []Scenario {
	return []Scenario{
		{
			Name:      "crash-after-provider-success",
			Summary:   "workers die after the provider charged and before the local save; reruns must not re-send",
			WorkerEnv: crash("worker.after_psp_response_before_save"),
			Run:       standard(20, 100),
			MustFire:  []string{"crashpoint:worker.after_psp_response_before_save"},
		},
		{
			Name:      "crash-after-submitting",
			Summary:   "workers die after committing submitting, before the call",
			WorkerEnv: crash("worker.after_submitting_commit"),
			Run:       standard(20, 100),
			MustFire:  []string{"crashpoint:worker.after_submitting_commit"},
		},
		{
			Name:      "crash-before-worker-commit",
			Summary:   "workers die with the provider's answer written but not committed",
			WorkerEnv: []string{"CHARGEFLOW_CRASHPOINTS=" + crashPerBatch("worker.after_save_before_commit")},
			Run:       standard(20, 100),
			MustFire:  []string{"crashpoint:worker.after_save_before_commit"},
		},
		{
			Name:     "refund-crash-after-provider-success",
			Summary:  "charges settle, then workers die after the provider refunded and before the local save; reruns must not refund again",
			Run:      refundsUnderCrash(30, 100, crash("worker.after_psp_response_before_save")...),
			MustFire: []string{"crashpoint:worker.after_psp_response_before_save", "refunds:found"},
		},
		{
			Name:     "refund-crash-after-submitting",
			Summary:  "charges settle, then workers die after committing a refund's submitting, before the call",
			Run:      refundsUnderCrash(30, 100, crash("worker.after_submitting_commit")...),
			MustFire: []string{"crashpoint:worker.after_submitting_commit", "refunds:re-attempted"},
		},
		{
			Name: "capture-crash-after-provider-success",
			Summary: "charges authorized only settle, then each is captured or canceled while workers die after the provider applied it and before the save, " +
				"and one of two reconcilers after its lookup; reruns must not send it again",
			Reconcilers: 2,
			Run: operationsUnderCrash(30, 100, operateEach, armed{workers: crash("worker.after_psp_response_before_save"),
				reconciler: []string{"CHARGEFLOW_CRASHPOINTS=reconciler.after_lookup_before_update=exit#2"}}),
			MustFire: []string{"crashpoint:worker.after_psp_response_before_save", "crashpoint:reconciler.after_lookup_before_update", "captures:found"},
		},
		{
			Name: "capture-crash-after-submitting",
			Summary: "charges authorized only settle, then workers die after committing a capture's or cancel's submitting, before the call, " +
				"and one of two reconcilers after leasing the stranded ones",
			Reconcilers: 2,
			Run: operationsUnderCrash(30, 100, operateEach, armed{workers: crash("worker.after_submitting_commit"),
				reconciler: []string{"CHARGEFLOW_CRASHPOINTS=reconciler.after_lease=exit#2"}}),
			MustFire: []string{"crashpoint:worker.after_submitting_commit", "crashpoint:reconciler.after_lease", "captures:re-attempted"},
		},
		{
			Name:     "capture-crash-before-worker-commit",
			Summary:  "charges authorized only settle, then workers die with a capture's or cancel's answer written but not committed",
			Run:      operationsUnderCrash(30, 100, operateEach, armed{workers: []string{"CHARGEFLOW_CRASHPOINTS=" + crashPerBatch("worker.after_save_before_commit")}}),
			MustFire: []string{"crashpoint:worker.after_save_before_commit"},
		},
		{
			Name: "capture-crash-in-api",
			Summary: "charges authorized only settle, then one of two APIs dies inside the accept transaction of a capture or cancel, " +
				"the other after its commit, before the answer; the clients retry with the same key",
			APIs: 2,
			Run: operationsUnderCrash(30, 100, operateEach, armed{apis: [][]string{
				{"CHARGEFLOW_CRASHPOINTS=api.after_insert_before_commit=exit#3"},
				{"CHARGEFLOW_CRASHPOINTS=api.after_commit_before_response=exit#3"},
			}}),
			MustFire: []string{"crashpoint:api.after_insert_before_commit", "crashpoint:api.after_commit_before_response"},
		},
		{
			Name:     "captures-racing-cancels",
			Summary:  "a capture and a cancel of each held charge sent at once through two APIs: exactly one wins, the other is refused and stores nothing",
			APIs:     2,
			Workers:  2,
			Run:      capturesRacingCancels(30, 200),
			MustFire: []string{"race:capture_won", "race:cancel_won", "race:" + codeOperationInProgress},
		},
		holdExpiresDuringCapture(),
		{
			Name:     "crash-inside-accept",
			Summary:  "the API dies inside the accept transaction; clients retry with the same key",
			APIEnv:   []string{"CHARGEFLOW_CRASHPOINTS=api.after_insert_before_commit=exit#6"},
			Run:      standard(20, 100),
			MustFire: []string{"crashpoint:api.after_insert_before_commit"},
		},
		{
			Name:     "duplicates-2",
			Summary:  "two concurrent requests per key",
			Run:      concurrentDuplicates(2, 50, 500),
			MustFire: []string{"replays"},
			AllowedStatus: func(status int) bool {
				return status == http.StatusCreated || status == http.StatusConflict || status == http.StatusBadRequest
			},
		},
		{
			Name:     "duplicates-200",
			Summary:  "two hundred concurrent requests with one key: one charge, one provider call, no 5xx",
			Run:      concurrentDuplicates(200, 1, 5),
			MustFire: []string{"replays"},
			AllowedStatus: func(status int) bool {
				return status == http.StatusCreated || status == http.StatusConflict || status == http.StatusBadRequest
			},
		},
		{
			Name:     "key-reuse-different-body",
			Summary:  "a key reused with a different body is refused (422) and changes nothing",
			Run:      keyReuse(20, 200),
			MustFire: []string{"refusals:422"},
		},
		{
			Name:     "client-timeout-retry",
			Summary:  "the server commits but answers after the client gave up; the client's retry with the same key gets the stored answer",
			APIEnv:   []string{"CHARGEFLOW_CRASHPOINTS=api.after_commit_before_response=pause:4s#3"},
			Run:      standard(20, 200),
			MustFire: []string{"crashpoint:api.after_commit_before_response"},
		},
		{
			Name:     "retry-long-after-timeout",
			Summary:  "a client times out, waits far longer than any timeout, and retries: the stored answer, not a second charge",
			APIEnv:   []string{"CHARGEFLOW_CRASHPOINTS=api.after_commit_before_response=pause:4s"},
			Run:      retryLongAfter,
			MustFire: []string{"crashpoint:api.after_commit_before_response", "late_retries"},
		},
		webhooksReceiverDown(),
		webhooksReceiverErrors(),
		webhooksCrash(),
		clockSkewScenario(),
		{
			Name:    "lookup-unavailable-then-back",
			Summary: "the provider's lookups fail for a while; unknown charges wait (no re-send, no failure), then resolve",
			Faults: `{"seed": 11, "rules": [{"on": "charge", "fault": "apply_then_timeout", "p": 0.4, "ms": 1500},
				{"on": "lookup", "fault": "unavailable", "p": 1}]}`,
			Run:      lookupOutage,
			MustFire: []string{"fault:apply_then_timeout", "fault:unavailable"},
		},
		{
			Name:        "reconciler-lease-expiry",
			Summary:     "two reconcilers; one stalls after its lookup past its lease; the other resolves, the stale write is fenced",
			Faults:      `{"seed": 13, "rules": [{"on": "charge", "fault": "apply_then_timeout", "p": 0.5, "ms": 1500}]}`,
			Reconcilers: 2,
			// Reconciler 0 ticks fast and takes the charges first, then
			// stalls past its 1 s lease after every lookup; reconciler 1
			// ticks slowly and takes over what 0 lost.
			ReconcilerFlagsFor: func(i int) []string {
				if i == 0 {
					return []string{"--lease-ttl", "1s", "--interval", "50ms"}
				}
				return []string{"--lease-ttl", "1s", "--interval", "700ms"}
			},
			ReconcilerEnvFor: func(i int) []string {
				if i == 0 {
					return []string{"CHARGEFLOW_CRASHPOINTS=reconciler.after_lookup_before_update=pause:2500ms"}
				}
				return nil
			},
			Run:      leaseExpiry,
			MustFire: []string{"crashpoint:reconciler.after_lookup_before_update", "fenced_refusals"},
		},
		{
			Name:     "delayed-apply",
			Summary:  "the provider applies charges after the client gave up; the apply window outlasts the delay",
			Faults:   `{"seed": 17, "rules": [{"on": "charge", "fault": "delayed_apply", "p": 0.4, "ms": 1500}]}`,
			Run:      standard(30, 300),
			MustFire: []string{"fault:delayed_apply"},
		},
		{
			Name:     "error-after-apply",
			Summary:  "the provider applies, then answers 500 (and replays the 500): only a lookup can tell",
			Faults:   `{"seed": 19, "rules": [{"on": "charge", "fault": "error_after_apply", "p": 0.4}]}`,
			Run:      standard(30, 300),
			MustFire: []string{"fault:error_after_apply"},
		},
		providerOutage(),
		{
			Name:            "postgres-restart",
			Summary:         "PostgreSQL shut down in immediate mode mid-run and restarted",
			PrivatePostgres: true,
			Faults:          `{"seed": 23, "rules": [{"on": "charge", "fault": "apply_then_timeout", "p": 0.2, "ms": 1500}]}`,
			Run:             postgresRestart,
			MustFire:        []string{"postgres:restart"},
		},
		{
			Name:            "soak",
			Summary:         "workers and reconcilers killed every fraction of a second, the API now and then, every provider fault, PostgreSQL crashed once",
			PrivatePostgres: true,
			Workers:         3,
			Reconcilers:     2,
			Faults:          soakFaults(),
			Run:             soak,
			MustFire:        soakMustFire(),
		},
		{
			Name:        "failover",
			Summary:     "a primary and a synchronous standby under pg_auto_failover; the primary node SIGKILLed mid-load, the standby promoted, traffic goes on",
			HAPostgres:  true,
			Workers:     2,
			Reconcilers: 2,
			Faults:      `{"seed": 29, "rules": [{"on": "charge", "fault": "apply_then_timeout", "p": 0.1, "ms": 1500}]}`,
			Run:         failoverRun(300, 3000),
			MustFire:    []string{"failover:primary_killed", "failover:promoted", "failover:river_leader"},
		},
		{
			Name:        "soak-replicas",
			Summary:     "the soak with two APIs behind a round-robin client, three workers and two reconcilers, each killed at random, and a failover of PostgreSQL instead of its restart",
			HAPostgres:  true,
			APIs:        2,
			Workers:     3,
			Reconcilers: 2,
			Faults:      soakFaults(),
			Run:         soak,
			MustFire:    replicasMustFire(),
			FullOnly:    true,
		},
		partitionPrimary(),
		partitionProvider(),
		partitionAPIDB(),
		partitionFlap(),
		{
			Name:      "negative-control",
			Summary:   "a deliberately broken worker re-sends on rerun; the checker must catch the double charge",
			WorkerEnv: append(crash("worker.after_psp_response_before_save"), "CHARGEFLOW_BROKEN=resend_on_rerun"),
			// Let River's rescue rerun the job, as the bug needs, instead of
			// the reconciler taking the stale charge first.
			ReconcilerFlagsFor: func(int) []string { return []string{"--stale-margin", "1h"} },
			Run:                standard(20, 20),
			MustFire:           []string{"crashpoint:worker.after_psp_response_before_save"},
			ExpectViolation:    true,
			Slow:               true,
		},
		{
			Name:    "refund-negative-control",
			Summary: "the broken worker of negative-control, armed once the charges settled: the checker must catch the double refund",
			// As negative-control; restartWith adds the crash point and the
			// broken mode once the charges have settled.
			ReconcilerFlagsFor: func(int) []string { return []string{"--stale-margin", "1h"} },
			Run:                refundsUnderCrash(20, 20, append(crash("worker.after_psp_response_before_save"), "CHARGEFLOW_BROKEN=resend_on_rerun")...),
			MustFire:           []string{"crashpoint:worker.after_psp_response_before_save"},
			ExpectViolation:    true,
			Slow:               true,
		},
		{
			Name: "capture-negative-control",
			Summary: "the broken worker of negative-control, armed once the authorizations settled, and a provider that captures an authorization " +
				"in several parts: the checker must catch the capture made twice",
			ProviderFlags: []string{"--multiple-captures"},
			// As negative-control; operationsUnderCrash adds the crash point
			// and the broken mode once the authorizations have settled.
			ReconcilerFlagsFor: func(int) []string { return []string{"--stale-margin", "1h"} },
			Run: operationsUnderCrash(20, 20, func(s *system) func(context.Context, string, string, int64) bool { return s.operateThird },
				armed{workers: append(crash("worker.after_psp_response_before_save"), "CHARGEFLOW_BROKEN=resend_on_rerun")}),
			MustFire:        []string{"crashpoint:worker.after_psp_response_before_save"},
			ExpectViolation: true,
			MustCatch:       []string{InvariantCapturedOnce},
			Slow:            true,
		},
		providerOutageNegativeControl(),
		{
			Name:    "history-negative-control",
			Summary: "every replay is answered 409 request_in_progress, as if the key's first request still held it: the history check must catch it",
			// Nothing is lost or doubled and the library retries a 409, so
			// only what the client saw shows the lie.
			BrokenReplays:   true,
			Run:             standard(20, 20),
			MustFire:        []string{"broken:replay_in_progress"},
			ExpectViolation: true,
			MustCatch:       []string{InvariantHistory},
		},
	}
}

// Find returns the scenario with the name.
func Find(name string) (Scenario, bool) {
	for _, sc := range Catalogue() {
		if sc.Name == name {
			return sc, true
		}
	}
	return Scenario{}, false
}

// Groups name sets of scenarios `run` takes as one name.
var Groups = map[string]func(Scenario) bool{
	"partitions": func(sc Scenario) bool { return sc.Partitions },
}

// Group returns the scenarios of a group, in the catalogue's order.
func Group(name string) ([]Scenario, bool) {
	in, ok := Groups[name]
	if !ok {
		return nil, false
	}
	var out []Scenario
	for _, sc := range Catalogue() {
		if in(sc) {
			out = append(out, sc)
		}
	}
	return out, true
}

// refundsUnderCrash sends charges with the workers' crash point disarmed
// and waits for them to settle; then it restarts the workers with env (the
// crash point armed, a broken mode) and refunds every charge, so that every
// crash cuts a refund. A crash point is armed per process by its environment
// at start and knows nothing of kinds: arming it once the charges are
// settled is what aims it at refunds.
func refundsUnderCrash(short, full int, env ...string) func(ctx context.Context, s *system) error {
	return func(ctx context.Context, s *system) error {
		charges := s.ackedTraffic(ctx, s.charges(short, full), func(i int) request { return s.request("charge", i) })
		if !s.waitConverged(ctx, s.t.convergenceBound()) {
			return errors.New("the charges did not settle before the crash point was armed")
		}
		if err := s.restartWith(ctx, s.workers, env...); err != nil {
			return err
		}
		return s.laterAll(ctx, charges, s.refund, "charges to refund had every refund answered")
	}
}

// concurrentDuplicates sends `copies` concurrent requests for each of n keys.
func concurrentDuplicates(copies, short, full int) func(ctx context.Context, s *system) error {
	return func(ctx context.Context, s *system) error {
		if err := s.rejectCard(ctx); err != nil {
			return err
		}
		for i := range s.charges(short, full) {
			r := s.request("dup", i)
			var wg sync.WaitGroup
			for range copies {
				wg.Go(func() { s.client.post(ctx, r) })
			}
			wg.Wait()
		}
		s.mu.Lock()
		s.fired["replays"] += s.client.sent - s.client.ackedCount()
		s.mu.Unlock()
		return nil
	}
}

// keyReuse sends each charge, then the same key with a different amount,
// which must be refused with 422.
func keyReuse(short, full int) func(ctx context.Context, s *system) error {
	return func(ctx context.Context, s *system) error {
		n := s.charges(short, full)
		s.traffic(ctx, "reuse", n, nil)
		for i := range n {
			other := chargeflow.ChargeParams{Amount: 1, Currency: "USD", PaymentMethod: "pm_card_visa", Description: canaryDescription(s.seed)}
			status, _, _ := s.client.send(ctx, charge(s.key("reuse", i), other))
			if status != http.StatusUnprocessableEntity {
				return fmt.Errorf("key %d reused with another body got %d, not 422", i, status)
			}
			s.mu.Lock()
			s.fired["refusals:422"]++
			s.mu.Unlock()
		}
		return nil
	}
}

// retryLongAfter: the first attempt of each charge times out on the client
// (the API pauses after committing), the client waits far longer than any
// timeout, then retries with the same key.
func retryLongAfter(ctx context.Context, s *system) error {
	n := s.charges(5, 20)
	wait := 10 * time.Second
	if !s.runner.cfg.Short {
		wait = time.Minute
	}
	var wg sync.WaitGroup
	for i := range n {
		r := s.request("late", i)
		wg.Go(func() {
			status, body, _ := s.client.send(ctx, r)
			if status == http.StatusCreated {
				s.client.recordAck(r, body)
			}
			if status != 0 {
				return // answered in time: nothing late to retry
			}
			time.Sleep(wait)
			if s.client.post(ctx, r).status == http.StatusCreated {
				s.mu.Lock()
				s.fired["late_retries"]++
				s.mu.Unlock()
			}
		})
	}
	wg.Wait()
	return nil
}

// lookupOutage keeps lookups failing for a while with charges waiting in
// unknown, checks nothing was re-sent or failed meanwhile, then heals.
func lookupOutage(ctx context.Context, s *system) error {
	s.traffic(ctx, "outage", s.charges(30, 300), nil)
	time.Sleep(s.t.applyWindow() + 2*time.Second)
	var reattempted, failedAfterUnknown int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE reason = 'proven_not_found'),
		count(*) FILTER (WHERE from_state = 'unknown' AND to_state = 'failed') FROM charge_audit`).Scan(&reattempted, &failedAfterUnknown); err != nil {
		return err
	}
	if reattempted > 0 || failedAfterUnknown > 0 {
		return fmt.Errorf("while lookups failed, %d charges were re-attempted and %d failed without proof", reattempted, failedAfterUnknown)
	}
	return nil
}

func (t timings) applyWindow() time.Duration {
	return t.callTimeout + t.maxApplyDelay + t.applyMargin
}

// postgresRestart sends traffic while PostgreSQL crashes and comes back.
func postgresRestart(ctx context.Context, s *system) error {
	return s.midTraffic(ctx, "pg", s.charges(200, 2000), func() error {
		return s.crashPostgres(ctx, 2*time.Second)
	})
}

// leaseExpiry runs the traffic, then waits until a stalled reconciler has
// woken up and had its stale write refused (or a minute passed).
func leaseExpiry(ctx context.Context, s *system) error {
	if err := standard(30, 300)(ctx, s); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		n, err := countInLogs(s.dir, `"msg":"fenced write refused`)
		if err != nil || n > 0 {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}
