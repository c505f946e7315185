package scenario

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/chargeflow/chargeflow/lab/netlab"
)

// netProbe says whether network namespaces can be made here (once per
// process); a test replaces it to see the path of a machine without them.
var netProbe = netlab.Probe

// partitionTimeout is the keepers' timeout.network_partition_timeout in a
// network lab, in seconds (pg_autoctl's default is 20): a primary that
// reaches neither the monitor nor its standby for that long shuts its
// PostgreSQL down. It counts only once the standby is gone from
// pg_stat_replication, which across a silent cut takes wal_sender_timeout
// (30 s, as pg_auto_failover sets it): the cut-off primary stops some 35 s
// after the cut, while the monitor, with the lab's health checks, promotes
// the standby after some 10 s. Both take connections in between; only the
// old one's commits wait for a standby that cannot answer.
const partitionTimeout = 5

// labNet is a run's network lab and the moments its links were cut.
type labNet struct {
	*netlab.Lab
	mu   sync.Mutex
	cuts []time.Time
}

// crossed reports whether a cut was made strictly between from and to.
func (l *labNet) crossed(from, to time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range l.cuts {
		if t.After(from) && t.Before(to) {
			return true
		}
	}
	return false
}

// The processes' names, which are their hosts' in a network lab.
func apiName(i int) string {
	if i == 0 {
		return "api"
	}
	return fmt.Sprintf("api-%d", i)
}
func workerName(i int) string     { return fmt.Sprintf("worker-%d", i) }
func reconcilerName(i int) string { return fmt.Sprintf("reconciler-%d", i) }

// startNetwork makes the run's lab: a host for the monitor, each node, the
// provider and each process.
func (s *system) startNetwork(ctx context.Context) error {
	lab, err := netlab.New(ctx)
	if err != nil {
		return err
	}
	s.lab = &labNet{Lab: lab}
	names := []string{"monitor", "node1", "node2", "fakepsp"}
	for i := range cmp.Or(s.sc.APIs, 1) {
		names = append(names, apiName(i))
	}
	for i := range cmp.Or(s.sc.Workers, 1) {
		names = append(names, workerName(i))
	}
	for i := range cmp.Or(s.sc.Reconcilers, 1) {
		names = append(names, reconcilerName(i))
	}
	for _, name := range names {
		if _, err := lab.AddHost(ctx, name); err != nil {
			return err
		}
	}
	s.logf("network lab %s: %d hosts, each in a namespace of its own (%s…)", lab.Subnet(), len(names), lab.Prefix())
	return nil
}

// closeNetwork removes the lab and whatever still runs in it.
func (s *system) closeNetwork() {
	if s.lab == nil {
		return
	}
	if err := s.lab.Close(); err != nil {
		s.logf("removing the network lab: %v", err)
	}
	s.lab = nil
}

// haNetwork places a pg_auto_failover cluster in a network lab: the
// environment of scripts/ha-postgres, and where each server listens.
type haNetwork struct {
	env   []string
	addrs map[string]string
}

func (s *system) haNetwork() *haNetwork {
	if s.lab == nil {
		return nil
	}
	var namespaces, addrs []string
	byNode := map[string]string{}
	for _, name := range []string{"monitor", "node1", "node2"} {
		h, _ := s.lab.Host(name)
		namespaces, addrs = append(namespaces, h.NS), append(addrs, h.Addr.String())
		byNode[name] = h.Addr.String()
	}
	return &haNetwork{addrs: byNode, env: []string{
		"CHARGEFLOW_HA_NETNS=" + strings.Join(namespaces, " "),
		"CHARGEFLOW_HA_ADDRS=" + strings.Join(addrs, " "),
		"CHARGEFLOW_HA_TRUST=" + s.lab.Subnet().String(),
		"CHARGEFLOW_HA_PARTITION_TIMEOUT=" + strconv.Itoa(partitionTimeout),
	}}
}

// listenAddr is where the process name listens: its host's address in a
// network lab, loopback otherwise (any port).
func (s *system) listenAddr(name string) string {
	if s.lab != nil {
		if h, ok := s.lab.Host(name); ok {
			return net.JoinHostPort(h.Addr.String(), "0")
		}
	}
	return "127.0.0.1:0"
}

