//go:build lab

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// TestCancelledSyncWaitIsNeverACommit runs the API and a worker on a server
// whose synchronous standby stops answering, as a primary cut off from its
// standby sees it, and cancels every commit's wait for it (a
// statement_timeout or pg_cancel_backend does the same). PostgreSQL then
// answers COMMIT with a warning, and the rows are there on this server, but
// a failover to the standby would lose them: the API must not answer 201,
// neither to the request nor to its retry, and the worker must not call the
// provider for a charge whose move to submitting it could not confirm.
func TestCancelledSyncWaitIsNeverACommit(t *testing.T) {
	t.Parallel()
	server := dbtest.SyncStandbyServer(t)
	dbURL := server.URL("chargeflow")
	runInProcess(t, map[string]string{"DATABASE_URL": dbURL}, "migrate")
	_, apiKey := createTenant(t, dbURL, "syncrep")
	ledger := filepath.Join(t.TempDir(), "ledger.jsonl")
	psp := start(t, nil, "fakepsp", "--addr", "127.0.0.1:0", "--no-dedupe", "--ledger", ledger)
	pspURL := psp.listenAddr()
	env := []string{"DATABASE_URL=" + dbURL, "PSP_URL=" + pspURL}
	api := start(t, env, "api", "--addr", "127.0.0.1:0", "--max-conns", "4")
	apiURL := api.listenAddr()
	pool := dbtest.NewPool(t, dbURL, 2)
	ctx := context.Background()
	count := func(table string) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n))
		return n
	}

	server.Vanish()
	const body = `{"amount": 1500, "currency": "USD", "payment_method": "pm_card_visa"}`
	post := func() postResult {
		var got postResult
		done := make(chan struct{})
		go func() {
			defer close(done)
			got = postCharge(apiURL, apiKey, "syncrep-key-0000001", body)
		}()
		server.CancelWaitsUntil("chargeflow-api", done)
		require.NoError(t, got.err)
		return got
	}
	requireUnconfirmed := func(got postResult) {
		t.Helper()
		require.Equal(t, http.StatusServiceUnavailable, got.status, got.body)
		var problem struct {
			Code   string `json:"code"`
			Detail string `json:"detail"`
		}
		require.NoError(t, json.Unmarshal([]byte(got.body), &problem))
		require.Equal(t, "database_unavailable", problem.Code)
		require.Contains(t, problem.Detail, "standby did not confirm")
	}

	// The first attempt: committed here, so a naive API would say 201.
	requireUnconfirmed(post())
	require.Equal(t, 1, count("charges"), "the server committed the accept locally")
	require.Equal(t, 1, count("idempotency_keys"))
	// Its retry finds the record, and must not answer with it before the
	// standby has it: the replay's own commit waits, and is cancelled too.
	requireUnconfirmed(post())
	require.Equal(t, 1, count("charges"), "a retry writes nothing more")

	// A worker claims the charge; its claim's commit is cancelled (River's
	// own commits too, which is why the cancels go on until the job's
	// error is stored). It must never call the provider.
	worker := start(t, env, "worker", "--call-timeout", "1s", "--retry-base", "50ms", "--retry-cap", "200ms", "--concurrency", "1")
	jobFailed := make(chan struct{})
	go func() {
		defer close(jobFailed)
		require.Eventually(t, func() bool {
			var errs string
			err := pool.QueryRow(ctx, `SELECT coalesce(errors::text, '') FROM river_job WHERE kind = 'charge.submit'`).Scan(&errs)
			return err == nil && strings.Contains(errs, "standby")
		}, time.Minute, 10*time.Millisecond)
	}()
	server.CancelWaitsUntil("chargeflow-worker", jobFailed)
	entries, err := fakepsp.FetchLedger(ctx, pspURL, false)
	require.NoError(t, err)
	require.Empty(t, entries, "no provider call for a claim the standby did not confirm")
	worker.kill()

	// The standby answers again: the retry is answered with the stored 201.
	server.Return()
	got := postCharge(apiURL, apiKey, "syncrep-key-0000001", body)
	require.NoError(t, got.err)
	require.Equal(t, http.StatusCreated, got.status, got.body)
	require.Equal(t, "true", got.replayed)
	var charge struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(got.body), &charge))
	var stored string
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM charges`).Scan(&stored))
	require.Equal(t, stored, charge.ID)
	require.NotContains(t, api.stderr.String(), "syncrep-key-0000001", "no raw idempotency key in the log")
}
