package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/route"
)

// The routed scenarios (Scenario.Routed) run two fake providers behind one
// tenant's route (docs/routing.md): the account "primary" on the first
// provider, the one the scenario's faults and outage act on, then
// "secondary" on the second. Both providers keep their de-duplication off,
// as in every scenario, and nothing de-duplicates across them: only a move
// made on proof keeps a charge from being taken by both.
const (
	primaryAccount   = "primary"
	secondaryAccount = "secondary"
	// providerKeyEnv names the variable every process reads the accounts'
	// API key from (their credential_env); providerKey is a test key both
	// protocols of the fake accept.
	providerKeyEnv = "SCENARIO_PROVIDER_API_KEY"
	providerKey    = "sk_test_chargeflow_scenario_accounts"
)

// secondaryKind is the second provider's protocol: Adyen's, whose only
// lookup is a re-send, unlike the first's (fake or Stripe, as --psp says),
// so a charge fails over from a provider it is looked up at to one it is
// re-sent to.
const secondaryKind = route.KindAdyen

// accountKinds are the protocols of the two providers: the run's (--psp)
// for the first, so that both protocols take the outage in turn, and
// secondaryKind for the second, or the other of fake and stripe when that
// is the first's.
func (s *system) accountKinds() (primary, secondary route.Kind) {
	primary = route.Kind(cmp.Or(s.runner.cfg.PSP, string(route.KindFake)))
	secondary = secondaryKind
	if secondary == primary {
		secondary = map[route.Kind]route.Kind{route.KindFake: route.KindStripe, route.KindStripe: route.KindFake}[primary]
	}
	return primary, secondary
}

// speaks reports whether a provider of the run speaks kind.
func (s *system) speaks(kind route.Kind) bool {
	primary, secondary := s.accountKinds()
	return primary == kind || s.sc.Routed && secondary == kind
}

// account is the account a provider of the run is, as route.AddAccount
// takes it.
func account(name string, kind route.Kind, endpoint string) route.Account {
	a := route.Account{Name: name, Kind: kind, Endpoint: endpoint}
	if kind != route.KindFake {
		a.CredentialEnv = providerKeyEnv
	}
	if kind == route.KindAdyen {
		// Adyen's base URL names the API's version.
		a.MerchantAccount, a.Endpoint = "ChargeflowScenario", endpoint+"/v71"
	}
	return a
}

// routeThroughAccounts starts the second provider, makes an account of
// each provider and routes the tenant through them, first to second.
func (s *system) routeThroughAccounts(ctx context.Context, tenantID string) error {
	primary, secondary := s.accountKinds()
	// Every fake runs with its de-duplication off, so that only chargeflow
	// stands between a retry and a double charge — but for one whose only
	// lookup is a re-send (Adyen's), where the re-send is safe exactly
	// because the provider de-duplicates its key: that is the capability
	// the adapter declares (its key window), and without it every re-send
	// charges anew.
	args := []string{"fakepsp", "--addr", s.listenAddr("fakepsp-2"), "--protocol", string(secondary),
		"--ledger", filepath.Join(s.dir, "ledger-2.jsonl")}
	if secondary != route.KindAdyen {
		args = append(args, "--no-dedupe")
	}
	s.psp2 = s.newProc("fakepsp-2", args...)
	s.psp2.env = s.env()
	if err := s.psp2.start(ctx, true); err != nil {
		return err
	}
	for _, a := range []route.Account{account(primaryAccount, primary, s.psp.url()), account(secondaryAccount, secondary, s.psp2.url())} {
		if _, err := route.AddAccount(ctx, s.pool, a); err != nil {
			return err
		}
	}
	if err := route.SetRoute(ctx, s.pool, tenantID, []route.Entry{{Account: primaryAccount}, {Account: secondaryAccount}}); err != nil {
		return err
	}
	s.logf("tenant routed through %s (%s, %s) then %s (%s, %s)", primaryAccount, primary, s.psp.url(), secondaryAccount, secondary, s.psp2.url())
	return nil
}

// breakerFlags make a routed run's workers find a provider failing on the
// scenario's time scale: three failures in a row open a breaker, for a
// second, after which a call goes through again.
var breakerFlags = []string{"--breaker-failures", "3", "--breaker-open-for", "1s", "--breaker-window", "5s", "--breaker-min-calls", "10"}

