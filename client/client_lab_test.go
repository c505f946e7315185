//go:build lab

package client_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/client"
	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/lockedbuf"
)

// Many calls with one key while the first is inside its transaction: the
// others get 409 request_in_progress with Retry-After: 1, wait at least
// that, and end with the replay of the first's charge. One charge, one job.
func TestRequestInProgressStorm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs lockedbuf.Buffer // the crash point's and the API's
	// The first accept pauses between its insert and its commit, holding
	// the key; the API's lock_timeout turns the others' wait into a 409.
	// The pause is long enough for all of the storm to reach the held key
	// on a busy machine, and short of the API's own limits on an accept,
	// past which the first call would be answered and retried (a replay);
	// the storm's clients retry meanwhile, each wait recorded.
	points, err := crashpoint.Parse(crashpoint.APIAfterInsertBeforeCommit+"=pause:4s#1", 1, slogJSON(&logs))
	require.NoError(t, err)
	s := start(t, func(o *app.Options) {
		o.CrashPoints = points
		o.APIPool.LockTimeout = 100 * time.Millisecond
		o.Logger = slogJSON(&logs)
	})
	key := client.NewIdempotencyKey()

	firstClient, _ := s.newClient(t, s.url)
	type result struct {
		charge *client.Charge
		err    error
	}
	firstDone := make(chan result, 1)
	go func() {
		charge, err := firstClient.CreateCharge(ctx, visa(key))
		firstDone <- result{charge, err}
	}()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "crashpoint fired") },
		10*time.Second, 5*time.Millisecond, "the first request holds the key")

	// The waits are recorded, and slept for at most 200 ms of real time.
	clock := &testClock{realWait: 200 * time.Millisecond}
	storm, seen := s.newClient(t, s.url, client.WithClock(clock))
	const n = 20
	charges := make([]*client.Charge, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { charges[i], errs[i] = storm.CreateCharge(ctx, visa(key)) })
	}
	wg.Wait()
	firstResult := <-firstDone
	require.NoError(t, firstResult.err)
	first := firstResult.charge
	require.False(t, first.Replayed)
	for i := range n {
		require.NoError(t, errs[i])
		require.True(t, charges[i].Replayed)
		require.Equal(t, first.ID, charges[i].ID)
	}
	conflicts, unavailable := 0, 0
	for _, e := range seen.exchanges() {
		switch {
		case e.status == http.StatusConflict && e.code == client.CodeRequestInProgress:
			require.Equal(t, time.Second, e.retryAfter)
			conflicts++
		case e.status == http.StatusServiceUnavailable && e.code == client.CodeDatabaseUnavailable:
			// A busy shared database server can refuse a connection; that
			// is retried too, after its own Retry-After: 1.
			require.Equal(t, time.Second, e.retryAfter)
			unavailable++
		case e.status == http.StatusCreated:
		default:
			t.Fatalf("unexpected answer %d %s", e.status, e.code)
		}
	}
	t.Logf("%d conflicts, %d database_unavailable", conflicts, unavailable)
	if unavailable > 0 {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "database_unavailable") {
				t.Log(line)
				break
			}
		}
	}
	require.GreaterOrEqual(t, conflicts, n, "every storm call met the held key at least once")
	require.Len(t, clock.waits(), conflicts+unavailable, "one wait per 409 or 503")
	for _, wait := range clock.waits() {
		require.GreaterOrEqual(t, wait, time.Second, "Retry-After: 1 is a floor")
	}
	require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Jobs: 1}, s.stored(t))
}
