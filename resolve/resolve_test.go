package resolve_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/resolve"
	"github.com/chargeflow/chargeflow/submit"
)

// The operator who acts in these tests, and the evidence they write.
const (
	actor    = "operator:alice"
	evidence = "checked the provider dashboard for this key"
	// window is the resend window of every resolver here, as the server
	// configures it (the provider's 24 h key window less its margin).
	window = 23 * time.Hour
)

// env is a fresh database with a tenant, a real fake provider on loopback,
// the provider's client and a submit queue on an insert-only River client,
// as the server builds them.
type env struct {
	pool     *pgxpool.Pool
	provider *fakepsptest.Provider
	client   *psp.Client
	jobs     *submit.Queue
	tenant   string
	// now is the clock of the resolvers that are not about the key window:
	// the test's start, so every row here was sent within the window.
	now time.Time
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := dbtest.Pool(t)
	provider := fakepsptest.Start(t, fakepsp.Config{})
	riverClient, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: submit.Middleware()})
	require.NoError(t, err)
	jobs, err := submit.NewQueue(submit.Config{River: riverClient})
	require.NoError(t, err)
	return &env{
		pool:     pool,
		provider: provider,
		client:   psp.NewClient(psp.Config{BaseURL: provider.URL, Timeout: 2 * time.Second}),
		jobs:     jobs,
		tenant:   dbtest.Tenant(t, pool, "tenant-a"),
		now:      time.Now(),
	}
}

// resolver is a Resolver on e whose configuration edit changes; by default
// its clock stands at e.now and its resend window is window.
func (e *env) resolver(t *testing.T, edit func(*resolve.Config)) *resolve.Resolver {
	t.Helper()
	cfg := resolve.Config{DB: e.pool, Jobs: e.jobs, Provider: e.client, ResendWindow: window,
		Now: func() time.Time { return e.now }}
	if edit != nil {
		edit(&cfg)
	}
	r, err := resolve.New(cfg)
	require.NoError(t, err)
	return r
}

// charge accepts a pending charge of 1,000 USD and walks it through states,
// as the worker and the reconciler would, and returns it as stored.
func (e *env) charge(t *testing.T, states ...intent.State) intent.Charge {
	t.Helper()
	return dbtest.Walk(t, e.pool, dbtest.PendingCharge(t, e.pool, dbtest.Charge{TenantID: e.tenant}), "py_walked", states...)
}

// inReview is a charge that was sent once and is now in needs_review.
func (e *env) inReview(t *testing.T) intent.Charge {
	t.Helper()
	c := e.charge(t, intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview)
	require.NotNil(t, c.FirstAttemptAt)
	return c
}

// atProvider applies a charge at the provider under c's provider key, as a
// lost call would have, and returns the provider's answer.
func (e *env) atProvider(t *testing.T, c intent.Charge, amount int64, currency, paymentMethod, reference string) psp.Charge {
	t.Helper()
	answer, err := e.client.Charge(context.Background(), psp.ChargeRequest{Key: c.ProviderKey, Amount: amount,
		Currency: currency, PaymentMethod: paymentMethod, Reference: reference})
	require.NoError(t, err)
	return answer
}

// countLookups makes every lookup of key at the provider fire a fault that
// does nothing (latency of 0 ms), so that lookups counts them.
func (e *env) countLookups(t *testing.T, key string) {
	t.Helper()
	require.NoError(t, fakepsp.SetFaults(context.Background(), e.provider.URL, fakepsp.Schedule{Seed: 1,
		Rules: []fakepsp.Rule{{On: fakepsp.OnLookup, Fault: fakepsp.FaultLatency, P: 1, MS: 0, KeyPrefix: key}}}))
}

// lookups is how many lookups reached the provider since countLookups.
func (e *env) lookups(t *testing.T) int {
	t.Helper()
	state, err := fakepsp.FetchFaults(context.Background(), e.provider.URL)
	require.NoError(t, err)
	return state.Fired[fakepsp.FaultLatency]
}

// stored is what a refusal must leave as it was: the row, its audit trail,
// and every River job.
type stored struct {
	charge intent.Charge
	audit  []intent.AuditEntry
	jobs   int
}

