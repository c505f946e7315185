//go:build lab

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
)

// leaves are every command of the tree that runs, as the words that name it.
func leaves(cmds []command, path []string) [][]string {
	var out [][]string
	for _, c := range cmds {
		p := append(slices.Clone(path), c.name)
		if c.subs != nil {
			out = append(out, leaves(c.subs, p)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

// Every command's -h lists each of its flags and exits 0, on stdout; every
// group's lists its commands.
func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	noEnv := func(string) string { return "" }
	all := leaves(commands(), nil)
	require.Greater(t, len(all), 20, "the walk found the tree")
	for _, path := range all {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append(slices.Clone(path), "-h"), noEnv, &stdout, &stderr)
		require.ErrorIs(t, err, flag.ErrHelp, "chargeflow %s -h", strings.Join(path, " "))
		require.Equal(t, exitOK, exitCode(err))
		help := stdout.String()
		require.True(t, strings.HasPrefix(help, "Usage: chargeflow "+strings.Join(path, " ")), "chargeflow %s -h:\n%s", strings.Join(path, " "), help)
		fs, _ := inspectFlags(t, path, noEnv)
		fs.VisitAll(func(f *flag.Flag) {
			require.Contains(t, help, "--"+f.Name+" ", "chargeflow %s -h does not list --%s", strings.Join(path, " "), f.Name)
		})
		require.Empty(t, stderr.String())
	}
	for _, group := range [][]string{nil, {"charge"}, {"tenant"}, {"operator"}, {"account"}, {"route"}} {
		var stdout bytes.Buffer
		err := run(context.Background(), append(slices.Clone(group), "--help"), noEnv, &stdout, io.Discard)
		require.ErrorIs(t, err, flag.ErrHelp)
		c, _ := lookup(group)
		subs := c.subs
		if group == nil {
			subs = commands()
		}
		for _, sub := range subs {
			require.Contains(t, stdout.String(), "  "+sub.name, "chargeflow %s --help", strings.Join(group, " "))
		}
	}
}

// The exit codes tell usage, not found, refused and unavailable apart,
// from the command line and from the API's answers.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		problem := func(status int, code string) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "code": code, "detail": "as the test says"})
		}
		switch r.URL.Path {
		case "/v1/charges/ch_found":
			_, _ = io.WriteString(w, `{"id":"ch_found","status":"succeeded","amount":1000,"currency":"USD"}`)
		case "/v1/charges/ch_missing":
			problem(http.StatusNotFound, "not_found")
		case "/v1/charges/ch_refused":
			problem(http.StatusUnprocessableEntity, "idempotency_key_reused")
		case "/v1/charges/ch_limited":
			problem(http.StatusTooManyRequests, "rate_limited")
		default:
			problem(http.StatusServiceUnavailable, "database_unavailable")
		}
	}))
	t.Cleanup(api.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	withKey := map[string]string{"CHARGEFLOW_API_KEY": "cfk_test", "CHARGEFLOW_API_URL": api.URL}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want int
	}{
		{"Help", nil, []string{"charge", "get", "-h"}, exitOK},
		{"Found", withKey, []string{"charge", "get", "ch_found", "--output", "json"}, exitOK},
		{"NoCommand", nil, nil, exitUsage},
		{"UnknownCommand", nil, []string{"frobnicate"}, exitUsage},
		{"UnknownSubcommand", nil, []string{"charge", "frobnicate"}, exitUsage},
		{"UnknownFlag", withKey, []string{"charge", "get", "ch_found", "--colour"}, exitUsage},
		{"MissingArgument", withKey, []string{"charge", "get"}, exitUsage},
		{"ExtraArgument", withKey, []string{"charge", "get", "ch_found", "ch_other"}, exitUsage},
		{"NoCredential", map[string]string{"CHARGEFLOW_API_URL": api.URL}, []string{"charge", "get", "ch_found"}, exitUsage},
		{"BadOutput", withKey, []string{"charge", "get", "ch_found", "--output", "yaml"}, exitUsage},
		{"OutOfBounds", nil, []string{"api", "--lock-timeout", "-1s"}, exitUsage},
		{"NotFound", withKey, []string{"charge", "get", "ch_missing"}, exitNotFound},
		{"Refused", withKey, []string{"charge", "get", "ch_refused"}, exitRefused},
		{"RateLimited", withKey, []string{"charge", "get", "ch_limited"}, exitUnavailable},
		{"ServerError", withKey, []string{"charge", "get", "ch_anything"}, exitUnavailable},
		{"Unreachable", map[string]string{"CHARGEFLOW_API_KEY": "cfk_test", "CHARGEFLOW_API_URL": closed.URL}, []string{"charge", "get", "ch_found"}, exitUnavailable},
		{"NoSuchTenant", map[string]string{"DATABASE_URL": dbtest.URL(t)}, []string{"tenant", "keys", "tn_01m8vq2jb81v9s1tm5ee58zbc8"}, exitNotFound},
		{"NoSuchAccount", map[string]string{"DATABASE_URL": dbtest.URL(t)}, []string{"account", "disable", "nowhere"}, exitNotFound},
		{"NoSuchTenantToRoute", map[string]string{"DATABASE_URL": dbtest.URL(t)}, []string{"route", "show", "tn_01m8vq2jb81v9s1tm5ee58zbc8"}, exitNotFound},
		{"AccountRefused", nil, []string{"account", "add", "--name", "stripe", "--kind", "stripe", "--endpoint", "https://api.stripe.com", "--credential-env", "K"}, exitRefused},
		{"BadRouteEntry", nil, []string{"route", "set", "tn_01m8vq2jb81v9s1tm5ee58zbc8", "eu:eur"}, exitUsage},
		{"NoRouteEntry", nil, []string{"route", "set", "tn_01m8vq2jb81v9s1tm5ee58zbc8"}, exitUsage},
		{"UnmigratedDatabase", map[string]string{"DATABASE_URL": dbtest.Empty(t)}, []string{"tenant", "list"}, exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, func(k string) string { return tc.env[k] }, &stdout, &stderr)
			require.Equal(t, tc.want, exitCode(err), "chargeflow %s: %v\n%s", strings.Join(tc.args, " "), err, stderr.String())
		})
	}
}

