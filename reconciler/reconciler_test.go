package reconciler_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/reconciler"
	"github.com/chargeflow/chargeflow/submit"
)

// testBundle is a real database, a real fake provider on loopback and an
// insert-only River client; tests call RunOnce themselves.
type testBundle struct {
	pool     *pgxpool.Pool
	queue    *submit.Queue
	pspURL   string
	provider *psp.Client
	tenantID string
}

const (
	callTimeout  = 300 * time.Millisecond
	settleMargin = 100 * time.Millisecond
)

func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	return setupWith(t, fakepsp.Config{}, psp.Capabilities{})
}

// setupWith is setup with a fake of cfg and a client declaring caps.
func setupWith(t *testing.T, cfg fakepsp.Config, caps psp.Capabilities) (context.Context, *testBundle) {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	fake := fakepsptest.Start(t, cfg)
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: submit.Middleware()})
	require.NoError(t, err)
	jobs, err := submit.NewQueue(submit.Config{River: riverClient})
	require.NoError(t, err)
	return ctx, &testBundle{pool: pool, queue: jobs, pspURL: fake.URL, tenantID: dbtest.Tenant(t, pool, "reconciler test"),
		provider: psp.NewClient(psp.Config{BaseURL: fake.URL, Timeout: callTimeout, Capabilities: caps})}
}

// newReconciler builds a reconciler with short timings; edit adjusts it.
func (b *testBundle) newReconciler(t *testing.T, edit ...func(*reconciler.Config)) *reconciler.Reconciler {
	t.Helper()
	cfg := reconciler.Config{
		DB: b.pool, Jobs: b.queue,
		Provider:          reconciler.Provider{Client: b.provider},
		StaleMargin:       100 * time.Millisecond,
		ApplyMargin:       settleMargin,
		LeaseTTL:          5 * time.Second,
		LookupBackoffBase: 50 * time.Millisecond,
		LookupBackoffCap:  100 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	}
	for _, e := range edit {
		e(&cfg)
	}
	r, err := reconciler.New(cfg)
	require.NoError(t, err)
	return r
}

// unknownCharge makes a charge whose call went out (attempts 1) and whose
// outcome is unknown, due for a check now.
func (b *testBundle) unknownCharge(ctx context.Context, t *testing.T, amount int64) intent.Charge {
	t.Helper()
	return b.unknownChargePaidWith(ctx, t, amount, "")
}

// unknownChargePaidWith is unknownCharge with a payment method ("" is the
// default card).
func (b *testBundle) unknownChargePaidWith(ctx context.Context, t *testing.T, amount int64, paymentMethod string) intent.Charge {
	t.Helper()
	c := b.submittingChargePaidWith(ctx, t, amount, paymentMethod)
	c, err := intent.MoveCharge(ctx, b.pool, intent.Move{TenantID: c.TenantID, ChargeID: c.ID, From: intent.StateSubmitting,
		To: intent.StateUnknown, Actor: "test", Reason: "timeout"})
	require.NoError(t, err)
	return c
}

func (b *testBundle) submittingCharge(ctx context.Context, t *testing.T, amount int64) intent.Charge {
	t.Helper()
	return b.submittingChargePaidWith(ctx, t, amount, "")
}

func (b *testBundle) submittingChargePaidWith(ctx context.Context, t *testing.T, amount int64, paymentMethod string) intent.Charge {
	t.Helper()
	c := dbtest.PendingCharge(t, b.pool, dbtest.Charge{TenantID: b.tenantID, Amount: amount, PaymentMethod: paymentMethod})
	c, err := intent.MoveCharge(ctx, b.pool, intent.Move{TenantID: c.TenantID, ChargeID: c.ID, From: intent.StatePending,
		To: intent.StateSubmitting, Actor: "test", Reason: "submit", CountAttempt: true})
	require.NoError(t, err)
	return c
}

// chargeAtProvider applies a charge at the fake provider under c's key, as
// the lost call did.
func (b *testBundle) chargeAtProvider(t *testing.T, c intent.Charge, amount int64, paymentMethod string) {
	t.Helper()
	_, err := b.provider.Charge(context.Background(), psp.ChargeRequest{Key: c.ProviderKey, Amount: amount, Currency: c.Currency,
		PaymentMethod: paymentMethod, Reference: c.ID})
	require.NoError(t, err)
}

func (b *testBundle) faults(t *testing.T, schedule fakepsp.Schedule) {
	t.Helper()
	require.NoError(t, fakepsp.SetFaults(context.Background(), b.pspURL, schedule))
}

