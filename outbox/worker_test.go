package outbox_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/outbox"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/submit"
)

// testBundle is a real database, a real fake provider on loopback, and a
// real River client running the worker.
type testBundle struct {
	pool     *pgxpool.Pool
	river    *river.Client[pgx.Tx]
	pspURL   string
	tenantID string
}

type setupOpts struct {
	callTimeout time.Duration
	maxAttempts int
	lab         outbox.Lab
	// wrap, when set, puts a handler between the worker and the provider.
	wrap func(http.Handler) http.Handler
	// noStart leaves the River client stopped, so jobs can pile up first.
	noStart bool
	// providerURL, when set, is where the worker sends charges instead.
	providerURL string
}

func setup(t *testing.T, opts ...func(*setupOpts)) (context.Context, *testBundle) {
	t.Helper()
	o := setupOpts{callTimeout: 2 * time.Second, maxAttempts: 5}
	for _, opt := range opts {
		opt(&o)
	}
	ctx := context.Background()
	pool := dbtest.Pool(t)

	provider := fakepsptest.Start(t, fakepsp.Config{})
	pspURL := provider.URL
	if o.wrap != nil {
		wrapped := httptest.NewServer(o.wrap(provider.Server.Handler()))
		t.Cleanup(wrapped.Close)
		pspURL = wrapped.URL
	}

	worker, err := outbox.NewWorker(outbox.Config{
		DB:                pool,
		Provider:          psp.NewClient(psp.Config{BaseURL: cmp.Or(o.providerURL, pspURL), Timeout: o.callTimeout}),
		UnknownCheckAfter: time.Minute,
		Lab:               o.lab,
	})
	require.NoError(t, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers:           workers,
		MaxAttempts:       o.maxAttempts,
		RetryPolicy:       outbox.RetryPolicy{Base: 20 * time.Millisecond, Cap: 50 * time.Millisecond},
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	if !o.noStart {
		require.NoError(t, client.Start(ctx))
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	})

	return ctx, &testBundle{pool: pool, river: client, pspURL: pspURL, tenantID: dbtest.Tenant(t, pool, "outbox test")}
}

// accept writes a charge and its job exactly as the API does, with extra
// duplicate jobs when asked.
func (b *testBundle) accept(ctx context.Context, t *testing.T, paymentMethod string, jobs int) intent.Charge {
	t.Helper()
	var c intent.Charge
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		c = dbtest.PendingCharge(t, tx, dbtest.Charge{TenantID: b.tenantID, Amount: 4200, Currency: "EUR", PaymentMethod: paymentMethod})
		for range jobs {
			if _, err := b.river.InsertTx(ctx, tx, submit.ChargeArgs{TenantID: c.TenantID, ChargeID: c.ID}, nil); err != nil {
				return err
			}
		}
		return nil
	})
	require.NoError(t, err)
	return c
}

// waitFor waits until the charge is in state and returns it.
func (b *testBundle) waitFor(ctx context.Context, t *testing.T, id string, state intent.State) intent.Charge {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := intent.Get(ctx, b.pool, b.tenantID, id)
		require.NoError(t, err)
		if c.State == state {
			return c
		}
		if time.Now().After(deadline) {
			var jobErrors []string
			rows, _ := b.pool.Query(ctx, `SELECT e->>'error' FROM river_job, jsonb_array_elements(coalesce(to_jsonb(errors), '[]')) e`)
			for rows.Next() {
				var s string
				_ = rows.Scan(&s)
				jobErrors = append(jobErrors, s)
			}
			rows.Close()
			t.Fatalf("charge %s never reached %s; its events: %v; job errors: %v", id, state, b.reasons(ctx, t, id), jobErrors)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitJobsDone waits until no job is left to run.
func (b *testBundle) waitJobsDone(ctx context.Context, t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled', 'discarded')`).Scan(&n))
		return n == 0
	}, 20*time.Second, 10*time.Millisecond)
}

// ledger reads what moved money at the provider: the ground truth.
func (b *testBundle) ledger(t *testing.T) []fakepsp.LedgerEntry {
	t.Helper()
	entries, err := fakepsp.FetchLedger(context.Background(), b.pspURL, false)
	require.NoError(t, err)
	return entries
}

// faults replaces the provider's fault schedule.
func (b *testBundle) faults(t *testing.T, schedule fakepsp.Schedule) {
	t.Helper()
	require.NoError(t, fakepsp.SetFaults(context.Background(), b.pspURL, schedule))
}

// noDedupe is a schedule of rules with the provider's own de-duplication
// off, so that only the worker stands between a retry and a second charge.
func noDedupe(rules ...fakepsp.Rule) fakepsp.Schedule {
	return fakepsp.Schedule{Seed: 1, Dedupe: new(false), Rules: rules}
}

