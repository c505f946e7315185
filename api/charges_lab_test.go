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
	"github.com/chargeflow/chargeflow/internal/apitest"
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
			apitest.SlogJSON(&crashLog))
		require.NoError(t, err)
		b := setup(t, func(o *setupOpts) {
			o.LockTimeout = "100ms"
			o.API = func(c *api.Config) { c.CrashPoints = points }
		})

		first := make(chan response, 1)
		go func() { first <- b.Post(t, b.TenantA, "in-progress-key-0001", apitest.ValidBody) }()
		require.Eventually(t, func() bool { return strings.Contains(crashLog.String(), "crashpoint fired") },
			10*time.Second, 5*time.Millisecond)

		second := b.Post(t, b.TenantA, "in-progress-key-0001", apitest.ValidBody)
		apitest.RequireProblem(t, second, http.StatusConflict, api.CodeRequestInProgress)
		require.Equal(t, "1", second.Header.Get("Retry-After"))

		firstResp := <-first
		require.Equal(t, http.StatusCreated, firstResp.Status)
		third := b.Post(t, b.TenantA, "in-progress-key-0001", apitest.ValidBody)
		require.Equal(t, http.StatusCreated, third.Status)
		require.Equal(t, "true", third.Header.Get("Idempotent-Replayed"))
		require.Equal(t, firstResp.Body, third.Body)
		require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Events: 1, Jobs: 1}, b.Stored(t))
	})

	// An error between the insert and the commit rolls everything back; the
	// retry with the same key then succeeds.
	t.Run("FailureBeforeCommitLeavesNothing", func(t *testing.T) {
		t.Parallel()
		points, err := crashpoint.Parse(crashpoint.APIAfterInsertBeforeCommit+"=error", 1, apitest.SlogJSON(&lockedbuf.Buffer{}))
		require.NoError(t, err)
		b := setup(t, func(o *setupOpts) {
			o.API = func(c *api.Config) { c.CrashPoints = points }
		})

		resp := b.Post(t, b.TenantA, "rollback-key-0000001", apitest.ValidBody)
		apitest.RequireProblem(t, resp, http.StatusInternalServerError, api.CodeInternal)
		require.Equal(t, stored{}, b.Stored(t))
	})
}
