// Package reconciler resolves charges whose outcome is unknown, with proof.
//
// Any number of reconcilers run against one database. Each tick, one leases
// a batch of charges — unknown ones whose next check is due, and ones stuck
// in submitting longer than the provider call timeout plus a margin — with
// the database's clock, FOR UPDATE SKIP LOCKED, and a lease_token that grows
// on every lease. It looks each provider key up and writes what the answer
// proves, every write fenced on its lease token, so a reconciler whose lease
// expired mid-flight writes nothing (and counts the refusal):
//
//	found, succeeded or declined            → succeeded / failed
//	found, about other money                → needs_review (amount_mismatch)
//	not found, proven, inside the key window → pending + a new charge.submit job, one
//	                                          transaction, the same provider key
//	not found, not yet proven               → stays unknown until the proof window ends
//	not found, never provable               → stays unknown, then needs_review
//	lookup error                            → stays unknown, exponential backoff with jitter
//	too many attempts, unknown too long,    → needs_review, with the reason
//	the provider's key window ending, or
//	a provider that never de-duplicates
//
// What a not-found proves follows from the provider's capabilities
// (psp.Capabilities; ProofWindow): a strongly consistent lookup proves that
// no charge exists once the apply window since the last send has passed —
// the call timeout (a request can reach the provider until then), plus the
// longest the provider may take to apply it, plus a margin; an eventually
// consistent one once its lag bound has passed as well; an unbounded or
// missing lookup never does. Re-sending with the same key is automatic only
// inside the provider's key window (less a margin), where its
// de-duplication backs up the proof. docs/provider.md has the table.
//
// Each tick also looks for pending charges whose charge.submit job River gave
// up on (discarded after a crash loop, cancelled by hand): every path that
// makes a charge pending writes its job in the same transaction, so a
// pending charge without a live job can only be stranded, and it gets a new
// job rather than waiting forever.
//
// Run is a ticker around RunOnce; tests call RunOnce.
package reconciler

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/backoff"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/settle"
	"github.com/chargeflow/chargeflow/submit"
)

// Provider is what the reconciler knows about the provider it reconciles:
// the adapter, whose Capabilities decide what a lookup proves (Decide), and
// the reconciler's own margins around them.
type Provider struct {
	Client psp.Provider
	// MaxApplyDelay is the longest the provider may take, after receiving
	// a request, to apply it (or, for a strong lookup, to show it). It
	// widens the apply window.
	MaxApplyDelay time.Duration
	// KeyWindowMargin is how long before the provider's key window ends
	// the reconciler stops trusting not-found and asks for review instead.
	// Default 1 h.
	KeyWindowMargin time.Duration
	// LookupRate caps lookups per second at this provider, per reconciler
	// process; LookupBurst is the bucket. Defaults 50/s and 10.
	LookupRate  float64
	LookupBurst int
}

// Config configures a reconciler. Zero values take the defaults.
type Config struct {
	DB *pgxpool.Pool
	// Jobs enqueues the charge.submit job of a re-attempt.
	Jobs *submit.Queue
	// Provider is the processes' own provider, with the margins every
	// provider is reconciled with. Providers finds the adapter of every
	// account whose rows this reconciler leases (docs/routing.md); nil is
	// Provider.Client alone.
	Provider    Provider
	Providers   psp.Registry
	Logger      *slog.Logger
	CrashPoints *crashpoint.Set

	// ID names this reconciler in leases and events. Default: host-pid-random.
	ID string
	// Interval is the tick of Run. Default 1 s.
	Interval time.Duration
	// BatchSize is the most charges leased per tick. Default 32.
	BatchSize int
	// LeaseTTL is how long a lease lasts. Default 30 s.
	LeaseTTL time.Duration
	// Parallelism is how many lookups run at once. Default 8.
	Parallelism int

	// StaleMargin: a charge in submitting longer than the provider
	// client's call timeout plus StaleMargin is taken over (its worker died
	// mid-call). Default 10 s.
	StaleMargin time.Duration
	// ApplyMargin pads the apply window. Default 1 s.
	ApplyMargin time.Duration

	// StrandedAfter is how long a pending charge without a live
	// charge.submit job waits before it gets a new one. Default 1 min.
	StrandedAfter time.Duration

	// MaxAttempts is how many provider calls a charge may get before a
	// proven not-found asks for review instead of another attempt.
	// Default 5.
	MaxAttempts int
	// MaxUnknownAge is how long a charge may stay unknown while lookups
	// fail (or cannot prove anything) before it needs review. Default 1 h.
	MaxUnknownAge time.Duration
	// LookupBackoffBase and LookupBackoffCap space lookups that failed:
	// base·2^(failures-1), at most the cap, with jitter. Defaults 1 s, 5 min.
	LookupBackoffBase time.Duration
	LookupBackoffCap  time.Duration

	// HoldMargin is how long before its provider's hold window ends a held
	// charge (requires_capture) is first looked up, and HoldRecheck how
	// often after that, until the provider released it (hold.go).
	// Defaults 1 h and 15 min.
	HoldMargin  time.Duration
	HoldRecheck time.Duration

	// TracerProvider makes a "charge.reconcile" span per leased charge; the
	// lookup's span is its child, and so is the charge.submit job of a
	// re-attempt (with outbox.TraceContext on the River client). Nil means
	// no spans.
	TracerProvider trace.TracerProvider
	// MeterProvider records MetricDecisions and MetricLag. Nil means no
	// metrics.
	MeterProvider metric.MeterProvider
}

