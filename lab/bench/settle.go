package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// SettleResult is the worker's pending → succeeded throughput against the
// fake provider, next to the API's accept throughput at the same
// concurrency, and whether the queue drains under a sustained load.
type SettleResult struct {
	Concurrency int `json:"concurrency"`
	// Accept is the API's accept rate while it built the backlog, with no
	// worker running (the fill).
	Accept Throughput `json:"accept"`
	// Backlog is how many pending charges the worker then started from.
	Backlog int64 `json:"backlog"`
	// SettledPerSecond is how fast the worker moved them to succeeded,
	// between the 10th and the 90th percent of the backlog (so neither
	// the worker's start-up nor the last stragglers count).
	SettledPerSecond float64 `json:"settled_per_second"`
	// DrainSeconds is from the worker's start to an empty backlog.
	DrainSeconds float64 `json:"drain_seconds"`
	// NotSucceeded counts charges that ended anywhere but succeeded (there
	// are no faults: it must be zero).
	NotSucceeded int64 `json:"not_succeeded"`
	// Ratio is SettledPerSecond ÷ Accept.PerSecond; the target is at least
	// SettleTarget.
	Ratio float64 `json:"ratio"`
	// CPU is what each settled charge cost, per process, over the drain;
	// nil where it could not be read (not Linux, or Postgres elsewhere).
	CPU *SettleCPU `json:"cpu_per_settled_charge_us,omitempty"`
	// Batches is how deep the worker's statements were over the drain.
	Batches Batches `json:"batches"`
	// EndToEnd is the API and the worker running together: the highest
	// rate both carry, and the latency at half of it.
	EndToEnd EndToEnd `json:"end_to_end"`
	// Slow is the same drain with the provider answering in 150–400 ms.
	Slow SlowProvider `json:"slow_provider"`
	Met  bool         `json:"met"`
}

// SlowProvider is a drain against a provider that answers every charge in
// 150–400 ms, against the drain of the same backlog by a provider that
// answers at once: provider calls must hold neither a database connection
// nor a scarce worker slot.
type SlowProvider struct {
	// SettledPerSecond, Backlog and DrainSeconds are over the slow
	// drains (rates averaged, backlogs and seconds summed), and
	// InstantPerSecond is the instant drains' rate (slowProviderDrains).
	SettledPerSecond float64 `json:"settled_per_second"`
	// Drains is how many slow drains there were, and as many instant ones.
	Drains           int     `json:"drains"`
	Backlog          int64   `json:"backlog"`
	DrainSeconds     float64 `json:"drain_seconds"`
	NotSucceeded     int64   `json:"not_succeeded"`
	InstantPerSecond float64 `json:"instant_per_second"`
	// CPU and InstantCPU are what a settled charge cost, per process, over
	// the slow drains and over the instant ones beside them (averaged);
	// nil where it could not be read.
	CPU        *SettleCPU `json:"cpu_per_settled_charge_us,omitempty"`
	InstantCPU *SettleCPU `json:"instant_cpu_per_settled_charge_us,omitempty"`
	// Batches and InstantBatches are how deep the worker's statements
	// were over the slow drains and over the instant ones (averaged).
	Batches        Batches `json:"batches"`
	InstantBatches Batches `json:"instant_batches"`
	// Ratio is SettledPerSecond ÷ InstantPerSecond; the target is at least
	// SlowProviderTarget.
	Ratio float64 `json:"ratio"`
	Met   bool    `json:"met"`
}

// Batches is how many charges the worker's statements moved on average
// over a drain: a claim (pending → submitting, before the calls) and a
// settling transaction (the moves the answers prove), each at most
// outbox.MaxBatch. What a statement costs whatever it moves is shared by
// that many charges (CHANGELOG.md, "The slow provider is wake-ups,
// not statements"). They are read from the drain's audit trail, where
// every row a statement wrote carries its transaction's id.
type Batches struct {
	Claim  float64 `json:"claim"`
	Settle float64 `json:"settle"`
}

