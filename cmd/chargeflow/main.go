// Command chargeflow is the one binary of chargeflow: every role and the
// operator tools, and, in the laboratory's build, the scenario runner, the
// benchmark and the bundled fake provider. It is the only code that reads
// flags and the environment; everything else takes a Config.
//
//	chargeflow migrate                  apply every migration (River's included)
//	chargeflow tenant create --name N   create a tenant, print {"tenant_id","api_key"}
//	chargeflow operator create --name N --role admin|viewer   create an operator, print {"operator_id","token"}
//	chargeflow account add|list|disable  provider accounts (the names of the variables their secrets are in)
//	chargeflow route set|show|clear     a tenant's route through provider accounts
//	chargeflow api                      the HTTP API
//	chargeflow worker                   the outbox worker (charge.submit jobs)
//	chargeflow reconciler               the reconciler (unknown outcomes, with proof)
//	chargeflow charge list|get|events|reconcile|resolve   a client of the API (reads: tenant key; reconcile, resolve: operator token)
//	chargeflow healthcheck --url URL    the container image's probe
//
// The laboratory's build (go build -tags lab; make run builds it as
// bin/chargeflow) adds its commands (lab.go), its crash points and its
// negative control:
//
//	chargeflow fakepsp                  the bundled fake payment provider
//	chargeflow scenario list|run        crash scenarios against real processes, with an invariant checker
//	chargeflow bench                    the performance targets, as ratios against baselines
//	chargeflow all                      every role in one process, with the fake provider and a demo tenant
//
// The product build (the Dockerfile's) names them with how to get them,
// and refuses to start a role given a laboratory variable (product.go).
//
// Every flag of a long-running command can also be set from the environment
// as CHARGEFLOW_ and its name (--call-timeout ↔ CHARGEFLOW_CALL_TIMEOUT); a
// flag on the command line wins. docs/operations.md lists every setting.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/chargeflow/chargeflow/internal/buildinfo"
	"github.com/chargeflow/chargeflow/internal/logsink"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first SIGTERM or SIGINT starts a graceful shutdown; a second one
	// kills the process at once, as if no handler were installed.
	go func() {
		<-ctx.Done()
		stop()
	}()
	// Log lines are handed to a goroutine that writes them in groups, so
	// no request waits on a write(2) (internal/logsink).
	sink := logsink.New(os.Stderr)
	defer sink.Close()
	var stderr io.Writer = sink
	e := env{getenv: os.Getenv, stdout: os.Stdout, stderr: stderr,
		stdoutTerminal: isTerminal(os.Stdout), stderrTerminal: isTerminal(os.Stderr)}
	// A shell asking for completions (complete -C chargeflow chargeflow):
	// bash sets COMP_LINE and passes the command's name, the word and the
	// one before it.
	if line := os.Getenv("COMP_LINE"); line != "" && len(os.Args) == 4 {
		printCompletions(e, line, os.Getenv("COMP_POINT"))
		return
	}
	err := runWith(ctx, os.Args[1:], e)
	if code := exitCode(err); code != exitOK {
		fmt.Fprintln(stderr, "chargeflow:", err)
		flushLogs(stderr)
		os.Exit(code)
	}
}

// flushLogs waits until what was written to stderr reached the file, when
// stderr is a logsink.Writer.
func flushLogs(stderr io.Writer) {
	if f, ok := stderr.(interface{ Flush() }); ok {
		f.Flush()
	}
}

// env is the process environment as the commands see it.
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
	// inspect, when set, receives every flag set in place of parsing it,
	// with which of its flags come from the environment; the command then
	// ends with errInspected. The reference table's test reads the flags
	// this way.
	inspect func(fs *flag.FlagSet, fromEnv func(name string) bool)
	// stdoutTerminal says stdout is a terminal, where the tools print
	// tables rather than JSON; stderrTerminal says stderr is one, where logs
	// default to text.
	stdoutTerminal, stderrTerminal bool
}

// isTerminal reports whether f is a character device: a terminal, not a
// file or a pipe.
func isTerminal(f *os.File) bool {
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// commands are the product's commands, then the laboratory's (labCommands:
// none in the product build).
func commands() []command {
	return append([]command{
		{name: "migrate", summary: "apply every migration, River's included (safe to run twice, or from two processes at once)", run: runMigrate},
		{name: "api", summary: "serve the HTTP API", run: runAPI},
		{name: "worker", summary: "run the outbox worker: carry pending charges to the provider", run: runWorker},
		{name: "reconciler", summary: "run the reconciler: resolve unknown outcomes with proof (any number of them)", run: runReconciler},
		{name: "charge", summary: "a client of the API: create, refund, capture, cancel and read charges (a tenant's API key); reconcile and resolve them (an operator's token)", subs: chargeCommands()},
		{name: "listen", summary: "forward the tenant's events to a URL on this machine, signed as webhooks are (as stripe listen does)", run: runListen},
		{name: "tenant", summary: "tenants and their API keys (the database's credentials; every change is in the admin audit)", subs: tenantCommands()},
		{name: "operator", summary: "operators and their tokens for /ops/ (the database's credentials; every change is in the admin audit)", subs: operatorCommands()},
		{name: "account", summary: "provider accounts: where charges can be sent (the database's credentials; every change is in the admin audit)", subs: accountCommands()},
		{name: "route", summary: "tenants' routes through provider accounts, by currency and amount (the database's credentials; every change is in the admin audit)", subs: routeCommands()},
		{name: "audit", summary: "the admin audit: who created, rotated, revoked, added, disabled and routed what, newest first", run: runAudit},
		{name: "healthcheck", summary: "GET --url and exit 0 on a 2xx: the container image's HEALTHCHECK", run: runHealthcheck},
		{name: "completion", args: "bash|zsh|fish", summary: "print the shell's completion script: eval \"$(chargeflow completion bash)\"", run: runCompletion},
		{name: "version", summary: "print the build's version and commit (also --version)", run: runVersion},
	}, labCommands()...)
}

// labCommandNames are the commands only the lab build has (lab.go); the
// product build names them when asked for one, with how to get it.
var labCommandNames = []string{"fakepsp", "scenario", "bench", "all"}

// labBuild says how to get the build that has the laboratory.
const labBuild = "build it with -tags lab: `make run` builds bin/chargeflow so, or `go build -tags lab ./cmd/chargeflow`"

// run is the whole program; tests call it with their own environment.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runWith(ctx, args, env{getenv: getenv, stdout: stdout, stderr: stderr})
}

// runWith is run in the environment e.
func runWith(ctx context.Context, args []string, e env) error {
	if len(args) > 0 && args[0] == "--version" {
		return runVersion(ctx, e, args[1:])
	}
	return dispatch(ctx, e, nil, commands(), args)
}

// runVersion prints the build (internal/buildinfo): what GET /healthz and
// the chargeflow_build_info metric say too.
func runVersion(_ context.Context, e env, args []string) error {
	if err := parseToolFlags(newFlagSet("version", e), e, args); err != nil {
		return err
	}
	b := buildinfo.Read()
	_, err := fmt.Fprintf(e.stdout, "chargeflow %s (commit %s, %s)\n", b.Version, b.Commit, b.GoVersion)
	return err
}