// netnsOf is the namespace the process name runs in ("" outside a lab).
func (s *system) netnsOf(name string) string {
	if s.lab != nil {
		if h, ok := s.lab.Host(name); ok {
			return h.NS
		}
	}
	return ""
}

// fire counts that something happened.
func (s *system) fire(name string) { s.fireN(name, 1) }

// fireN counts that something happened n times.
func (s *system) fireN(name string, n int) {
	s.mu.Lock()
	s.fired[name] += n
	s.mu.Unlock()
}

func (s *system) measure(name string, d time.Duration) {
	s.mu.Lock()
	s.measured[name] = max(d, 0)
	s.mu.Unlock()
}

// cut cuts host a from each of others, and marks the moment.
func (s *system) cut(ctx context.Context, a string, others ...string) error {
	if err := s.lab.Isolate(ctx, a, others...); err != nil {
		return err
	}
	s.markCut()
	s.logf("cut %s from %s", a, strings.Join(others, ", "))
	return nil
}

func (s *system) markCut() {
	s.lab.mu.Lock()
	s.lab.cuts = append(s.lab.cuts, time.Now())
	s.lab.mu.Unlock()
	s.fire("partition:cut")
}

// heal heals what cut cut.
func (s *system) heal(ctx context.Context, a string, others ...string) error {
	if err := s.lab.Rejoin(ctx, a, others...); err != nil {
		return err
	}
	s.fire("partition:healed")
	s.logf("healed %s and %s", a, strings.Join(others, ", "))
	return nil
}

// cutFor is how long a cut lasts.
func (s *system) cutFor() time.Duration {
	if s.runner.cfg.Short {
		return 6 * time.Second
	}
	return 20 * time.Second
}

// trafficAcross sends n charges as midTraffic does, the event running
// while the rest are sent, and goes on sending, each of the 16 clients
// pausing between charges, until the event is over: every cut and heal
// meets traffic, however fast the first n go. It counts as
// partition:in_flight each charge whose request was sent before a cut and
// answered after it, and returns how many charges it sent.
func (s *system) trafficAcross(ctx context.Context, name string, n int, event func() error) (int, error) {
	first := n / 3
	s.trafficFrom(ctx, name, 0, first, nil)
	pace := 100 * time.Millisecond
	if s.runner.cfg.Short {
		pace = 400 * time.Millisecond
	}
	eventDone := make(chan struct{})
	next := make(chan int)
	var total atomic.Int64
	total.Store(int64(first))
	go func() {
		defer close(next)
		for i := first; ; i++ {
			if i >= n {
				select {
				case <-eventDone:
					return
				default:
				}
			}
			select {
			case next <- i:
				total.Add(1)
			case <-ctx.Done():
				return
			}
		}
	}()
	var clients sync.WaitGroup
	for range 16 {
		clients.Go(func() {
			for i := range next {
				sent := time.Now()
				s.client.post(ctx, s.request(name, i))
				if s.lab.crossed(sent, time.Now()) {
					s.fire("partition:in_flight")
				}
				if i >= n {
					sleepCtx(ctx, pace)
				}
			}
		})
	}
	err := event()
	close(eventDone)
	clients.Wait()
	return int(total.Load()), err
}

// partitionChaos kills a worker or a reconciler every 1.5–3 s, once it has
// worked workerLife, as the soak's chaos does, until stop is called.
func (s *system) partitionChaos(ctx context.Context) (stop func()) {
	return s.killInTurn(ctx, append(append([]*proc(nil), s.workers...), s.reconcilers...))
}