// The process exits with the code, and says why once.
func TestExitCodeOfTheProcess(t *testing.T) {
	t.Parallel()
	for args, want := range map[string]int{"charge get": exitUsage, "version": exitOK, "charge -h": exitOK} {
		cmd := exec.Command(os.Args[0], strings.Fields(args)...)
		cmd.Env = append(os.Environ(), "CHARGEFLOW_TEST_AS_MAIN=1", "CHARGEFLOW_API_KEY=cfk_test")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		var exitErr *exec.ExitError
		if err != nil {
			require.ErrorAs(t, err, &exitErr)
			code = exitErr.ExitCode()
		}
		require.Equal(t, want, code, "chargeflow %s: %s", args, stderr.String())
		require.LessOrEqual(t, strings.Count(stderr.String(), "chargeflow:"), 1, "said once: %s", stderr.String())
	}
}

// A shell completes commands and flags from the binary itself.
func TestCompletion(t *testing.T) {
	t.Parallel()
	for line, want := range map[string][]string{
		"chargeflow ch":                      {"charge"},
		"chargeflow charge g":                {"get"},
		"chargeflow charge ":                 {"cancel", "capture", "create", "events", "get", "list", "reconcile", "refund", "resolve"},
		"chargeflow charge create --n":       {"--no-capture"},
		"chargeflow charge capture ch_1 --a": {"--amount", "--api-key", "--api-url"},
		"chargeflow charge get ch_1 --o":     {"--output"},
		"chargeflow tenant rotate-key --":    {"--actor", "--database-url", "--log-format", "--log-level", "--output", "--overlap"},
		"chargeflow account ":                {"add", "disable", "list"},
		"chargeflow route ":                  {"clear", "set", "show"},
		"chargeflow account add --c":         {"--credential-env"},
		"chargeflow nothing":                 nil,
	} {
		require.Equal(t, want, completions(line), "%q", line)
	}

	// As bash asks: COMP_LINE, and the command, the word and the one before.
	cmd := exec.Command(os.Args[0], "chargeflow", "re", "charge")
	cmd.Env = append(os.Environ(), "CHARGEFLOW_TEST_AS_MAIN=1", "COMP_LINE=chargeflow charge re", "COMP_POINT=20")
	out, err := cmd.Output()
	require.NoError(t, err)
	require.Equal(t, "reconcile\nrefund\nresolve\n", string(out))

	for _, shell := range []string{"bash", "zsh", "fish"} {
		script := runInProcess(t, nil, "completion", shell)
		require.Contains(t, script, "chargeflow")
	}
	var stderr bytes.Buffer
	require.Equal(t, exitUsage, exitCode(run(context.Background(), []string{"completion", "tcsh"}, func(string) string { return "" }, io.Discard, &stderr)))
}
