package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"chargeflow/fakepsp"
	"chargeflow/internal/dbtest"
	"chargeflow/webhook"
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

	// The receiver: verifies each delivery with the secret, then fails 30 %
	// of them at random.
	var mu sync.Mutex
	var secret string
	valid, forged := map[string]map[string]any{}, 0
	rng := rand.New(rand.NewPCG(7, 13))
	var down atomic.Bool
	var dropped atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			dropped.Add(1)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		body, _ := io.ReadAll(r.Body)
		ts, _ := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
		mu.Lock()
		defer mu.Unlock()
		want, err := webhook.Sign(secret, r.Header.Get("webhook-id"), ts, body)
		if err != nil || want != r.Header.Get("webhook-signature") {
			forged++
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var event map[string]any
		require.NoError(t, json.Unmarshal(body, &event))
		if rng.Float64() < 0.3 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		valid[r.Header.Get("webhook-id")] = event
	}))
	t.Cleanup(receiver.Close)
	created := postTo(s.apiURL+"/v1/webhook_endpoints", s.apiKey, "", fmt.Sprintf(`{"url": %q, "events": ["*"]}`, receiver.URL+"/hooks"))
	require.NoError(t, created.err)
	require.Equal(t, http.StatusCreated, created.status, created.body)
	var endpoint struct{ Secret string }
	require.NoError(t, json.Unmarshal([]byte(created.body), &endpoint))
	mu.Lock()
	secret = endpoint.Secret
	mu.Unlock()

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
			down.Store(true)
			time.AfterFunc(4*time.Second, func() { down.Store(false) })
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

	// Every settled charge has exactly one event, and that event reached
	// the receiver signed; nothing else did.
	rows, err := s.pool.Query(ctx, `SELECT e.id, e.type, c.id, c.state FROM charges c JOIN events e ON e.object_id = c.id`)
	require.NoError(t, err)
	events := map[string]string{}
	perCharge := map[string]int{}
	for rows.Next() {
		var id, typ, charge, state string
		require.NoError(t, rows.Scan(&id, &typ, &charge, &state))
		require.Equal(t, "charge."+state, typ, "the event's type is the move's state")
		events[id] = charge
		perCharge[charge]++
	}
	require.NoError(t, rows.Err())
	require.Len(t, perCharge, 200, "every charge settled has its event")
	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, forged, "every delivery verifies with the secret")
	require.Len(t, valid, len(events))
	for id, event := range valid {
		charge, ok := events[id]
		require.True(t, ok, "a delivered event %s is an event of a move that happened", id)
		require.Equal(t, charge, event["data"].(map[string]any)["id"])
	}
	var attempts, failed int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status <> 200 OR status IS NULL) FROM webhook_attempts`).Scan(&attempts, &failed))
	t.Logf("200 charges, %d events, %d delivery attempts (%d failed or cut short; %d dropped while the receiver was down), %d worker kills",
		len(events), attempts, failed, dropped.Load(), kills)
	require.Positive(t, dropped.Load(), "deliveries met the receiver down")
	require.Positive(t, kills)
	require.Positive(t, failed, "the receiver's failures were retried")
}