// Reconciler resolves unknown charges. Its methods are safe for concurrent use.
type Reconciler struct {
	cfg Config
	// own is the processes' own provider's account.
	own       *account
	telemetry telemetry

	accounts struct {
		sync.Mutex
		m map[string]*account
	}

	totals struct {
		sync.Mutex
		Result
	}
}

// Result counts what one RunOnce (or, from Totals, every run) did.
type Result struct {
	Leased          int
	StaleSubmitting int
	Succeeded       int
	Failed          int
	Requeued        int
	NotYetProven    int
	LookupErrors    int
	NeedsReview     int
	// Fenced counts writes refused because this reconciler's lease had
	// expired and another had taken the charge.
	Fenced int
	// Conflicts counts writes dropped because someone else (a late worker
	// answer, an operator) moved the charge first.
	Conflicts int
	// Stranded counts pending charges given a new charge.submit job because
	// River had given up on theirs.
	Stranded int
	// Released counts held charges found released at their provider (their
	// hold expired) and moved to canceled.
	Released int
}

func (r *Result) add(o Result) {
	r.Leased += o.Leased
	r.StaleSubmitting += o.StaleSubmitting
	r.Succeeded += o.Succeeded
	r.Failed += o.Failed
	r.Requeued += o.Requeued
	r.NotYetProven += o.NotYetProven
	r.LookupErrors += o.LookupErrors
	r.NeedsReview += o.NeedsReview
	r.Fenced += o.Fenced
	r.Conflicts += o.Conflicts
	r.Stranded += o.Stranded
	r.Released += o.Released
}

// Defaults is the configuration New fills zero fields from (ID aside,
// which defaults to host-pid-random); the command's flags show the same.
func Defaults() Config {
	return Config{
		Interval:          time.Second,
		BatchSize:         32,
		LeaseTTL:          30 * time.Second,
		Parallelism:       8,
		StaleMargin:       10 * time.Second,
		ApplyMargin:       time.Second,
		StrandedAfter:     time.Minute,
		MaxAttempts:       5,
		MaxUnknownAge:     time.Hour,
		LookupBackoffBase: time.Second,
		LookupBackoffCap:  5 * time.Minute,
		HoldMargin:        time.Hour,
		HoldRecheck:       15 * time.Minute,
		Provider: Provider{
			KeyWindowMargin: time.Hour,
			LookupRate:      50,
			LookupBurst:     10,
		},
	}
}

// LookupSpan bounds how long after a batch is leased the last of its
// lookups is answered, for a provider whose lookup is one call of at most
// callTimeout: the batch's lookups run Parallelism at a time, and those
// past the rate limit's burst wait for it. A charge's key deadline is
// checked against the lease's time, so the key window's margin must cover
// this much at least, or a not-found could come from a provider that has
// already forgotten the key (the command refuses a smaller
// --key-window-margin). Zero fields take the defaults.
func (cfg Config) LookupSpan(callTimeout time.Duration) time.Duration {
	d := Defaults()
	batch, parallel := cmp.Or(cfg.BatchSize, d.BatchSize), cmp.Or(cfg.Parallelism, d.Parallelism)
	perSecond, burst := cmp.Or(cfg.Provider.LookupRate, d.Provider.LookupRate), cmp.Or(cfg.Provider.LookupBurst, d.Provider.LookupBurst)
	if batch <= 0 || parallel <= 0 || !(perSecond > 0) {
		return math.MaxInt64
	}
	rounds := (batch + parallel - 1) / parallel
	paced := time.Duration(float64(max(batch-burst, 0)) / perSecond * float64(time.Second))
	return time.Duration(rounds)*callTimeout + paced
}

