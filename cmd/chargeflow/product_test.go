package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/crashpoint"
)

// The image the Dockerfile builds is the product: no command of the
// laboratory, no crash point that can be armed, no negative control
// (docs/architecture.md, "The laboratory apart"). These tests build the
// binary with the Dockerfile's own command, and the laboratory's binary
// with the same command and -tags lab beside it, and try both: whatever
// the product is shown not to hold, the laboratory's binary is shown to
// hold, so no check passes for want of looking in the right place.

// dockerfileBuild returns the environment and the `go build` arguments the
// Dockerfile builds the final stage's binary with: the RUN of the stage the
// final stage copies its ENTRYPOINT from.
func dockerfileBuild(t *testing.T, root string) (env, args []string) {
	t.Helper()
	stages := parseDockerfile(t, root)
	binary := dockerfileEntrypoint(t, root)
	var from, built string
	for _, in := range stages[len(stages)-1].with("COPY") {
		fields := strings.Fields(in.args)
		if fields[len(fields)-1] != binary {
			continue
		}
		built = fields[len(fields)-2]
		for _, f := range fields {
			if stage, ok := strings.CutPrefix(f, "--from="); ok {
				from = stage
			}
		}
	}
	require.NotEmpty(t, from, "Dockerfile: the final stage copies %s from no stage", binary)
	i := slices.IndexFunc(stages, func(s dockerStage) bool { return strings.HasSuffix(strings.ToLower(s.from), " as "+from) })
	require.GreaterOrEqual(t, i, 0, "Dockerfile: no stage %s", from)
	for _, in := range stages[i].with("RUN") {
		if !strings.Contains(in.args, "go build") {
			continue
		}
		words := shellWords(t, in.args)
		for len(words) > 0 && strings.Contains(words[0], "=") {
			env, words = append(env, words[0]), words[1:]
		}
		require.GreaterOrEqual(t, len(words), 2, "Dockerfile: %s", in.args)
		require.Equal(t, []string{"go", "build"}, words[:2], "Dockerfile: %s", in.args)
		args = words[2:]
		o := slices.Index(args, "-o")
		require.True(t, o >= 0 && o+1 < len(args), "Dockerfile: %s has no -o", in.args)
		require.Equal(t, built, args[o+1], "Dockerfile: %s builds elsewhere than the final stage copies from", in.args)
		return env, args
	}
	t.Fatalf("Dockerfile: stage %s runs no go build", from)
	return nil, nil
}

// shellWords splits a RUN's shell form into words: blanks separate them,
// quotes group them. Anything the shell would do more (&&, ;, $, a
// backslash) fails, so the test never builds something else than the
// Dockerfile does.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	require.False(t, strings.ContainsAny(line, "&;|$`\\<>()"), "Dockerfile: the build is not one simple command, which this test reads: %s", line)
	var words []string
	var word strings.Builder
	var quote rune
	inWord := false
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			word.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words, inWord = append(words, word.String()), false
				word.Reset()
			}
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	require.Zero(t, quote, "Dockerfile: unbalanced quote in %s", line)
	if inWord {
		words = append(words, word.String())
	}
	return words
}

// buildAs runs `go build` with the Dockerfile's environment and arguments,
// extra arguments first and the output moved to out.
func buildAs(t *testing.T, root string, env, args []string, out string, extra ...string) []byte {
	t.Helper()
	args = slices.Clone(args)
	args[slices.Index(args, "-o")+1] = out
	cmd := exec.Command("go", append(append([]string{"build"}, extra...), args...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	output, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s: %s", strings.Join(cmd.Args[2:], " "), output)
	binary, err := os.ReadFile(out)
	require.NoError(t, err)
	return binary
}

// runBinary runs a built binary to its end and returns its exit status and
// what it wrote.
func runBinary(t *testing.T, binary string, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append([]string{}, env...) // nothing of the test's own
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "chargeflow %s did not end", strings.Join(args, " "))
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return exitErr.ExitCode(), output.String()
	}
	require.NoError(t, err)
	return 0, output.String()
}

