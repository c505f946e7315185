//go:build lab

package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/client"
	"github.com/chargeflow/chargeflow/internal/lockedbuf"
)

// `chargeflow listen --forward-to` forwards the tenant's events, from the
// moment it starts, to a local receiver that verifies each with the client
// library and the printed secret; it prints a line per event, retries one
// the receiver refused, and leaves out the types it was not asked for.
func TestListenForwardsEvents(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.startWorker()
	earlier := s.post("listen-before-it-started", "pm_card_visa", 700)
	require.Eventually(t, func() bool { return s.state(earlier) == "succeeded" }, 30*time.Second, 20*time.Millisecond)

	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	var mu sync.Mutex
	var received []*client.Event
	refusedOnce := false
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ev, err := client.ConstructEvent(secret, r.Header, body, 0)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !refusedOnce {
			refusedOnce = true
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		received = append(received, ev)
	}))
	t.Cleanup(receiver.Close)

	ctx, cancel := context.WithCancel(context.Background())
	stdout := &lockedbuf.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"listen", "--forward-to", receiver.URL + "/hooks", "--events", "charge.succeeded,charge.failed",
			"--interval", "100ms", "--retry-base", "50ms"},
			func(k string) string {
				return map[string]string{"CHARGEFLOW_API_URL": s.apiURL, "CHARGEFLOW_API_KEY": s.apiKey, "CHARGEFLOW_SECRET": secret}[k]
			}, stdout, io.Discard)
	}()
	require.Eventually(t, func() bool { return strings.Contains(stdout.String(), "Forwarding the events") }, 30*time.Second, 10*time.Millisecond)
	require.Contains(t, stdout.String(), secret, "the secret to verify with is printed")

	succeeded := s.post("listen-succeeds-0001", "pm_card_visa", 1000)
	declined := s.post("listen-declined-0001", "pm_card_chargeDeclined", 1000)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(received) == 2
	}, 60*time.Second, 20*time.Millisecond, "forwarded:\n%s", stdout.String())

	mu.Lock()
	byType := map[string]string{}
	for _, ev := range received {
		c, err := ev.Charge()
		require.NoError(t, err)
		byType[ev.Type] = c.ID
	}
	mu.Unlock()
	require.Equal(t, map[string]string{"charge.succeeded": succeeded, "charge.failed": declined}, byType,
		"what happened while listening, verified; not the charge before it")
	printed := stdout.String()
	require.Regexp(t, `charge\.(succeeded|failed) +evt_\S+  → 503; again in`, printed, "the refused attempt, then")
	require.Regexp(t, `charge\.(succeeded|failed) +evt_\S+  → 200 \(\d+ ms\)`, printed)
	require.NotContains(t, printed, s.apiKey)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "Ctrl-C ends it cleanly")
	case <-time.After(30 * time.Second):
		t.Fatal("listen did not stop")
	}

	// Refusals: a URL that is not one, a type that is none.
	for _, args := range [][]string{
		{"listen", "--forward-to", "localhost:3000"},
		{"listen", "--forward-to", "http://localhost:3000", "--events", "charge.exploded"},
	} {
		err := run(context.Background(), args, func(k string) string { return map[string]string{"CHARGEFLOW_API_KEY": s.apiKey}[k] }, &bytes.Buffer{}, io.Discard)
		require.Equal(t, exitUsage, exitCode(err), "%q: %v", args, err)
	}
}