// Sustained is a run in which the API is offered charges at a steady rate
// the system should sustain while the worker settles them: the backlog
// must stay bounded, and empty once the load stops.
type Sustained struct {
	OfferedPerSecond float64    `json:"offered_per_second"`
	Accepted         Throughput `json:"accepted"`
	SettledPerSecond float64    `json:"settled_per_second"`
	// BacklogMax and BacklogEnd are the charges not yet settled (pending,
	// submitting or unknown), the highest seen and at the end of the load.
	BacklogMax int64 `json:"backlog_max"`
	BacklogEnd int64 `json:"backlog_end"`
	// DrainedAfter is how long after the load stopped the backlog was
	// empty; Drained is false if it never was within a minute.
	DrainedAfterSeconds float64 `json:"drained_after_seconds"`
	Drained             bool    `json:"drained"`
	// Bounded says the backlog at the end was under a second's worth of
	// offered charges: it did not grow with the length of the run.
	Bounded bool `json:"bounded"`
	// KeptUp says both halves carried the offered rate: the backlog was
	// bounded, and the API accepted at least keptUpShare of the offer.
	KeptUp bool `json:"kept_up"`
}

// openLoopClients is how many clients the end-to-end probes offer their
// rate from.
const openLoopClients = 128

// keptUpShare is the least share of an offered rate the API must accept
// for a probe to count as keeping up (the limiter's own jitter aside).
const keptUpShare = 0.97

// EndToEnd is the system's capacity with both halves running: the highest
// offered rate at which the API accepted and the worker settled for the
// whole of a long run with the backlog bounded, against the API's
// accept-only rate; and how long a charge took from accepted to succeeded
// at half that rate.
type EndToEnd struct {
	// Probes are the search's runs, in order, each r.opts.Duration long.
	Probes []Sustained `json:"probes"`
	// Confirmed is the long run at the rate the probes found.
	Confirmed Sustained `json:"confirmed"`
	// CapacityPerSecond is Confirmed's rate if it kept up, else 0.
	CapacityPerSecond float64 `json:"capacity_per_second"`
	// AcceptOnly is the API's accept rate with no worker (the settle
	// line's fill); Ratio is CapacityPerSecond ÷ AcceptOnly.
	AcceptOnly float64 `json:"accept_only_per_second"`
	Ratio      float64 `json:"ratio"`
	// Latency is accepted → succeeded, per charge, at half the capacity.
	Latency SettleLatency `json:"latency"`
	Met     bool          `json:"met"`
}

// SettleLatency is accepted → succeeded over the charges of one run, from each
// charge's own timestamps (created_at, and updated_at of its move to
// succeeded).
type SettleLatency struct {
	OfferedPerSecond float64 `json:"offered_per_second"`
	Charges          int64   `json:"charges"`
	P50              float64 `json:"p50_ms"`
	P99              float64 `json:"p99_ms"`
}