// New checks cfg and fills its defaults.
func New(cfg Config) (*Reconciler, error) {
	if cfg.DB == nil || cfg.Jobs == nil || cfg.Provider.Client == nil || cfg.Provider.Client.Capabilities().Name == "" {
		return nil, errors.New("reconciler: DB, Jobs and a Provider with a named client are required")
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if cfg.ID == "" {
		host, _ := os.Hostname()
		var suffix [3]byte
		_, _ = rand.Read(suffix[:])
		cfg.ID = fmt.Sprintf("%s-%d-%s", cmp.Or(host, "host"), os.Getpid(), hex.EncodeToString(suffix[:]))
	}
	d := Defaults()
	cfg.Interval = cmp.Or(cfg.Interval, d.Interval)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, d.BatchSize)
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, d.LeaseTTL)
	cfg.Parallelism = cmp.Or(cfg.Parallelism, d.Parallelism)
	cfg.StaleMargin = cmp.Or(cfg.StaleMargin, d.StaleMargin)
	cfg.ApplyMargin = cmp.Or(cfg.ApplyMargin, d.ApplyMargin)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, d.MaxAttempts)
	cfg.StrandedAfter = cmp.Or(cfg.StrandedAfter, d.StrandedAfter)
	cfg.MaxUnknownAge = cmp.Or(cfg.MaxUnknownAge, d.MaxUnknownAge)
	cfg.LookupBackoffBase = cmp.Or(cfg.LookupBackoffBase, d.LookupBackoffBase)
	cfg.LookupBackoffCap = cmp.Or(cfg.LookupBackoffCap, d.LookupBackoffCap)
	cfg.HoldMargin = cmp.Or(cfg.HoldMargin, d.HoldMargin)
	cfg.HoldRecheck = cmp.Or(cfg.HoldRecheck, d.HoldRecheck)
	p := &cfg.Provider
	p.KeyWindowMargin = cmp.Or(p.KeyWindowMargin, d.Provider.KeyWindowMargin)
	p.LookupRate = cmp.Or(p.LookupRate, d.Provider.LookupRate)
	p.LookupBurst = cmp.Or(p.LookupBurst, d.Provider.LookupBurst)
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Providers == nil {
		cfg.Providers = psp.Single(p.Client)
	}
	r := &Reconciler{cfg: cfg}
	own, err := r.newAccount(p.Client)
	if err != nil {
		return nil, err
	}
	r.own = own
	r.accounts.m = map[string]*account{own.caps.Name: own}
	tel, err := newTelemetry(cfg, r.lag)
	if err != nil {
		return nil, err
	}
	r.telemetry = tel
	return r, nil
}

// check refuses, once the defaults are filled in, what would panic or
// prove a not-found too early: a negative interval stops the ticker with a
// panic, a negative margin or apply delay narrows the windows a not-found
// is proven in (a negative key-window margin trusts it past the key
// window), a rate that is not a positive number stops every lookup.
func (cfg Config) check() error {
	var errs []error
	for _, d := range []struct {
		name  string
		value time.Duration
	}{
		{"interval", cfg.Interval}, {"lease TTL", cfg.LeaseTTL}, {"stale margin", cfg.StaleMargin},
		{"apply margin", cfg.ApplyMargin}, {"stranded after", cfg.StrandedAfter}, {"max unknown age", cfg.MaxUnknownAge},
		{"lookup backoff base", cfg.LookupBackoffBase}, {"lookup backoff cap", cfg.LookupBackoffCap},
		{"max apply delay", cfg.Provider.MaxApplyDelay}, {"key window margin", cfg.Provider.KeyWindowMargin},
		{"hold margin", cfg.HoldMargin}, {"hold recheck", cfg.HoldRecheck},
	} {
		if d.value < 0 {
			errs = append(errs, fmt.Errorf("reconciler: %s %s is negative", d.name, d.value))
		}
	}
	if cfg.BatchSize < 0 || cfg.Parallelism < 0 || cfg.MaxAttempts < 0 || cfg.Provider.LookupBurst < 0 {
		errs = append(errs, errors.New("reconciler: batch size, parallelism, max attempts and lookup burst cannot be negative"))
	}
	if !(cfg.Provider.LookupRate > 0) || math.IsInf(cfg.Provider.LookupRate, 1) {
		errs = append(errs, fmt.Errorf("reconciler: lookup rate %v is not a positive number of lookups a second", cfg.Provider.LookupRate))
	}
	return errors.Join(errs...)
}