// killInTurn kills a process of each group in turn, every 1.5–3 s, drawn
// at random within its group; one not yet working for workerLife is spared
// that time, and its group keeps the turn. It goes on until stop is called.
func (s *system) killInTurn(ctx context.Context, groups ...[]*proc) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for turn := 0; ; {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(1500+s.intn(1500)) * time.Millisecond):
			}
			victims := groups[turn%len(groups)]
			if victim := victims[s.intn(len(victims))]; victim.upFor() >= workerLife {
				s.kill(victim, victim.args[0])
				turn++
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// partitionRun refuses a card number, sends n charges with event (a cut
// and its heal) a third of the way in and the chaos's kills while it
// lasts, and lets everything settle under the provider's faults.
func partitionRun(short, full int, event func(ctx context.Context, s *system) error) func(ctx context.Context, s *system) error {
	return func(ctx context.Context, s *system) error {
		if err := s.rejectCard(ctx); err != nil {
			return err
		}
		n, err := s.trafficAcross(ctx, "part", s.charges(short, full), func() error {
			stop := s.partitionChaos(ctx)
			defer stop()
			return event(ctx, s)
		})
		if err != nil {
			return err
		}
		if got := s.client.ackedCount(); got < n {
			return fmt.Errorf("only %d of %d charges were acknowledged; the clients gave up on the rest", got, n)
		}
		s.settleUnderFaults(ctx)
		return nil
	}
}

func partitionPrimary() Scenario {
	return Scenario{
		Name: "partition-primary",
		Summary: "the primary cut off from its standby and the monitor, the APIs and workers still reaching it: the standby promoted, " +
			"the old primary stops, no 201 for what the new one lacks; healed, the old node rejoins as the standby",
		HAPostgres: true, Partitions: true,
		APIs: 2, Workers: 2, Reconcilers: 2,
		Faults: `{"seed": 31, "rules": [{"on": "charge", "fault": "apply_then_timeout", "p": 0.1, "ms": 1500}]}`,
		Run:    partitionRun(300, 3000, primaryCut),
		MustFire: []string{"partition:cut", "partition:in_flight", "partition:promoted", "partition:old_primary_stopped",
			"partition:healed", "partition:rejoined", "failover:river_leader"},
	}
}

func partitionProvider() Scenario {
	return Scenario{
		Name: "partition-provider",
		Summary: "the workers cut off from the provider mid-call (it applies the charge, its answer is lost); " +
			"the reconcilers, which still reach it, resolve by lookup",
		HAPostgres: true, Partitions: true,
		Workers: 2, Reconcilers: 1,
		// Half the calls take 400 ms, so that calls are open when the
		// link goes; all stay inside the call timeout (1 s).
		Faults:   `{"seed": 37, "rules": [{"on": "charge", "fault": "latency", "p": 0.5, "ms": 400}]}`,
		Run:      partitionRun(150, 1500, providerCut),
		MustFire: []string{"partition:cut", "partition:in_flight", "partition:answer_lost", "partition:healed"},
	}
}

func partitionAPIDB() Scenario {
	return Scenario{
		Name: "partition-api-db",
		Summary: "an API cut off from PostgreSQL mid-commit (its commits may or may not have landed); " +
			"the clients retry through the other API, or after the heal",
		HAPostgres: true, Partitions: true,
		APIs: 2, Workers: 1, Reconcilers: 1,
		Run:      partitionRun(200, 2000, apiDBCut),
		MustFire: []string{"partition:cut", "partition:in_flight", "partition:api_stalled", "partition:healed"},
	}
}

func partitionFlap() Scenario {
	return Scenario{
		Name:       "partition-flap",
		Summary:    "the link between a worker and PostgreSQL flapping: cut and healed every second",
		HAPostgres: true, Partitions: true,
		Workers: 2, Reconcilers: 1,
		Faults:   `{"seed": 41, "rules": [{"on": "charge", "fault": "latency", "p": 0.3, "ms": 200}]}`,
		Run:      partitionRun(300, 3000, workerDBFlap),
		MustFire: []string{"partition:cut", "partition:unsettled_at_cut", "partition:in_flight", "partition:healed"},
	}
}

// primaryCut cuts the primary node from its standby and from the monitor
// (the APIs, workers, reconcilers and the runner still reach it), and
// measures from the cut: the first charge acknowledged, whose row must be
// on the standby (promoted in the meantime) — a 201 from the cut-off
// primary would be for a commit the new primary lacks; and how long the
// cut-off primary went on answering as a primary and committing locally
// (until its keeper's network_partition_timeout shut it down). Then it
// heals, waits for the old node to rejoin as the standby and for a River
// leader on the new primary.
func primaryCut(ctx context.Context, s *system) error {
	old, oldPort, err := s.ha.primary(ctx)
	if err != nil {
		return err
	}
	standby := map[string]string{"node1": "node2", "node2": "node1"}[old]
	// The watch's table, created (and replicated) before the cut.
	if _, err := s.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS partition_probe (n bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	watch := s.watchPrimary(ctx, s.ha.addr(old), oldPort)
	defer watch.stop()
	s.logf("cutting the primary %s from its standby %s and the monitor; the APIs and workers still reach it", old, standby)
	if err := s.cut(ctx, old, standby, "monitor"); err != nil {
		return err
	}
	cutAt := time.Now()

	// What goes wrong from here is reported at the end: the heal and the
	// rejoin still happen, and the run is still checked.
	var problems []error
	// Fresh charges, one after the other, until one is acknowledged from
	// the standby: a 201 whose row the standby lacks came from the cut-off
	// primary, a commit the new primary does not have.
	deadline := time.Now().Add(watchFor)
	for time.Now().Before(deadline) {
		a := s.client.post(ctx, s.request("probe", int(s.probes.Add(1))))
		after := time.Since(cutAt)
		if a.status != 201 {
			problems = append(problems, fmt.Errorf("a charge sent after the cut got no 201 (status %d, last %s)", a.status, a.last))
			break
		}
		var created struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(a.body, &created)
		on, err := s.rowOn(ctx, standby, created.ID)
		if err != nil {
			problems = append(problems, fmt.Errorf("reading a charge sent after the cut on %s: %w", standby, err))
			break
		}
		if on {
			s.measure("cut→first 201", after)
			s.fire("partition:promoted")
			s.logf("first charge acknowledged from %s %s after the cut", standby, after.Round(10*time.Millisecond))
			break
		}
		s.mu.Lock()
		_, seen := s.measured["cut→201 from the cut-off primary"]
		s.mu.Unlock()
		if !seen {
			s.measure("cut→201 from the cut-off primary", after)
			problems = append(problems, fmt.Errorf("a charge acknowledged %s after the cut is not on %s, the standby the monitor promotes: the cut-off %s acknowledged a commit the new primary lacks",
				after.Round(10*time.Millisecond), standby, old))
		}
	}

	stopped, err := watch.wait(ctx)
	if err != nil {
		problems = append(problems, err)
	}
	if err == nil {
		s.fire("partition:old_primary_stopped")
		s.measure("cut→old primary stopped", stopped.stoppedAt.Sub(cutAt))
		s.measure("cut→old primary's last local commit", stopped.lastCommit.Sub(cutAt))
	}
	s.logf("the cut-off %s answered as a primary until %s after the cut, committed locally until %s after it",
		old, stopped.lastPrimary.Sub(cutAt).Round(10*time.Millisecond), stopped.lastCommit.Sub(cutAt).Round(10*time.Millisecond))

	// A little longer cut off, with the traffic on the new primary.
	if !sleepCtx(ctx, 2*time.Second) {
		return ctx.Err()
	}
	if err := s.heal(ctx, old, standby, "monitor"); err != nil {
		return errors.Join(append(problems, err)...)
	}
	problems = append(problems, s.waitRejoined(ctx, old), s.waitLeader(ctx))
	return errors.Join(problems...)
}

// rowOn reports whether the charge's row is on node, asked directly.
func (s *system) rowOn(ctx context.Context, node, id string) (bool, error) {
	u, err := url.Parse(s.dbURL)
	if err != nil {
		return false, err
	}
	port := s.ha.port + map[string]int{"node1": 1, "node2": 2}[node]
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, fmt.Sprintf("postgres://postgres@%s%s?sslmode=disable", net.JoinHostPort(s.ha.addr(node), strconv.Itoa(port)), u.Path))
	if err != nil {
		return false, err
	}
	defer conn.Close(cctx)
	var n int
	err = conn.QueryRow(cctx, `SELECT count(*) FROM charges WHERE id = $1`, id).Scan(&n)
	return n > 0, err
}

// waitRejoined waits until the monitor reports node as a secondary.
func (s *system) waitRejoined(ctx context.Context, node string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if states := s.ha.states(ctx); strings.Contains(states, node+" secondary") {
			s.fire("partition:rejoined")
			s.logf("%s rejoined as the standby: %s", node, states)
			return nil
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("%s had not rejoined as the standby two minutes after the heal (%s)", node, s.ha.states(ctx))
}

// primaryWatch asks a node, directly from the runner (whose link is never
// cut), every 100 ms on a new connection, whether it is a primary, and
// commits a row with synchronous_commit = local: what a client would get
// from it, the standby's acknowledgement aside.
type primaryWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	last   watched
}

// watched is what a primaryWatch saw: the last moment the node answered as
// a primary, the last local commit, and the first failure after which it
// never answered as a primary again.
type watched struct {
	lastPrimary, lastCommit, stoppedAt time.Time
}

// stoppedFor is how long a node must fail to answer as a primary to count
// as stopped; watchFor bounds the whole watch.
const (
	stoppedFor = 3 * time.Second
	watchFor   = 2 * time.Minute
)

func (s *system) watchPrimary(ctx context.Context, addr string, port int) *primaryWatch {
	u, _ := url.Parse(s.dbURL)
	dsn := fmt.Sprintf("postgres://postgres@%s%s?sslmode=disable", net.JoinHostPort(addr, strconv.Itoa(port)), u.Path)
	ctx, cancel := context.WithTimeout(ctx, watchFor)
	w := &primaryWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			primary, committed := askPrimary(ctx, dsn)
			now := time.Now()
			w.mu.Lock()
			switch {
			case primary:
				w.last.lastPrimary, w.last.stoppedAt = now, time.Time{}
				if committed {
					w.last.lastCommit = now
				}
			case w.last.stoppedAt.IsZero():
				w.last.stoppedAt = now
			}
			gone := !w.last.stoppedAt.IsZero() && now.Sub(w.last.stoppedAt) >= stoppedFor
			w.mu.Unlock()
			if gone {
				return
			}
			sleepCtx(ctx, 100*time.Millisecond)
		}
	}()
	return w
}

