package scenario

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/internal/childproc"
	"github.com/chargeflow/chargeflow/route"
)

// Config configures a Runner.
type Config struct {
	// Binary is the chargeflow binary every process is started from.
	Binary string
	// Env is the environment children inherit (chargeflow's own variables
	// in it are replaced).
	Env []string
	// DatabaseURL names the PostgreSQL server scenarios create their fresh
	// databases on.
	DatabaseURL string
	// PGScript is scripts/ensure-postgres, used by the scenarios that
	// crash and restart a PostgreSQL of their own.
	PGScript string
	// Dir is where each run's folder (process logs, private cluster) goes.
	Dir string
	// Seed drives every random choice of a run: traffic, faults, crash
	// points, kills. The same seed replays the same schedule (timing and
	// the operating system still vary).
	Seed uint64
	// Short uses the short timings and charge counts of `make test`.
	Short bool
	// Charges and Duration, when set, override the soak's size and the
	// length of its chaos.
	Charges  int
	Duration time.Duration
	// Keep keeps databases, clusters and logs of passing runs too.
	Keep bool
	// PSP is the provider protocol every process speaks: "fake" (default,
	// the bundled protocol) or "stripe" (the fake provider serves Stripe's
	// API and the API, workers and reconcilers use the Stripe adapter).
	PSP string
	// Progress receives progress lines on long runs.
	Progress io.Writer
}

// Runner runs scenarios.
type Runner struct {
	cfg Config
}

// NewRunner checks cfg and fills its defaults.
func NewRunner(cfg Config) (*Runner, error) {
	if cfg.Binary == "" || cfg.DatabaseURL == "" {
		return nil, errors.New("scenario: Binary and DatabaseURL are required")
	}
	cfg.Dir = cmp.Or(cfg.Dir, os.TempDir())
	cfg.PGScript = cmp.Or(cfg.PGScript, "scripts/ensure-postgres")
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	// Scenarios run side by side, and each run's progress, convergence
	// and chaos print from goroutines of their own.
	cfg.Progress = &lockedWriter{w: cfg.Progress}
	return &Runner{cfg: cfg}, nil
}

// timings are the durations every process of a run is configured with.
// The convergence bound is derived from them.
type timings struct {
	callTimeout    time.Duration // worker and reconciler --call-timeout
	staleMargin    time.Duration
	applyMargin    time.Duration
	maxApplyDelay  time.Duration
	rescueAfter    time.Duration
	backoffCap     time.Duration // reconciler lookup backoff cap
	retryCap       time.Duration // worker retry cap
	interval       time.Duration // reconciler tick
	leaseTTL       time.Duration
	maxUnknownAge  time.Duration
	clientTimeout  time.Duration
	clientGiveUp   time.Duration
	keyWindow      time.Duration
	keyWindowGuard time.Duration
	historyCheck   time.Duration // porcupine's bound
}

func (r *Runner) timings() timings {
	return timings{
		callTimeout:    time.Second,
		staleMargin:    time.Second,
		applyMargin:    500 * time.Millisecond,
		maxApplyDelay:  2 * time.Second,
		rescueAfter:    7 * time.Second,
		backoffCap:     time.Second,
		retryCap:       300 * time.Millisecond,
		interval:       100 * time.Millisecond,
		leaseTTL:       5 * time.Second,
		maxUnknownAge:  2 * time.Minute,
		clientTimeout:  3 * time.Second,
		clientGiveUp:   5 * time.Minute,
		keyWindow:      time.Hour,
		keyWindowGuard: 10 * time.Minute,
		historyCheck:   time.Minute,
	}
}

// convergenceBound is how long, once faults stop, every charge may take to
// end terminal or in review. A charge whose job was running in a killed
// worker waits for River's rescuer (its rescue-after, plus the rescuer's 30 s
// interval and a leader election of up to 15 s); a charge left submitting
// waits call timeout + stale margin for the reconciler; an unknown one waits
// at most a lookup backoff and the apply window, then one more attempt
// (a call) and one more lookup round; plus ticks and a margin for a loaded
// machine.
func (t timings) convergenceBound() time.Duration {
	return t.rescueAfter + 30*time.Second + 15*time.Second +
		t.callTimeout + t.staleMargin + t.retryCap +
		2*(t.backoffCap+t.applyWindow()+t.callTimeout+t.interval) + 30*time.Second
}

