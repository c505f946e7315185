//go:build lab

// The laboratory's side of the command, built only with -tags lab (make
// run, make test, the scenarios and the benchmark build it so): its
// commands (all.go, bench.go, fakepsp.go, scenario.go carry the same tag),
// arming crash points, skewing the clock, and the negative control's broken
// mode. product.go
// is what the product build has in their place.

package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/clock"
)

// labCommands are the laboratory's commands, in the order usage lists
// them; labCommandNames names them for the product build.
func labCommands() []command {
	return []command{
		{name: "fakepsp", summary: "run the bundled fake payment provider (durable ledger, fault injection)", run: runFakePSP},
		{name: "scenario", summary: "replay crash scenarios against real processes and check the invariants (docs/scenarios.md)", subs: []command{
			{name: "list", summary: "list the scenarios", run: runScenarioList},
			{name: "run", args: "NAME[,NAME…]|all", summary: "run scenarios, each against its own database and processes, and check every invariant", run: runScenarioRun},
		}},
		{name: "bench", summary: "measure the performance targets as ratios against baselines on a fresh database (docs/benchmarks.md)", run: runBench},
		{name: "all", summary: "every role in one process against the local Postgres, with the bundled fake provider, a demo tenant and ready commands", run: runAll},
	}
}

// crashPoints arms what CHARGEFLOW_CRASHPOINTS names (tests and scenarios
// only); the draws are seeded by CHARGEFLOW_CRASHPOINT_SEED.
func crashPoints(e env, logger *slog.Logger) (*crashpoint.Set, error) {
	seed := uint64(time.Now().UnixNano())
	if s := e.getenv("CHARGEFLOW_CRASHPOINT_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("CHARGEFLOW_CRASHPOINT_SEED: %w", err)
		}
		seed = n
	}
	set, err := crashpoint.Parse(e.getenv("CHARGEFLOW_CRASHPOINTS"), seed, logger)
	if err != nil {
		return nil, fmt.Errorf("CHARGEFLOW_CRASHPOINTS: %w", err)
	}
	if set.Armed() {
		// A crash point's "fired" line must reach the log before the exit.
		set.WithExit(func(code int) {
			flushLogs(e.stderr)
			os.Exit(code)
		})
		logger.Warn("crash points armed", "spec", e.getenv("CHARGEFLOW_CRASHPOINTS"), "seed", seed)
	}
	return set, nil
}

// clockSkew offsets the wall clock the role's decisions read (internal/clock)
// by CHARGEFLOW_CLOCK_SKEW, a signed duration such as -4m (tests and
// scenarios only), and logs the offset, which is how a scenario proves that
// the role ran skewed.
func clockSkew(e env, logger *slog.Logger) error {
	value := e.getenv("CHARGEFLOW_CLOCK_SKEW")
	if value == "" {
		return nil
	}
	d, err := time.ParseDuration(value)
	if err != nil {
		return fmt.Errorf("CHARGEFLOW_CLOCK_SKEW: %w", err)
	}
	clock.Skew(d)
	logger.Warn("clock skewed", "offset", d.String())
	return nil
}

// brokenModes arms the deliberately broken behaviours the scenario runner
// uses as negative controls. They exist to prove the invariant checker can
// fail; they are read only from CHARGEFLOW_BROKEN and are loudly logged.
func brokenModes(e env, o *app.Options, logger *slog.Logger) error {
	switch mode := e.getenv("CHARGEFLOW_BROKEN"); mode {
	case "":
		return nil
	case "resend_on_rerun":
		logger.Error("BROKEN MODE: a rerun re-sends charges found submitting; this can double-charge", "mode", mode)
		o.Worker.Lab.ResendOnRerun = true
		return nil
	case "reroute_on_timeout":
		logger.Error("BROKEN MODE: an unknown outcome is taken for proof that nothing was applied, and the charge is sent to the next account of its route; this can charge twice across providers", "mode", mode)
		o.Worker.Lab.RerouteOnTimeout = true
		return nil
	default:
		return fmt.Errorf("CHARGEFLOW_BROKEN=%q: unknown broken mode", mode)
	}
}