func (e *env) stored(t *testing.T, c intent.Charge) stored {
	t.Helper()
	ctx := context.Background()
	row, err := intent.Find(ctx, e.pool, c.ID)
	require.NoError(t, err)
	audit, err := intent.AuditTrail(ctx, e.pool, c.TenantID, c.ID)
	require.NoError(t, err)
	var jobs int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM river_job`).Scan(&jobs))
	return stored{charge: row, audit: audit, jobs: jobs}
}

// jobsFor counts the charge.submit jobs whose args name c.
func (e *env) jobsFor(t *testing.T, c intent.Charge) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'charge_id' = $2`, submit.KindCharge, c.ID).Scan(&n))
	return n
}

// requireRefused checks that err is a refusal for reason, and returns it.
func requireRefused(t *testing.T, err, reason error) *resolve.Error {
	t.Helper()
	require.ErrorIs(t, err, reason)
	var refusal *resolve.Error
	require.ErrorAs(t, err, &refusal)
	require.Equal(t, reason, refusal.Reason)
	require.NotEmpty(t, refusal.Detail)
	return refusal
}

// requireUnchanged checks that c's row, audit trail and the River jobs are
// as before.
func (e *env) requireUnchanged(t *testing.T, c intent.Charge, before stored, msgAndArgs ...any) {
	t.Helper()
	require.Equal(t, before, e.stored(t, c), msgAndArgs...)
}

// A resolution to succeeded holds only when the provider holds, under the
// row's key, a successful charge with that id and the row's amount,
// currency and reference; anything else is ErrEvidenceMismatch, from
// Verify and from Resolve, and changes nothing.
func TestResolveSucceededNeedsTheProvidersMatchingSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.resolver(t, nil)
	ctx := context.Background()

	for _, tc := range []struct {
		name string
		// provider puts what the provider holds under the row's key and
		// returns the provider's charge id the operator names.
		provider func(t *testing.T, c intent.Charge) string
	}{
		{"ProviderHoldsNothing", func(*testing.T, intent.Charge) string { return "py_made_up" }},
		{"OtherProviderID", func(t *testing.T, c intent.Charge) string {
			e.atProvider(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodVisa, c.ID)
			return "py_made_up"
		}},
		{"OtherAmount", func(t *testing.T, c intent.Charge) string {
			return e.atProvider(t, c, c.Amount-1, c.Currency, fakepsp.PaymentMethodVisa, c.ID).ID
		}},
		{"OtherCurrency", func(t *testing.T, c intent.Charge) string {
			return e.atProvider(t, c, c.Amount, "EUR", fakepsp.PaymentMethodVisa, c.ID).ID
		}},
		{"OtherReference", func(t *testing.T, c intent.Charge) string {
			return e.atProvider(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodVisa, "ch_someone_else").ID
		}},
		{"ProviderDeclinedIt", func(t *testing.T, c intent.Charge) string {
			answer := e.atProvider(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodDeclined, c.ID)
			require.Equal(t, psp.StatusFailed, answer.Status)
			return answer.ID
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := e.inReview(t)
			providerID := tc.provider(t, c)
			res := resolve.Resolution{Status: intent.StateSucceeded, Evidence: evidence, ProviderChargeID: providerID}
			before := e.stored(t, c)

			requireRefused(t, r.Verify(ctx, c, res), resolve.ErrEvidenceMismatch)
			found, err := r.Resolve(ctx, actor, c.ID, res)
			requireRefused(t, err, resolve.ErrEvidenceMismatch)
			require.Equal(t, before.charge, found, "a refusal returns the row as it was found")
			e.requireUnchanged(t, c, before)
			require.Equal(t, intent.StateNeedsReview, e.stored(t, c).charge.State)
		})
	}

	// The provider's own success, with the row's money and reference:
	// resolved, with the provider's id, and audited as the operator's.
	c := e.inReview(t)
	providerID := e.atProvider(t, c, c.Amount, c.Currency, fakepsp.PaymentMethodVisa, c.ID).ID
	before := e.stored(t, c)
	res := resolve.Resolution{Status: intent.StateSucceeded, Evidence: evidence, ProviderChargeID: providerID}
	require.NoError(t, r.Verify(ctx, c, res))
	resolved, err := r.Resolve(ctx, actor, c.ID, res)
	require.NoError(t, err)
	require.Equal(t, intent.StateSucceeded, resolved.State)
	require.Equal(t, providerID, resolved.ProviderChargeID)
	after := e.stored(t, c)
	require.Equal(t, resolved, after.charge)
	require.Len(t, after.audit, len(before.audit)+1)
	last := after.audit[len(after.audit)-1]
	require.Equal(t, intent.StateNeedsReview, last.From)
	require.Equal(t, intent.StateSucceeded, last.To)
	require.Equal(t, actor, last.Actor)
	require.Equal(t, "operator_resolved", last.Reason)
	require.Equal(t, evidence, last.Evidence)
	require.Equal(t, before.jobs, after.jobs, "a success sends nothing")
}

