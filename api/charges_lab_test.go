//go:build lab

package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/internal/lockedbuf"
)

// TestCreateChargeUnderCrashPoints is TestCreateCharge's cases that need an
// armed crash point, which only the lab build has (crashpoint).
func TestCreateChargeUnderCrashPoints(t *testing.T) {
	t.Parallel()

	// While the first request holds the key inside its transaction, a second
	// one waits on the unique index; with a short lock_timeout it gets 409 +
	// Retry-After, and after the first commits it gets the replay.
	t.Run("InProgressIsConflict", func(t *testing.T) {
		t.Parallel()
		var crashLog lockedbuf.Buffer
		points, err := crashpoint.Parse(crashpoint.APIAfterInsertBeforeCommit+"=pause:1500ms", 1,
			slogJSON(&crashLog))
		require.NoError(t, err)
		b := setup(t, func(o *setupOpts) {
			o.lockTimeout = "100ms"
			o.config = func(c *api.Config) { c.CrashPoints = points }
		})

		first := make(chan response, 1)
		go func() { first <- b.post(t, b.tenantA, "in-progress-key-0001", validBody) }()
		require.Eventually(t, func() bool { return strings.Contains(crashLog.String(), "crashpoint fired") },
			10*time.Second, 5*time.Millisecond)

		second := b.post(t, b.tenantA, "in-progress-key-0001", validBody)
		requireProblem(t, second, http.StatusConflict, api.CodeRequestInProgress)
		require.Equal(t, "1", second.header.Get("Retry-After"))

		firstResp := <-first
		require.Equal(t, http.StatusCreated, firstResp.status)
		third := b.post(t, b.tenantA, "in-progress-key-0001", validBody)
		require.Equal(t, http.StatusCreated, third.status)
		require.Equal(t, "true", third.header.Get("Idempotent-Replayed"))
		require.Equal(t, firstResp.body, third.body)
		require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Events: 1, Jobs: 1}, b.stored(t))
	})

	// An error between the insert and the commit rolls everything back; the
	// retry with the same key then succeeds.
	t.Run("FailureBeforeCommitLeavesNothing", func(t *testing.T) {
		t.Parallel()
		points, err := crashpoint.Parse(crashpoint.APIAfterInsertBeforeCommit+"=error", 1, slogJSON(&lockedbuf.Buffer{}))
		require.NoError(t, err)
		b := setup(t, func(o *setupOpts) {
			o.config = func(c *api.Config) { c.CrashPoints = points }
		})

		resp := b.post(t, b.tenantA, "rollback-key-0000001", validBody)
		requireProblem(t, resp, http.StatusInternalServerError, api.CodeInternal)
		require.Equal(t, stored{}, b.stored(t))
	})
}