// Run runs one scenario and reports. A violation is in the report, not an
// error; the error is for runs that could not be carried out.
func (r *Runner) Run(ctx context.Context, sc Scenario) (Report, error) {
	seed := r.cfg.Seed
	rep := Report{Scenario: sc.Name, Seed: seed, Fired: map[string]int{}, Counts: map[string]int{}}
	if sc.Partitions {
		// Without namespaces the scenario is not run, and says so: never
		// a pass.
		if err := netProbe(); err != nil {
			rep.NotRun = err.Error()
			return rep, nil
		}
	}
	dir, err := os.MkdirTemp(r.cfg.Dir, "chargeflow-scenario-"+sc.Name+"-")
	if err != nil {
		return rep, err
	}
	// The private PostgreSQL runs as an unprivileged user that must reach
	// its data folder inside this one.
	if err := os.Chmod(dir, 0o755); err != nil {
		return rep, err
	}
	rep.Dir = dir
	s := &system{
		runner:  r,
		sc:      sc,
		t:       r.timings(),
		dir:     dir,
		rnd:     rand.New(rand.NewPCG(seed, seed^0x5ca1ab1e)),
		seed:    seed,
		kills:   map[string]int{},
		fired:   map[string]int{},
		refunds: newRefunder(16),

		measured: map[string]time.Duration{},
		// Kept until the run is known to have passed: a run that fails
		// for any reason keeps the logs its error points to.
		keep: true,
	}
	defer s.shutdown()

	if err := s.provision(ctx); err != nil {
		return rep, err
	}
	if err := s.boot(ctx); err != nil {
		return rep, err
	}
	if sc.Webhooks != nil {
		if err := s.startReceiver(ctx); err != nil {
			return rep, err
		}
	}
	supervise, stopSupervising := context.WithCancel(ctx)
	var supervised sync.WaitGroup
	supervised.Go(func() { s.supervise(supervise) })

	started := time.Now()
	stopProgress := s.reportProgress(ctx, started)
	runErr := sc.Run(ctx, s)
	stopProgress()
	if runErr != nil && ctx.Err() != nil {
		stopSupervising()
		supervised.Wait()
		return rep, fmt.Errorf("scenario %s: %w", sc.Name, runErr)
	}
	// A scenario whose own steps failed (its clients gave up, a step it
	// needed could not be taken) is still calmed, converged and checked:
	// its report says what else was wrong, or that nothing was lost or
	// doubled, beside the failure.

	// Faults stop: the provider heals, crash points are disarmed, killed
	// processes come back. Then every charge must settle within the bound.
	if err := s.calm(ctx); err != nil {
		stopSupervising()
		supervised.Wait()
		return rep, err
	}
	calmAt := time.Now()
	bound := s.t.convergenceBound()
	converged := s.waitConverged(ctx, bound)
	rep.Converge = time.Since(calmAt)
	stopSupervising()
	supervised.Wait()
	s.client.replayAll(ctx)

	if err := s.check(ctx, &rep, converged, bound); err != nil {
		return rep, err
	}
	rep.Elapsed = time.Since(started)
	if sc.ExpectViolation {
		rep.Passed = runErr == nil && len(rep.Violations) > 0 && rep.firedAll(sc.MustFire) && len(uncaught(sc.MustCatch, rep)) == 0
	} else {
		rep.Passed = len(rep.Violations) == 0
	}
	if runErr != nil {
		rep.Violations = append([]Violation{{InvariantCompleted, "", runErr.Error()}}, rep.Violations...)
		rep.Counts[InvariantCompleted]++
		rep.Passed = false
	}
	s.keep = r.cfg.Keep || !rep.Passed
	return rep, nil
}