func (b *testBundle) reasons(ctx context.Context, t *testing.T, id string) []string {
	t.Helper()
	events, err := intent.AuditTrail(ctx, b.pool, b.tenantID, id)
	require.NoError(t, err)
	var out []string
	for _, e := range events {
		out = append(out, fmt.Sprintf("%s>%s:%s", e.From, e.To, e.Reason))
	}
	return out
}

func TestWorkSettles(t *testing.T) {
	t.Parallel()

	t.Run("Succeeded", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		c := b.accept(ctx, t, "pm_card_visa", 1)
		got := b.waitFor(ctx, t, c.ID, intent.StateSucceeded)
		require.Equal(t, 1, got.Attempts)
		ledger := b.ledger(t)
		require.Len(t, ledger, 1)
		require.Equal(t, got.ProviderChargeID, ledger[0].ID)
		require.Equal(t, c.ProviderKey, ledger[0].IdempotencyKey)
		require.Equal(t, c.ID, ledger[0].Reference)
		require.Equal(t, int64(4200), ledger[0].Amount)
		require.Equal(t, "EUR", ledger[0].Currency)
		require.Equal(t, []string{">pending:accepted", "pending>submitting:submit", "submitting>succeeded:provider_succeeded"}, b.reasons(ctx, t, c.ID))
		b.waitJobsDone(ctx, t)
	})

	t.Run("Declined", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t)

		for pm, code := range map[string]string{
			"pm_card_chargeDeclined":                  "generic_decline",
			"pm_card_chargeDeclinedInsufficientFunds": "insufficient_funds",
			"pm_card_chargeDeclinedExpiredCard":       "expired_card",
		} {
			c := b.accept(ctx, t, pm, 1)
			got := b.waitFor(ctx, t, c.ID, intent.StateFailed)
			require.Equal(t, code, got.FailureCode)
		}
		require.Empty(t, b.ledger(t), "a decline moves no money")
	})

	// Five River jobs for one charge make one provider call: with the
	// provider's own de-duplication off, a second call would be a second
	// ledger entry.
	t.Run("FiveJobsOneCall", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t, func(o *setupOpts) { o.noStart = true })
		b.faults(t, noDedupe())

		c := b.accept(ctx, t, "pm_card_visa", 5)
		require.NoError(t, b.river.Start(ctx))
		b.waitFor(ctx, t, c.ID, intent.StateSucceeded)
		b.waitJobsDone(ctx, t)
		require.Len(t, b.ledger(t), 1)
		got, err := intent.Get(ctx, b.pool, b.tenantID, c.ID)
		require.NoError(t, err)
		require.Equal(t, 1, got.Attempts)
	})

	// A provider answer about other money is never taken as success.
	t.Run("AmountMismatchNeedsReview", func(t *testing.T) {
		t.Parallel()
		lying := func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rec := httptest.NewRecorder()
				next.ServeHTTP(rec, r)
				body := bytes.Replace(rec.Body.Bytes(), []byte(`"amount":4200`), []byte(`"amount":4201`), 1)
				w.WriteHeader(rec.Code)
				_, _ = w.Write(body)
			})
		}
		ctx, b := setup(t, func(o *setupOpts) { o.wrap = lying })

		c := b.accept(ctx, t, "pm_card_visa", 1)
		got := b.waitFor(ctx, t, c.ID, intent.StateNeedsReview)
		require.Contains(t, got.ReviewReason, "4201")
		require.Empty(t, got.ProviderChargeID)
	})
}

func TestWorkUnknownOutcomes(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		fault   string
		ms      int
		applied bool
		reason  string
	}{
		{fault: "apply_then_timeout", ms: 2000, applied: true, reason: "timeout"},
		{fault: "apply_then_reset", applied: true, reason: "reset_after_send"},
		{fault: "error_after_apply", applied: true, reason: "status_500"},
		{fault: "error_before_apply", applied: false, reason: "status_500"},
		{fault: "drop_before_apply", ms: 50, applied: false, reason: "reset_after_send"},
	} {
		t.Run(tt.fault, func(t *testing.T) {
			t.Parallel()
			ctx, b := setup(t, func(o *setupOpts) { o.callTimeout = 300 * time.Millisecond })
			b.faults(t, noDedupe(fakepsp.Rule{On: fakepsp.OnCharge, Fault: tt.fault, P: 1, MS: tt.ms}))

			c := b.accept(ctx, t, "pm_card_visa", 1)
			got := b.waitFor(ctx, t, c.ID, intent.StateUnknown)
			require.NotNil(t, got.NextCheckAt)
			require.NotNil(t, got.UnknownSince)
			require.Equal(t, 1, got.Attempts)
			reasons := b.reasons(ctx, t, c.ID)
			require.True(t, strings.HasPrefix(reasons[len(reasons)-1], "submitting>unknown:outcome_unknown:"), reasons)
			b.waitJobsDone(ctx, t)
			if tt.applied {
				require.Eventually(t, func() bool { return len(b.ledger(t)) == 1 }, 5*time.Second, 10*time.Millisecond)
			} else {
				require.Empty(t, b.ledger(t))
			}
		})
	}
}