// steadyAddr is a loopback address for a server that must come back on it
// after being stopped: a free port below the ephemeral range, which no
// outgoing connection, nor a listener on port 0, takes meanwhile.
func steadyAddr() (string, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if fields := strings.Fields(string(b)); len(fields) > 0 {
			low, _ = strconv.Atoi(fields[0])
		}
	}
	first := 20000
	if low-first < 1000 {
		first = 1024
	}
	if low-first < 1000 {
		return "", fmt.Errorf("the ephemeral ports start at %d: no room below them for a provider that must keep its port", low)
	}
	for range 100 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(first+rand.IntN(low-first)))
		l, err := net.Listen("tcp", addr)
		if err == nil {
			return addr, l.Close()
		}
	}
	return "", errors.New("no free port below the ephemeral range")
}

// ledgers reads the ledger of every provider of the run, each with the
// accounts it answers for (none with a single provider: every row's).
func (s *system) ledgers(ctx context.Context) ([]Ledger, error) {
	// Every charge, declines and released holds too: a held or released
	// charge is judged against the provider's authorization.
	first, err := fakepsp.FetchLedger(ctx, s.psp.url(), true)
	if err != nil {
		return nil, err
	}
	if !s.sc.Routed {
		return []Ledger{{Name: "the provider", Entries: first}}, nil
	}
	second, err := fakepsp.FetchLedger(ctx, s.psp2.url(), true)
	if err != nil {
		return nil, err
	}
	return []Ledger{
		{Name: "the first provider", Accounts: []string{primaryAccount}, Entries: first},
		{Name: "the second provider", Accounts: []string{secondaryAccount}, Entries: second},
	}, nil
}