func (b *testBundle) get(ctx context.Context, t *testing.T, id string) intent.Charge {
	t.Helper()
	c, err := intent.Get(ctx, b.pool, b.tenantID, id)
	require.NoError(t, err)
	return c
}

func (b *testBundle) jobs(ctx context.Context, t *testing.T, id string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args->>'charge_id' = $1`, id).Scan(&n))
	return n
}

// makeDue makes the charge's next check due now, as time passing would.
func (b *testBundle) makeDue(ctx context.Context, t *testing.T, id string) {
	t.Helper()
	_, err := b.pool.Exec(ctx, `UPDATE charges SET next_check_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
}

// age moves a charge's clock marks into the past, as time passing would.
func (b *testBundle) age(ctx context.Context, t *testing.T, id string, by time.Duration) {
	t.Helper()
	_, err := b.pool.Exec(ctx, `UPDATE charges SET first_attempt_at = first_attempt_at - $2::interval,
		last_attempt_at = last_attempt_at - $2::interval, unknown_since = unknown_since - $2::interval,
		next_check_at = now() WHERE id = $1`, id, by)
	require.NoError(t, err)
}

func TestFoundAtProvider(t *testing.T) {
	t.Parallel()

	t.Run("Succeeded", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.unknownCharge(ctx, t, 1500)
		b.chargeAtProvider(t, c, 1500, "pm_card_visa")
		r := b.newReconciler(t)

		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, reconciler.Result{Leased: 1, Succeeded: 1}, res)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateSucceeded, got.State)
		require.True(t, strings.HasPrefix(got.ProviderChargeID, "py_"))
		require.Empty(t, got.LeaseOwner, "a move ends the lease")
		require.Greater(t, got.LeaseToken, c.LeaseToken)
	})

	t.Run("Declined", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.unknownCharge(ctx, t, 1500)
		b.chargeAtProvider(t, c, 1500, "pm_card_chargeDeclinedInsufficientFunds")

		res, err := b.newReconciler(t).RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Failed)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateFailed, got.State)
		require.Equal(t, "insufficient_funds", got.FailureCode)
	})

	t.Run("OtherMoneyNeedsReview", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.unknownCharge(ctx, t, 1500)
		b.chargeAtProvider(t, c, 1499, "pm_card_visa")

		res, err := b.newReconciler(t).RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.NeedsReview)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateNeedsReview, got.State)
		require.Contains(t, got.ReviewReason, "1499")
	})
}

func TestNotFound(t *testing.T) {
	t.Parallel()

	// Not found inside the apply window proves nothing: the charge waits
	// until the window ends. After it, not-found is proof: pending and a new
	// job, same provider key, one transaction.
	t.Run("ProvenOnlyAfterApplyWindow", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.unknownCharge(ctx, t, 1500)
		r := b.newReconciler(t, func(c *reconciler.Config) { c.Provider.MaxApplyDelay = time.Hour })
		require.Equal(t, callTimeout+time.Hour+settleMargin, r.Settle(), "derived from the configuration")

		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, reconciler.Result{Leased: 1, NotYetProven: 1}, res)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateUnknown, got.State)
		require.WithinDuration(t, got.LastAttemptAt.Add(r.Settle()), *got.NextCheckAt, time.Second, "next check when the window ends")
		require.Zero(t, b.jobs(ctx, t, c.ID))

		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, res.Leased, "not due before the window ends")

		b.age(ctx, t, c.ID, time.Hour+time.Second)
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, reconciler.Result{Leased: 1, Requeued: 1}, res)
		got = b.get(ctx, t, c.ID)
		require.Equal(t, intent.StatePending, got.State)
		require.Equal(t, c.ProviderKey, got.ProviderKey, "a re-attempt uses the same provider key")
		require.Equal(t, 1, b.jobs(ctx, t, c.ID))
		events, err := intent.AuditTrail(ctx, b.pool, b.tenantID, c.ID)
		require.NoError(t, err)
		last := events[len(events)-1]
		require.Equal(t, "proven_not_found", last.Reason)
		require.True(t, strings.HasPrefix(last.Actor, "reconciler:"))
		require.Contains(t, last.Evidence, "apply window")
	})

	t.Run("WeakLookupNeverProves", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.unknownCharge(ctx, t, 1500)
		b.age(ctx, t, c.ID, time.Minute)
		r := b.newReconciler(t, func(c *reconciler.Config) {
			c.Provider.Client = b.declaring(psp.Capabilities{Consistency: psp.Eventual})
			c.MaxUnknownAge = 2 * time.Minute
		})

		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.NotYetProven)
		require.Equal(t, intent.StateUnknown, b.get(ctx, t, c.ID).State)

		b.age(ctx, t, c.ID, 2*time.Minute)
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.NeedsReview)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateNeedsReview, got.State)
		require.Zero(t, b.jobs(ctx, t, c.ID), "never re-attempted on an unproven not-found")
	})

	t.Run("AttemptsExhausted", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.unknownCharge(ctx, t, 1500)
		b.age(ctx, t, c.ID, time.Minute)
		r := b.newReconciler(t, func(c *reconciler.Config) { c.MaxAttempts = 1 })

		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.NeedsReview)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateNeedsReview, got.State)
		require.Contains(t, got.ReviewReason, "1 attempts")
	})

	// Near the end of the provider's key window a not-found no longer
	// proves anything: the provider may have forgotten the key.
	t.Run("KeyWindowEnding", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.unknownCharge(ctx, t, 1500)
		b.age(ctx, t, c.ID, 23*time.Hour+time.Minute)

		res, err := b.newReconciler(t).RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.NeedsReview)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateNeedsReview, got.State)
		require.Contains(t, got.ReviewReason, "key window")
		require.Zero(t, b.jobs(ctx, t, c.ID))
	})
}