// ApplyWindow is how long after the last send a strongly consistent
// not-found proves that no charge exists: the request may reach the
// provider until the call times out, the provider may take maxApplyDelay
// to apply or show it, and margin pads both.
func ApplyWindow(callTimeout, maxApplyDelay, margin time.Duration) time.Duration {
	return callTimeout + maxApplyDelay + margin
}

// ProofWindow is how long after the last send a not-found proves that no
// charge exists, for a provider with caps; provable is false when a
// not-found never proves it. A strong lookup proves it once the apply
// window has passed; an eventual one once its lag bound has passed too
// (the charge may be applied as late as the apply window, then stay
// hidden for the lag); an eventual lookup without a bound, or no lookup at
// all, never proves it, and such charges end with an operator
// (docs/provider.md, "What a lookup proves").
func ProofWindow(caps psp.Capabilities, callTimeout, maxApplyDelay, margin time.Duration) (window time.Duration, provable bool) {
	apply := ApplyWindow(callTimeout, maxApplyDelay, margin)
	switch {
	case caps.Lookup == psp.LookupNone, caps.Lookup == psp.LookupByResend:
		// A re-send's answer is the first request's result or nothing:
		// it never says "not found", so no window makes one a proof.
		return apply, false
	case caps.Consistency == psp.Eventual && caps.LagBound <= 0:
		return apply, false
	case caps.Consistency == psp.Eventual:
		return apply + caps.LagBound, true
	}
	return apply, true
}

// account is one provider the reconciler looks rows up at, with what its
// capabilities make of a lookup.
type account struct {
	client  psp.Provider
	caps    psp.Capabilities
	limiter *rate.Limiter
	// proof is how long after the last send a not-found proves that no
	// charge exists; provable is false when it never does.
	proof    time.Duration
	provable bool
	// opProof and opProvable are the same for a capture or cancel, whose
	// lookup is its held charge's by provider id (settle.Find): strong when
	// the provider retrieves by id (docs/capture.md).
	opProof    time.Duration
	opProvable bool
	// resend is how long after a charge's first send a re-send is still
	// de-duplicated (settle.ResendWindow); zero when the provider never
	// de-duplicates.
	resend time.Duration
}

// newAccount derives client's account with the reconciler's margins,
// refusing a key window the margin does not fit in.
func (r *Reconciler) newAccount(client psp.Provider) (*account, error) {
	p, caps := r.cfg.Provider, client.Capabilities()
	if caps.KeyWindow > 0 && p.KeyWindowMargin >= caps.KeyWindow {
		return nil, fmt.Errorf("reconciler: key window margin %s must be shorter than the key window %s of provider %s", p.KeyWindowMargin, caps.KeyWindow, caps.Name)
	}
	proof, provable := ProofWindow(caps, client.Timeout(), p.MaxApplyDelay, r.cfg.ApplyMargin)
	return &account{
		client:     client,
		caps:       caps,
		limiter:    rate.NewLimiter(rate.Limit(p.LookupRate), p.LookupBurst),
		proof:      proof,
		provable:   provable,
		opProof:    ApplyWindow(client.Timeout(), p.MaxApplyDelay, r.cfg.ApplyMargin),
		opProvable: sweepable(caps),
		resend:     settle.ResendWindow(caps.KeyWindow, p.KeyWindowMargin),
	}, nil
}

// account is the account called name, made on first use and again when
// the registry hands out another adapter for it (its settings changed).
func (r *Reconciler) account(ctx context.Context, name string) (*account, error) {
	client, err := r.cfg.Providers.Provider(ctx, name)
	if err != nil {
		return nil, err
	}
	r.accounts.Lock()
	defer r.accounts.Unlock()
	if a, ok := r.accounts.m[name]; ok && a.client == client {
		return a, nil
	}
	a, err := r.newAccount(client)
	if err != nil {
		return nil, err
	}
	r.accounts.m[name] = a
	return a, nil
}

