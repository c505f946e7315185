//go:build lab

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/scenario"
)

// postMany creates n charges through the API, 16 at a time, and returns
// their ids in order.
func (s *system) postMany(prefix string, n int) []string {
	s.t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ids[i] = s.post(fmt.Sprintf("%s-%012d", prefix, i), "pm_card_visa", 100+i)
		})
	}
	wg.Wait()
	return ids
}

func (s *system) countIn(state string) int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.pool.QueryRow(context.Background(), `SELECT count(*) FROM charges WHERE state = $1`, state).Scan(&n))
	return n
}

// 1,000 charges through real processes, the provider's de-duplication off,
// 30% of calls applied-then-timed-out and 30% dropped before applying: every
// charge ends terminal, no provider charge is duplicated, no failed charge
// was charged. The reconciler found the applied ones and re-attempted the
// dropped ones only on proof.
func TestThousandChargesWithUnknownOutcomes(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.faults(fakepsp.Schedule{Seed: 7, Dedupe: new(false), Rules: []fakepsp.Rule{
		{On: fakepsp.OnCharge, Fault: fakepsp.FaultApplyThenTimeout, P: 0.3, MS: 1500},
		{On: fakepsp.OnCharge, Fault: fakepsp.FaultDropBeforeApply, P: 0.43, MS: 50}}}) // 0.43 of the remaining 70% = 30%
	s.startWorker()
	s.startWorker()
	s.startReconciler(nil, "--max-attempts", "12")
	s.startReconciler(nil, "--max-attempts", "12")

	s.postMany("unknown-outcomes", 1000)
	s.waitNoneIn(5*time.Minute, "pending", "submitting", "unknown")

	require.Empty(t, s.violations())
	require.Equal(t, 1000, s.countIn("succeeded"))
	reasons := s.reasons()
	found, reattempted := reasons["lookup_found_succeeded"], reasons["proven_not_found"]
	t.Logf("1000 charges: %d found at the provider after an unknown outcome, %d proven not found and re-attempted, %d rerun moves",
		found, reattempted, reasons["rerun_found_submitting"])
	require.Positive(t, found, "apply_then_timeout fired and was found")
	require.Positive(t, reattempted, "drop_before_apply fired and was re-attempted")
	require.Len(t, s.ledgerEntries(), 1000)
}

// A lookup lag longer than a careless apply window: the provider applied
// the charge but hides it from lookups for 3 s. The apply window is derived
// from the configuration (call timeout + --max-apply-delay + margin), so a
// reconciler told about the lag waits it out and finds the charge. A second
// system, misconfigured with no apply delay, takes the early not-found as
// proof and charges twice: the checker sees it, which shows the window is
// what keeps the first system correct.
func TestApplyWindowOutlastsLookupLag(t *testing.T) {
	t.Parallel()
	faults := fakepsp.Schedule{Seed: 3, Dedupe: new(false), Rules: []fakepsp.Rule{
		{On: fakepsp.OnCharge, Fault: fakepsp.FaultApplyThenTimeout, P: 1, MS: 1500},
		{On: fakepsp.OnLookup, Fault: fakepsp.FaultLookupLag, P: 1, MS: 3000}}}
	run := func(maxApplyDelay string) (*system, []string) {
		s := startSystem(t)
		s.faults(faults)
		s.startWorker()
		s.startReconciler(nil, "--max-apply-delay", maxApplyDelay)
		ids := s.postMany("lag-"+maxApplyDelay, 5)
		return s, ids
	}

	var wg sync.WaitGroup
	var right, careless *system
	wg.Go(func() { right, _ = run("3s") })
	wg.Go(func() { careless, _ = run("0s") })
	wg.Wait()

	right.waitNoneIn(2*time.Minute, "pending", "submitting", "unknown")
	require.Empty(t, right.violations())
	require.Len(t, right.ledgerEntries(), 5, "one provider charge each")
	require.Zero(t, right.reasons()["proven_not_found"], "a not-found inside the window was never taken as proof")

	require.Eventually(t, func() bool {
		for _, v := range careless.violations(scenario.InvariantTerminal) {
			if v.Invariant == scenario.InvariantAtMostOnce {
				return true
			}
		}
		return false
	}, 2*time.Minute, 100*time.Millisecond, "a apply window shorter than the lag double-charges, and the checker says so")
}

