//go:build lab

package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/chargeflow/chargeflow/lab/scenario"
)

// runScenarioList lists the crash scenarios of docs/scenarios.md.
func runScenarioList(_ context.Context, e env, args []string) error {
	fs := newFlagSet("scenario list", e)
	if err := parseToolFlags(fs, e, args); err != nil {
		return err
	}
	if _, err := positional(fs); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	for _, sc := range scenario.Catalogue() {
		fmt.Fprintf(tw, "%s\t%s\n", sc.Name, sc.Summary)
	}
	return tw.Flush()
}

// runScenarioRun replays crash scenarios against real processes and checks
// the invariants.
func runScenarioRun(ctx context.Context, e env, args []string) error {
	var c common
	var seed uint64
	var short, keep bool
	var charges, parallel int
	var duration time.Duration
	var dir, script, pspKind string
	fs := newFlagSet("scenario run", e)
	c.bind(fs)
	fs.Uint64Var(&seed, "seed", 0, "replay a run: the seed it printed (default: a new random seed)")
	fs.BoolVar(&short, "short", false, "short timings and fewer charges (what make test runs)")
	fs.IntVar(&charges, "charges", 0, "charges in the soak (default 10000, or 2000 with --short)")
	fs.DurationVar(&duration, "duration", 0, "spread the soak's charges over this long (default: as fast as the clients go)")
	fs.BoolVar(&keep, "keep", false, "keep the databases and logs of passing runs too")
	fs.IntVar(&parallel, "parallel", 1, "scenarios run at once (each has its own database and processes), besides the slow ones, which mostly wait")
	fs.StringVar(&dir, "dir", os.TempDir(), "where each run's folder (logs, private PostgreSQL) goes")
	fs.StringVar(&script, "pg-script", "scripts/ensure-postgres", "the script that starts a private PostgreSQL (for the scenarios that crash it)")
	fs.StringVar(&pspKind, "psp", "fake", "the provider protocol of the run: fake, or stripe (the fake serves Stripe's API, every process uses the Stripe adapter)")
	if err := parseToolFlags(fs, e, args, "database-url", "log-level"); err != nil {
		return err
	}
	names, err := positional(fs, "NAME")
	if err != nil {
		return err
	}
	name := names[0]
	if pspKind != "fake" && pspKind != "stripe" {
		return usageErrorf("scenario run: --psp %q: want fake or stripe", pspKind)
	}
	if seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.BigEndian.Uint64(b[:]) % 1_000_000_000
	}

	var selected []scenario.Scenario
	if name == "all" {
		for _, sc := range scenario.Catalogue() {
			if !short || !sc.FullOnly {
				selected = append(selected, sc)
			}
		}
	} else {
		for _, n := range strings.Split(name, ",") {
			if group, ok := scenario.Group(n); ok {
				selected = append(selected, group...)
				continue
			}
			sc, ok := scenario.Find(n)
			if !ok {
				return usageErrorf("no scenario %q (see chargeflow scenario list)", n)
			}
			selected = append(selected, sc)
		}
	}
	binary, err := os.Executable()
	if err != nil {
		return err
	}
	runner, err := scenario.NewRunner(scenario.Config{
		Binary:      binary,
		Env:         os.Environ(),
		DatabaseURL: cmp.Or(c.databaseURL, defaultDatabaseURL),
		PGScript:    script,
		Dir:         dir,
		Seed:        seed,
		Short:       short,
		Charges:     charges,
		Duration:    duration,
		Keep:        keep,
		PSP:         pspKind,
		Progress:    e.stderr,
	})
	if err != nil {
		return err
	}

	fmt.Fprintf(e.stderr, "scenario seed %d (replay with --seed %d)\n", seed, seed)
	reports := make([]scenario.Report, len(selected))
	errs := make([]error, len(selected))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	// A slow scenario mostly waits (for River's rescue of a job): with
	// --parallel above 1 it starts first and takes no slot, so the others
	// run alongside it instead of after it. The table keeps the catalogue's
	// order.
	var order []int
	for _, slow := range []bool{true, false} {
		for i, sc := range selected {
			if sc.Slow == slow {
				order = append(order, i)
			}
		}
	}
	for _, i := range order {
		sc := selected[i]
		slot := !sc.Slow || parallel <= 1
		if slot {
			sem <- struct{}{}
		}
		wg.Go(func() {
			if slot {
				defer func() { <-sem }()
			}
			fmt.Fprintf(e.stderr, "[%s] %s\n", sc.Name, sc.Summary)
			rep, err := runner.Run(ctx, sc)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w (logs in %s)", sc.Name, err, rep.Dir)
				return
			}
			if rep.NotRun != "" {
				fmt.Fprintf(e.stderr, "[%s] %s\n", sc.Name, verdict(rep))
			} else {
				fmt.Fprintf(e.stderr, "[%s] %s in %s\n", sc.Name, verdict(rep), rep.Elapsed.Round(100*time.Millisecond))
			}
			reports[i] = rep
		})
	}
	wg.Wait()
	// The scenarios that ran are reported even when another could not be
	// carried out.
	var ran []scenario.Report
	for i, r := range reports {
		if errs[i] == nil {
			ran = append(ran, r)
		}
	}
	fmt.Fprintf(e.stdout, "seed %d\n", seed)
	scenario.PrintTable(e.stdout, ran)
	scenario.PrintViolations(e.stdout, ran)
	// A scenario that could not run here is neither a pass nor a failure:
	// it is named, with why, after the table.
	for _, r := range ran {
		if r.NotRun != "" {
			fmt.Fprintf(e.stdout, "NOT RUN: %s: %s\n", r.Scenario, r.NotRun)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, r := range reports {
		if !r.Passed && r.NotRun == "" {
			return fmt.Errorf("scenario %s failed (seed %d)", r.Scenario, seed)
		}
	}
	return nil
}

func verdict(r scenario.Report) string {
	switch {
	case r.NotRun != "":
		return "NOT RUN (" + r.NotRun + ")"
	case !r.Passed:
		return "FAILED"
	case len(r.Violations) > 0:
		return "caught the broken mode, as it must"
	}
	return "passed"
}
