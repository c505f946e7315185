//go:build lab

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// Refunds through real processes, in both provider protocols, with the
// provider's de-duplication off: a 100-unit charge, then 200 concurrent
// one-unit refunds with different keys through two API processes. Exactly
// 100 are accepted and 100 refused (refund_exceeds_charge); with refunds
// applied then timed out, dropped before applying and answered 500 after
// applying, the workers and reconcilers carry every accepted refund to
// succeeded, and the provider's ledger holds exactly 100 refunds of the
// charge, none of them twice.
func TestRefundsThroughProcesses(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"fake", "stripe"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			var s *system
			var env []string
			if protocol == "stripe" {
				s, env = startStripeSystem(t)
			} else {
				s = startSystem(t)
			}
			s.startWorker(env...)
			s.startWorker(env...)
			s.startReconciler(env, "--max-attempts", "12")
			s.startReconciler(env, "--max-attempts", "12")

			charge := s.post("refunded-charge-0001", "pm_card_visa", 100)
			s.waitNoneIn(time.Minute, "pending", "submitting", "unknown")
			require.Equal(t, "succeeded", s.state(charge))

			s.faults(fakepsp.Schedule{Seed: 12, Rules: []fakepsp.Rule{
				{On: fakepsp.OnRefund, Fault: fakepsp.FaultApplyThenTimeout, P: 0.15, MS: 1500},
				{On: fakepsp.OnRefund, Fault: fakepsp.FaultDropBeforeApply, P: 0.1, MS: 50},
				{On: fakepsp.OnRefund, Fault: fakepsp.FaultErrorAfterApply, P: 0.1},
			}})
			second := start(t, append([]string{"DATABASE_URL=" + s.dbURL, "PSP_URL=" + s.pspURL}, env...),
				"api", "--addr", "127.0.0.1:0", "--max-conns", "4")
			apis := []string{s.apiURL, second.listenAddr()}

			answers := make([]postResult, 200)
			var wg sync.WaitGroup
			for i := range answers {
				wg.Go(func() {
					answers[i] = postTo(apis[i%2]+"/v1/refunds", s.apiKey, fmt.Sprintf("refund-key-%08d", i),
						fmt.Sprintf(`{"charge": %q, "amount": 1}`, charge))
				})
			}
			wg.Wait()
			counts := map[string]int{}
			for _, a := range answers {
				require.NoError(t, a.err)
				var p struct{ Code string }
				_ = json.Unmarshal([]byte(a.body), &p)
				counts[fmt.Sprintf("%d %s", a.status, p.Code)]++
			}
			require.Equal(t, map[string]int{"201 ": 100, "409 refund_exceeds_charge": 100}, counts)

			s.waitNoneIn(5*time.Minute, "pending", "submitting", "unknown")
			require.Empty(t, s.violations(), "the charge itself is still charged once")
			var succeeded, refunded int
			require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT
				(SELECT count(*) FROM charges WHERE parent_id = $1 AND state = 'succeeded'),
				(SELECT amount_refunded FROM charges WHERE id = $1)`, charge).Scan(&succeeded, &refunded))
			require.Equal(t, []int{100, 100}, []int{succeeded, refunded}, "every accepted refund succeeded")

			refunds, err := fakepsp.FetchRefunds(context.Background(), s.pspURL)
			require.NoError(t, err)
			references := map[string]int{}
			for _, r := range refunds {
				references[r.Reference]++
			}
			require.Len(t, refunds, 100, "exactly 100 refunds at the provider")
			require.Len(t, references, 100, "none of them twice")
			reasons := s.reasons()
			t.Logf("%s: 100 refunds; %d found by lookup after an unknown outcome, %d proven not found and re-sent",
				protocol, reasons["lookup_found_succeeded"], reasons["proven_not_found"])
			require.Positive(t, reasons["lookup_found_succeeded"], "applied-then-lost refunds were found: %v", reasons)
			require.Positive(t, reasons["proven_not_found"], "dropped refunds were proven not found and re-sent: %v", reasons)
			var gotStatus int
			resp, err := http.Get(s.apiURL + "/healthz")
			require.NoError(t, err)
			gotStatus = resp.StatusCode
			resp.Body.Close()
			require.Equal(t, http.StatusOK, gotStatus)
		})
	}
}
