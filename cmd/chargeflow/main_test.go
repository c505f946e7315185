package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/lockedbuf"
)

// TestMain lets tests start this very binary as `chargeflow`: a child
// started with CHARGEFLOW_TEST_AS_MAIN=1 runs main instead of the tests, so
// crash tests kill real processes without a separate build.
func TestMain(m *testing.M) {
	if os.Getenv("CHARGEFLOW_TEST_AS_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// process is a chargeflow child process with its output captured.
type process struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout *lockedbuf.Buffer
	stderr *lockedbuf.Buffer
	done   chan struct{}
	err    error
}

// start runs `chargeflow args…` with the given extra environment.
func start(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CHARGEFLOW_TEST_AS_MAIN=1")
	cmd.Env = append(cmd.Env, env...)
	p := &process{t: t, cmd: cmd, stdout: &lockedbuf.Buffer{}, stderr: &lockedbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, cmd.Start())
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s stderr:\n%s", strings.Join(args, " "), p.stderr.String())
		}
	})
	return p
}

// kill sends SIGKILL: no cleanup runs in the child, exactly like a crash.
func (p *process) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// waitLog waits for a log line containing s.
func (p *process) waitLog(s string) {
	p.t.Helper()
	require.Eventually(p.t, func() bool { return strings.Contains(p.stderr.String(), s) }, 60*time.Second, 5*time.Millisecond,
		"waiting for %q in:\n%s", s, p.stderr.String())
}

// listenAddr waits for the "listening" log line and returns its address.
func (p *process) listenAddr() string {
	p.t.Helper()
	p.waitLog(`"msg":"listening"`)
	scanner := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	for scanner.Scan() {
		var line struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal(scanner.Bytes(), &line) == nil && line.Msg == "listening" {
			return "http://" + line.Addr
		}
	}
	p.t.Fatalf("no listening line in:\n%s", p.stderr.String())
	return ""
}

// runInProcess runs a short command in this process and returns its stdout.
func runInProcess(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	return runCaptured(t, env, &stderr, args...)
}

// runCaptured is runInProcess keeping the command's stderr, where a create
// prints its idempotency key.
func runCaptured(t *testing.T, env map[string]string, stderr *bytes.Buffer, args ...string) string {
	t.Helper()
	var stdout bytes.Buffer
	getenv := func(k string) string { return env[k] }
	err := run(context.Background(), args, getenv, &stdout, stderr)
	require.NoError(t, err, "stderr: %s", stderr.String())
	return stdout.String()
}

func TestUsage(t *testing.T) {
	t.Parallel()

	var stderr bytes.Buffer
	err := run(context.Background(), []string{"frobnicate"}, func(string) string { return "" }, io.Discard, &stderr)
	require.ErrorContains(t, err, `unknown command "frobnicate"`)
	require.Contains(t, stderr.String(), "migrate")
	require.ErrorContains(t, run(context.Background(), []string{"tenant", "create"}, func(string) string { return "" }, io.Discard, io.Discard), "--name is required")
	require.Error(t, run(context.Background(), []string{"tenant"}, func(string) string { return "" }, io.Discard, io.Discard))
	require.Error(t, run(context.Background(), nil, func(string) string { return "" }, io.Discard, io.Discard))
}

// createTenant runs `chargeflow tenant create` and returns its JSON.
func createTenant(t *testing.T, dbURL, name string) (tenantID, apiKey string) {
	t.Helper()
	out := runInProcess(t, map[string]string{"DATABASE_URL": dbURL}, "tenant", "create", "--name", name)
	var created struct {
		TenantID string `json:"tenant_id"`
		APIKey   string `json:"api_key"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &created), "output: %s", out)
	require.True(t, strings.HasPrefix(created.TenantID, "tn_"), created.TenantID)
	require.True(t, strings.HasPrefix(created.APIKey, "cfk_"), created.APIKey)
	require.Equal(t, 1, strings.Count(out, "\n"), "one JSON object on one line")
	return created.TenantID, created.APIKey
}

// getStatus GETs url on a fresh connection and returns the answer's status
// and problem code.
func getStatus(url, bearer string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var p struct {
		Code string `json:"code"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return resp.StatusCode, p.Code, nil
}