// declaring is the test's fake provider declaring other capabilities than
// the bundled fake's: the lookups are real, what they are taken to prove
// follows caps (defaults from the real client for zero fields but KeyWindow).
func (b *testBundle) declaring(caps psp.Capabilities) psp.Provider {
	real := b.provider.Capabilities()
	caps.Name = cmp.Or(caps.Name, real.Name)
	caps.Lookup = cmp.Or(caps.Lookup, real.Lookup)
	caps.Consistency = cmp.Or(caps.Consistency, real.Consistency)
	return declared{Client: b.provider, caps: caps}
}

type declared struct {
	*psp.Client
	caps psp.Capabilities
}

func (d declared) Capabilities() psp.Capabilities { return d.caps }

// What a not-found proves follows the provider's declared capabilities:
// the decision table of docs/provider.md, row by row.
func TestCapabilitiesDecide(t *testing.T) {
	t.Parallel()
	const day = 24 * time.Hour

	// An eventual lookup with a lag bound proves not-found only once the
	// apply window and the lag have both passed.
	t.Run("EventualProvesAfterItsLag", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.unknownCharge(ctx, t, 1500)
		r := b.newReconciler(t, func(c *reconciler.Config) {
			c.Provider.Client = b.declaring(psp.Capabilities{Consistency: psp.Eventual, LagBound: time.Hour, KeyWindow: day})
		})
		require.Equal(t, callTimeout+settleMargin+time.Hour, r.Settle())

		b.age(ctx, t, c.ID, 30*time.Minute)
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, reconciler.Result{Leased: 1, NotYetProven: 1}, res)

		b.age(ctx, t, c.ID, time.Hour)
		res, err = r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, reconciler.Result{Leased: 1, Requeued: 1}, res)
		require.Equal(t, 1, b.jobs(ctx, t, c.ID))
	})

	// No lookup at all: not-found is never proof, the charge waits for a
	// person.
	t.Run("NoLookupEndsWithAnOperator", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.unknownCharge(ctx, t, 1500)
		b.age(ctx, t, c.ID, 3*time.Minute)
		r := b.newReconciler(t, func(c *reconciler.Config) {
			c.Provider.Client = b.declaring(psp.Capabilities{Lookup: psp.LookupNone, KeyWindow: day})
			c.MaxUnknownAge = 2 * time.Minute
		})
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.NeedsReview)
		require.Contains(t, b.get(ctx, t, c.ID).ReviewReason, "cannot prove")
		require.Zero(t, b.jobs(ctx, t, c.ID))
	})

	// A provider that never de-duplicates: even a proven not-found does not
	// re-send by itself, since nothing backs the proof up.
	t.Run("NeverDeduplicatedIsNotResent", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)
		c := b.unknownCharge(ctx, t, 1500)
		b.age(ctx, t, c.ID, time.Minute)
		r := b.newReconciler(t, func(c *reconciler.Config) { c.Provider.Client = b.declaring(psp.Capabilities{}) })
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.NeedsReview)
		got := b.get(ctx, t, c.ID)
		require.Contains(t, got.ReviewReason, "does not de-duplicate")
		require.Zero(t, b.jobs(ctx, t, c.ID))
	})

	// The table itself, as a function.
	for _, tc := range []struct {
		name     string
		caps     psp.Capabilities
		window   time.Duration
		provable bool
	}{
		{"Strong", psp.Capabilities{Lookup: psp.LookupByKey, Consistency: psp.Strong}, 12 * time.Second, true},
		{"StrongByReference", psp.Capabilities{Lookup: psp.LookupByReference, Consistency: psp.Strong}, 12 * time.Second, true},
		{"EventualBounded", psp.Capabilities{Lookup: psp.LookupByReference, Consistency: psp.Eventual, LagBound: time.Minute}, 72 * time.Second, true},
		{"EventualUnbounded", psp.Capabilities{Lookup: psp.LookupByReference, Consistency: psp.Eventual}, 12 * time.Second, false},
		{"None", psp.Capabilities{Lookup: psp.LookupNone}, 12 * time.Second, false},
	} {
		window, provable := reconciler.ProofWindow(tc.caps, 10*time.Second, time.Second, time.Second)
		require.Equal(t, tc.window, window, tc.name)
		require.Equal(t, tc.provable, provable, tc.name)
	}
}