func TestWorkNotApplied(t *testing.T) {
	t.Parallel()

	// A provider that says "not processed" (429) sends the charge back to
	// pending; River retries with backoff, and once the provider recovers
	// the charge succeeds, charged once.
	t.Run("RetriesUntilAccepted", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t, func(o *setupOpts) { o.maxAttempts = 50 })
		b.faults(t, noDedupe(fakepsp.Rule{On: fakepsp.OnCharge, Fault: fakepsp.FaultNotProcessed, P: 1}))

		c := b.accept(ctx, t, "pm_card_visa", 1)
		require.Eventually(t, func() bool {
			reasons := b.reasons(ctx, t, c.ID)
			return strings.Count(strings.Join(reasons, " "), "submitting>pending:not_applied:status_429") >= 2
		}, 20*time.Second, 10*time.Millisecond)
		b.faults(t, noDedupe())

		got := b.waitFor(ctx, t, c.ID, intent.StateSucceeded)
		require.GreaterOrEqual(t, got.Attempts, 3)
		require.Len(t, b.ledger(t), 1)
	})

	// When the job runs out of attempts, the charge fails as
	// provider_unavailable: proven uncharged.
	t.Run("AttemptsExhausted", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t, func(o *setupOpts) { o.maxAttempts = 3 })
		b.faults(t, noDedupe(fakepsp.Rule{On: fakepsp.OnCharge, Fault: fakepsp.FaultNotProcessed, P: 1}))

		c := b.accept(ctx, t, "pm_card_visa", 1)
		got := b.waitFor(ctx, t, c.ID, intent.StateFailed)
		require.Equal(t, "provider_unavailable", got.FailureCode)
		require.Equal(t, 3, got.Attempts)
		require.Empty(t, b.ledger(t))
		b.waitJobsDone(ctx, t)
	})

	// A refused connection is provably not applied too.
	t.Run("ConnectionRefused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		closedURL := "http://" + ln.Addr().String()
		require.NoError(t, ln.Close())
		ctx, b := setup(t, func(o *setupOpts) { o.maxAttempts = 2; o.providerURL = closedURL })

		c := b.accept(ctx, t, "pm_card_visa", 1)
		got := b.waitFor(ctx, t, c.ID, intent.StateFailed)
		require.Equal(t, "provider_unavailable", got.FailureCode)
		require.Contains(t, b.reasons(ctx, t, c.ID), "submitting>pending:not_applied:connection_refused")
	})
}

// A run that finds the charge submitting (an earlier run died mid-call)
// moves it to unknown and never sends again.
func TestRerunFindsSubmitting(t *testing.T) {
	t.Parallel()

	t.Run("MovesToUnknownWithoutSending", func(t *testing.T) {
		t.Parallel()
		ctx, b := setup(t, func(o *setupOpts) { o.noStart = true })
		b.faults(t, noDedupe())

		c := b.accept(ctx, t, "pm_card_visa", 1)
		_, err := intent.MoveCharge(ctx, b.pool, intent.Move{TenantID: c.TenantID, ChargeID: c.ID, From: intent.StatePending,
			To: intent.StateSubmitting, Actor: "test", Reason: "crashed_mid_call", CountAttempt: true})
		require.NoError(t, err)
		require.NoError(t, b.river.Start(ctx))

		got := b.waitFor(ctx, t, c.ID, intent.StateUnknown)
		require.Equal(t, 1, got.Attempts, "no second attempt")
		b.waitJobsDone(ctx, t)
		require.Empty(t, b.ledger(t), "nothing was sent")
		reasons := b.reasons(ctx, t, c.ID)
		require.Equal(t, "submitting>unknown:rerun_found_submitting", reasons[len(reasons)-1])
	})
}

func TestRetryPolicy(t *testing.T) {
	t.Parallel()

	p := outbox.RetryPolicy{Base: time.Second, Cap: 10 * time.Second}
	// An attempt that began earlier by the database's clock (a worker whose
	// clock is right, or ahead) counts from this process's clock.
	earlier := time.Now().Add(-time.Hour)
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 40: 10 * time.Second} {
		got := time.Until(p.NextRetry(&rivertype.JobRow{Attempt: attempt, AttemptedAt: &earlier}))
		require.InDelta(t, want.Seconds(), got.Seconds(), want.Seconds()*0.11, "attempt %d", attempt)
	}
	// One that began later by the database's clock (this worker's clock is
	// behind it) counts from that start: the attempts keep their spacing
	// instead of coming at once.
	later := time.Now().Add(time.Hour)
	got := p.NextRetry(&rivertype.JobRow{Attempt: 2, AttemptedAt: &later}).Sub(later)
	require.InDelta(t, 2, got.Seconds(), 0.21)
}