// Failed and pending are refused while the provider holds a successful
// charge under the row's key, whatever its money: the money moved, and a
// person must say so. A decline, or nothing at all, lets failed through.
func TestResolveFailedOrPendingRefusedWhileTheProviderHoldsASuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.resolver(t, nil)
	ctx := context.Background()

	for _, amount := range []int64{1000, 999} {
		for _, status := range []intent.State{intent.StateFailed, intent.StatePending} {
			c := e.inReview(t)
			e.atProvider(t, c, amount, c.Currency, fakepsp.PaymentMethodVisa, c.ID)
			res := resolve.Resolution{Status: status, Evidence: evidence}
			before := e.stored(t, c)

			requireRefused(t, r.Verify(ctx, c, res), resolve.ErrEvidenceMismatch)
			_, err := r.Resolve(ctx, actor, c.ID, res)
			requireRefused(t, err, resolve.ErrEvidenceMismatch)
			e.requireUnchanged(t, c, before, "%s while the provider holds %d", status, amount)
		}
	}

	// A decline at the provider: failed, with the operator's code.
	declined := e.inReview(t)
	e.atProvider(t, declined, declined.Amount, declined.Currency, fakepsp.PaymentMethodDeclined, declined.ID)
	failed, err := r.Resolve(ctx, actor, declined.ID, resolve.Resolution{Status: intent.StateFailed, Evidence: evidence, FailureCode: "not_charged"})
	require.NoError(t, err)
	require.Equal(t, intent.StateFailed, failed.State)
	require.Equal(t, "not_charged", failed.FailureCode)

	// Nothing at the provider: failed, with the default code.
	nothing := e.inReview(t)
	failed, err = r.Resolve(ctx, actor, nothing.ID, resolve.Resolution{Status: intent.StateFailed, Evidence: evidence})
	require.NoError(t, err)
	require.Equal(t, intent.StateFailed, failed.State)
	require.Equal(t, "resolved_by_operator", failed.FailureCode)
	last := e.stored(t, nothing).audit
	require.Equal(t, intent.StateFailed, last[len(last)-1].To)
	require.Equal(t, evidence, last[len(last)-1].Evidence)
}

// Once the resend window has passed since the row's first send, a new
// attempt could be charged twice: pending is ErrKeyWindowPassed, decided
// before any lookup, and changes nothing. The clock is the resolver's, set
// from the row's own first send, so the boundary is exact.
func TestResolvePendingPastTheKeyWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	for _, tc := range []struct {
		name   string
		window time.Duration
		since  time.Duration // the clock, after the row's first send
	}{
		{"AtTheWindowsEnd", window, window},
		{"PastTheWindow", window, window + time.Hour},
		{"ProviderNeverDeduplicates", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Its own provider, whose fault schedule counts this row's lookups.
			e := newEnv(t)
			c := e.inReview(t)
			e.countLookups(t, c.ProviderKey)
			r := e.resolver(t, func(cfg *resolve.Config) {
				cfg.ResendWindow = tc.window
				cfg.Now = func() time.Time { return c.FirstAttemptAt.Add(tc.since) }
			})
			res := resolve.Resolution{Status: intent.StatePending, Evidence: evidence}
			before := e.stored(t, c)

			requireRefused(t, r.Verify(ctx, c, res), resolve.ErrKeyWindowPassed)
			_, err := r.Resolve(ctx, actor, c.ID, res)
			requireRefused(t, err, resolve.ErrKeyWindowPassed)
			e.requireUnchanged(t, c, before)
			require.Zero(t, e.jobsFor(t, c), "no new attempt")
			require.Zero(t, e.lookups(t), "the window is judged before the provider is asked")

			// Settling it is still the operator's to do, on the provider's word.
			failed, err := r.Resolve(ctx, actor, c.ID, resolve.Resolution{Status: intent.StateFailed, Evidence: evidence})
			require.NoError(t, err)
			require.Equal(t, intent.StateFailed, failed.State)
			require.Equal(t, 1, e.lookups(t), "failed was checked with the provider")
		})
	}
}