// ID is the name this reconciler leases under.
func (r *Reconciler) ID() string { return r.cfg.ID }

// Settle is the apply window in force.
func (r *Reconciler) Settle() time.Duration { return r.own.proof }

// Totals is the sum of every RunOnce so far.
func (r *Reconciler) Totals() Result {
	r.totals.Lock()
	defer r.totals.Unlock()
	return r.totals.Result
}

// Run reconciles every Interval until ctx is done. A full batch is followed
// at once by another, so a backlog drains at the speed of the lookups.
func (r *Reconciler) Run(ctx context.Context) error { return r.RunUntil(ctx, ctx.Done()) }

// RunUntil is Run that starts no batch once stop is closed and lets the
// batch in progress finish under ctx: a process told to stop closes stop,
// and cancels ctx after a grace period, which cuts a batch still running
// short (its leases then expire, as a crashed reconciler's do).
func (r *Reconciler) RunUntil(ctx context.Context, stop <-chan struct{}) error {
	own := r.own
	r.cfg.Logger.InfoContext(ctx, "reconciler started", "id", r.cfg.ID, "provider", own.caps.Name,
		"proof_window", own.proof.String(), "not_found_provable", own.provable, "lookup", string(own.caps.Lookup),
		"consistency", string(own.caps.Consistency), "key_window", own.caps.KeyWindow.String())
	ticker := time.NewTicker(r.cfg.Interval)
	defer ticker.Stop()
	for {
		select {
		case <-stop:
			r.cfg.Logger.InfoContext(ctx, "reconciler stopped", "id", r.cfg.ID)
			return nil
		default:
		}
		res, err := r.RunOnce(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			r.cfg.Logger.ErrorContext(ctx, "reconcile", "err", err.Error())
		case res.Leased == r.cfg.BatchSize:
			continue
		}
		select {
		case <-stop:
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// RunOnce gives stranded pending charges a new job, then leases one batch
// and reconciles every charge in it.
func (r *Reconciler) RunOnce(ctx context.Context) (Result, error) {
	res, err := r.runOnce(ctx)
	r.totals.Lock()
	r.totals.add(res)
	r.totals.Unlock()
	r.telemetry.decided(ctx, res)
	return res, err
}

func (r *Reconciler) runOnce(ctx context.Context) (Result, error) {
	var res Result
	names, err := r.cfg.Providers.Names(ctx)
	if err != nil {
		return res, err
	}
	if res.Stranded, err = r.requeueStranded(ctx, names); err != nil {
		return res, err
	}
	if res.Released, err = r.sweepHolds(ctx, names); err != nil {
		return res, err
	}
	leased, err := intent.Lease(ctx, r.cfg.DB, intent.LeaseParams{
		Owner:           r.cfg.ID,
		Providers:       names,
		TTL:             r.cfg.LeaseTTL,
		Limit:           r.cfg.BatchSize,
		StaleSubmitting: r.staleAfter(),
	})
	if err != nil {
		return res, err
	}
	res.Leased = len(leased)
	if len(leased) == 0 {
		return res, nil
	}
	if err := r.cfg.CrashPoints.Hit(ctx, crashpoint.ReconcilerAfterLease); err != nil {
		return res, err
	}

	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	sem := make(chan struct{}, r.cfg.Parallelism)
	for _, l := range leased {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			one, err := r.reconcile(ctx, l)
			if err != nil {
				r.cfg.Logger.ErrorContext(ctx, "reconcile charge", "charge_id", l.ID, "err", err.Error())
			}
			mu.Lock()
			defer mu.Unlock()
			res.add(one)
			if firstErr == nil {
				firstErr = err
			}
		})
	}
	wg.Wait()
	return res, firstErr
}

// requeueStranded gives a new charge.submit job to every pending charge
// River gave up on (its job discarded after a crash loop, or cancelled by
// hand), so that no accepted charge waits forever. Each job goes in with a
// lock on its charge, in one transaction; a live job, even one still
// "running" in a dead worker, is left to River's rescuer.
func (r *Reconciler) requeueStranded(ctx context.Context, providers []string) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, r.cfg.DB, func(tx pgx.Tx) error {
		charges, err := submit.LockStranded(ctx, tx, submit.StrandedParams{
			Providers: providers, OlderThan: r.cfg.StrandedAfter, Limit: r.cfg.BatchSize,
		})
		if err != nil {
			return err
		}
		for _, c := range charges {
			if err := r.cfg.Jobs.Enqueue(ctx, tx, submit.ChargeArgs{TenantID: c.TenantID, ChargeID: c.ChargeID}); err != nil {
				return fmt.Errorf("requeue stranded charge %s: %w", c.ChargeID, err)
			}
			if err := intent.TouchPending(ctx, tx, c.TenantID, c.ChargeID); err != nil {
				return err
			}
			r.cfg.Logger.WarnContext(ctx, "requeued a pending charge whose job River gave up on", "charge_id", c.ChargeID, "tenant_id", c.TenantID)
		}
		n = len(charges)
		return nil
	})
	return n, err
}

