//go:build lab

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// The provider's flags come from the environment too (by their well-known
// names here); the Stripe key is read from it but never printed by -h.
func TestBindProvider(t *testing.T) {
	t.Parallel()

	parse := func(environ map[string]string, args ...string) (app.Options, string) {
		var o app.Options
		var help bytes.Buffer
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(&help)
		bindProvider(fs, &o)
		require.NoError(t, parseFlags(fs, env{getenv: func(k string) string { return environ[k] }}, args))
		fs.PrintDefaults()
		return o, help.String()
	}

	o, _ := parse(nil)
	require.Equal(t, app.ProviderFake, o.ProviderKind)
	require.Empty(t, o.Provider.BaseURL, "each adapter has its own default URL")

	stripeEnv := map[string]string{"PSP_KIND": "stripe", "PSP_URL": "http://127.0.0.1:12111", "STRIPE_API_KEY": "sk_test_canary"}
	o, help := parse(stripeEnv)
	require.Equal(t, app.ProviderStripe, o.ProviderKind)
	require.Equal(t, "http://127.0.0.1:12111", o.Provider.BaseURL)
	require.Equal(t, "sk_test_canary", o.StripeAPIKey)
	require.NotContains(t, help, "sk_test_canary", "-h never prints the key")

	o, _ = parse(stripeEnv, "--psp", "fake", "--stripe-api-key", "sk_test_flag")
	require.Equal(t, app.ProviderFake, o.ProviderKind, "a flag overrides the environment")
	require.Equal(t, "sk_test_flag", o.StripeAPIKey)
}

// `chargeflow all --psp stripe` and `--psp adyen` run their fake speaking
// that provider's API and every role through its adapter: the quickstart's
// charge succeeds, and so does a refund of it — Adyen's only acknowledged,
// then settled by its signed REFUND notification.
func TestAllWithOtherProviders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ kind, secret string }{
		{"stripe", "sk_test_chargeflow_all"},
		{"adyen", "chargeflow_all_test_key"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			dbURL := dbtest.URL(t)
			all := start(t, []string{"DATABASE_URL=" + dbURL}, "all", "--psp", tc.kind, "--addr", "127.0.0.1:0", "--psp-addr", "127.0.0.1:0",
				"--max-conns", "6", "--concurrency", "4", "--ledger", filepath.Join(t.TempDir(), "ledger.jsonl"))
			b := waitBanner(t, all)
			require.Contains(t, all.stderr.String(), `"protocol":"`+tc.kind+`"`, "the fake speaks the provider's API")
			apiURL, apiKey := b.apiURL, b.apiKey

			posted := postCharge(apiURL, apiKey, tc.kind+"-quickstart-order-1", `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa"}`)
			require.NoError(t, posted.err)
			require.Equal(t, http.StatusCreated, posted.status, posted.body)
			var charge struct{ ID string }
			require.NoError(t, json.Unmarshal([]byte(posted.body), &charge))
			waitStatus(t, apiURL, apiKey, "/v1/charges/"+charge.ID, "succeeded")

			refunded := postTo(apiURL+"/v1/refunds", apiKey, tc.kind+"-quickstart-refund-1", `{"charge": "`+charge.ID+`", "amount": 400}`)
			require.NoError(t, refunded.err)
			require.Equal(t, http.StatusCreated, refunded.status, refunded.body)
			var refund struct{ ID string }
			require.NoError(t, json.Unmarshal([]byte(refunded.body), &refund))
			waitStatus(t, apiURL, apiKey, "/v1/refunds/"+refund.ID, "succeeded")
			require.NotContains(t, all.stderr.String(), tc.secret, "the key is never logged")
		})
	}
}

// waitStatus waits until the object at path has status.
func waitStatus(t *testing.T, apiURL, apiKey, path, status string) {
	t.Helper()
	var got struct{ Status string }
	require.Eventually(t, func() bool {
		req, _ := http.NewRequest(http.MethodGet, apiURL+path, nil)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&got) == nil && got.Status == status
	}, 30*time.Second, 10*time.Millisecond, "%s never reached %s (last %q)", path, status, got.Status)
}

