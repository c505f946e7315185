package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHealthcheck(t *testing.T) {
	t.Parallel()

	// The first GET is answered 200, every later one 503: a service that
	// was ready and then lost its database.
	var calls atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/readyz" {
			http.Error(w, "want GET /readyz, got "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		if calls.Add(1) == 1 {
			_, _ = io.WriteString(w, `{"status":"ok"}`)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"status":"database unreachable"}`)
	}))
	t.Cleanup(server.Close)
	url := server.URL + "/readyz"
	noEnv := func(string) string { return "" }

	var stdout bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"healthcheck", "--url", url, "--timeout", "2s"}, noEnv, &stdout, io.Discard))
	require.Equal(t, "GET "+url+": 200 OK\n", stdout.String())

	err := run(context.Background(), []string{"healthcheck", "--url", url}, noEnv, io.Discard, io.Discard)
	require.ErrorContains(t, err, "503 Service Unavailable")
	require.ErrorContains(t, err, "database unreachable", "the body says why")
	require.EqualValues(t, 2, calls.Load())

	// As a process, the way Docker runs it: the exit status is what counts.
	exitCode := func(args ...string) int {
		cmd := exec.Command(os.Args[0], append([]string{"healthcheck"}, args...)...)
		cmd.Env = append(os.Environ(), "CHARGEFLOW_TEST_AS_MAIN=1")
		err := cmd.Run()
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return exitErr.ExitCode()
		}
		require.NoError(t, err)
		return 0
	}
	require.NotZero(t, exitCode("--url", url), "a 503 is unhealthy")
	calls.Store(0)
	require.Zero(t, exitCode("--url", url), "a 200 is healthy")
}

func TestHealthcheckTimeout(t *testing.T) {
	t.Parallel()

	release := make(chan struct{})
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); server.Close() })

	start := time.Now()
	err := run(context.Background(), []string{"healthcheck", "--url", server.URL, "--timeout", "100ms"}, func(string) string { return "" }, io.Discard, io.Discard)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestHealthcheckFlags(t *testing.T) {
	t.Parallel()

	noEnv := func(string) string { return "" }
	for _, args := range [][]string{
		{"--url", "127.0.0.1:8080/readyz"},
		{"--url", "http://127.0.0.1:8080/readyz", "--timeout", "0s"},
		{"http://127.0.0.1:8080/readyz"},
		{"--port", "8080"},
	} {
		err := run(context.Background(), append([]string{"healthcheck"}, args...), noEnv, io.Discard, io.Discard)
		require.Error(t, err, "%q", args)
		require.NotErrorIs(t, err, flag.ErrHelp, "%q", args)
	}
}