// lag is how long the most overdue charge of this reconciler's providers
// has been waiting for it; MetricLag observes it.
func (r *Reconciler) lag(ctx context.Context) (time.Duration, error) {
	names, err := r.cfg.Providers.Names(ctx)
	if err != nil {
		return 0, err
	}
	return intent.ReconcileLag(ctx, r.cfg.DB, names, r.staleAfter())
}

// staleAfter is how long a charge may sit in submitting before the
// reconciler takes it: longer than any call can take, plus the margin, so
// a live worker is never overtaken mid-call.
func (r *Reconciler) staleAfter() time.Duration {
	return r.cfg.Provider.Client.Timeout() + r.cfg.StaleMargin
}

// reconcile decides one leased charge and writes the decision, fenced, in
// the charge's span.
func (r *Reconciler) reconcile(ctx context.Context, l intent.Leased) (Result, error) {
	ctx, span := r.telemetry.startReconcile(ctx, l.Charge)
	defer span.End()
	log := r.cfg.Logger.With(string(cmp.Or(l.Kind, intent.KindCharge))+"_id", l.ID, "tenant_id", l.TenantID, "lease_token", l.LeaseToken)
	if sc := span.SpanContext(); sc.HasTraceID() {
		log = log.With("trace_id", sc.TraceID().String())
	}
	res, err := r.decideAndWrite(ctx, log, l)
	endReconcile(span, res, err)
	return res, err
}

// decideAndWrite looks a leased charge up (unless it is a stale submitting
// one) and writes what the answer proves.
func (r *Reconciler) decideAndWrite(ctx context.Context, log *slog.Logger, l intent.Leased) (Result, error) {
	c := l.Charge
	actor := "reconciler:" + r.cfg.ID

	if c.State == intent.StateSubmitting {
		// The worker that committed submitting has been silent for longer
		// than a call can take: it died mid-call. Whatever it sent may
		// exist, so the charge's outcome is unknown; look it up next tick.
		return r.write(ctx, log, Result{StaleSubmitting: 1}, func(tx pgx.Tx) error {
			_, err := intent.MoveCharge(ctx, tx, intent.Move{TenantID: c.TenantID, ChargeID: c.ID,
				From: intent.StateSubmitting, To: intent.StateUnknown, Actor: actor, Reason: "stale_submitting",
				LeaseToken: c.LeaseToken})
			return err
		})
	}

	a, err := r.account(ctx, c.Provider)
	if err != nil {
		// This process cannot call the row's provider (its account's
		// settings changed since the lease was taken): try again later.
		log.WarnContext(ctx, "cannot look the row up at its provider here", "provider", c.Provider, "err", err.Error())
		return r.write(ctx, log, Result{LookupErrors: 1}, func(tx pgx.Tx) error {
			return intent.RescheduleCheck(ctx, tx, intent.Recheck{TenantID: c.TenantID, ChargeID: c.ID, LeaseToken: c.LeaseToken,
				After: r.backoff(c.LookupFailures + 1), LookupFailed: true})
		})
	}
	if d, ok := r.beforeResend(a, l); ok {
		return r.apply(ctx, log, c, d)
	}
	if err := a.limiter.Wait(ctx); err != nil {
		return Result{}, err
	}
	// The client bounds the lookup with its call timeout; the row's kind
	// decides what is looked up, and the provider's capabilities how: a
	// provider without a lookup is asked by sending the row's own request
	// again (settle.Find).
	found, lookupErr := settle.Find(ctx, r.cfg.DB, a.client, c)
	if err := r.cfg.CrashPoints.Hit(ctx, crashpoint.ReconcilerAfterLookupBeforeUpdate); err != nil {
		return Result{}, err
	}
	return r.apply(ctx, log, c, r.decide(a, l, found, lookupErr))
}