// Without a Now of its own a resolver judges the key window by the
// database's clock, the one that wrote the row's first send: no API
// process's clock enters it (docs/operations.md, "Clocks"). The first send
// is set a minute either side of the window's end, from the database's now.
func TestResolvePendingJudgedByTheDatabasesClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	c := e.inReview(t)
	r := e.resolver(t, func(cfg *resolve.Config) { cfg.Now = nil })
	res := resolve.Resolution{Status: intent.StatePending, Evidence: evidence}

	sentAt := func(ago time.Duration) intent.Charge {
		var sent time.Time
		require.NoError(t, e.pool.QueryRow(ctx, `SELECT now() - make_interval(secs => $1)`, ago.Seconds()).Scan(&sent))
		moved := c
		moved.FirstAttemptAt = &sent
		return moved
	}
	requireRefused(t, r.Verify(ctx, sentAt(window+time.Minute), res), resolve.ErrKeyWindowPassed)
	require.NoError(t, r.Verify(ctx, sentAt(window-time.Minute), res), "within the window, and the provider holds nothing under the key")
}

// Within the window, pending moves the row back and enqueues exactly one
// charge.submit job for it, in the same transaction as the move.
func TestResolveToPendingEnqueuesOneAttemptInTheSameTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()

	c := e.inReview(t)
	e.countLookups(t, c.ProviderKey)
	// The last instant the window still covers.
	r := e.resolver(t, func(cfg *resolve.Config) {
		cfg.Now = func() time.Time { return c.FirstAttemptAt.Add(window - time.Microsecond) }
	})
	before := e.stored(t, c)
	require.Zero(t, e.jobsFor(t, c))

	resolved, err := r.Resolve(ctx, actor, c.ID, resolve.Resolution{Status: intent.StatePending, Evidence: evidence})
	require.NoError(t, err)
	require.Equal(t, intent.StatePending, resolved.State)
	require.Equal(t, c.ProviderKey, resolved.ProviderKey, "the new attempt keeps the key")
	require.Equal(t, 1, e.lookups(t), "pending was checked with the provider")

	after := e.stored(t, c)
	require.Equal(t, resolved, after.charge)
	require.Equal(t, before.jobs+1, after.jobs, "exactly one job")
	require.Equal(t, 1, e.jobsFor(t, c), "and it is this row's charge.submit")
	require.Len(t, after.audit, len(before.audit)+1)
	last := after.audit[len(after.audit)-1]
	require.Equal(t, intent.StateNeedsReview, last.From)
	require.Equal(t, intent.StatePending, last.To)
	require.Equal(t, actor, last.Actor)
	require.Equal(t, evidence, last.Evidence)

	// One transaction wrote the row, its audit entry and the job.
	var rowTx, auditTx, jobTx string
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT xmin::text FROM charges WHERE id = $1`, c.ID).Scan(&rowTx))
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT xmin::text FROM charge_audit WHERE id = $1`, last.ID).Scan(&auditTx))
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT xmin::text FROM river_job WHERE kind = $1 AND args->>'charge_id' = $2`,
		submit.KindCharge, c.ID).Scan(&jobTx))
	require.Equal(t, rowTx, auditTx)
	require.Equal(t, rowTx, jobTx, "the job was inserted in the move's transaction")

	// And a job that cannot be written takes the move with it.
	other := e.inReview(t)
	_, err = e.pool.Exec(ctx, `