// system is one run: its database, processes, client and counters.
type system struct {
	runner *Runner
	sc     Scenario
	t      timings
	dir    string
	seed   uint64
	keep   bool

	rndMu sync.Mutex
	rnd   *rand.Rand

	dbURL   string
	drop    func(context.Context) error
	cluster *privateCluster
	ha      *haCluster
	pool    *pgxpool.Pool
	// lab is the network of a partition scenario (sc.Partitions): every
	// process in a namespace of its own, links that can be cut.
	lab *labNet

	psp *proc
	// psp2 is the second provider of a routed scenario (sc.Routed), and
	// outage the phases of provider-outage once it has run them.
	psp2   *proc
	outage *outagePhases
	// api is the first of apis, the API processes behind the client's
	// round robin (one unless the scenario asks for more).
	api         *proc
	apis        []*proc
	workers     []*proc
	reconcilers []*proc

	apiKey  string
	client  *client
	refunds *refunder
	// receiver is the merchant's webhook receiver, when sc.Webhooks.
	receiver *Receiver

	mu         sync.Mutex
	kills      map[string]int
	fired      map[string]int
	pgRestarts int
	// chaosOn is set while a soak kills processes; chaosEnded is when it
	// stopped (system.patient).
	chaosOn    bool
	chaosEnded time.Time
	// measured holds the durations a scenario measures (the failover's
	// kill to first accepted charge), shown with what fired.
	measured map[string]time.Duration
	probes   atomic.Int64
	// paused stops the supervisor from restarting processes (while
	// Postgres is down, or while a scenario restarts one itself).
	paused bool
}

// intn draws from the run's seeded source.
func (s *system) intn(n int) int {
	s.rndMu.Lock()
	defer s.rndMu.Unlock()
	return s.rnd.IntN(n)
}

func (s *system) float() float64 {
	s.rndMu.Lock()
	defer s.rndMu.Unlock()
	return s.rnd.Float64()
}

// lockedWriter lets goroutines write whole lines to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (s *system) logf(format string, args ...any) {
	fmt.Fprintf(s.runner.cfg.Progress, "[%s] "+format+"\n", append([]any{s.sc.Name}, args...)...)
}

// provision creates the run's database: fresh on the shared server, or on
// a private cluster when the scenario crashes Postgres.
func (s *system) provision(ctx context.Context) error {
	server := s.runner.cfg.DatabaseURL
	if s.sc.PrivatePostgres {
		script, err := filepath.Abs(s.runner.cfg.PGScript)
		if err != nil {
			return err
		}
		s.logf("starting a private PostgreSQL (it will be crashed on purpose)")
		if s.cluster, err = startPrivateCluster(ctx, script, filepath.Join(s.dir, "pg")); err != nil {
			return err
		}
		server = s.cluster.URL()
	}
	if s.sc.Partitions {
		if err := s.startNetwork(ctx); err != nil {
			return err
		}
	}
	if s.sc.HAPostgres {
		pgScript, err := filepath.Abs(s.runner.cfg.PGScript)
		if err != nil {
			return err
		}
		s.logf("starting PostgreSQL under pg_auto_failover: a monitor, a primary and its synchronous standby")
		s.ha, err = startHACluster(ctx, filepath.Join(filepath.Dir(pgScript), "ha-postgres"), filepath.Join(s.dir, "pg"), s.haNetwork())
		if err != nil {
			return err
		}
		server = s.ha.URL()
	}
	name := fmt.Sprintf("chargeflow_scenario_%s_%d_%d", strings.ReplaceAll(s.sc.Name, "-", "_"), s.seed, time.Now().UnixNano()%1e6)
	url, drop, err := childproc.FreshDatabase(ctx, server, name)
	if err != nil {
		return err
	}
	s.dbURL, s.drop = url, drop
	return nil
}