// Lookups unavailable for a while: charges wait in unknown — no re-send, no
// failure — then resolve once the provider answers lookups again.
func TestLookupUnavailableThenHealthy(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.faults(fakepsp.Schedule{Seed: 5, Dedupe: new(false), Rules: []fakepsp.Rule{
		{On: fakepsp.OnCharge, Fault: fakepsp.FaultApplyThenTimeout, P: 0.5, MS: 1500},
		{On: fakepsp.OnLookup, Fault: fakepsp.FaultUnavailable, P: 1}}})
	s.startWorker()
	s.startReconciler(nil)
	ids := s.postMany("lookup-down", 20)

	require.Eventually(t, func() bool {
		return s.countIn("unknown") > 0 && s.countIn("pending") == 0 && s.countIn("submitting") == 0
	},
		time.Minute, 50*time.Millisecond)
	unknown := s.countIn("unknown")
	time.Sleep(3 * time.Second) // several lookup rounds fail meanwhile
	require.Equal(t, unknown, s.countIn("unknown"), "nothing moves while lookups fail")
	require.Zero(t, s.countIn("failed"))
	require.Zero(t, s.reasons()["proven_not_found"], "no re-send without proof")
	var failures int
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT coalesce(max(lookup_failures), 0) FROM charges`).Scan(&failures))
	require.GreaterOrEqual(t, failures, 2, "lookups were retried with backoff")

	s.faults(fakepsp.Schedule{Seed: 5, Dedupe: new(false)})
	s.waitNoneIn(time.Minute, "pending", "submitting", "unknown")
	require.Empty(t, s.violations())
	require.Equal(t, len(ids), s.countIn("succeeded"))
}

// Lookups unavailable forever for some keys: those charges end in
// needs_review with a reason — never failed, never charged twice — and the
// others resolve.
func TestLookupUnavailableForeverForSomeKeys(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.startWorker()
	s.startReconciler(nil, "--max-unknown-age", "3s")

	// Lookups fail for everyone while the doomed charges are made; then a
	// rule per doomed provider key keeps failing theirs, and only theirs.
	chargeFault := fakepsp.Rule{On: fakepsp.OnCharge, Fault: fakepsp.FaultApplyThenTimeout, P: 1, MS: 1500}
	s.faults(fakepsp.Schedule{Seed: 9, Dedupe: new(false), Rules: []fakepsp.Rule{{On: fakepsp.OnLookup, Fault: fakepsp.FaultUnavailable, P: 1}, chargeFault}})
	doomed := s.postMany("doomed", 5)
	var rules []fakepsp.Rule
	for _, id := range doomed {
		rules = append(rules, fakepsp.Rule{On: fakepsp.OnLookup, Fault: fakepsp.FaultUnavailable, P: 1, KeyPrefix: intent.ProviderKeyFor(id)})
	}
	s.faults(fakepsp.Schedule{Seed: 9, Dedupe: new(false), Rules: append(rules, chargeFault)})
	healthy := s.postMany("healthy", 5)

	s.waitNoneIn(2*time.Minute, "pending", "submitting", "unknown")
	require.Empty(t, s.violations())
	for _, id := range doomed {
		require.Equal(t, "needs_review", s.state(id))
	}
	for _, id := range healthy {
		require.Equal(t, "succeeded", s.state(id))
	}
	require.Zero(t, s.countIn("failed"))
	require.Len(t, s.ledgerEntries(), 10, "each charged once, the doomed ones too")
	var reason string
	require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT review_reason FROM charges WHERE id = $1`, doomed[0]).Scan(&reason))
	require.Contains(t, reason, "lookups have failed")

	// An operator resolves one with evidence, through the CLI, once the
	// provider answers lookups again (the API checks the resolution with it).
	s.faults(fakepsp.Schedule{Seed: 9, Dedupe: new(false)})
	created := runInProcess(t, map[string]string{"DATABASE_URL": s.dbURL}, "operator", "create", "--name", "ops@example.com", "--role", "admin")
	var op struct{ Token string }
	require.NoError(t, json.Unmarshal([]byte(created), &op))
	require.True(t, strings.HasPrefix(op.Token, "cfo_"), created)
	env := map[string]string{"CHARGEFLOW_API_URL": s.apiURL, "CHARGEFLOW_API_KEY": s.apiKey, "CHARGEFLOW_OPERATOR_TOKEN": op.Token}
	listed := runInProcess(t, env, "charge", "list", "--status", "needs_review")
	require.Contains(t, listed, doomed[0])
	var ledgerID string
	for _, e := range s.ledgerEntries() {
		if e.Reference == doomed[0] {
			ledgerID = e.ID
		}
	}
	resolved := runInProcess(t, env, "charge", "resolve", doomed[0], "--status", "succeeded", "--provider-charge-id", ledgerID,
		"--evidence", "Provider dashboard shows "+ledgerID+" captured")
	var charge struct{ Status string }
	require.NoError(t, json.Unmarshal([]byte(resolved), &charge))
	require.Equal(t, "succeeded", charge.Status)
	events := runInProcess(t, env, "charge", "events", doomed[0])
	require.Contains(t, events, `"actor": "operator:ops@example.com"`)

	var stderr bytes.Buffer
	err := run(context.Background(), []string{"charge", "resolve", doomed[0], "--status", "failed", "--evidence", "second thoughts here"},
		func(k string) string { return env[k] }, &bytes.Buffer{}, &stderr)
	require.Error(t, err, "a resolved charge is not in review any more")
	require.Contains(t, stderr.String(), "charge_not_in_review")
}