// routeFired counts what the routed run's charges went through:
// "route:rerouted", their moves to the next account, and of those
// "route:rerouted_after_not_found", the moves that rest on a lookup's
// proven not-found; "route:unknown_resolved_at_primary", the charges whose
// outcome at the first account was unknown and was proven there (they never
// moved); "broken:reroute_on_timeout", the negative control's moves on a
// timeout.
func (s *system) routeFired(ctx context.Context, fired map[string]int) error {
	var rerouted, afterNotFound, resolved, broken int
	err := s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM charge_audit WHERE action = $1),
		(SELECT count(*) FROM charge_audit WHERE action = $1 AND evidence LIKE '%proven_not_found%'),
		(SELECT count(*) FROM charges c WHERE c.kind = 'charge' AND c.provider = $2 AND c.state IN ('succeeded', 'failed')
			AND EXISTS (SELECT 1 FROM charge_audit a WHERE a.charge_id = c.id AND a.to_state = 'unknown')),
		(SELECT count(*) FROM charge_audit WHERE reason = $3)`,
		intent.ActionReroute, primaryAccount, "not_applied:broken_reroute_on_timeout").Scan(&rerouted, &afterNotFound, &resolved, &broken)
	if err != nil {
		return fmt.Errorf("count the reroutes: %w", err)
	}
	fired["route:rerouted"], fired["route:rerouted_after_not_found"] = rerouted, afterNotFound
	fired["route:unknown_resolved_at_primary"], fired["broken:reroute_on_timeout"] = resolved, broken
	return nil
}

// InvariantOutageServed: in provider-outage, charges accepted while the
// first provider was down or failing succeeded at the second — the point
// of a route through two providers.
const InvariantOutageServed = "succeeded_during_outage"

// outagePhases are when provider-outage's phases began, by the database's
// clock (the clock the audit trail's times are in).
type outagePhases struct {
	healthy, refusing, failing, healed time.Time
}

// outageTimings are provider-outage's phase lengths and traffic.
type outageTimings struct {
	healthy, refusing, failing, healed time.Duration
	clients                            int
	pace                               time.Duration // each client's pause between charges
}

func (s *system) outageTimings() outageTimings {
	if s.runner.cfg.Short {
		return outageTimings{healthy: 3 * time.Second, refusing: 6 * time.Second, failing: 8 * time.Second, healed: 3 * time.Second,
			clients: 6, pace: 500 * time.Millisecond}
	}
	return outageTimings{healthy: 10 * time.Second, refusing: 20 * time.Second, failing: 30 * time.Second, healed: 10 * time.Second,
		clients: 12, pace: 250 * time.Millisecond}
}

// failingFaults are the first provider's faults once it answers again:
// three charges in four fail, a quarter of them each way — answered 500
// before applying anything, applied then answered 500, applied with the
// answer lost (held past the call timeout). The first rule that fires
// applies, so each later rule's p is of what the earlier ones left.
var failingFaults = []fakepsp.Rule{
	{On: fakepsp.OnCharge, Fault: fakepsp.FaultErrorBeforeApply, P: 0.25},
	{On: fakepsp.OnCharge, Fault: fakepsp.FaultErrorAfterApply, P: 1.0 / 3},
	{On: fakepsp.OnCharge, Fault: fakepsp.FaultApplyThenTimeout, P: 0.5, MS: 1500},
}

func providerOutage() Scenario {
	mustFire := []string{"outage:refusing", "outage:failing", "outage:healed", "kill:worker", "kill:reconciler",
		"route:rerouted", "route:unknown_resolved_at_primary"}
	for _, rule := range failingFaults {
		mustFire = append(mustFire, "fault:"+rule.Fault)
	}
	return Scenario{
		Name: "provider-outage",
		Summary: "two providers of different protocols behind one route; the first refuses connections, then answers 500 and loses answers, " +
			"while workers and reconcilers are killed: each charge taken at most once across both, charges still succeeding during the outage",
		Routed:      true,
		Workers:     2,
		Reconcilers: 2,
		Run:         outageRun,
		MustFire:    mustFire,
	}
}

func providerOutageNegativeControl() Scenario {
	return Scenario{
		Name:    "provider-outage-negative-control",
		Summary: "a deliberately broken worker takes a lost answer for proof and sends the charge to the second provider: the checker must catch the charge taken by both",
		Routed:  true,
		Workers: 2,
		// The first provider applies half the charges and loses the answer;
		// the broken worker (CHARGEFLOW_BROKEN=reroute_on_timeout) moves each
		// to the second, which takes it again.
		Faults:          `{"rules": [{"on": "charge", "fault": "apply_then_timeout", "p": 0.5, "ms": 1500}]}`,
		WorkerEnv:       []string{"CHARGEFLOW_BROKEN=reroute_on_timeout"},
		Run:             standard(40, 100),
		MustFire:        []string{"fault:apply_then_timeout", "broken:reroute_on_timeout", "route:rerouted"},
		ExpectViolation: true,
		MustCatch:       []string{InvariantOnceAcrossProviders},
	}
}

// outageRun sends charges at a steady pace through four phases while a
// worker and a reconciler are killed in turn, one every 1.5–3 s: healthy; the first
// provider stopped (every connection to it refused); the first provider
// back on its address, with its ledger, answering 500 and losing answers;
// healed. Then it lets every charge settle.
func outageRun(ctx context.Context, s *system) error {
	if err := s.rejectCard(ctx); err != nil {
		return err
	}
	t := s.outageTimings()
	var phases outagePhases
	mark := func(at *time.Time, name string) error {
		if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(at); err != nil {
			return fmt.Errorf("read the database's clock: %w", err)
		}
		if name != "" {
			s.fire("outage:" + name)
			s.logf("outage: %s", name)
		}
		return nil
	}
	if err := mark(&phases.healthy, ""); err != nil {
		return err
	}
	stopTraffic := s.steadyTraffic(ctx, "outage", t.clients, t.pace)
	// A worker, then a reconciler, and so on: both roles die in every
	// run, at any phase.
	stopChaos := s.killInTurn(ctx, s.workers, s.reconcilers)
	err := s.outagePhases(ctx, t, &phases, mark)
	stopChaos()
	sent := stopTraffic()
	s.mu.Lock()
	s.outage = &phases
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if got := s.client.ackedCount(); got < sent {
		return fmt.Errorf("only %d of %d charges were acknowledged; the clients gave up on the rest", got, sent)
	}
	s.logf("%d charges sent through the outage", sent)
	s.settleUnderFaults(ctx)
	return nil
}

// outagePhases takes the first provider through its outage, marking when
// each phase began.
func (s *system) outagePhases(ctx context.Context, t outageTimings, phases *outagePhases, mark func(*time.Time, string) error) error {
	if !sleepCtx(ctx, t.healthy) {
		return ctx.Err()
	}
	// What fired so far, before the provider that counted it goes.
	if err := s.harvestFaults(ctx); err != nil {
		return err
	}
	s.psp.kill()
	if err := mark(&phases.refusing, "refusing"); err != nil {
		return err
	}
	if !sleepCtx(ctx, t.refusing) {
		return ctx.Err()
	}
	// Back on its address, with its ledger: the accounts' endpoint and
	// every charge it took are where they were.
	if err := s.psp.start(ctx, true); err != nil {
		return fmt.Errorf("start the first provider again: %w", err)
	}
	if err := s.setFaults(ctx, fakepsp.Schedule{Seed: int64(s.seed % (1 << 53)), Rules: failingFaults}); err != nil {
		return err
	}
	if err := mark(&phases.failing, "failing"); err != nil {
		return err
	}
	if !sleepCtx(ctx, t.failing) {
		return ctx.Err()
	}
	if err := s.setFaults(ctx, fakepsp.Schedule{Seed: 1}); err != nil {
		return err
	}
	if err := mark(&phases.healed, "healed"); err != nil {
		return err
	}
	if !sleepCtx(ctx, t.healed) {
		return ctx.Err()
	}
	return nil
}

// steadyTraffic sends charges named name from clients concurrent clients,
// each pausing pace between its charges, until the function it returns is
// called; that waits for the charges in flight to be answered and says how
// many were sent.
func (s *system) steadyTraffic(ctx context.Context, name string, clients int, pace time.Duration) (stop func() int) {
	var sent atomic.Int64
	stopped := make(chan struct{})
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				select {
				case <-stopped:
					return
				case <-ctx.Done():
					return
				default:
				}
				s.client.post(ctx, s.request(name, int(sent.Add(1)-1)))
				select {
				case <-stopped:
					return
				case <-ctx.Done():
					return
				case <-time.After(pace):
				}
			}
		})
	}
	return func() int {
		close(stopped)
		wg.Wait()
		return int(sent.Load())
	}
}

// checkOutage judges provider-outage's phases once every charge settled:
// of the charges accepted while the first provider was down or failing
// ("outage:accepted"), some must have succeeded at the second
// ("outage:succeeded_at_secondary"). It shows how long the first provider
// was stopped, then failing, and times the first success at the second
// from the stop.
func (s *system) checkOutage(ctx context.Context, rep *Report) ([]Violation, error) {
	s.mu.Lock()
	phases := s.outage
	s.mu.Unlock()
	if phases == nil || phases.healed.IsZero() {
		return nil, nil
	}
	// A charge was accepted when its creation entry was written, by the
	// database's clock.
	var accepted, served int
	var first *time.Time
	err := s.pool.QueryRow(ctx, `WITH accepted AS (
			SELECT c.id, c.state, c.provider FROM charges c
			JOIN charge_audit a ON a.charge_id = c.id AND a.from_state IS NULL AND a.action IS NULL
			WHERE c.kind = 'charge' AND a.created_at >= $1 AND a.created_at < $2)
		SELECT count(*), count(*) FILTER (WHERE state = 'succeeded' AND provider = $3),
			(SELECT min(a.created_at) FROM charge_audit a JOIN charges c ON c.id = a.charge_id
				WHERE c.provider = $3 AND a.to_state = 'succeeded' AND a.created_at >= $1)
		FROM accepted`, phases.refusing, phases.healed, secondaryAccount).Scan(&accepted, &served, &first)
	if err != nil {
		return nil, fmt.Errorf("count the charges accepted during the outage: %w", err)
	}
	rep.Fired["outage:accepted"], rep.Fired["outage:succeeded_at_secondary"] = accepted, served
	if rep.Measured == nil {
		rep.Measured = map[string]time.Duration{}
	}
	rep.Measured["first provider stopped"] = phases.failing.Sub(phases.refusing)
	rep.Measured["first provider failing"] = phases.healed.Sub(phases.failing)
	if first != nil {
		rep.Measured["stop→first success at secondary"] = first.Sub(phases.refusing)
	}
	if served == 0 {
		return []Violation{{InvariantOutageServed, "", fmt.Sprintf(
			"of the %d charges accepted while the first provider was down or failing, none succeeded at the second", accepted)}}, nil
	}
	return nil, nil
}