// env is the environment of a child: the runner's, with chargeflow's
// variables set for this run.
func (s *system) env(extra ...string) []string {
	var env []string
	for _, kv := range s.runner.cfg.Env {
		name, _, _ := strings.Cut(kv, "=")
		if name == "DATABASE_URL" || name == "PSP_URL" || name == "PSP_KIND" || name == "STRIPE_API_KEY" ||
			strings.HasPrefix(name, "CHARGEFLOW_") && name != "CHARGEFLOW_TEST_AS_MAIN" || name == "LOG_LEVEL" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "DATABASE_URL="+s.dbURL, "LOG_LEVEL=info")
	if s.psp != nil {
		env = append(env, "PSP_URL="+s.psp.url())
	}
	if s.runner.cfg.PSP == "stripe" {
		// A test key: the fake accepts any sk_test_ key.
		env = append(env, "PSP_KIND=stripe", "STRIPE_API_KEY=sk_test_chargeflow_scenario")
	}
	if s.sc.Routed {
		// The provider accounts' key, by the name they give (outage.go).
		env = append(env, providerKeyEnv+"="+providerKey)
	}
	return append(env, extra...)
}

func (s *system) newProc(name string, args ...string) *proc {
	h := fnv.New64a()
	h.Write([]byte(s.sc.Name + "/" + name))
	return &proc{name: name, bin: s.runner.cfg.Binary, args: args, log: filepath.Join(s.dir, name+".log"), seed: s.seed ^ h.Sum64(),
		netns: s.netnsOf(name)}
}