// measureEndToEnd searches for the highest rate the running system
// sustains: it probes from the estimate sustainableRate gives without its
// headroom, up by a quarter while probes keep up and down by a quarter
// until one does, then halves the gap twice; confirms the rate found with
// a run of SustainDuration (or, if that does not keep up, 15 % less); and
// measures latency at half of it.
func (r *runner) measureEndToEnd(ctx context.Context, client *apiClient, concurrency int, accept, settle float64) (EndToEnd, error) {
	e := EndToEnd{AcceptOnly: accept}
	// Merchants do not wait for one charge's answer before sending the
	// next: the offered rate must not be capped by the clients' own
	// round trips (16 clients at 30 ms each can offer no more than 533/s
	// whatever the system carries), so the probes offer it from many.
	concurrency = max(concurrency, openLoopClients)
	client = newAPIClient(r.sys, client.keyPrefix+"e2e-", concurrency)
	defer client.http.CloseIdleConnections()
	// The drain settled the whole table: fresh statistics keep the
	// backlog's count on its index.
	if _, err := r.admin.Exec(ctx, analyzeTables); err != nil {
		return e, fmt.Errorf("analyze: %w", err)
	}
	start := sustainableRate(accept, settle) / sustainedShare
	if start <= 0 {
		return e, nil
	}
	var lo, hi float64 // highest rate kept up with, lowest not
	// try probes perSecond and moves lo or hi to it.
	try := func(perSecond float64) error {
		// Each probe starts from an empty backlog: one a probe left
		// behind would count against the next.
		if err := r.waitDrained(ctx); err != nil {
			return err
		}
		s, err := r.sustain(ctx, client, concurrency, perSecond, r.opts.Duration)
		e.Probes = append(e.Probes, s)
		if s.KeptUp && s.Drained {
			lo = perSecond
		} else {
			hi = perSecond
		}
		return err
	}
	if err := try(start); err != nil {
		return e, err
	}
	// Up by a quarter until a probe falls behind, or down until one keeps
	// up; then halve the gap twice.
	for i := 0; i < 4 && (lo == 0 || hi == 0); i++ {
		next := lo * 1.25
		if lo == 0 {
			next = hi * 0.75
		}
		if err := try(next); err != nil {
			return e, err
		}
	}
	for i := 0; i < 2 && lo > 0 && hi > 0; i++ {
		if err := try((lo + hi) / 2); err != nil {
			return e, err
		}
	}
	if lo == 0 {
		return e, nil
	}
	// A short probe can keep up where the long hold does not (the
	// tables grow, a checkpoint comes): the hold steps down by 15 % until
	// it holds, three times at most. What is reported is what held.
	var err error
	for i := 0; i < 4 && e.CapacityPerSecond == 0; i++ {
		if i > 0 {
			lo *= 0.85
		}
		if err = r.waitDrained(ctx); err != nil {
			return e, err
		}
		if e.Confirmed, err = r.sustain(ctx, client, concurrency, lo, r.opts.SustainDuration); err != nil {
			return e, err
		}
		if e.Confirmed.KeptUp && e.Confirmed.Drained {
			e.CapacityPerSecond = lo
		}
	}
	if accept > 0 {
		e.Ratio = e.CapacityPerSecond / accept
	}
	if e.Latency, err = r.latency(ctx, client, concurrency, lo/2); err != nil {
		return e, err
	}
	e.Met = e.Ratio >= EndToEndTarget
	return e, nil
}

// latency offers perSecond for the run's duration, waits for the backlog
// to drain, and reads accepted → succeeded of the charges accepted then.
func (r *runner) latency(ctx context.Context, client *apiClient, concurrency int, perSecond float64) (SettleLatency, error) {
	l := SettleLatency{OfferedPerSecond: perSecond}
	if err := r.waitDrained(ctx); err != nil {
		return l, err
	}
	var since time.Time
	if err := r.admin.QueryRow(ctx, `SELECT now()`).Scan(&since); err != nil {
		return l, err
	}
	if _, err := r.sustain(ctx, client, concurrency, perSecond, r.opts.Duration); err != nil {
		return l, err
	}
	err := r.admin.QueryRow(ctx, `SELECT count(*),
		coalesce(extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY updated_at - created_at)) * 1000, 0),
		coalesce(extract(epoch FROM percentile_disc(0.99) WITHIN GROUP (ORDER BY updated_at - created_at)) * 1000, 0)
		FROM charges WHERE tenant_id = $1 AND created_at >= $2 AND state = 'succeeded'`, r.sys.TenantID, since).
		Scan(&l.Charges, &l.P50, &l.P99)
	if err != nil {
		return l, fmt.Errorf("read latencies: %w", err)
	}
	return l, nil
}

// counts are the charges of the benchmark's tenant by where they are.
type counts struct {
	unsettled    int64 // pending, submitting or unknown
	succeeded    int64
	notSucceeded int64 // failed or needs_review
}

