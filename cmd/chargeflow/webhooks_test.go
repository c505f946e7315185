//go:build lab

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/scenario"
)

// A merchant's receiver failing 30 % of deliveries at random and down
// altogether (connections dropped) for four seconds mid-run, and workers
// killed every two seconds, while 200 charges settle (declines and lost
// answers among them): every charge that reached succeeded or failed has
// its event delivered, signed with the endpoint's secret, and nothing is
// delivered that is not an event of a move that happened.
func TestWebhooksDeliveredThroughKills(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &system{t: t, dbURL: dbtest.URL(t), ledger: filepath.Join(t.TempDir(), "ledger.jsonl")}
	s.pool = dbtest.NewPool(t, s.dbURL, 4)
	_, s.apiKey = createTenant(t, s.dbURL, "hooked")
	s.startFakePSP()
	env := []string{"DATABASE_URL=" + s.dbURL, "PSP_URL=" + s.pspURL, "WEBHOOKS_ALLOW_PRIVATE=1"}
	s.apiURL = start(t, env, "api", "--addr", "127.0.0.1:0", "--max-conns", "4").listenAddr()

	// The merchant's receiver, the scenarios' own (package scenario): it
	// verifies each delivery with the secret, then fails 30 % of them at
	// random.
	receiver, err := scenario.NewReceiver(t.Context(), 7, 0.3)
	require.NoError(t, err)
	t.Cleanup(receiver.Close)
	created := postTo(s.apiURL+"/v1/webhook_endpoints", s.apiKey, "webhooks-through-kills", fmt.Sprintf(`{"url": %q, "events": ["*"]}`, receiver.URL))
	require.NoError(t, created.err)
	require.Equal(t, http.StatusCreated, created.status, created.body)
	var endpoint struct{ Secret string }
	require.NoError(t, json.Unmarshal([]byte(created.body), &endpoint))
	receiver.SetSecret(endpoint.Secret)

	startWorker := func() *process {
		p := start(t, env, "worker", "--call-timeout", "1s", "--rescue-after", "7s", "--retry-base", "50ms", "--retry-cap", "200ms",
			"--concurrency", "4", "--unknown-check-after", "200ms", "--webhook-retry-base", "50ms", "--webhook-retry-cap", "500ms")
		p.waitLog(`"msg":"worker started"`)
		return p
	}
	workers := []*process{startWorker(), startWorker()}
	s.startReconciler(nil)
	s.faults(fakepsp.Schedule{Seed: 21, Rules: []fakepsp.Rule{{On: fakepsp.OnCharge, Fault: fakepsp.FaultApplyThenTimeout, P: 0.1, MS: 1500}}})

	// Kill a worker every two seconds, and start another.
	chaos, stop := context.WithCancel(ctx)
	var kills int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-chaos.Done():
				return
			case <-time.After(2 * time.Second):
			}
			workers[i%2].kill()
			kills++
			workers[i%2] = startWorker()
		}
	}()
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			card := "pm_card_visa"
			if i%5 == 0 {
				card = "pm_card_chargeDeclined"
			}
			s.post(fmt.Sprintf("hooked-charge-%06d", i), card, 100+i)
		})
		if i%20 == 19 {
			wg.Wait() // in waves, so the kills land mid-traffic
		}
		if i == 99 {
			receiver.Down()
			time.AfterFunc(4*time.Second, receiver.Up)
		}
	}
	wg.Wait()
	s.waitNoneIn(3*time.Minute, "pending", "submitting", "unknown")
	require.Eventually(t, func() bool {
		var left int
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE state <> 'delivered'`).Scan(&left))
		return left == 0
	}, 3*time.Minute, 100*time.Millisecond, "every delivery delivered")
	stop()
	<-done

	// Every settled charge has exactly one event; every event reached the
	// receiver signed, with its id as webhook-id, and nothing else did
	// (scenario.CheckWebhooks, as in the webhook scenarios).
	rows, err := s.pool.Query(ctx, `SELECT e.type, c.id, c.state FROM charges c JOIN events e ON e.object_id = c.id`)
	require.NoError(t, err)
	perCharge := map[string]int{}
	events := 0
	for rows.Next() {
		var typ, charge, state string
		require.NoError(t, rows.Scan(&typ, &charge, &state))
		require.Equal(t, "charge."+state, typ, "the event's type is the move's state")
		perCharge[charge]++
		events++
	}
	require.NoError(t, rows.Err())
	require.Len(t, perCharge, 200, "every charge settled has its event")
	require.Equal(t, 200, events, "one event per charge")
	violations, err := scenario.CheckWebhooks(ctx, s.pool, receiver)
	require.NoError(t, err)
	require.Empty(t, violations)
	stats := receiver.Stats()
	require.Equal(t, events, stats.Delivered)
	var attempts, failed int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status <> 200 OR status IS NULL) FROM webhook_attempts`).Scan(&attempts, &failed))
	t.Logf("200 charges, %d events, %d delivery attempts (%d failed or cut short; %d dropped while the receiver was down), %d worker kills",
		events, attempts, failed, stats.Dropped, kills)
	require.Positive(t, stats.Dropped, "deliveries met the receiver down")
	require.Positive(t, kills)
	require.Positive(t, stats.Failed, "the receiver's failures were retried")
}
