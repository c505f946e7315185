//go:build lab

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	neturl "net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/migrations"
)

const crashBody = `{"amount": 2500, "currency": "EUR", "payment_method": "pm_card_visa", "description": "crash test"}`

type postResult struct {
	status   int
	replayed string
	body     string
	err      error
}

func postCharge(baseURL, apiKey, key, body string) postResult {
	return postTo(baseURL+"/v1/charges", apiKey, key, body)
}

// postTo sends one POST with an idempotency key to url.
func postTo(url, apiKey, key, body string) postResult {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return postResult{err: err}
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		return postResult{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return postResult{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed"), body: string(data), err: err}
}

// rowCounts is what the accept transaction writes.
func rowCounts(t *testing.T, dbURL string) [4]int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n [4]int
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM charges), (SELECT count(*) FROM idempotency_keys),
		(SELECT count(*) FROM charge_audit), (SELECT count(*) FROM river_job)`).Scan(&n[0], &n[1], &n[2], &n[3]))
	return n
}

// Killing the API process inside the accept transaction leaves nothing
// behind, and the client's retry with the same key then succeeds.
func TestCrashInsideAcceptTransaction(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	_, apiKey := createTenant(t, dbURL, "crash-inside")

	api := start(t, []string{"DATABASE_URL=" + dbURL, "CHARGEFLOW_CRASHPOINTS=api.after_insert_before_commit=pause:60s"},
		"api", "--addr", "127.0.0.1:0", "--max-conns", "4")
	baseURL := api.listenAddr()

	result := make(chan postResult, 1)
	go func() { result <- postCharge(baseURL, apiKey, "crash-inside-key-0001", crashBody) }()
	api.waitLog(`"msg":"crashpoint fired","role":"api","point":"api.after_insert_before_commit"`)
	api.kill()
	got := <-result
	require.Error(t, got.err, "the client saw the connection die, not an answer")
	require.Equal(t, [4]int{}, rowCounts(t, dbURL), "nothing of the killed transaction is visible")

	restarted := start(t, []string{"DATABASE_URL=" + dbURL}, "api", "--addr", "127.0.0.1:0", "--max-conns", "4")
	baseURL = restarted.listenAddr()
	var retry postResult
	// Postgres may take a moment to notice the dead session and release the
	// key's lock; until then the retry is told 409 + Retry-After.
	require.Eventually(t, func() bool {
		retry = postCharge(baseURL, apiKey, "crash-inside-key-0001", crashBody)
		return retry.err == nil && retry.status != http.StatusConflict
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, http.StatusCreated, retry.status, retry.body)
	require.Empty(t, retry.replayed, "the retry is the first request that committed")
	require.Equal(t, [4]int{1, 1, 1, 1}, rowCounts(t, dbURL))
}

// Killing the API after the commit but before the answer: the client saw
// nothing, and its retry gets the committed charge as a replay.
func TestCrashAfterCommitBeforeResponse(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	_, apiKey := createTenant(t, dbURL, "crash-after-commit")

	api := start(t, []string{"DATABASE_URL=" + dbURL, "CHARGEFLOW_CRASHPOINTS=api.after_commit_before_response=exit"},
		"api", "--addr", "127.0.0.1:0", "--max-conns", "4")
	got := postCharge(api.listenAddr(), apiKey, "crash-after-key-00001", crashBody)
	require.Error(t, got.err)
	<-api.done
	require.Contains(t, api.stderr.String(), `"point":"api.after_commit_before_response"`)

	restarted := start(t, []string{"DATABASE_URL=" + dbURL}, "api", "--addr", "127.0.0.1:0", "--max-conns", "4")
	retry := postCharge(restarted.listenAddr(), apiKey, "crash-after-key-00001", crashBody)
	require.NoError(t, retry.err)
	require.Equal(t, http.StatusCreated, retry.status, retry.body)
	require.Equal(t, "true", retry.replayed)
	require.Equal(t, [4]int{1, 1, 1, 1}, rowCounts(t, dbURL))
}

// Two `chargeflow migrate` processes at once on an empty database: both
// succeed and every migration is applied exactly once.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := dbtest.Admin(t)
	name := fmt.Sprintf("chargeflow_migrate_test_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), fmt.Sprintf(`DROP DATABASE IF EXISTS %q WITH (FORCE)`, name))
	})
	dbURL := strings.Replace(admin.Config().ConnString(), "/postgres?", "/"+name+"?", 1)
	require.Contains(t, dbURL, name, "the admin URL names the postgres database")

	var wg sync.WaitGroup
	procs := make([]*process, 2)
	for i := range procs {
		wg.Go(func() {
			procs[i] = start(t, []string{"DATABASE_URL=" + dbURL}, "migrate")
			<-procs[i].done
		})
	}
	wg.Wait()
	for _, p := range procs {
		require.NoError(t, p.err, p.stderr.String())
	}
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var ours, river int
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM chargeflow_migrations), (SELECT count(*) FROM river_migration)`).Scan(&ours, &river))
	all, err := migrations.All()
	require.NoError(t, err)
	require.Equal(t, len(all), ours, "every migration applied exactly once")
	require.Positive(t, river)

	// And a third run on the migrated database changes nothing.
	runInProcess(t, map[string]string{"DATABASE_URL": dbURL}, "migrate")
}

// `chargeflow all` prints a charge that works as printed, and an operator
// token that signs in.
func TestAllPrintsWorkingCurl(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)

	all := start(t, []string{"DATABASE_URL=" + dbURL}, "all", "--addr", "127.0.0.1:0", "--psp-addr", "127.0.0.1:0", "--max-conns", "6", "--concurrency", "4",
		"--ledger", filepath.Join(t.TempDir(), "ledger.jsonl"))
	b := waitBanner(t, all)
	url, apiKey, key, body := b.apiURL+"/v1/charges", b.apiKey, b.idempotencyKey, b.chargeBody

	first := postCharge(strings.TrimSuffix(url, "/v1/charges"), apiKey, key, body)
	require.NoError(t, first.err)
	require.Equal(t, http.StatusCreated, first.status, first.body)
	second := postCharge(strings.TrimSuffix(url, "/v1/charges"), apiKey, key, body)
	require.Equal(t, "true", second.replayed, "running it twice replays, as the banner says")
	require.Equal(t, first.body, second.body)
	require.NotContains(t, all.stderr.String(), apiKey, "the key is printed for the user, never logged")

	// The worker and the fake provider run in the same process: the charge
	// reaches succeeded on its own.
	var charge struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	require.NoError(t, json.Unmarshal([]byte(first.body), &charge))
	require.Eventually(t, func() bool {
		req, _ := http.NewRequest(http.MethodGet, strings.TrimSuffix(url, "/v1/charges")+"/v1/charges/"+charge.ID, nil)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&charge) == nil && charge.Status == "succeeded"
	}, 30*time.Second, 10*time.Millisecond)

	// The operator's page signs in with the printed token, and serves
	// River's job UI behind it.
	page := []string{"", b.apiURL, b.operatorToken}
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar}
	resp, err := browser.PostForm(page[1]+"/ops/sign-in", neturl.Values{"token": {page[2]}})
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "/ops/", resp.Request.URL.Path, "signed in, on the review queue")
	resp, err = browser.Get(page[1] + "/ops/jobs/")
	require.NoError(t, err)
	jobsPage, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(jobsPage), `<div id="root"`, "River's job UI")
	require.NotContains(t, all.stderr.String(), page[2], "the token is printed for the user, never logged")
}
