//go:build lab

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// terminate sends SIGTERM, as Docker and Kubernetes do to stop a container.
func (p *process) terminate() {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(syscall.SIGTERM))
}

// exited waits for the process to end and requires exit status 0.
func (p *process) exited() {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.t.Fatalf("still running a minute after SIGTERM:\n%s", p.stderr.String())
	}
	require.NoError(p.t, p.err, "a stop on SIGTERM exits 0:\n%s", p.stderr.String())
}

// On SIGTERM the API's /readyz answers 503 draining at once, while every
// other request is still served; the request in flight (held inside its
// transaction by a crash point's pause past the end of the drain, so the
// listener closes under it) gets its answer; a client that
// polls readiness on one keep-alive connection, as a load balancer does,
// gets an answer to every request until it sees draining; and the process
// exits 0.
func TestAPIStopsGracefully(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	_, apiKey := createTenant(t, dbURL, "graceful-api")
	api := start(t, []string{"DATABASE_URL=" + dbURL, "CHARGEFLOW_CRASHPOINTS=api.after_insert_before_commit=pause:4s"},
		"api", "--addr", "127.0.0.1:0", "--max-conns", "4", "--shutdown-grace", "3s")
	baseURL := api.listenAddr()
	status, _, err := getStatus(baseURL+"/readyz", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)

	// The balancer: it stops sending once readiness says draining.
	var balancer sync.WaitGroup
	var pollErrs []error
	var polled int
	var sawDraining bool
	balancer.Go(func() {
		client := &http.Client{Timeout: 30 * time.Second}
		for {
			resp, err := client.Get(baseURL + "/readyz")
			if err != nil {
				pollErrs = append(pollErrs, err)
				return
			}
			var p struct {
				Code string `json:"code"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&p)
			_ = resp.Body.Close()
			polled++
			if resp.StatusCode == http.StatusServiceUnavailable && p.Code == "draining" {
				sawDraining = true
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})

	inFlight := make(chan postResult, 1)
	go func() { inFlight <- postCharge(baseURL, apiKey, "graceful-api-key-0001", crashBody) }()
	api.waitLog(`"msg":"crashpoint fired","role":"api","point":"api.after_insert_before_commit"`)
	api.terminate()
	balancer.Wait()
	require.Empty(t, pollErrs, "a readiness probe failed before it saw draining")
	require.True(t, sawDraining, "readiness never went 503 draining")
	require.Greater(t, polled, 1)

	status, _, err = getStatus(baseURL+"/v1/charges", apiKey)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "a draining API still serves")

	got := <-inFlight
	require.NoError(t, got.err, "the request in flight got its answer")
	require.Equal(t, http.StatusCreated, got.status, got.body)
	api.exited()
	require.Contains(t, api.stderr.String(), `"msg":"draining: /readyz answers 503, requests are still served"`)
	require.Contains(t, api.stderr.String(), `"msg":"stopped serving"`)
	require.Equal(t, [4]int{1, 1, 1, 1}, rowCounts(t, dbURL), "the charge in flight committed")
	_, _, err = getStatus(baseURL+"/healthz", "")
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "stopped: the port refuses connections")
}

// A worker stopped while its provider call is held by the fake provider's
// latency fault: within its grace the call does not end, so the job is
// cancelled and the charge stays submitting, never anything else; the
// process exits 0. Restarted, with a reconciler, the charge succeeds, and
// the provider holds exactly one charge for it.
func TestWorkerStopsMidCall(t *testing.T) {
	t.Parallel()
	s := &system{t: t, dbURL: dbtest.URL(t), ledger: filepath.Join(t.TempDir(), "ledger.jsonl")}
	s.pool = dbtest.NewPool(t, s.dbURL, 4)
	_, s.apiKey = createTenant(t, s.dbURL, "graceful-worker")
	provider := s.startFakePSP()
	s.apiURL = start(t, []string{"DATABASE_URL=" + s.dbURL, "PSP_URL=" + s.pspURL}, "api", "--addr", "127.0.0.1:0", "--max-conns", "4").listenAddr()
	s.faults(fakepsp.Schedule{Rules: []fakepsp.Rule{{On: fakepsp.OnCharge, Fault: fakepsp.FaultLatency, P: 1, MS: 4000}}})

	env := []string{"DATABASE_URL=" + s.dbURL, "PSP_URL=" + s.pspURL}
	worker := start(t, env, "worker", "--call-timeout", "10s", "--concurrency", "2", "--shutdown-grace", "300ms")
	worker.waitLog(`"msg":"worker started"`)
	id := s.post("graceful-worker-key-01", "pm_card_visa", 1000)
	provider.waitLog(`"msg":"fakepsp: fault fired"`)
	require.Equal(t, "submitting", s.state(id))

	worker.terminate()
	worker.exited()
	require.Contains(t, worker.stderr.String(), `"msg":"jobs still running after the grace; cancelling them"`)
	state := s.state(id)
	require.Contains(t, []string{"submitting", "succeeded"}, state, "a worker stopped mid-call leaves its charge submitting (or settled), nothing else")
	if state == "submitting" {
		var last string
		require.NoError(t, s.pool.QueryRow(context.Background(),
			`SELECT to_state FROM charge_audit WHERE charge_id = $1 ORDER BY id DESC LIMIT 1`, id).Scan(&last))
		require.Equal(t, "submitting", last, "nothing was written after the cut call")
	}

	// The provider applies the held charge when its latency ends, whether
	// or not anyone still waits for the answer.
	s.faults(fakepsp.Schedule{})
	start(t, env, "worker", "--call-timeout", "10s", "--concurrency", "2", "--unknown-check-after", "200ms").waitLog(`"msg":"worker started"`)
	s.startReconcilerWith("--call-timeout", "10s", "--stale-margin", "1s")
	require.Eventually(t, func() bool { return s.state(id) == "succeeded" }, 90*time.Second, 50*time.Millisecond, "the charge never settled after the restart")
	require.Len(t, s.ledgerEntries(), 1, "one charge at the provider")
	require.Empty(t, s.violations())
}

// startReconcilerWith starts a reconciler with short timings and flags,
// which override them.
func (s *system) startReconcilerWith(flags ...string) *process {
	s.t.Helper()
	args := append([]string{"reconciler", "--max-conns", "3", "--apply-margin", "500ms", "--interval", "100ms",
		"--lookup-rate", "2000", "--lookup-backoff-base", "100ms", "--lookup-backoff-cap", "500ms", "--lease-ttl", "10s"}, flags...)
	p := start(s.t, []string{"DATABASE_URL=" + s.dbURL, "PSP_URL=" + s.pspURL}, args...)
	p.waitLog(`"msg":"reconciler started"`)
	return p
}

// A reconciler stopped by SIGTERM exits 0 and says so.
func TestReconcilerStopsGracefully(t *testing.T) {
	t.Parallel()
	s := &system{t: t, dbURL: dbtest.URL(t), ledger: filepath.Join(t.TempDir(), "ledger.jsonl")}
	s.startFakePSP()
	r := s.startReconcilerWith("--shutdown-grace", "1s")
	r.terminate()
	r.exited()
	require.Contains(t, r.stderr.String(), `"msg":"reconciler stopped"`)
}

// `chargeflow all` stops every role it runs on SIGTERM, each as on its own,
// and exits 0.
func TestAllStopsGracefully(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	all := start(t, []string{"DATABASE_URL=" + dbURL}, "all", "--addr", "127.0.0.1:0", "--psp-addr", "127.0.0.1:0", "--max-conns", "6", "--concurrency", "4",
		"--ledger", filepath.Join(t.TempDir(), "ledger.jsonl"), "--shutdown-grace", "1s")
	all.waitLog(`"msg":"reconciler started"`)
	var baseURL string
	require.Eventually(t, func() bool {
		m := regexp.MustCompile(`export CHARGEFLOW_API_URL=(\S+)`).FindStringSubmatch(all.stdout.String())
		if m != nil {
			baseURL = m[1]
		}
		return m != nil
	}, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		status, _, err := getStatus(baseURL+"/readyz", "")
		return err == nil && status == http.StatusOK
	}, 30*time.Second, 10*time.Millisecond)
	all.terminate()
	require.Eventually(t, func() bool {
		status, code, err := getStatus(baseURL+"/readyz", "")
		return err == nil && status == http.StatusServiceUnavailable && code == "draining"
	}, 30*time.Second, 10*time.Millisecond, "readiness never went 503 draining")
	all.exited()
	logs := all.stderr.String()
	for _, line := range []string{
		`"msg":"draining: /readyz answers 503, requests are still served","role":"api"`,
		`"msg":"stopped: every running job finished","role":"worker"`,
		`"msg":"reconciler stopped","role":"reconciler"`,
	} {
		require.Contains(t, logs, line)
	}
}
