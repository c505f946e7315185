//go:build lab

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/scenario"
)

// system is a set of real chargeflow processes on one test database.
type system struct {
	t      *testing.T
	dbURL  string
	pool   *pgxpool.Pool
	pspURL string
	apiURL string
	apiKey string
	ledger string
}

// startSystem starts the fake provider with its de-duplication off (so only
// chargeflow stands between a retry and a double charge) and the API; tests
// start their workers.
func startSystem(t *testing.T) *system {
	t.Helper()
	s := &system{t: t, dbURL: dbtest.URL(t), ledger: filepath.Join(t.TempDir(), "ledger.jsonl")}
	s.pool = dbtest.NewPool(t, s.dbURL, 4)
	_, s.apiKey = createTenant(t, s.dbURL, "system")
	s.startFakePSP()
	// Every process keeps a small pool: tests run side by side on one
	// server, and its max_connections is shared by all of them.
	api := start(t, []string{"DATABASE_URL=" + s.dbURL, "PSP_URL=" + s.pspURL}, "api", "--addr", "127.0.0.1:0", "--max-conns", "4")
	s.apiURL = api.listenAddr()
	return s
}

func (s *system) startFakePSP() *process {
	p := start(s.t, nil, "fakepsp", "--addr", "127.0.0.1:0", "--no-dedupe", "--ledger", s.ledger)
	s.pspURL = p.listenAddr()
	return p
}

// startWorker starts a worker with short timings, and extra env.
func (s *system) startWorker(env ...string) *process {
	p := start(s.t, append([]string{"DATABASE_URL=" + s.dbURL, "PSP_URL=" + s.pspURL}, env...),
		"worker", "--call-timeout", "1s", "--rescue-after", "7s", "--retry-base", "50ms", "--retry-cap", "200ms", "--concurrency", "4",
		"--unknown-check-after", "200ms")
	p.waitLog(`"msg":"worker started"`)
	return p
}

// startReconciler starts a reconciler with short timings that match the
// workers' (call timeout 1 s), plus extra flags.
func (s *system) startReconciler(env []string, flags ...string) *process {
	args := append([]string{"reconciler", "--max-conns", "3", "--call-timeout", "1s", "--stale-margin", "1s", "--apply-margin", "500ms",
		"--interval", "100ms", "--lookup-rate", "2000", "--lookup-backoff-base", "100ms", "--lookup-backoff-cap", "500ms",
		"--lease-ttl", "10s"}, flags...)
	p := start(s.t, append([]string{"DATABASE_URL=" + s.dbURL, "PSP_URL=" + s.pspURL}, env...), args...)
	p.waitLog(`"msg":"reconciler started"`)
	return p
}

// faults replaces the fake provider's fault schedule.
func (s *system) faults(schedule fakepsp.Schedule) {
	s.t.Helper()
	require.NoError(s.t, fakepsp.SetFaults(context.Background(), s.pspURL, schedule))
}

// reasons counts the events of every charge by reason.
func (s *system) reasons() map[string]int {
	s.t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT reason, count(*) FROM charge_audit GROUP BY reason`)
	require.NoError(s.t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var reason string
		var n int
		require.NoError(s.t, rows.Scan(&reason, &n))
		out[reason] = n
	}
	require.NoError(s.t, rows.Err())
	return out
}

// post creates a charge through the real API and returns its id.
func (s *system) post(key, paymentMethod string, amount int) string {
	s.t.Helper()
	body := fmt.Sprintf(`{"amount": %d, "currency": "USD", "payment_method": %q}`, amount, paymentMethod)
	got := postCharge(s.apiURL, s.apiKey, key, body)
	require.NoError(s.t, got.err)
	require.Equal(s.t, http.StatusCreated, got.status, got.body)
	var charge struct {
		ID string `json:"id"`
	}
	require.NoError(s.t, json.Unmarshal([]byte(got.body), &charge))
	return charge.ID
}

// waitStates waits until no charge is in any of the given states.
func (s *system) waitNoneIn(timeout time.Duration, states ...string) {
	s.t.Helper()
	var left int
	require.Eventually(s.t, func() bool {
		require.NoError(s.t, s.pool.QueryRow(context.Background(), `SELECT count(*) FROM charges WHERE state = ANY($1)`, states).Scan(&left))
		return left == 0
	}, timeout, 20*time.Millisecond, "charges still in %v", states)
}

func (s *system) state(id string) string {
	s.t.Helper()
	var state string
	require.NoError(s.t, s.pool.QueryRow(context.Background(), `SELECT state FROM charges WHERE id = $1`, id).Scan(&state))
	return state
}

func (s *system) ledgerEntries() []fakepsp.LedgerEntry {
	s.t.Helper()
	entries, err := fakepsp.FetchLedger(context.Background(), s.pspURL, false)
	require.NoError(s.t, err)
	return entries
}

// violations runs the ledger invariants, leaving out the ones named.
func (s *system) violations(ignore ...string) []scenario.Violation {
	s.t.Helper()
	charges, err := scenario.ReadCharges(context.Background(), s.pool)
	require.NoError(s.t, err)
	var out []scenario.Violation
	for _, v := range scenario.CheckLedger(charges, s.ledgerEntries()) {
		if !containsString(ignore, v.Invariant) {
			out = append(out, v)
		}
	}
	return out
}

func containsString(list []string, s string) bool {
	for _, item := range list {
		if item == s {
			return true
		}
	}
	return false
}

// 1,000 charges with mixed test cards through the real API, worker and fake
// provider processes, the provider's de-duplication off: every charge ends
// terminal, every succeeded charge has exactly one ledger entry with its
// amount and currency, no failed one has any, and no entry lacks a charge.
func TestThousandChargesThroughProcesses(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.startWorker()

	methods := []string{"pm_card_visa", "pm_card_mastercard", "pm_card_chargeDeclined",
		"pm_card_chargeDeclinedInsufficientFunds", "pm_card_chargeDeclinedExpiredCard", "pm_card_visa"}
	const n = 1000
	wantSucceeded := 0
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		if strings.HasPrefix(methods[i%len(methods)], "pm_card_visa") || methods[i%len(methods)] == "pm_card_mastercard" {
			wantSucceeded++
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			s.post(fmt.Sprintf("thousand-%012d", i), methods[i%len(methods)], 100+i)
		})
	}
	wg.Wait()
	s.waitNoneIn(3*time.Minute, "pending", "submitting", "unknown")

	require.Empty(t, s.violations())
	var succeeded, failed int
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE state = 'succeeded'),
		count(*) FILTER (WHERE state = 'failed') FROM charges`).Scan(&succeeded, &failed))
	require.Equal(t, n, succeeded+failed)
	require.Equal(t, wantSucceeded, succeeded)
	require.Len(t, s.ledgerEntries(), succeeded)
}