// drainWait bounds how long a measurement waits for a backlog the one
// before it left.
const drainWait = 5 * time.Minute

// waitDrained waits until no charge is unsettled.
func (r *runner) waitDrained(ctx context.Context) error {
	deadline := time.Now().Add(drainWait)
	for {
		n, err := r.backlog(ctx)
		if err != nil || n == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d charges still unsettled %s after the load stopped", n, drainWait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// backlog counts the charges of the benchmark's tenant not yet settled,
// through the index on (tenant, state): its cost is the backlog's, where
// counts' is the table's, so sampling it every few hundred milliseconds
// takes little from what is measured.
func (r *runner) backlog(ctx context.Context) (int64, error) {
	var n int64
	err := r.admin.QueryRow(ctx, `SELECT count(*) FROM charges WHERE tenant_id = $1 AND state IN ('pending', 'submitting', 'unknown')`,
		r.sys.TenantID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the backlog: %w", err)
	}
	return n, nil
}

func (r *runner) counts(ctx context.Context) (counts, error) {
	var c counts
	err := r.admin.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE state IN ('pending', 'submitting', 'unknown')),
		count(*) FILTER (WHERE state = 'succeeded'),
		count(*) FILTER (WHERE state IN ('failed', 'needs_review'))
		FROM charges WHERE tenant_id = $1`, r.sys.TenantID).Scan(&c.unsettled, &c.succeeded, &c.notSucceeded)
	if err != nil {
		return counts{}, fmt.Errorf("count charges: %w", err)
	}
	return c, nil
}

// measureSettle drains a backlog with the provider answering at once,
// then, with the worker still running, searches for the highest rate the
// API and the worker carry together (measureEndToEnd); then drains a second backlog with the provider
// answering in 150–400 ms (SlowProvider). It returns a running worker's
// stop function: the duplicate storm needs a worker.
func (r *runner) measureSettle(ctx context.Context, concurrency int) (SettleResult, func() error, error) {
	client := newAPIClient(r.sys, r.keyPrefix+"settle-", concurrency)
	defer client.http.CloseIdleConnections()
	res := SettleResult{Concurrency: concurrency}

	fast, stopWorker, err := r.drain(ctx, client, concurrency)
	if err != nil {
		return res, nil, err
	}
	res.Accept, res.Backlog, res.SettledPerSecond, res.DrainSeconds, res.NotSucceeded, res.CPU, res.Batches =
		fast.accept, fast.backlog, fast.perSecond, fast.seconds, fast.notSucceeded, fast.cpu, fast.batches
	if res.Accept.PerSecond > 0 {
		res.Ratio = res.SettledPerSecond / res.Accept.PerSecond
	}
	if res.EndToEnd, err = r.measureEndToEnd(ctx, client, concurrency, res.Accept.PerSecond, res.SettledPerSecond); err != nil {
		_ = stopWorker()
		return res, nil, err
	}
	if err := stopWorker(); err != nil {
		return res, nil, err
	}

	// The same drain with every provider call taking 150–400 ms, against
	// instant drains made beside it: instant, slow, slow, instant. The
	// settle line's drain ran before the end-to-end search, whose minute
	// of writes leaves Postgres checkpointing and its tables larger; a
	// drain after it compared with one before it measured that drift as
	// much as the provider's latency (docs/benchmarks.md, "What each line
	// measures").
	var instant, slow []drained
	for _, latency := range slowProviderDrains {
		d, err := r.drainWith(ctx, client, concurrency, latency)
		if err != nil {
			return res, nil, err
		}
		if latency {
			slow = append(slow, d)
		} else {
			instant = append(instant, d)
		}
	}
	sl, in := merge(slow), merge(instant)
	res.Slow = SlowProvider{SettledPerSecond: sl.perSecond, Drains: len(slow), Backlog: sl.backlog, DrainSeconds: sl.seconds,
		NotSucceeded: sl.notSucceeded, InstantPerSecond: in.perSecond, CPU: sl.cpu, InstantCPU: in.cpu,
		Batches: sl.batches, InstantBatches: in.batches}
	if res.Slow.InstantPerSecond > 0 {
		res.Slow.Ratio = res.Slow.SettledPerSecond / res.Slow.InstantPerSecond
	}
	res.Slow.Met = res.Slow.Ratio >= SlowProviderTarget && sl.notSucceeded == 0
	stopWorker, err = r.sys.StartWorker(ctx)
	if err != nil {
		return res, nil, err
	}
	res.Met = res.Ratio >= SettleTarget && res.NotSucceeded == 0 && res.Accept.Failures == 0
	return res, stopWorker, nil
}

// slowProviderDrains is the order of the slow-provider line's drains, with
// (true) and without (false) the provider's latency: instant, slow, slow,
// instant, twice. A drain's rate moves by 10–15 % from one to the next on
// a machine shared with its neighbours, as much as the effect measured;
// four of each halve what one unlucky drain does to the ratio
// (docs/benchmarks.md, "What each line measures").
var slowProviderDrains = []bool{false, true, true, false, false, true, true, false}

// slowProvider makes every charge call take 150, 212, 275, 337 or 400 ms,
// a fifth of the calls each: a real provider's latency, as the slow-provider
// settle line offers it. Rules are tried in order, so the probabilities
// below give each duration a fifth of the calls.
var slowProvider = fakepsp.Schedule{Rules: []fakepsp.Rule{
	{On: fakepsp.OnCharge, Fault: fakepsp.FaultLatency, P: 1.0 / 5, MS: 150},
	{On: fakepsp.OnCharge, Fault: fakepsp.FaultLatency, P: 1.0 / 4, MS: 212},
	{On: fakepsp.OnCharge, Fault: fakepsp.FaultLatency, P: 1.0 / 3, MS: 275},
	{On: fakepsp.OnCharge, Fault: fakepsp.FaultLatency, P: 1.0 / 2, MS: 337},
	{On: fakepsp.OnCharge, Fault: fakepsp.FaultLatency, P: 1, MS: 400},
}}

// drained is one drain of a backlog.
type drained struct {
	accept       Throughput
	backlog      int64
	perSecond    float64
	seconds      float64
	notSucceeded int64
	cpu          *SettleCPU
	batches      Batches
}

// drainWith is a drain with the provider answering at once or, with
// latency, in 150–400 ms; its worker is stopped and the provider's
// faults cleared before it returns.
func (r *runner) drainWith(ctx context.Context, client *apiClient, concurrency int, latency bool) (drained, error) {
	if latency {
		if err := fakepsp.SetFaults(ctx, r.sys.PSPURL, slowProvider); err != nil {
			return drained{}, fmt.Errorf("slow the provider down: %w", err)
		}
	}
	d, stopWorker, err := r.drain(ctx, client, concurrency)
	if stopWorker != nil {
		err = errors.Join(err, stopWorker())
	}
	if latency {
		err = errors.Join(err, fakepsp.SetFaults(ctx, r.sys.PSPURL, fakepsp.Schedule{}))
	}
	return d, err
}

// merge sums drains: rates, CPU per charge and batches averaged (the CPU
// nil if any drain's is), backlogs, seconds and charges not succeeded
// added up.
func merge(ds []drained) drained {
	m := drained{cpu: &SettleCPU{}}
	n := float64(len(ds))
	for _, d := range ds {
		m.backlog += d.backlog
		m.seconds += d.seconds
		m.notSucceeded += d.notSucceeded
		m.perSecond += d.perSecond / n
		m.batches.Claim += d.batches.Claim / n
		m.batches.Settle += d.batches.Settle / n
		if d.cpu == nil || m.cpu == nil {
			m.cpu = nil
			continue
		}
		m.cpu.Worker += d.cpu.Worker / n
		m.cpu.Provider += d.cpu.Provider / n
		m.cpu.Postgres += d.cpu.Postgres / n
	}
	return m
}

// drain empties the charge tables (earlier measurements left tens of
// thousands of charges, the raw baseline's among them, whose jobs would
// otherwise be worked too), seeds them again, builds a backlog through the
// API with no worker running, starts a worker and times it emptying the
// backlog. It returns the running worker's stop function.
func (r *runner) drain(ctx context.Context, client *apiClient, concurrency int) (drained, func() error, error) {
	var d drained
	if _, err := r.admin.Exec(ctx, `TRUNCATE webhook_attempts, webhook_deliveries, events, charge_audit, idempotency_keys, charges, river_job`); err != nil {
		return d, nil, fmt.Errorf("empty the charge tables: %w", err)
	}
	// The seed's charges join the backlog; the new statistics keep the
	// foreign-key checks on their indexes.
	if err := r.seed(ctx); err != nil {
		return d, nil, err
	}
	fill := r.load.run(ctx, loadOptions{concurrency: concurrency, until: r.half()}, client.accept)
	d.accept = throughputOf(fill)
	// The tables grew from the seed's rows to the backlog's: in production
	// autovacuum would analyze them within a minute; here nothing might
	// (see runner.seed), and the worker's queries would be planned for
	// tables a tenth of their size.
	if _, err := r.admin.Exec(ctx, analyzeTables); err != nil {
		return d, nil, fmt.Errorf("analyze: %w", err)
	}
	// Every drain starts from a checkpoint, not in the middle of one the
	// writes before it (the fill, the end-to-end search) set off: the
	// drains are compared with each other. Needs a superuser (or
	// pg_checkpoint); without one the drains take their chances.
	_, _ = r.admin.Exec(ctx, `CHECKPOINT`)
	before, err := r.counts(ctx)
	if err != nil {
		return d, nil, err
	}
	d.backlog = before.unsettled

	cpuBefore, err := r.settleCPU(ctx)
	if err != nil {
		return d, nil, err
	}
	started := time.Now()
	stopWorker, err := r.sys.StartWorker(ctx)
	if err != nil {
		return d, nil, err
	}
	fail := func(err error) (drained, func() error, error) {
		_ = stopWorker()
		return d, nil, err
	}
	var at10, at90 time.Time
	var n10, n90 int64
	deadline := started.Add(max(2*time.Minute, 20*r.opts.Duration))
	for {
		// No charge is accepted during a drain: what left the backlog
		// settled.
		unsettled, err := r.backlog(ctx)
		if err != nil {
			return fail(err)
		}
		settled := d.backlog - unsettled
		now := time.Now()
		if at10.IsZero() && settled*10 >= d.backlog {
			at10, n10 = now, settled
		}
		if at90.IsZero() && settled*10 >= 9*d.backlog {
			at90, n90 = now, settled
		}
		if unsettled == 0 {
			d.seconds = time.Since(started).Seconds()
			after, err := r.counts(ctx)
			if err != nil {
				return fail(err)
			}
			d.notSucceeded = after.notSucceeded - before.notSucceeded
			break
		}
		if now.After(deadline) {
			return fail(fmt.Errorf("the worker left %d of %d charges unsettled after %s", unsettled, d.backlog, time.Since(started).Round(time.Second)))
		}
		select {
		case <-ctx.Done():
			return fail(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	cpuAfter, err := r.settleCPU(ctx)
	if err != nil {
		return fail(err)
	}
	d.cpu = cpuAfter.sub(cpuBefore).perCharge(d.backlog)
	if d.batches, err = r.batches(ctx); err != nil {
		return fail(err)
	}
	if span := at90.Sub(at10); span > 0 && n90 > n10 {
		d.perSecond = float64(n90-n10) / span.Seconds()
	} else if d.seconds > 0 {
		// Too small a backlog to see its middle: the whole drain, start-up
		// included, is the (pessimistic) rate.
		d.perSecond = float64(d.backlog) / d.seconds
	}
	return d, stopWorker, nil
}

// batches reads how deep the worker's statements were over a drain from
// its audit trail (the tables hold that drain's charges only): the rows
// of one claim, or of one settling transaction, share their transaction
// id (xmin).
func (r *runner) batches(ctx context.Context) (Batches, error) {
	var claimed, claims, settled, settles int64
	err := r.admin.QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE to_state = 'submitting'),
		count(DISTINCT xmin::text) FILTER (WHERE to_state = 'submitting'),
		count(*) FILTER (WHERE from_state = 'submitting'),
		count(DISTINCT xmin::text) FILTER (WHERE from_state = 'submitting')
		FROM charge_audit WHERE tenant_id = $1`, r.sys.TenantID).Scan(&claimed, &claims, &settled, &settles)
	if err != nil {
		return Batches{}, fmt.Errorf("count the worker's statements: %w", err)
	}
	var b Batches
	if claims > 0 {
		b.Claim = float64(claimed) / float64(claims)
	}
	if settles > 0 {
		b.Settle = float64(settled) / float64(settles)
	}
	return b, nil
}