// askPrimary connects to dsn, asks whether it is a primary and, if so,
// commits a row locally; each step within a second.
func askPrimary(ctx context.Context, dsn string) (primary, committed bool) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, dsn)
	if err != nil {
		return false, false
	}
	defer conn.Close(context.Background())
	var recovering bool
	if err := conn.QueryRow(cctx, `SELECT pg_is_in_recovery()`).Scan(&recovering); err != nil || recovering {
		return false, false
	}
	_, err = conn.Exec(cctx, `SET synchronous_commit = local; INSERT INTO partition_probe DEFAULT VALUES`)
	return true, err == nil
}

// wait waits until the node stopped answering as a primary for stoppedFor.
func (w *primaryWatch) wait(ctx context.Context) (watched, error) {
	select {
	case <-w.done:
	case <-ctx.Done():
		return watched{}, ctx.Err()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last.stoppedAt.IsZero() {
		return w.last, fmt.Errorf("the cut-off primary still answered as a primary %s after the watch began", watchFor)
	}
	return w.last, nil
}

func (w *primaryWatch) stop() {
	w.cancel()
	<-w.done
}

// providerCut cuts every worker from the provider while calls are open;
// the reconciler still reaches it. A cut is made only once the provider
// has answered a worker and a charge has been on its way to it for
// longer than the network takes (under the latency fault, a call the
// provider holds). It lasts until the reconciler has found, by lookup, a
// charge the provider applied and whose answer the cut lost (its worker's
// call went unanswered), and at least cutFor, then heals. A cut that lost
// no answer in half a minute (every open call happened to end just before
// it) is healed and made again, up to three times.
func providerCut(ctx context.Context, s *system) error {
	var workers []string
	for i := range s.workers {
		workers = append(workers, workerName(i))
	}
	var found int
	var firstCut time.Time
	for attempt := 1; attempt <= 3 && found == 0; attempt++ {
		open, err := waitOpenCalls(ctx, s)
		if err != nil {
			return err
		}
		if firstCut.IsZero() {
			if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&firstCut); err != nil {
				return err
			}
		}
		if err := s.cut(ctx, "fakepsp", workers...); err != nil {
			return err
		}
		// The calls open at the cut are in flight across it, as a
		// client's request sent before it and answered after it is.
		s.fireN("partition:in_flight", open)
		began := time.Now()
		for {
			// A worker records an unknown outcome only when its call
			// went unanswered (one killed mid-call records nothing),
			// which the latency fault alone never causes.
			err := s.pool.QueryRow(ctx, `SELECT count(DISTINCT f.charge_id) FROM charge_audit f
				JOIN charge_audit u ON u.charge_id = f.charge_id AND u.reason LIKE 'outcome_unknown:%' AND u.created_at >= $1
				WHERE f.reason LIKE 'lookup_found_%'`, firstCut).Scan(&found)
			if err != nil {
				return err
			}
			since := time.Since(began)
			if found > 0 && since >= s.cutFor() || since >= 30*time.Second {
				break
			}
			if !sleepCtx(ctx, 200*time.Millisecond) {
				return ctx.Err()
			}
		}
		if err := s.heal(ctx, "fakepsp", workers...); err != nil {
			return err
		}
	}
	s.fireN("partition:answer_lost", found)
	s.logf("%d charges the provider applied while its answers could not reach the workers were found by the reconciler", found)
	return nil
}