// Lookup errors leave the charge unknown with growing waits; when they last
// longer than policy the charge needs review — never failed, never re-sent.
func TestLookupErrors(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	c := b.unknownCharge(ctx, t, 1500)
	b.chargeAtProvider(t, c, 1500, "pm_card_visa")
	b.faults(t, fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{{On: fakepsp.OnLookup, Fault: fakepsp.FaultUnavailable, P: 1}}})
	r := b.newReconciler(t, func(c *reconciler.Config) { c.MaxUnknownAge = time.Hour })

	var waits []time.Duration
	for i := range 3 {
		res, err := r.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, reconciler.Result{Leased: 1, LookupErrors: 1}, res, "round %d", i)
		got := b.get(ctx, t, c.ID)
		require.Equal(t, intent.StateUnknown, got.State)
		require.Equal(t, i+1, got.LookupFailures)
		waits = append(waits, got.NextCheckAt.Sub(got.UpdatedAt))
		b.makeDue(ctx, t, c.ID)
	}
	require.Less(t, waits[0], waits[1], "backoff grows")

	// Healthy again: the lookup finds the charge.
	b.faults(t, fakepsp.Schedule{Seed: 1})
	res, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Succeeded)

	// Down for longer than policy: needs review.
	d := b.unknownCharge(ctx, t, 1600)
	b.faults(t, fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{{On: fakepsp.OnLookup, Fault: fakepsp.FaultUnavailable, P: 1}}})
	b.age(ctx, t, d.ID, 2*time.Hour)
	res, err = r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.NeedsReview)
	got := b.get(ctx, t, d.ID)
	require.Equal(t, intent.StateNeedsReview, got.State)
	require.Contains(t, got.ReviewReason, "lookups have failed")
	require.Zero(t, b.jobs(ctx, t, d.ID))
}

// A charge stuck in submitting longer than a call can take is taken over:
// its worker died mid-call, so its outcome is unknown.
func TestStaleSubmitting(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	c := b.submittingCharge(ctx, t, 1500)
	r := b.newReconciler(t)

	res, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Leased, "a fresh submitting charge belongs to its worker")

	b.age(ctx, t, c.ID, time.Second)
	res, err = r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, reconciler.Result{Leased: 1, StaleSubmitting: 1}, res)
	require.Equal(t, intent.StateUnknown, b.get(ctx, t, c.ID).State)

	b.chargeAtProvider(t, c, 1500, "pm_card_visa")
	res, err = r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Succeeded)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Many reconcilers on one database never lease the same charge twice at once.
