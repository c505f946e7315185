//go:build lab

package crashpoint_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/crashpoint"
)

func TestParse(t *testing.T) {
	t.Parallel()

	for _, spec := range []string{
		"nope=exit",
		"api.after_insert_before_commit",
		"api.after_insert_before_commit=explode",
		"api.after_insert_before_commit=pause",
		"api.after_insert_before_commit=pause:-1s",
		"api.after_insert_before_commit=exit:3s",
		"api.after_insert_before_commit=exit@1.5",
		"api.after_insert_before_commit=exit#0",
		"api.after_insert_before_commit=exit#2@0.5",
	} {
		_, err := crashpoint.Parse(spec, 1, slog.New(slog.DiscardHandler))
		require.Error(t, err, spec)
	}

	set, err := crashpoint.Parse("  ", 1, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Nil(t, set)
	require.False(t, set.Armed())
	require.NoError(t, set.Hit(context.Background(), crashpoint.APIAfterInsertBeforeCommit), "a nil set is disarmed")
}

func TestHit(t *testing.T) {
	t.Parallel()

	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	set, err := crashpoint.Parse("api.after_insert_before_commit=error,worker.after_submitting_commit=exit,"+
		"reconciler.after_lease=pause:20ms,reconciler.after_lookup_before_update=error@0.5", 7, logger)
	require.NoError(t, err)
	exited := 0
	set.WithExit(func(code int) {
		require.Equal(t, crashpoint.ExitCode, code)
		exited++
	})
	ctx := context.Background()

	require.ErrorIs(t, set.Hit(ctx, crashpoint.APIAfterInsertBeforeCommit), crashpoint.ErrInjected)
	require.NoError(t, set.Hit(ctx, crashpoint.WorkerAfterSubmittingCommit))
	require.Equal(t, 1, exited)
	start := time.Now()
	require.NoError(t, set.Hit(ctx, crashpoint.ReconcilerAfterLease))
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
	require.NoError(t, set.Hit(ctx, crashpoint.APIAfterCommitBeforeResponse), "unarmed points do nothing")

	fired := 0
	for range 1000 {
		if set.Hit(ctx, crashpoint.ReconcilerAfterLookupBeforeUpdate) != nil {
			fired++
		}
	}
	require.InDelta(t, 500, fired, 100, "fires with its probability")

	nth, err := crashpoint.Parse("api.after_commit_before_response=error#3", 1, logger)
	require.NoError(t, err)
	var errs []bool
	for range 5 {
		errs = append(errs, nth.Hit(ctx, crashpoint.APIAfterCommitBeforeResponse) != nil)
	}
	require.Equal(t, []bool{false, false, true, false, false}, errs, "#3 fires on the third hit only")
	require.Contains(t, logs.String(), `"msg":"crashpoint fired","point":"worker.after_submitting_commit"`)
}