// waitOpenCalls waits until the provider has answered a worker (the
// workers are up and reach it) and a charge has been submitting for
// between 100 and 400 ms by the database's clock: a call open at the
// provider, under the scenario's latency fault. It returns how many are.
func waitOpenCalls(ctx context.Context, s *system) (int, error) {
	for {
		var open int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM charges WHERE state = 'submitting'
				AND last_attempt_at BETWEEN now() - interval '400 ms' AND now() - interval '100 ms'
				AND EXISTS (SELECT 1 FROM charges WHERE state = 'succeeded')`).Scan(&open)
		if err != nil {
			return 0, err
		}
		if open > 0 {
			return open, nil
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
}

// apiDBCut cuts the first API from both nodes for cutFor, while it takes
// charges, then heals. It counts as partition:api_stalled the requests the
// cut API answered only after the clients' timeout: each was inside its
// transaction, its commit sent or not, when the link went.
func apiDBCut(ctx context.Context, s *system) error {
	api := s.apis[0]
	offset := logSize(api.log)
	if err := s.cut(ctx, apiName(0), "node1", "node2"); err != nil {
		return err
	}
	if !sleepCtx(ctx, s.cutFor()) {
		return ctx.Err()
	}
	if err := s.heal(ctx, apiName(0), "node1", "node2"); err != nil {
		return err
	}
	// The stalled requests end soon after the heal (their transactions
	// go on) or at the API's own deadline.
	sleepCtx(ctx, 2*time.Second)
	stalled, err := slowRequests(api.log, offset, s.t.clientTimeout)
	if err != nil {
		return err
	}
	s.fireN("partition:api_stalled", stalled)
	s.logf("%d requests to the cut API outlasted the clients' timeout", stalled)
	return nil
}

// logSize is a log file's size now (0 if it does not exist yet).
func logSize(path string) int64 {
	if fi, err := os.Stat(path); err == nil {
		return fi.Size()
	}
	return 0
}

// slowRequests counts the POST /v1/charges lines of an API's log from
// offset on that took at least d.
func slowRequests(path string, offset int64, d time.Duration) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return 0, err
	}
	n := 0
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for scanner.Scan() {
		var line struct {
			Route      string  `json:"route"`
			Method     string  `json:"method"`
			DurationMS float64 `json:"duration_ms"`
		}
		if json.Unmarshal(scanner.Bytes(), &line) == nil && line.Method == "POST" && line.Route == chargesPath &&
			time.Duration(line.DurationMS*float64(time.Millisecond)) >= d {
			n++
		}
	}
	return n, scanner.Err()
}

// workerDBFlap cuts the first worker from both nodes and heals it, every
// second, for twice cutFor.
func workerDBFlap(ctx context.Context, s *system) error {
	stop := s.lab.Flap(ctx, time.Second, func() {
		s.markCut()
		// What the worker had in hand when its link went: charges not
		// yet settled.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if n, err := s.nonTerminal(cctx); err == nil {
			s.fireN("partition:unsettled_at_cut", n)
		}
	}, workerName(0), "node1", "node2")
	sleepCtx(ctx, 2*s.cutFor())
	cuts, err := stop()
	if err != nil {
		return err
	}
	s.fire("partition:healed")
	s.logf("the link of %s to PostgreSQL was cut %d times", workerName(0), cuts)
	return ctx.Err()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
