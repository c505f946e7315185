package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
)

// `chargeflow version`, GET /healthz and the chargeflow_build_info metric
// name the same build: a binary built in this checkout as make builds it,
// stamped with the checkout's commit (or "unknown" outside one).
func TestVersionAgreesEverywhere(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	binary := filepath.Join(t.TempDir(), "chargeflow")
	build := exec.Command("go", "build", "-tags", "lab", "-buildvcs=auto", "-o", binary, "./cmd/chargeflow")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	// The commit the toolchain stamped, if it could: it reads a checkout
	// whose .git is a folder (not a git worktree's .git file). A stamp is
	// the checkout's HEAD; no stamp is "unknown".
	wantCommit := "unknown"
	info, err := exec.Command("go", "version", "-m", binary).Output()
	require.NoError(t, err)
	if m := regexp.MustCompile(`(?m)^\s+build\s+vcs\.revision=(\S+)$`).FindSubmatch(info); m != nil {
		wantCommit = string(m[1])
		head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
		require.NoError(t, err)
		require.Equal(t, strings.TrimSpace(string(head)), wantCommit, "the stamp is the checkout's commit")
	}

	status, printed := runBinary(t, binary, nil, "version")
	require.Zero(t, status, printed)
	m := regexp.MustCompile(`^chargeflow (\S+) \(commit (\S+), (go\S+)\)\n$`).FindStringSubmatch(printed)
	require.NotNil(t, m, "version printed %q", printed)
	version, commit, goVersion := m[1], m[2], m[3]
	require.Equal(t, wantCommit, commit)
	require.NotEmpty(t, version)
	_, again := runBinary(t, binary, nil, "--version")
	require.Equal(t, printed, again, "--version is the version command")

	cmd := exec.Command(binary, "api", "--addr", "127.0.0.1:0")
	cmd.Env = []string{"DATABASE_URL=" + dbtest.URL(t), "PSP_URL=http://127.0.0.1:1"}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stderr)
		for scanner.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(scanner.Bytes(), &line) == nil && line.Msg == "listening" {
				addr <- line.Addr
			}
		}
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case <-time.After(time.Minute):
		t.Fatal("the API never said it was listening")
	}

	resp, err := http.Get(base + "/healthz")
	require.NoError(t, err)
	var health map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&health))
	resp.Body.Close()
	require.Equal(t, map[string]string{"status": "ok", "version": version, "commit": commit}, health)

	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(metrics),
		`chargeflow_build_info{commit="`+commit+`",goversion="`+goVersion+`",version="`+version+`"} 1`)
}