// apply logs decision d about c and writes it, fenced.
func (r *Reconciler) apply(ctx context.Context, log *slog.Logger, c intent.Charge, d decision) (Result, error) {
	noun := string(cmp.Or(c.Kind, intent.KindCharge))
	switch {
	case d.requeue:
		log.InfoContext(ctx, "the provider proved it never took the "+noun+"; sending it again with the same key", "decision", d.reason)
	case d.move.To == intent.StateNeedsReview:
		log.WarnContext(ctx, "nothing could prove what became of the "+noun+"; it needs a person (needs_review)", "decision", d.reason)
	case d.move.To != "":
		log.InfoContext(ctx, noun+" "+string(d.move.To)+", as the provider's records show", "decision", d.reason)
	default:
		log.DebugContext(ctx, "looked the "+noun+" up; nothing proven yet, checking again later", "decision", d.reason)
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("chargeflow.reconcile.decision", d.reason))
	if d.requeue {
		return r.write(ctx, log, d.counts, func(tx pgx.Tx) error {
			if _, err := intent.MoveCharge(ctx, tx, d.move); err != nil {
				return err
			}
			return r.cfg.Jobs.Enqueue(ctx, tx, submit.ChargeArgs{TenantID: c.TenantID, ChargeID: c.ID})
		})
	}
	if d.move.To == "" {
		return r.write(ctx, log, d.counts, func(tx pgx.Tx) error {
			return intent.RescheduleCheck(ctx, tx, d.recheck)
		})
	}
	return r.write(ctx, log, d.counts, func(tx pgx.Tx) error {
		_, err := intent.MoveCharge(ctx, tx, d.move)
		return err
	})
}

// decision is what a lookup proves: a move (with, for a re-attempt, a new
// job), or a later check.
type decision struct {
	reason  string
	move    intent.Move
	requeue bool
	recheck intent.Recheck
	counts  Result
}

// beforeResend is the decision about l made before any call, for a
// provider whose lookup is a re-send (psp.LookupByResend): past the key
// window less its margin, a re-send could charge anew, so the row goes to
// review unsent. ok is false when the re-send may go.
func (r *Reconciler) beforeResend(a *account, l intent.Leased) (decision, bool) {
	if a.caps.Lookup != psp.LookupByResend || !r.keyWindowEnding(a, l) {
		return decision{}, false
	}
	rules := r.rules(l)
	return rules.review("key_window_passed", "the provider's idempotency key window is ending, and it has no lookup: a re-send could charge anew"), true
}

// keyWindowEnding reports whether a re-send of l's row would no longer be
// de-duplicated (settle.ResendCovered, the rule an operator's resolution is
// held to as well). A provider that never de-duplicates has no key window
// to end; its not-found goes to review in decide.
func (r *Reconciler) keyWindowEnding(a *account, l intent.Leased) bool {
	return a.resend > 0 && !settle.ResendCovered(l.Charge, a.resend, l.Now)
}

// ruleset builds the decisions about one leased row.
type ruleset struct {
	move    intent.Move
	recheck func(reason string, after time.Duration, failed bool, counts Result) decision
	review  func(reason, why string) decision
}

func (r *Reconciler) rules(l intent.Leased) ruleset {
	c := l.Charge
	rs := ruleset{move: intent.Move{TenantID: c.TenantID, ChargeID: c.ID, From: intent.StateUnknown,
		Actor: "reconciler:" + r.cfg.ID, LeaseToken: c.LeaseToken}}
	rs.recheck = func(reason string, after time.Duration, failed bool, counts Result) decision {
		return decision{reason: reason, counts: counts, recheck: intent.Recheck{TenantID: c.TenantID, ChargeID: c.ID,
			LeaseToken: c.LeaseToken, After: max(after, 0), LookupFailed: failed}}
	}
	rs.review = func(reason, why string) decision {
		move := rs.move
		move.To, move.Reason, move.ReviewReason = intent.StateNeedsReview, reason, why
		return decision{reason: reason, move: move, counts: Result{NeedsReview: 1}}
	}
	return rs
}