// sustainedShare is the share of the sustainable rate the sustained run
// offers: some headroom, as a capacity plan would leave.
const sustainedShare = 0.8

// sustainableRate is the end-to-end rate one machine sustains when the API
// accepts at most accept/s alone and the worker settles at most settle/s
// alone, times sustainedShare. The two share the machine's CPUs (and
// Postgres), so each charge costs 1/accept + 1/settle seconds of it;
// offering half the accept rate, as if the worker ran elsewhere, would
// overload a small machine by construction.
func sustainableRate(accept, settle float64) float64 {
	if accept <= 0 || settle <= 0 {
		return 0
	}
	return sustainedShare / (1/accept + 1/settle)
}

// sustain offers the API charges at perSecond for the run's duration while
// the worker runs, samples the backlog, and waits for it to drain.
func (r *runner) sustain(ctx context.Context, client *apiClient, concurrency int, perSecond float64, duration time.Duration) (Sustained, error) {
	s := Sustained{OfferedPerSecond: perSecond}
	if perSecond <= 0 {
		return s, nil
	}
	before, err := r.counts(ctx)
	if err != nil {
		return s, err
	}
	limiter := rate.NewLimiter(rate.Limit(perSecond), 1)
	stopLoad := make(chan struct{})
	loaded := make(chan tally, 1)
	started := time.Now()
	go func() {
		loaded <- r.load.run(ctx, loadOptions{concurrency: concurrency, until: until{signal: stopLoad}, limiter: limiter}, client.accept)
	}()
	for time.Since(started) < duration && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
		unsettled, err := r.backlog(ctx)
		if err != nil {
			close(stopLoad)
			<-loaded
			return s, err
		}
		s.BacklogMax = max(s.BacklogMax, unsettled)
	}
	close(stopLoad)
	s.Accepted = throughputOf(<-loaded)
	last, err := r.counts(ctx)
	if err != nil {
		return s, err
	}
	s.BacklogEnd = last.unsettled
	s.BacklogMax = max(s.BacklogMax, last.unsettled)
	s.SettledPerSecond = float64(last.succeeded+last.notSucceeded-before.succeeded-before.notSucceeded) / time.Since(started).Seconds()
	s.Bounded = float64(s.BacklogEnd) <= perSecond
	s.KeptUp = s.Bounded && s.Accepted.Failures == 0 && s.Accepted.PerSecond >= keptUpShare*perSecond

	stopped := time.Now()
	for time.Since(stopped) < time.Minute {
		unsettled, err := r.backlog(ctx)
		if err != nil {
			return s, err
		}
		if unsettled == 0 {
			s.Drained, s.DrainedAfterSeconds = true, time.Since(stopped).Seconds()
			break
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return s, nil
}
