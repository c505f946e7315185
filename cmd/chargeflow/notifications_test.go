//go:build lab

package main

import (
	"context"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// How much sooner a charge whose answer is lost settles when the provider
// notifies: the same 40 charges, every call applied and then timed out,
// through real processes with and without the provider's notifications.
// With them, a charge settles on the notification, while the worker still
// waits for the lost answer and before the reconciler's first lookup;
// without, it waits for the call's timeout and a lookup. The medians, from
// the first send, are printed; the test holds only what must be true: with
// notifications every charge settled either on its genuine notification or
// — when the fake forged it (one in five) — by a lookup, the forgery having
// changed nothing; without, every one by a lookup.
func TestNotificationsSettleUnknownChargesSooner(t *testing.T) {
	t.Parallel()
	median := map[bool]time.Duration{}
	for _, notify := range []bool{true, false} {
		s := &system{t: t, dbURL: dbtest.URL(t), ledger: filepath.Join(t.TempDir(), "ledger.jsonl")}
		s.pool = dbtest.NewPool(t, s.dbURL, 4)
		_, s.apiKey = createTenant(t, s.dbURL, "notified")
		// The provider posts to a relay that forwards to the API, whose
		// address is known only once it runs.
		var apiURL atomic.Value
		relay := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
			target, _ := url.Parse(apiURL.Load().(string))
			r.SetURL(target)
		}})
		t.Cleanup(relay.Close)
		env := []string{"PSP_WEBHOOK_SECRET=whsec_process_test_secret_0123456789"}
		pspArgs := []string{"fakepsp", "--addr", "127.0.0.1:0", "--no-dedupe", "--ledger", s.ledger}
		if notify {
			pspArgs = append(pspArgs, "--webhook-url", relay.URL+"/v1/provider_webhooks/fake")
		}
		psp := start(t, env, pspArgs...)
		s.pspURL = psp.listenAddr()
		apiEnv := env
		if !notify {
			apiEnv = nil
		}
		api := start(t, append([]string{"DATABASE_URL=" + s.dbURL, "PSP_URL=" + s.pspURL}, apiEnv...), "api", "--addr", "127.0.0.1:0", "--max-conns", "4")
		s.apiURL = api.listenAddr()
		apiURL.Store(s.apiURL)
		s.startWorker()
		s.startReconciler(nil)
		rules := []fakepsp.Rule{{On: fakepsp.OnCharge, Fault: fakepsp.FaultApplyThenTimeout, P: 1, MS: 1500}}
		if notify {
			rules = append(rules, fakepsp.Rule{On: fakepsp.OnNotification, Fault: fakepsp.FaultForge, P: 0.2})
		}
		s.faults(fakepsp.Schedule{Seed: 5, Rules: rules})

		s.postMany("notified", 40)
		s.waitNoneIn(2*time.Minute, "pending", "submitting", "unknown")
		require.Empty(t, s.violations())
		var took time.Duration
		require.NoError(t, s.pool.QueryRow(context.Background(), `SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY e.created_at - c.first_attempt_at)
			FROM charges c JOIN charge_audit e ON e.charge_id = c.id AND e.to_state = 'succeeded'`).Scan(&took))
		median[notify] = took
		reasons := s.reasons()
		if notify {
			require.Equal(t, 40, reasons["notification_succeeded"]+reasons["lookup_found_succeeded"], "%v", reasons)
			require.Positive(t, reasons["notification_succeeded"], "%v", reasons)
			counts, err := fakepsp.FetchNotifications(context.Background(), s.pspURL)
			require.NoError(t, err)
			t.Logf("with notifications: %d settled by one, %d by a lookup (the forged ones' charges); %+v", reasons["notification_succeeded"], reasons["lookup_found_succeeded"], counts)
		} else {
			require.Equal(t, 40, reasons["lookup_found_succeeded"], "%v", reasons)
		}
	}
	t.Logf("median time from the first send to succeeded, every answer lost: %s with notifications, %s without (%.1f× sooner)",
		median[true].Round(time.Millisecond), median[false].Round(time.Millisecond), float64(median[false])/float64(median[true]))
	require.Less(t, median[true], median[false])
}
