//go:build lab

package main

import (
	"errors"
	"flag"
	"io"
	"math"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// outside are values of s's type that s refuses: just past each end, the
// negatives and 0 when they mean nothing, and for a float what is no
// number. Each is written as the flag reads it.
func (s span[T]) outside() []string {
	var candidates []T
	var extra []string
	if _, isFloat := any(s.min).(float64); isFloat {
		lo, hi := any(s.min).(float64), any(s.max).(float64)
		candidates = append(candidates, T(math.Nextafter(lo, math.Inf(-1))), T(math.Nextafter(hi, math.Inf(1))))
		extra = []string{"NaN", "+Inf", "-Inf"}
	} else {
		if s.min != 0 {
			candidates = append(candidates, s.min-1)
		} else if T(0)-1 < 0 { // a signed type: -1 is below a min of 0
			candidates = append(candidates, T(0)-1)
		}
		if s.max+1 > s.max { // not the type's largest value
			candidates = append(candidates, s.max+1)
		}
	}
	if _, isDuration := any(s.min).(time.Duration); isDuration {
		extra = []string{"-1s", "-1h"}
	}
	candidates = append(candidates, 0)
	var values []string
	for _, c := range candidates {
		if ok, _ := s.accepts(c); !ok {
			values = append(values, showNumber(c))
		}
	}
	for _, e := range extra {
		if e[0] != '-' || s.negative == "" {
			values = append(values, e)
		}
	}
	return values
}

// inside are values s accepts: both ends, and 0 and -1 when they mean
// something.
func (s span[T]) inside() []T {
	values := []T{s.min, s.max}
	if s.zero != "" {
		values = append(values, 0)
	}
	if s.negative != "" {
		values = append(values, T(0)-1)
	}
	return values
}

// sampled is a bound whose test values can be drawn.
type sampled interface {
	bound
	outside() []string
}

// numericFlags calls fn for every numeric flag of every command, with the
// command's invocation and whether the flag comes from the environment.
func numericFlags(t *testing.T, fn func(args []string, command string, f *flag.Flag, fromEnv func(string) bool)) {
	t.Helper()
	for _, args := range settingsInvocations {
		fs, fromEnv := inspectFlags(t, args, func(string) string { return "" })
		command := strings.TrimPrefix(fs.Name(), "chargeflow ")
		fs.VisitAll(func(f *flag.Flag) {
			if _, ok := numericValue(f); ok {
				fn(args, command, f, fromEnv)
			}
		})
	}
}

// parseInspected parses `chargeflow args…` with extra command-line flags
// and an environment the way the command does (parseWithEnv, the flag set
// the command builds, its own choice of flags read from the environment),
// without running it.
func parseInspected(t *testing.T, args, flags []string, environ map[string]string) error {
	t.Helper()
	getenv := func(k string) string { return environ[k] }
	fs, fromEnv := inspectFlags(t, args, getenv)
	return parseWithEnv(fs, env{getenv: getenv, stdout: io.Discard, stderr: io.Discard}, flags, fromEnv)
}

// Every numeric flag of every command has bounds of its own type, which
// its default is within, and every entry of flagBounds is some flag's: a
// flag added without bounds fails here.
func TestEveryNumericFlagHasBounds(t *testing.T) {
	t.Parallel()
	used := map[string]bool{}
	flags := 0
	numericFlags(t, func(args []string, command string, f *flag.Flag, _ func(string) bool) {
		flags++
		b, ok := boundsOf(command, f.Name)
		require.True(t, ok, "`chargeflow %s` --%s is a number without bounds: add a line to flagBounds", command, f.Name)
		if _, specific := flagBounds[command+" --"+f.Name]; specific {
			used[command+" --"+f.Name] = true
		} else {
			used["--"+f.Name] = true
		}
		v, _ := numericValue(f)
		accepted, err := b.accepts(v)
		require.NoError(t, err, "`chargeflow %s` --%s", command, f.Name)
		require.True(t, accepted, "`chargeflow %s` --%s: its default %s is outside %s", command, f.Name, f.DefValue, b)
		_, ok = b.(sampled)
		require.True(t, ok, "--%s: the test cannot draw values from its bounds", f.Name)
	})
	require.Greater(t, flags, 50, "the flag sets were not reached")
	for key := range flagBounds {
		require.True(t, used[key], "flagBounds has %q, which no command's flag uses", key)
	}

	// And with every default, every command parses: no relation refuses
	// the defaults.
	for _, args := range settingsInvocations {
		require.NoError(t, parseInspected(t, args, nil, nil), "`chargeflow %s` with its defaults", strings.Join(args, " "))
	}
}

// Every numeric flag of every command refuses every value outside its
// bounds, from the command line and from its variable, with a message that
// names the flag, its variable (when the command reads one) and what it
// takes; both ends of its bounds are taken.
func TestEveryNumericFlagRefusesOutOfBounds(t *testing.T) {
	t.Parallel()
	checked := 0
	numericFlags(t, func(args []string, command string, f *flag.Flag, fromEnv func(string) bool) {
		b, ok := boundsOf(command, f.Name)
		require.True(t, ok, "--%s", f.Name)
		for _, bad := range b.(sampled).outside() {
			want := "--" + f.Name
			if fromEnv(f.Name) {
				want += " (" + envName(f.Name) + ")"
			}
			shown := bad // as the flag reads it back
			if _, isDuration := f.Value.(flag.Getter).Get().(time.Duration); isDuration {
				d, err := time.ParseDuration(bad)
				require.NoError(t, err)
				shown = d.String()
			}
			want += " is " + shown + ": want " + b.String()

			err := parseInspected(t, args, []string{"--" + f.Name + "=" + bad}, nil)
			require.ErrorContains(t, err, want, "`chargeflow %s --%s=%s`", command, f.Name, bad)
			checked++
			if fromEnv(f.Name) {
				err := parseInspected(t, args, nil, map[string]string{envName(f.Name): bad})
				require.ErrorContains(t, err, want, "`%s=%s chargeflow %s`", envName(f.Name), bad, command)
				require.NotContains(t, err.Error(), "\n", "one line")
				checked++
			}
		}
	})
	require.Greater(t, checked, 150)
}

// Both ends of every flag's bounds, and 0 or a negative value where they
// mean something, are within them.
func TestBoundsTakeTheirEnds(t *testing.T) {
	t.Parallel()
	for key, b := range flagBounds {
		var ends []any
		switch s := b.(type) {
		case span[int]:
			for _, v := range s.inside() {
				ends = append(ends, v)
			}
		case span[int64]:
			for _, v := range s.inside() {
				ends = append(ends, v)
			}
		case span[uint64]:
			for _, v := range s.inside() {
				ends = append(ends, v)
			}
		case span[float64]:
			for _, v := range s.inside() {
				ends = append(ends, v)
			}
		case span[time.Duration]:
			for _, v := range s.inside() {
				ends = append(ends, v)
			}
		default:
			t.Fatalf("%s: bounds of %T", key, b)
		}
		for _, v := range ends {
			ok, err := b.accepts(v)
			require.NoError(t, err)
			require.True(t, ok, "%s: %v is refused by %s", key, v, b)
		}
	}
}

// A negative duration is refused by every duration flag of every command,
// whatever its bounds say: none of them has a meaning for one.
func TestNegativeDurationsRefused(t *testing.T) {
	t.Parallel()
	numericFlags(t, func(args []string, command string, f *flag.Flag, fromEnv func(string) bool) {
		if _, ok := f.Value.(flag.Getter).Get().(time.Duration); !ok {
			return
		}
		for _, negative := range []string{"-1ns", "-1s", "-720h"} {
			d, err := time.ParseDuration(negative)
			require.NoError(t, err)
			err = parseInspected(t, args, []string{"--" + f.Name, negative}, nil)
			require.ErrorContains(t, err, flagNames(f.Name, fromEnv)+" is "+d.String()+": want ", "`chargeflow %s --%s %s`", command, f.Name, negative)
		}
	})
}

// What the issue found, and what the scenarios and the tests run: each
// refused with its reason, or taken.
func TestSettingsThatStartABrokenService(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		args    []string
		environ map[string]string
		want    string // "" when taken
	}{
		{"negative interval", []string{"reconciler", "--interval", "-1s"}, nil,
			"--interval (CHARGEFLOW_INTERVAL) is -1s: want 10ms to 10m0s"},
		{"negative session lifetime", []string{"api"}, map[string]string{"CHARGEFLOW_OPS_SESSION_TTL": "-1h"},
			"--ops-session-ttl (CHARGEFLOW_OPS_SESSION_TTL) is -1h0m0s: want 5m0s to 168h0m0s"},
		{"negative key-window margin", []string{"reconciler", "--key-window-margin", "-1h"}, nil,
			"--key-window-margin (CHARGEFLOW_KEY_WINDOW_MARGIN) is -1h0m0s: want 5m0s to 24h0m0s"},
		{"negative key-window margin in the API", []string{"api"}, map[string]string{"CHARGEFLOW_KEY_WINDOW_MARGIN": "-1h"},
			"--key-window-margin (CHARGEFLOW_KEY_WINDOW_MARGIN) is -1h0m0s"},
		{"margin as long as the window", []string{"all", "--key-window", "2h", "--key-window-margin", "2h"}, nil,
			"--key-window-margin (CHARGEFLOW_KEY_WINDOW_MARGIN) is 2h0m0s, --key-window (CHARGEFLOW_KEY_WINDOW) is 2h0m0s: the margin is taken from the window"},
		{"margin shorter than a batch of lookups and a re-send", []string{"reconciler", "--call-timeout", "1m", "--lease-ttl", "1m", "--key-window-margin", "5m"}, nil,
			"the margin must outlast a lookup made at the deadline and the re-send after it (5m0.44s with these settings)"},
		{"margin shorter than an operator's lookup and a re-send", []string{"api", "--call-timeout", "5m", "--key-window-margin", "9m"}, nil,
			"the margin must outlast a lookup made at the deadline and the re-send after it (10m0s with these settings)"},
		{"a proof that comes after the key window", []string{"reconciler", "--key-window", "1h", "--key-window-margin", "50m", "--max-apply-delay", "10m"}, nil,
			"every unknown outcome would need review"},
		{"a lag bound with a strong lookup", []string{"reconciler", "--lookup-lag-bound", "3s"}, nil,
			"--lookup-lag-bound (CHARGEFLOW_LOOKUP_LAG_BOUND) is 3s, --strong-lookup (CHARGEFLOW_STRONG_LOOKUP) is true: a lag bound says the lookup lags"},
		{"a lag bound with an eventual lookup", []string{"reconciler", "--lookup-lag-bound", "3s", "--strong-lookup=false"}, nil, ""},
		{"worker concurrency past River's", []string{"worker", "--concurrency", "10001"}, nil,
			"--concurrency (CHARGEFLOW_CONCURRENCY) is 10001: want 1 to 10000; 0: the default"},
		{"negative worker concurrency", []string{"worker"}, map[string]string{"CHARGEFLOW_CONCURRENCY": "-4"},
			"--concurrency (CHARGEFLOW_CONCURRENCY) is -4"},
		{"webhook concurrency 0", []string{"worker", "--webhook-concurrency", "0"}, nil,
			"--webhook-concurrency (CHARGEFLOW_WEBHOOK_CONCURRENCY) is 0: want 1 to 10000"},
		{"rescue within the job's timeout", []string{"worker", "--rescue-after", "15s"}, nil,
			"--rescue-after (CHARGEFLOW_RESCUE_AFTER) is 15s, --call-timeout (CHARGEFLOW_CALL_TIMEOUT) is 10s: River would rerun a charge.submit job still within its call"},
		{"backoff base past its cap", []string{"worker", "--retry-base", "10m", "--retry-cap", "1m"}, nil,
			"--retry-base (CHARGEFLOW_RETRY_BASE) is 10m0s, --retry-cap (CHARGEFLOW_RETRY_CAP) is 1m0s: the first wait cannot be longer than the longest"},
		{"negative retry base", []string{"worker", "--retry-base", "-1s"}, nil, "--retry-base (CHARGEFLOW_RETRY_BASE) is -1s"},
		{"negative stale margin", []string{"reconciler", "--stale-margin", "-10s"}, nil, "--stale-margin (CHARGEFLOW_STALE_MARGIN) is -10s"},
		{"negative apply margin", []string{"all", "--apply-margin", "-1s"}, nil, "--apply-margin (CHARGEFLOW_APPLY_MARGIN) is -1s"},
		{"negative apply delay", []string{"reconciler", "--max-apply-delay", "-2s"}, nil, "--max-apply-delay (CHARGEFLOW_MAX_APPLY_DELAY) is -2s"},
		{"negative clock skew", []string{"worker", "--stripe-clock-skew", "-10s"}, nil, "--stripe-clock-skew (CHARGEFLOW_STRIPE_CLOCK_SKEW) is -10s"},
		{"negative reconcile floor", []string{"api", "--reconcile-floor", "-30s"}, nil, "--reconcile-floor (CHARGEFLOW_RECONCILE_FLOOR) is -30s"},
		{"negative lock timeout", []string{"api", "--lock-timeout", "-1s"}, nil, "--lock-timeout (CHARGEFLOW_LOCK_TIMEOUT) is -1s"},
		{"a lock timeout Postgres reads as none", []string{"api", "--lock-timeout", "500us"}, nil, "--lock-timeout (CHARGEFLOW_LOCK_TIMEOUT) is 500µs"},
		{"negative retention interval", []string{"worker", "--retention-interval", "-1m"}, nil, "--retention-interval (CHARGEFLOW_RETENTION_INTERVAL) is -1m0s"},
		{"negative event retention", []string{"worker", "--event-retention", "-1h"}, nil, "--event-retention (CHARGEFLOW_EVENT_RETENTION) is -1h0m0s"},
		{"a rate that is no number", []string{"api", "--rate-limit", "NaN"}, nil, "--rate-limit (CHARGEFLOW_RATE_LIMIT) is NaN"},
		{"an unlimited lookup rate", []string{"reconciler", "--lookup-rate", "+Inf"}, nil, "--lookup-rate (CHARGEFLOW_LOOKUP_RATE) is +Inf"},
		{"a pool too small for River", []string{"all", "--max-conns", "2"}, nil, "--max-conns (CHARGEFLOW_MAX_CONNS) is 2: want 4 to 1000; 0: the default"},
		{"a pool of 2 for the reconciler", []string{"reconciler", "--max-conns", "2"}, nil, ""},
		{"more accept statements than connections", []string{"api", "--accept-batches", "21"}, nil,
			"each accept statement holds one of the pool's 20 connections"},
		{"0 for the idempotency TTL", []string{"api", "--idempotency-ttl", "0"}, nil, "--idempotency-ttl (CHARGEFLOW_IDEMPOTENCY_TTL) is 0s: want 1h0m0s to 168h0m0s"},
		{"0 for the key window", []string{"reconciler", "--key-window", "0"}, nil, "--key-window (CHARGEFLOW_KEY_WINDOW) is 0s"},
		{"a tool's negative timeout", []string{"healthcheck", "--timeout", "-1s"}, nil, "--timeout is -1s: want 1ms to 10m0s"},
		{"a tool's negative amount", []string{"charge", "refund", "ch_x", "--amount", "-5"}, nil, "--amount is -5"},
		{"a capture's negative amount", []string{"charge", "capture", "ch_x", "--amount", "-5"}, nil,
			"--amount is -5: want 1 to 9223372036854775807; 0: none given: all that was authorized"},

		// What the scenarios run (lab/scenario/runner.go, catalogue.go) and the
		// benchmark, which must keep starting.
		{"the scenarios' API", []string{"api", "--addr", "127.0.0.1:0", "--lock-timeout", "500ms", "--max-conns", "8"}, nil, ""},
		{"the scenarios' worker", []string{"worker", "--call-timeout", "1s", "--rescue-after", "7s", "--retry-base", "50ms", "--retry-cap", "300ms",
			"--unknown-check-after", "200ms", "--concurrency", "8", "--max-conns", "8"}, nil, ""},
		{"the scenarios' reconciler", []string{"reconciler", "--call-timeout", "1s", "--stale-margin", "1s", "--apply-margin", "500ms",
			"--max-apply-delay", "2s", "--interval", "100ms", "--lease-ttl", "5s", "--lookup-rate", "2000", "--lookup-backoff-base", "100ms",
			"--lookup-backoff-cap", "1s", "--max-unknown-age", "2m", "--max-attempts", "20", "--key-window", "1h", "--key-window-margin", "10m",
			"--max-conns", "4", "--stripe-clock-skew", "1s"}, nil, ""},
		{"reconciler-lease-expiry's reconciler", []string{"reconciler", "--call-timeout", "1s", "--lease-ttl", "1s", "--interval", "50ms"}, nil, ""},
		{"the negative control's reconciler", []string{"reconciler", "--call-timeout", "1s", "--stale-margin", "1h"}, nil, ""},
		{"the benchmark's API", []string{"api", "--max-conns", "0", "--rate-limit", "1000000000", "--shutdown-grace", "1s"}, nil, ""},
		{"docker-compose's worker", []string{"worker"}, map[string]string{"CHARGEFLOW_CONCURRENCY": "1024", "CHARGEFLOW_SHUTDOWN_GRACE": "30s"}, ""},
		{"forever", []string{"worker", "--event-retention", "0"}, nil, ""},
		{"no replay cache", []string{"api", "--replay-cache", "-1", "--accept-batches", "-1"}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			i := slices.IndexFunc(tc.args, func(a string) bool { return strings.HasPrefix(a, "-") })
			if i < 0 {
				i = len(tc.args)
			}
			err := parseInspected(t, tc.args[:i], tc.args[i:], tc.environ)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// A real process given a value out of bounds, from its command line or
// its environment, exits 2 with one line naming the flag and its variable,
// before it opens a connection to the database or a listener; the same
// process with its flags in bounds does reach the database.
func TestOutOfBoundsStopsTheProcessBeforeItStarts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		role string
		bad  []string // the bad setting, as an argument or as KEY=value
		want string
	}{
		{"api", []string{"CHARGEFLOW_OPS_SESSION_TTL=-12h"}, "chargeflow: --ops-session-ttl (CHARGEFLOW_OPS_SESSION_TTL) is -12h0m0s: want 5m0s to 168h0m0s\n"},
		{"worker", []string{"--concurrency", "20000"}, "chargeflow: --concurrency (CHARGEFLOW_CONCURRENCY) is 20000: want 1 to 10000; 0: the default\n"},
		{"reconciler", []string{"--interval", "-1s"}, "chargeflow: --interval (CHARGEFLOW_INTERVAL) is -1s: want 10ms to 10m0s\n"},
		{"all", []string{"CHARGEFLOW_KEY_WINDOW_MARGIN=-1h"}, "chargeflow: --key-window-margin (CHARGEFLOW_KEY_WINDOW_MARGIN) is -1h0m0s: want 5m0s to 24h0m0s\n"},
	} {
		t.Run(tc.role, func(t *testing.T) {
			t.Parallel()
			db, connections := countingServer(t)
			environ := []string{"DATABASE_URL=postgres://postgres@" + db + "/flags?sslmode=disable&connect_timeout=5"}
			args := []string{tc.role}
			switch tc.role {
			case "api":
				args = append(args, "--addr", "127.0.0.1:0")
			case "all":
				args = append(args, "--addr", "127.0.0.1:0", "--psp-addr", "127.0.0.1:0", "--ledger", t.TempDir()+"/ledger.jsonl")
			case "worker", "reconciler":
				args = append(args, "--metrics-addr", "127.0.0.1:0")
			}
			good := start(t, environ, args...)
			<-good.done
			require.Positive(t, connections.Load(), "with its flags in bounds, `chargeflow %s` reaches for the database:\n%s", tc.role, good.stderr.String())
			connections.Store(0)

			for _, b := range tc.bad {
				if strings.Contains(b, "=") {
					environ = append(environ, b)
				} else {
					args = append(args, b)
				}
			}
			p := start(t, environ, args...)
			<-p.done
			var exit *exec.ExitError
			require.True(t, errors.As(p.err, &exit), "%v", p.err)
			require.Equal(t, 2, exit.ExitCode())
			require.Equal(t, tc.want, p.stderr.String(), "one line, and nothing else: no log, no stack")
			require.Zero(t, connections.Load(), "no connection to the database")
		})
	}
}