func TestConcurrentReconcilersShareWork(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	const n = 40
	for i := range n {
		c := b.unknownCharge(ctx, t, int64(1000+i))
		b.chargeAtProvider(t, c, int64(1000+i), "pm_card_visa")
	}
	var mu sync.Mutex
	var total reconciler.Result
	var wg sync.WaitGroup
	for i := range 4 {
		r := b.newReconciler(t, func(c *reconciler.Config) { c.ID = fmt.Sprint("r", i); c.BatchSize = 5 })
		wg.Go(func() {
			for {
				res, err := r.RunOnce(ctx)
				require.NoError(t, err)
				mu.Lock()
				total.Leased += res.Leased
				total.Succeeded += res.Succeeded
				total.Fenced += res.Fenced
				total.Conflicts += res.Conflicts
				mu.Unlock()
				if res.Leased == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, reconciler.Result{Leased: n, Succeeded: n}, total)
	var events int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM charge_audit WHERE to_state = 'succeeded'`).Scan(&events))
	require.Equal(t, n, events)
}

func TestApplyWindow(t *testing.T) {
	t.Parallel()
	require.Equal(t, 13*time.Second, reconciler.ApplyWindow(10*time.Second, 2*time.Second, time.Second))
	_, err := reconciler.New(reconciler.Config{})
	require.Error(t, err)
	var body bytes.Buffer
	require.NoError(t, json.NewEncoder(&body).Encode(reconciler.Result{}))
}

// A pending charge whose job River gave up on gets a new job; one with a
// live job is left alone.
func TestStrandedPending(t *testing.T) {
	t.Parallel()
	ctx, b := setup(t)
	pendingWithJob := func() intent.Charge {
		var c intent.Charge
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			c = dbtest.PendingCharge(t, tx, dbtest.Charge{TenantID: b.tenantID, Amount: 100})
			return b.queue.Enqueue(ctx, tx, submit.ChargeArgs{TenantID: c.TenantID, ChargeID: c.ID})
		}))
		_, err := b.pool.Exec(ctx, `UPDATE charges SET updated_at = now() - interval '2 minutes' WHERE id = $1`, c.ID)
		require.NoError(t, err)
		return c
	}
	stranded := pendingWithJob()
	_, err := b.pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now() WHERE args->>'charge_id' = $1`, stranded.ID)
	require.NoError(t, err)
	healthy := pendingWithJob()
	r := b.newReconciler(t)

	res, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, reconciler.Result{Stranded: 1}, res)
	live := func(id string) int {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE args->>'charge_id' = $1
			AND state IN ('available', 'scheduled', 'running', 'retryable')`, id).Scan(&n))
		return n
	}
	require.Equal(t, 1, live(stranded.ID), "a new job for the stranded charge")
	require.Equal(t, 1, live(healthy.ID), "the healthy charge kept its one job")
	require.Equal(t, intent.StatePending, b.get(ctx, t, stranded.ID).State)

	res, err = r.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Stranded, "its new job is live")
}

// A configuration that would panic, or prove a not-found too early, does
// not start: New says what is wrong, before any query.
func TestNewRefusesNonsense(t *testing.T) {
	t.Parallel()
	// The pool connects lazily: New needs no database.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: submit.Middleware()})
	require.NoError(t, err)
	jobs, err := submit.NewQueue(submit.Config{River: riverClient})
	require.NoError(t, err)
	for _, tt := range []struct {
		name      string
		configure func(*reconciler.Config)
		says      string
	}{
		{"NegativeInterval", func(c *reconciler.Config) { c.Interval = -time.Second }, "interval -1s is negative"},
		{"NegativeKeyWindowMargin", func(c *reconciler.Config) { c.Provider.KeyWindowMargin = -time.Hour }, "key window margin -1h0m0s is negative"},
		{"NegativeApplyMargin", func(c *reconciler.Config) { c.ApplyMargin = -time.Second }, "apply margin"},
		{"NegativeApplyDelay", func(c *reconciler.Config) { c.Provider.MaxApplyDelay = -time.Second }, "max apply delay"},
		{"NegativeLeaseTTL", func(c *reconciler.Config) { c.LeaseTTL = -time.Second }, "lease TTL"},
		{"NegativeBatch", func(c *reconciler.Config) { c.BatchSize = -1 }, "batch size"},
		{"NegativeRate", func(c *reconciler.Config) { c.Provider.LookupRate = -1 }, "lookup rate"},
		{"NaNRate", func(c *reconciler.Config) { c.Provider.LookupRate = math.NaN() }, "lookup rate"},
	} {
		cfg := reconciler.Config{DB: pool, Jobs: jobs, Provider: reconciler.Provider{Client: psp.NewClient(psp.Config{})}}
		tt.configure(&cfg)
		_, err := reconciler.New(cfg)
		require.ErrorContains(t, err, tt.says, tt.name)
	}
	_, err = reconciler.New(reconciler.Config{DB: pool, Jobs: jobs, Provider: reconciler.Provider{Client: psp.NewClient(psp.Config{})}})
	require.NoError(t, err, "zero values take the defaults")
}

// LookupSpan: a batch's lookups in rounds of Parallelism, each a call, plus
// the pacing of those past the burst.
func TestLookupSpan(t *testing.T) {
	t.Parallel()
	// 32 lookups, 8 at a time: 4 calls; 22 past the burst of 10 at 50/s: 0.44 s.
	require.Equal(t, 40*time.Second+440*time.Millisecond, reconciler.Config{}.LookupSpan(10*time.Second))
	require.Equal(t, time.Second, reconciler.Config{BatchSize: 8, Parallelism: 8}.LookupSpan(time.Second))
	require.Equal(t, 2*time.Second+10*time.Second, reconciler.Config{BatchSize: 9, Parallelism: 8,
		Provider: reconciler.Provider{LookupRate: 0.1, LookupBurst: 8}}.LookupSpan(time.Second))
}