// boot migrates, creates the tenant and starts every process.
func (s *system) boot(ctx context.Context) error {
	if _, err := runOnce(ctx, s.runner.cfg.Binary, s.env(), filepath.Join(s.dir, "migrate.log"), "migrate"); err != nil {
		return err
	}
	out, err := runOnce(ctx, s.runner.cfg.Binary, s.env(), filepath.Join(s.dir, "tenant.log"), "tenant", "create", "--name", "scenario-"+s.sc.Name)
	if err != nil {
		return err
	}
	var created struct {
		TenantID string `json:"tenant_id"`
		APIKey   string `json:"api_key"`
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		return fmt.Errorf("tenant create printed %q: %w", out, err)
	}
	s.apiKey = created.APIKey
	poolCfg, err := pgxpool.ParseConfig(s.dbURL)
	if err != nil {
		return err
	}
	poolCfg.MaxConns = 2
	if s.pool, err = pgxpool.NewWithConfig(ctx, poolCfg); err != nil {
		return err
	}

	faults, err := seeded(cmp.Or(s.sc.Faults, `{"rules": []}`), s.seed)
	if err != nil {
		return fmt.Errorf("scenario %s: faults: %w", s.sc.Name, err)
	}
	addr := s.listenAddr("fakepsp")
	if s.sc.Routed {
		// The first provider is stopped and started again on its address,
		// the endpoint of its account.
		if addr, err = steadyAddr(); err != nil {
			return err
		}
	}
	s.psp = s.newProc("fakepsp", append([]string{"fakepsp", "--addr", addr, "--no-dedupe", "--protocol", cmp.Or(s.runner.cfg.PSP, "fake"),
		"--ledger", filepath.Join(s.dir, "ledger.jsonl"), "--faults", faults}, s.sc.ProviderFlags...)...)
	s.psp.env = s.env()
	if err := s.psp.start(ctx, true); err != nil {
		return err
	}
	if s.sc.Routed {
		if err := s.routeThroughAccounts(ctx, created.TenantID); err != nil {
			return err
		}
	}

	t := s.t
	// Small pools: several scenarios may share one server's max_connections.
	apiEnv, workerEnv, workerFlags := s.sc.APIEnv, s.sc.WorkerEnv, []string(nil)
	if s.sc.Webhooks != nil {
		apiEnv, workerEnv = append(slices.Clone(apiEnv), webhookEnv), append(slices.Clone(workerEnv), webhookEnv)
		workerFlags = webhookWorkerFlags
	}
	if s.sc.Routed {
		workerFlags = slices.Concat(workerFlags, breakerFlags)
	}
	for i := range cmp.Or(s.sc.APIs, 1) {
		name := apiName(i)
		api := s.newProc(name, "api", "--addr", s.listenAddr(name), "--lock-timeout", "500ms", "--max-conns", "8")
		api.env = s.env(apiEnv...)
		if err := api.start(ctx, true); err != nil {
			return err
		}
		s.apis = append(s.apis, api)
	}
	s.api = s.apis[0]
	for i := range cmp.Or(s.sc.Workers, 1) {
		w := s.newProc(workerName(i), append([]string{"worker",
			"--call-timeout", t.callTimeout.String(), "--rescue-after", t.rescueAfter.String(),
			"--retry-base", "50ms", "--retry-cap", t.retryCap.String(), "--unknown-check-after", "200ms", "--concurrency", "8",
			// Scenarios run side by side on one server's connections.
			"--max-conns", "8"},
			workerFlags...)...)
		w.env = s.env(workerEnv...)
		if err := w.start(ctx, false); err != nil {
			return err
		}
		s.workers = append(s.workers, w)
	}
	for i := range cmp.Or(s.sc.Reconcilers, 1) {
		args := []string{"reconciler", "--id", fmt.Sprintf("reconciler-%d", i),
			"--call-timeout", t.callTimeout.String(), "--stale-margin", t.staleMargin.String(),
			"--apply-margin", t.applyMargin.String(), "--max-apply-delay", t.maxApplyDelay.String(),
			"--interval", t.interval.String(), "--lease-ttl", t.leaseTTL.String(), "--lookup-rate", "2000",
			"--lookup-backoff-base", "100ms", "--lookup-backoff-cap", t.backoffCap.String(),
			"--max-unknown-age", t.maxUnknownAge.String(), "--max-attempts", "20",
			"--key-window", t.keyWindow.String(), "--key-window-margin", t.keyWindowGuard.String(), "--max-conns", "4"}
		if s.speaks(route.KindStripe) {
			// The fake shares this machine's clock: no skew to allow for,
			// and the soak creates hundreds of intents a second.
			args = append(args, "--stripe-clock-skew", "1s")
		}
		rec := s.newProc(reconcilerName(i), append(args, s.sc.ReconcilerFlags(i)...)...)
		rec.env = s.env(s.sc.ReconcilerEnv(i)...)
		if err := rec.start(ctx, false); err != nil {
			return err
		}
		s.reconcilers = append(s.reconcilers, rec)
	}
	s.client = newClient(roundRobin(s.apis), s.apiKey, t.clientTimeout, t.clientGiveUp, s.refunds.slots)
	s.client.breakReplays.Store(s.sc.BrokenReplays)
	for _, api := range s.apis {
		if err := childproc.WaitReady(ctx, api.url()); err != nil {
			return err
		}
	}
	return nil
}

// isAPI reports whether p is one of the API processes (which listen).
func (s *system) isAPI(p *proc) bool { return slices.Contains(s.apis, p) }

// processes lists every long-running process but the provider.
func (s *system) processes() []*proc {
	return append(append(slices.Clone(s.apis), s.workers...), s.reconcilers...)
}

// supervise restarts processes that died (a crash point that exits, a
// kill) until ctx is done, as an orchestrator would.
func (s *system) supervise(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
		s.mu.Lock()
		paused := s.paused
		s.mu.Unlock()
		if paused {
			continue
		}
		for _, p := range s.processes() {
			if !p.running() {
				if err := p.start(ctx, s.isAPI(p)); err != nil && ctx.Err() == nil {
					s.logf("restart %s: %v", p.name, err)
				}
			}
		}
	}
}

// kill SIGKILLs a process; the supervisor restarts it.
func (s *system) kill(p *proc, role string) {
	p.kill()
	s.mu.Lock()
	s.kills[role]++
	s.mu.Unlock()
}