func TestProductBuild(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	env, args := dockerfileBuild(t, root)
	require.NotContains(t, args, "-tags", "the Dockerfile builds the product without build tags")
	dir := t.TempDir()
	productPath, labPath := filepath.Join(dir, "chargeflow"), filepath.Join(dir, "chargeflow-lab")
	product := buildAs(t, root, env, args, productPath)
	lab := buildAs(t, root, env, args, labPath, "-tags", "lab")

	// What only the laboratory's code holds: function names stay in a
	// stripped Go binary (the runtime's symbol table, which -s -w keeps),
	// and so do the strings its log lines are made of.
	t.Run("HoldsNoLaboratoryCode", func(t *testing.T) {
		t.Parallel()
		for _, marker := range []string{
			"github.com/chargeflow/chargeflow/lab/",             // any package of the laboratory
			"github.com/chargeflow/chargeflow/crashpoint.Parse", // arming a crash point
			"crash points armed", "crashpoint fired",            // arming, and a point firing
			"BROKEN MODE", "broken mode: resending", "broken mode: an unknown outcome taken", // the negative controls
			"resend_on_rerun", "reroute_on_timeout",
			"github.com/chargeflow/chargeflow/internal/clock.Skew", "clock skewed", // skewing the clock
		} {
			require.True(t, bytes.Contains(lab, []byte(marker)), "the lab build lacks %q: this check looks for the wrong thing", marker)
			require.False(t, bytes.Contains(product, []byte(marker)), "the product build holds %q", marker)
		}
	})

	// A role given a laboratory variable refuses to start, before it
	// reaches for the database; given none, the same command does reach it.
	t.Run("RefusesLaboratoryVariables", func(t *testing.T) {
		t.Parallel()
		addr, connections := countingServer(t)
		base := []string{"DATABASE_URL=postgres://postgres@" + addr + "/chargeflow?sslmode=disable", "PSP_URL=http://127.0.0.1:1"}
		for _, tc := range []struct{ role, variable, value string }{
			{"worker", "CHARGEFLOW_BROKEN", "resend_on_rerun"},
			{"worker", "CHARGEFLOW_BROKEN", "reroute_on_timeout"},
			{"worker", "CHARGEFLOW_CRASHPOINTS", crashpoint.WorkerAfterPSPResponseBeforeSave + "=exit"},
			{"worker", "CHARGEFLOW_CRASHPOINT_SEED", "1"},
			{"api", "CHARGEFLOW_CRASHPOINTS", crashpoint.APIAfterInsertBeforeCommit + "=exit"},
			{"reconciler", "CHARGEFLOW_CRASHPOINTS", crashpoint.ReconcilerAfterLookupBeforeUpdate + "=exit"},
			{"api", "CHARGEFLOW_CLOCK_SKEW", "4m"},
			{"worker", "CHARGEFLOW_CLOCK_SKEW", "-4m"},
			{"reconciler", "CHARGEFLOW_CLOCK_SKEW", "10m"},
		} {
			code, output := runBinary(t, productPath, append(slices.Clone(base), tc.variable+"="+tc.value), tc.role)
			require.Equal(t, 2, code, "%s with %s: %s", tc.role, tc.variable, output)
			require.Contains(t, output, tc.variable+" is set, but this build has no laboratory modes", tc.role)
			require.Contains(t, output, "-tags lab", "%s: it says how to get the build that has them", tc.role)
		}
		require.Zero(t, connections.Load(), "a refused role reached for the database")

		ctx, cancel := context.WithCancel(context.Background())
		worker := exec.CommandContext(ctx, productPath, "worker")
		worker.Env = base
		require.NoError(t, worker.Start())
		defer func() { _ = worker.Wait() }()
		defer cancel()
		require.Eventually(t, func() bool { return connections.Load() > 0 }, 30*time.Second, 10*time.Millisecond,
			"the worker without a laboratory variable never reached for the database")
	})

	// Every command of the laboratory is absent, and asking for one says
	// where it is; the lab build lists each among its commands.
	t.Run("HasNoLaboratoryCommands", func(t *testing.T) {
		t.Parallel()
		_, productUsage := runBinary(t, productPath, nil, "help")
		_, labUsage := runBinary(t, labPath, nil, "help")
		for _, name := range labCommandNames {
			listed := regexp.MustCompile(`(?m)^  ` + name + ` +\S`)
			require.Regexp(t, listed, labUsage, "the lab build does not list %s", name)
			require.NotRegexp(t, listed, productUsage, "the product build lists %s", name)

			code, output := runBinary(t, productPath, nil, name, "-h")
			require.Equal(t, 2, code, "%s: %s", name, output)
			require.Contains(t, output, `"`+name+`" is a command of the laboratory, which this build does not have`)
			require.Contains(t, output, "-tags lab")
		}
		require.Contains(t, productUsage, "not in this build: "+strings.Join(labCommandNames, ", "))
		require.NotContains(t, labUsage, "not in this build")
	})
}