// The worker dies after the provider applied the charge and before it saved
// the answer. After a restart River reruns the job, which finds the charge
// submitting and moves it to unknown instead of sending again: one ledger
// entry, never two. The reconciler then finds the charge at the provider:
// succeeded, still one ledger entry.
func TestWorkerCrashAfterProviderResponse(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	crashed := s.startWorker("CHARGEFLOW_CRASHPOINTS=worker.after_psp_response_before_save=exit")

	id := s.post("crash-after-psp-0000001", "pm_card_visa", 700)
	<-crashed.done
	require.Contains(t, crashed.stderr.String(), `"point":"worker.after_psp_response_before_save"`)
	require.Equal(t, "submitting", s.state(id))
	require.Len(t, s.ledgerEntries(), 1, "the provider applied it once")

	s.startWorker()
	require.Eventually(t, func() bool { return s.state(id) == "unknown" }, 90*time.Second, 50*time.Millisecond)
	require.Len(t, s.ledgerEntries(), 1, "the rerun did not send again")
	require.Empty(t, s.violations(scenario.InvariantTerminal))

	s.startReconciler(nil)
	require.Eventually(t, func() bool { return s.state(id) == "succeeded" }, 30*time.Second, 50*time.Millisecond)
	require.Len(t, s.ledgerEntries(), 1)
	require.Empty(t, s.violations())
	require.Equal(t, 1, s.reasons()["lookup_found_succeeded"])
}

// The worker dies right after committing submitting, before the call: the
// rerun moves the charge to unknown and sends nothing at all. The reconciler
// proves it was never charged and re-attempts it with the same key: one
// ledger entry.
func TestWorkerCrashAfterSubmittingCommit(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	crashed := s.startWorker("CHARGEFLOW_CRASHPOINTS=worker.after_submitting_commit=exit")

	id := s.post("crash-after-submitting-01", "pm_card_visa", 800)
	<-crashed.done
	require.Contains(t, crashed.stderr.String(), `"point":"worker.after_submitting_commit"`)
	require.Equal(t, "submitting", s.state(id))

	s.startWorker()
	require.Eventually(t, func() bool { return s.state(id) == "unknown" }, 90*time.Second, 50*time.Millisecond)
	require.Empty(t, s.ledgerEntries(), "no provider call was ever sent")
	var events []string
	rows, err := s.pool.Query(context.Background(), `SELECT reason FROM charge_audit WHERE charge_id = $1 ORDER BY id`, id)
	require.NoError(t, err)
	for rows.Next() {
		var reason string
		require.NoError(t, rows.Scan(&reason))
		events = append(events, reason)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"accepted", "submit", "rerun_found_submitting"}, events)

	s.startReconciler(nil)
	require.Eventually(t, func() bool { return s.state(id) == "succeeded" }, 30*time.Second, 50*time.Millisecond)
	require.Len(t, s.ledgerEntries(), 1)
	require.Empty(t, s.violations())
	require.Equal(t, 1, s.reasons()["proven_not_found"])
}

// The CLI creates a charge and refunds it through chargeflow/client: the
// key it prints, reused, replays the same charge rather than making one.
func TestChargeCreateAndRefundThroughTheCLI(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.startWorker()
	env := map[string]string{"CHARGEFLOW_API_URL": s.apiURL, "CHARGEFLOW_API_KEY": s.apiKey}
	created := runInProcess(t, env, "charge", "create", "--amount", "1500", "--key", "cli-order-000000000001", "--wait")
	var charge struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	require.NoError(t, json.Unmarshal([]byte(created), &charge), created)
	require.Equal(t, "succeeded", charge.Status)
	again := runInProcess(t, env, "charge", "create", "--amount", "1500", "--key", "cli-order-000000000001")
	require.Contains(t, again, charge.ID, "the same key is the same charge")
	require.Len(t, s.ledgerEntries(), 1)

	refunded := runInProcess(t, env, "charge", "refund", charge.ID, "--amount", "500", "--reason", "requested_by_customer")
	require.Contains(t, refunded, `"charge": "`+charge.ID+`"`)
	s.waitNoneIn(time.Minute, "pending", "submitting", "unknown")
	require.Empty(t, s.violations())
}