// The Stripe adapter wired into real processes: the API, a worker and a
// reconciler with PSP_KIND=stripe against the fake speaking Stripe's API,
// its de-duplication off so that only chargeflow prevents a double charge.
// Some charges are applied and answered with a 500, so the reconciler must
// find them by reference; some are rate limited, so the worker retries.
func TestStripeAdapterThroughProcesses(t *testing.T) {
	t.Parallel()

	s, stripeEnv := startStripeSystem(t)
	s.faults(fakepsp.Schedule{Seed: 7, Rules: []fakepsp.Rule{
		{On: fakepsp.OnCharge, Fault: fakepsp.FaultErrorAfterApply, P: 0.3},
		{On: fakepsp.OnCharge, Fault: fakepsp.FaultNotProcessed, P: 0.2},
	}})
	s.startWorker(stripeEnv...)
	s.startReconciler(stripeEnv)

	ids := map[string]string{}
	for i := range 20 {
		method := "pm_card_visa"
		if i%4 == 3 {
			method = "pm_card_chargeDeclinedInsufficientFunds"
		}
		ids[s.post(fmt.Sprintf("stripe-adapter-key-%03d", i), method, 1000+i)] = method
	}
	s.waitNoneIn(60*time.Second, "pending", "submitting", "unknown")

	require.Empty(t, s.violations(), "the fake's ledger agrees with every charge")
	for id, method := range ids {
		want := "succeeded"
		if method != "pm_card_visa" {
			want = "failed"
		}
		require.Equal(t, want, s.state(id), id)
	}
	var providers []string
	rows, err := s.pool.Query(context.Background(), `SELECT DISTINCT provider FROM charges`)
	require.NoError(t, err)
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		providers = append(providers, name)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"stripe"}, providers)
	reasons := s.reasons()
	require.Positive(t, reasons["lookup_found_succeeded"], "a 500 after applying was settled by a lookup by reference: %v", reasons)
	require.Positive(t, reasons["not_applied:rate_limited"], "a rate-limited charge went back to pending: %v", reasons)
}

// startStripeSystem is startSystem through the Stripe adapter: the fake
// speaks Stripe's API with its de-duplication off, and the API (and the
// workers and reconcilers started with the returned env) use PSP_KIND=stripe.
func startStripeSystem(t *testing.T) (*system, []string) {
	t.Helper()
	s := &system{t: t, dbURL: dbtest.URL(t), ledger: filepath.Join(t.TempDir(), "ledger.jsonl")}
	s.pool = dbtest.NewPool(t, s.dbURL, 4)
	_, s.apiKey = createTenant(t, s.dbURL, "stripe")
	psp := start(t, nil, "fakepsp", "--addr", "127.0.0.1:0", "--protocol", "stripe", "--no-dedupe", "--ledger", s.ledger)
	s.pspURL = psp.listenAddr()
	stripeEnv := []string{"PSP_KIND=stripe", "STRIPE_API_KEY=sk_test_chargeflow"}
	api := start(t, append([]string{"DATABASE_URL=" + s.dbURL, "PSP_URL=" + s.pspURL}, stripeEnv...), "api", "--addr", "127.0.0.1:0", "--max-conns", "4")
	s.apiURL = api.listenAddr()
	return s, stripeEnv
}

// A thousand charges through the Stripe adapter and real processes, against
// the fake's Stripe API with its de-duplication off and faults on every
// path: applied then timed out, dropped before applying, applied then 500,
// and a search index lagging 3 s — longer than a careless apply window —
// which the adapter trusts only for what it finds (it proves not-found with
// the consistent list). No charge is applied twice, none fails falsely, every
// one ends terminal; the split of what the reconciler proved is printed.
func TestThousandChargesThroughStripe(t *testing.T) {
	t.Parallel()
	s, stripeEnv := startStripeSystem(t)
	s.faults(fakepsp.Schedule{Seed: 11, Rules: []fakepsp.Rule{
		{On: fakepsp.OnCharge, Fault: fakepsp.FaultApplyThenTimeout, P: 0.1, MS: 1500},
		{On: fakepsp.OnCharge, Fault: fakepsp.FaultDropBeforeApply, P: 0.06, MS: 50}, // of the remaining 90%: ~5%
		{On: fakepsp.OnCharge, Fault: fakepsp.FaultErrorAfterApply, P: 0.06},         // of the remaining ~85%: ~5%
		{On: fakepsp.OnLookup, Fault: fakepsp.FaultLookupLag, P: 1, MS: 3000},
	}})
	s.startWorker(stripeEnv...)
	s.startWorker(stripeEnv...)
	s.startReconciler(stripeEnv, "--max-attempts", "12")
	s.startReconciler(stripeEnv, "--max-attempts", "12")

	// Every proof of not-found lists the PaymentIntents of its time window
	// (most of the thousand, here), so the bound is generous for a -race
	// build.
	s.postMany("stripe-thousand", 1000)
	s.waitNoneIn(10*time.Minute, "pending", "submitting", "unknown")

	require.Empty(t, s.violations(), "no charge applied twice, none lost, none failed falsely")
	require.Equal(t, 1000, s.countIn("succeeded"))
	reasons := s.reasons()
	found, reattempted := reasons["lookup_found_succeeded"], reasons["proven_not_found"]
	t.Logf("1000 charges through Stripe: %d found by reference after an unknown outcome, %d proven not found and re-attempted, %d needs_review",
		found, reattempted, s.countIn("needs_review"))
	require.Positive(t, found, "applied-then-lost answers were found by reference")
	require.Positive(t, reattempted, "dropped requests were proven not found and re-attempted")
	require.Len(t, s.ledgerEntries(), 1000, "one provider charge per charge")
}