// setFaults replaces the provider's schedule, first harvesting how often
// the old one's faults fired.
func (s *system) setFaults(ctx context.Context, schedule fakepsp.Schedule) error {
	if err := s.harvestFaults(ctx); err != nil {
		return err
	}
	return fakepsp.SetFaults(ctx, s.psp.url(), schedule)
}

// harvestFaults adds how often each fault of the schedule in force fired to
// the run's counts. The provider resets its counters with every new
// schedule, so this runs before each replacement and once at the end.
func (s *system) harvestFaults(ctx context.Context) error {
	state, err := fakepsp.FetchFaults(ctx, s.psp.url())
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, n := range state.Fired {
		s.fired["fault:"+name] += n
	}
	return nil
}

// calm ends the chaos: no provider faults, crash points disarmed (every
// process restarted without them), nothing paused.
func (s *system) calm(ctx context.Context) error {
	if err := s.setFaults(ctx, fakepsp.Schedule{Seed: 1}); err != nil {
		return err
	}
	defer s.pause()()
	for _, p := range s.processes() {
		disarmed := slices.DeleteFunc(slices.Clone(p.env), func(kv string) bool { return strings.HasPrefix(kv, "CHARGEFLOW_CRASHPOINTS=") })
		if len(disarmed) == len(p.env) && p.running() {
			continue
		}
		if err := s.restart(ctx, p, disarmed); err != nil {
			return err
		}
	}
	return nil
}

// restartWith restarts procs with extra environment, as a scenario arming a
// crash point mid-run does; calm disarms it as it disarms the others.
func (s *system) restartWith(ctx context.Context, procs []*proc, extra ...string) error {
	defer s.pause()()
	for _, p := range procs {
		if err := s.restart(ctx, p, append(slices.Clone(p.env), extra...)); err != nil {
			return err
		}
	}
	return nil
}

// restart kills p and starts it again with env. The supervisor must be
// paused.
func (s *system) restart(ctx context.Context, p *proc, env []string) error {
	p.kill()
	p.env = env
	return p.start(ctx, s.isAPI(p))
}

// pause stops the supervisor from restarting processes until the function
// it returns is called.
func (s *system) pause() (resume func()) {
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		s.paused = false
		s.mu.Unlock()
	}
}