// decide is the table of the package doc, for one charge and one lookup at
// its provider a. Every time it compares comes from the database's clock.
func (r *Reconciler) decide(a *account, l intent.Leased, found psp.Charge, lookupErr error) decision {
	c, now := l.Charge, l.Now
	rs := r.rules(l)
	move, recheck, review := rs.move, rs.recheck, rs.review
	keyWindowEnding := r.keyWindowEnding(a, l)
	unknownFor := now.Sub(timeOr(c.UnknownSince, now))

	switch {
	case lookupErr == nil:
		moves, outcome := settle.Moves(move, c, found, settle.Lookup)
		d := decision{reason: moves[0].Reason, move: moves[0]}
		switch outcome {
		case settle.Succeeded, settle.Authorized:
			d.counts.Succeeded = 1
		case settle.Released:
			d.counts.Released = 1
		case settle.Declined:
			d.counts.Failed = 1
		case settle.Mismatch:
			d.counts.NeedsReview = 1
		}
		return d

	case errors.Is(lookupErr, psp.ErrNotFound):
		proof, provable := a.proof, a.provable
		if c.Kind.Operation() {
			proof, provable = a.opProof, a.opProvable
		}
		settledAt := timeOr(c.LastAttemptAt, c.CreatedAt).Add(proof)
		switch {
		case keyWindowEnding:
			return review("key_window_passed", "the provider's idempotency key window is ending; a not-found can no longer prove that no charge exists")
		case !provable && unknownFor >= r.cfg.MaxUnknownAge:
			return review("lookup_not_authoritative", "the provider's lookup cannot prove that no charge exists, and the charge has been unknown for "+unknownFor.Round(time.Second).String())
		case !provable:
			return recheck("not_found_not_authoritative", r.backoff(c.LookupFailures+1), false, Result{NotYetProven: 1})
		case now.Before(settledAt):
			return recheck("not_found_not_yet_proven", settledAt.Sub(now), false, Result{NotYetProven: 1})
		case a.caps.KeyWindow == 0:
			return review("never_deduplicated", "proven not found, but the provider does not de-duplicate idempotency keys, so no attempt is re-sent automatically")
		case c.Attempts >= r.cfg.MaxAttempts:
			return review("attempts_exhausted", fmt.Sprintf("proven not found after %d attempts; no further attempt is made automatically", c.Attempts))
		}
		move.To, move.Reason = intent.StatePending, "proven_not_found"
		move.Evidence = fmt.Sprintf("lookup not found %s after the last send (apply window %s)", now.Sub(timeOr(c.LastAttemptAt, now)).Round(time.Millisecond), proof)
		return decision{reason: move.Reason, move: move, requeue: true, counts: Result{Requeued: 1}}

	default:
		switch {
		case keyWindowEnding:
			return review("key_window_passed", "the provider's idempotency key window is ending and the lookup fails")
		case unknownFor >= r.cfg.MaxUnknownAge:
			return review("lookup_unavailable", "lookups have failed for "+unknownFor.Round(time.Second).String()+": "+psp.ReasonOf(lookupErr))
		}
		return recheck("lookup_error:"+psp.ReasonOf(lookupErr), r.backoff(c.LookupFailures+1), true, Result{LookupErrors: 1})
	}
}

// write runs fn in a transaction and turns a lost compare-and-set into a
// count: a stale lease is a fenced refusal, another state a conflict.
func (r *Reconciler) write(ctx context.Context, log *slog.Logger, counts Result, fn func(pgx.Tx) error) (Result, error) {
	err := pgx.BeginFunc(ctx, r.cfg.DB, fn)
	switch {
	case errors.Is(err, intent.ErrFenced):
		log.InfoContext(ctx, "fenced write refused: the lease expired and another reconciler took the charge", "err", err.Error())
		return Result{Fenced: 1}, nil
	case errors.Is(err, intent.ErrConflict):
		log.DebugContext(ctx, "the worker or a notification settled it first; this lookup is not needed", "err", err.Error())
		return Result{Conflicts: 1}, nil
	case err != nil:
		return Result{}, err
	}
	return counts, nil
}

// backoff is the wait before lookup number n (1-based) of a failing
// streak, by the one backoff rule.
func (r *Reconciler) backoff(n int) time.Duration {
	return backoff.Delay(n, r.cfg.LookupBackoffBase, r.cfg.LookupBackoffCap)
}

// timeOr returns *t, or fallback when t is nil (a time not yet recorded).
func timeOr(t *time.Time, fallback time.Time) time.Time {
	if t == nil {
		return fallback
	}
	return *t
}