CREATE FUNCTION refuse_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'test: no jobs'; END $$;
CREATE TRIGGER refuse_jobs BEFORE INSERT ON river_job FOR EACH ROW EXECUTE FUNCTION refuse_jobs()`)
	require.NoError(t, err)
	before = e.stored(t, other)
	_, err = r.Resolve(ctx, actor, other.ID, resolve.Resolution{Status: intent.StatePending, Evidence: evidence})
	require.ErrorContains(t, err, "test: no jobs")
	e.requireUnchanged(t, other, before, "the move rolled back with its job")
}

// A provider that cannot answer settles nothing, whatever the resolution.
func TestResolveProviderUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.resolver(t, nil)
	ctx := context.Background()
	require.NoError(t, fakepsp.SetFaults(ctx, e.provider.URL, fakepsp.Schedule{Seed: 1,
		Rules: []fakepsp.Rule{{On: fakepsp.OnLookup, Fault: fakepsp.FaultUnavailable, P: 1}}}))

	for _, status := range []intent.State{intent.StateSucceeded, intent.StateFailed, intent.StatePending} {
		c := e.inReview(t)
		res := resolve.Resolution{Status: status, Evidence: evidence, ProviderChargeID: "py_made_up"}
		if status != intent.StateSucceeded {
			res.ProviderChargeID = ""
		}
		before := e.stored(t, c)
		refusal := requireRefused(t, r.Verify(ctx, c, res), resolve.ErrProviderUnavailable)
		require.Positive(t, refusal.Wait)
		require.Error(t, refusal.Err, "the cause is kept")
		require.NotContains(t, refusal.Error(), e.provider.URL, "the operator's sentence does not name the provider's address")

		_, err := r.Resolve(ctx, actor, c.ID, res)
		requireRefused(t, err, resolve.ErrProviderUnavailable)
		e.requireUnchanged(t, c, before, status)
	}
	state, err := fakepsp.FetchFaults(ctx, e.provider.URL)
	require.NoError(t, err)
	require.Positive(t, state.Fired[fakepsp.FaultUnavailable], "the provider was asked, and could not answer")
}

// Only a needs_review row can be resolved; any other is ErrNotInReview,
// refused before the provider is asked, and changes nothing. A row that
// does not exist is intent.ErrNotFound.
func TestResolveNotInReview(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.resolver(t, nil)
	ctx := context.Background()
	e.countLookups(t, "cf_") // every row's key

	for _, states := range [][]intent.State{
		nil,
		{intent.StateSubmitting},
		{intent.StateSubmitting, intent.StateUnknown},
		{intent.StateSubmitting, intent.StateSucceeded},
		{intent.StateSubmitting, intent.StateFailed},
	} {
		c := e.charge(t, states...)
		before := e.stored(t, c)
		for _, status := range []intent.State{intent.StateFailed, intent.StatePending} {
			found, err := r.Resolve(ctx, actor, c.ID, resolve.Resolution{Status: status, Evidence: evidence})
			requireRefused(t, err, resolve.ErrNotInReview)
			require.Equal(t, before.charge, found)
			e.requireUnchanged(t, c, before, "%s resolved to %s", c.State, status)
		}
	}

	require.Zero(t, e.lookups(t), "the state is checked before the provider is asked")

	_, err := r.Resolve(ctx, actor, "ch_00000000000000000000000000", resolve.Resolution{Status: intent.StateFailed, Evidence: evidence})
	require.ErrorIs(t, err, intent.ErrNotFound)
	var refusal *resolve.Error
	require.False(t, errors.As(err, &refusal), "not found is not a refusal: %v", err)
}

// Reconcile makes an unknown row's lookup due now and records the request;
// a second one within the floor is ErrTooSoon with how long to wait; a row
// that is not unknown is ErrNotUnknown. Refusals change nothing.
func TestReconcile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	// A floor far longer than the test, so the second request is within it
	// however slow the machine is.
	const floor = time.Hour
	r := e.resolver(t, func(cfg *resolve.Config) { cfg.ReconcileFloor = floor })
	require.Equal(t, floor, r.ReconcileFloor())

	c := e.charge(t, intent.StateSubmitting, intent.StateUnknown)
	before := e.stored(t, c)
	require.Nil(t, c.ForcedCheckAt)
	forced, err := r.Reconcile(ctx, actor, c.ID)
	require.NoError(t, err)
	require.Equal(t, intent.StateUnknown, forced.State)
	require.NotNil(t, forced.ForcedCheckAt)
	require.NotNil(t, forced.NextCheckAt)
	after := e.stored(t, c)
	require.Equal(t, forced, after.charge)
	require.Equal(t, before.jobs, after.jobs)
	require.Len(t, after.audit, len(before.audit)+1)
	last := after.audit[len(after.audit)-1]
	require.Equal(t, "reconcile_requested", last.Action)
	require.Equal(t, actor, last.Actor)
	require.Empty(t, last.From, "an action moves nothing")
	require.Equal(t, intent.StateUnknown, last.To)

	again, err := r.Reconcile(ctx, actor, c.ID)
	refusal := requireRefused(t, err, resolve.ErrTooSoon)
	require.Positive(t, refusal.Wait)
	require.LessOrEqual(t, refusal.Wait, floor)
	require.Equal(t, intent.Charge{}, again)
	e.requireUnchanged(t, c, after, "a request too soon changes nothing")

	for _, states := range [][]intent.State{
		nil,
		{intent.StateSubmitting},
		{intent.StateSubmitting, intent.StateUnknown, intent.StateNeedsReview},
		{intent.StateSubmitting, intent.StateSucceeded},
		{intent.StateSubmitting, intent.StateFailed},
	} {
		c := e.charge(t, states...)
		before := e.stored(t, c)
		_, err := r.Reconcile(ctx, actor, c.ID)
		requireRefused(t, err, resolve.ErrNotUnknown)
		e.requireUnchanged(t, c, before, "reconcile of a %s charge", c.State)
	}

	// The default floor.
	require.Equal(t, resolve.Defaults().ReconcileFloor, e.resolver(t, nil).ReconcileFloor())
	require.Equal(t, 30*time.Second, resolve.Defaults().ReconcileFloor)
}

// New refuses what makes no sense.
func TestNewRefuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	valid := resolve.Config{DB: e.pool, Jobs: e.jobs, Provider: e.client, ResendWindow: window}
	for name, edit := range map[string]func(*resolve.Config){
		"NoDB":           func(c *resolve.Config) { c.DB = nil },
		"NoJobs":         func(c *resolve.Config) { c.Jobs = nil },
		"NoProvider":     func(c *resolve.Config) { c.Provider = nil },
		"NegativeWindow": func(c *resolve.Config) { c.ResendWindow = -time.Second },
		"NegativeFloor":  func(c *resolve.Config) { c.ReconcileFloor = -time.Second },
	} {
		cfg := valid
		edit(&cfg)
		_, err := resolve.New(cfg)
		require.Error(t, err, name)
	}
	_, err := resolve.New(valid)
	require.NoError(t, err)
}

// resender is e's provider declaring that its only lookup is a re-send
// (psp.LookupByResend, as Adyen's): the fake de-duplicates keys, so it
// answers a re-send with the first result as such a provider does.
type resender struct{ *psp.Client }

func (r resender) Capabilities() psp.Capabilities {
	caps := r.Client.Capabilities()
	caps.Lookup = psp.LookupByResend
	return caps
}

// A provider whose only lookup is a re-send is asked by one inside the key
// window, so a resolution is held to the first request's result; past the
// window nothing is sent — it could charge anew — and a resolution to
// succeeded or failed rests on the operator's evidence, while pending
// stays refused.
func TestResolveWhenTheLookupIsAResend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	provider := resender{e.client}
	inside := e.resolver(t, func(c *resolve.Config) { c.Provider = provider })
	past := e.resolver(t, func(c *resolve.Config) {
		c.Provider = provider
		c.Now = func() time.Time { return e.now.Add(window + time.Hour) }
	})
	ledger := func() int {
		entries, err := fakepsp.FetchLedger(ctx, e.provider.URL, true)
		require.NoError(t, err)
		return len(entries)
	}

	held := e.inReview(t)
	providerID := e.atProvider(t, held, held.Amount, held.Currency, fakepsp.PaymentMethodVisa, held.ID).ID
	requireRefused(t, inside.Verify(ctx, held, resolve.Resolution{Status: intent.StateFailed, Evidence: evidence}),
		resolve.ErrEvidenceMismatch)
	require.NoError(t, inside.Verify(ctx, held, resolve.Resolution{Status: intent.StateSucceeded, Evidence: evidence, ProviderChargeID: providerID}))

	sent := ledger()
	for _, status := range []intent.State{intent.StateSucceeded, intent.StateFailed} {
		c := e.inReview(t)
		res := resolve.Resolution{Status: status, Evidence: evidence, ProviderChargeID: "psp_seen_in_the_customer_area"}
		require.NoError(t, past.Verify(ctx, c, res), status)
	}
	c := e.inReview(t)
	before := e.stored(t, c)
	_, err := past.Resolve(ctx, actor, c.ID, resolve.Resolution{Status: intent.StatePending, Evidence: evidence})
	requireRefused(t, err, resolve.ErrKeyWindowPassed)
	e.requireUnchanged(t, c, before)
	require.Equal(t, sent, ledger(), "past the window nothing was re-sent")
}