// nonTerminal counts charges and refunds not yet terminal or in review.
func (s *system) nonTerminal(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM charges WHERE state IN ('pending', 'submitting', 'unknown')`).Scan(&n)
	return n, err
}

// waitConverged waits for every charge and refund to settle, and gives up
// as a convergence says.
func (s *system) waitConverged(ctx context.Context, bound time.Duration) bool {
	c := newConvergence(bound, time.Now())
	last := time.Now()
	for {
		n, err := s.nonTerminal(ctx)
		if err != nil {
			n = -1
		}
		switch c.observe(n, time.Now()) {
		case converged:
			return true
		case stalled:
			return false
		}
		if time.Since(last) > 5*time.Second {
			s.logf("converging: %d charges and refunds not yet settled", n)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// convergence decides, from successive counts of what is not yet settled,
// when a wait for every charge to settle is over. One charge may wait the
// whole bound (for River's rescuer, a lookup round), so a bound that passes
// with nothing settling is a charge stuck: stalled. A backlog that keeps
// settling is a machine being slow, and the wait goes on while it does, up
// to maxStalls bounds in all.
type convergence struct {
	bound           time.Duration
	deadline, limit time.Time
	least           int // the fewest unsettled seen; -1 before the first count
}

// maxStalls caps a convergence that keeps making progress: that many
// bounds in all.
const maxStalls = 10

type verdict int

const (
	waiting verdict = iota
	converged
	stalled
)

func newConvergence(bound time.Duration, now time.Time) *convergence {
	return &convergence{bound: bound, deadline: now.Add(bound), limit: now.Add(maxStalls * bound), least: -1}
}

// observe takes a count of what is unsettled at now (negative when the
// count failed) and says where the wait stands.
func (c *convergence) observe(unsettled int, now time.Time) verdict {
	if unsettled == 0 {
		return converged
	}
	if unsettled > 0 && (c.least < 0 || unsettled < c.least) {
		if c.least >= 0 {
			c.deadline = now.Add(c.bound)
		}
		c.least = unsettled
	}
	if !now.Before(c.deadline) || !now.Before(c.limit) {
		return stalled
	}
	return waiting
}

// settleUnderFaults waits, with the faults still armed, until every charge
// settled and, with a webhook receiver, every delivery was delivered or
// given up on, or the convergence bound passed (the checks after calm
// decide). Deliveries follow their charges' moves: a chaos that ended
// when the last charge settled would leave most of them to calm, unarmed,
// processes, and the delivery crash points little to hit.
func (s *system) settleUnderFaults(ctx context.Context) {
	deadline := time.Now().Add(s.t.convergenceBound())
	s.waitConverged(ctx, time.Until(deadline))
	if s.receiver != nil {
		_, _ = s.waitDelivered(ctx, time.Until(deadline))
	}
}

// reportProgress prints a line every five seconds until stopped.
func (s *system) reportProgress(ctx context.Context, started time.Time) func() {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
			}
			s.mu.Lock()
			kills := maps.Clone(s.kills)
			s.mu.Unlock()
			s.logf("%s: %d charges acknowledged, kills %v, postgres restarts %d", time.Since(started).Round(time.Second),
				s.client.ackedCount(), kills, s.pgRestarts)
		}
	})
	return func() { cancel(); wg.Wait() }
}

// crashPostgres shuts the private cluster down in immediate mode, keeps it
// down for a while, and starts it again.
func (s *system) crashPostgres(ctx context.Context, down time.Duration) error {
	if s.cluster == nil {
		return errors.New("crashPostgres needs PrivatePostgres")
	}
	defer s.pause()()
	s.logf("crashing PostgreSQL (immediate shutdown)")
	if err := s.cluster.crash(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	if err := s.cluster.start(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.pgRestarts++
	s.fired["postgres:restart"]++
	s.mu.Unlock()
	s.logf("PostgreSQL is back")
	return nil
}

// shutdown stops every process and, unless the run is kept, removes its
// database, cluster and folder.
func (s *system) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range s.processes() {
		if p != nil {
			p.kill()
		}
	}
	for _, p := range []*proc{s.psp, s.psp2} {
		if p != nil {
			p.kill()
		}
	}
	if s.pool != nil {
		s.pool.Close()
	}
	if s.keep {
		s.logf("kept: logs in %s, database %s", s.dir, s.dbURL)
		if s.cluster != nil {
			s.logf("the private PostgreSQL still runs; stop it with: DATABASE_URL=%s CHARGEFLOW_DATA=%s %s stop", s.cluster.URL(), s.cluster.root, s.cluster.script)
		}
		if s.ha != nil && s.lab == nil {
			s.logf("pg_auto_failover still runs; stop it with: CHARGEFLOW_HA_PORT=%d CHARGEFLOW_DATA=%s %s stop", s.ha.port, s.ha.root, s.ha.script)
		}
		if s.lab != nil {
			// The namespaces go, and what ran in them: a lab outliving
			// its run would hold its addresses.
			if s.ha != nil {
				_ = s.ha.stop(ctx)
			}
			s.closeNetwork()
			s.logf("the network lab is removed with what ran in it; the data stays in %s", s.dir)
		}
		return
	}
	if s.drop != nil {
		_ = s.drop(ctx)
	}
	if s.cluster != nil {
		_ = s.cluster.stop(ctx)
	}
	if s.ha != nil {
		_ = s.ha.stop(ctx)
	}
	s.closeNetwork()
	_ = os.RemoveAll(s.dir)
}

// seeded sets a fault schedule's seed to the run's, so that --seed replays
// the provider's faults too.
func seeded(schedule string, seed uint64) (string, error) {
	var m map[string]any
	if err := json.Unmarshal([]byte(schedule), &m); err != nil {
		return "", err
	}
	m["seed"] = seed % (1 << 53)
	out, err := json.Marshal(m)
	return string(out), err
}
