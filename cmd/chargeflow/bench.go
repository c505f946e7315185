//go:build lab

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/chargeflow/chargeflow/lab/bench"
	"github.com/chargeflow/chargeflow/retention"
)

// runBench measures the performance targets as ratios against
// baselines run in the same process, on the same database, at the same
// concurrency; docs/benchmarks.md explains the numbers.
//
//	chargeflow bench [--duration 10s] [--concurrency 16,32] [--json]
//	chargeflow bench --scale N [--samples 200] [--duration 10s] [--json]
//	chargeflow bench --rates 200,1000 [--duration 10s] [--json]
//
// It creates a fresh database on DATABASE_URL's server, migrates it, starts
// the API and the fake provider (and, for the settle measurement, the
// worker) as child processes, prints the table and drops the database. It
// fails when the duplicate storm made more than one charge or provider
// call, or got a 5xx; a missed performance target is reported, not fatal.
//
// With --scale it measures instead how each operation's cost holds as the
// tables grow (bench.Scale): two databases seeded with SQL, of 1,000
// charges and of N, every operation timed on both, retention run over
// each one's expired records while accepts run (--duration is the window
// of accepts alone), and the bytes per charge.
//
// With --rates it offers each rate in turn to the whole system for
// --duration and prints what every process spent per charge at that rate
// (bench.Rates).
func runBench(ctx context.Context, e env, args []string) error {
	var c common
	var duration time.Duration
	var concurrency, dir string
	var asJSON, keep bool
	var sustain time.Duration
	var apiMaxConns, workerConcurrency int
	fs := newFlagSet("bench", e)
	c.bind(fs)
	fs.DurationVar(&duration, "duration", 10*time.Second, "how long each measurement runs (split in alternated parts: halves, or quarters for accept)")
	fs.DurationVar(&sustain, "sustain", time.Minute, "how long the end-to-end rate found must hold with the backlog bounded")
	fs.StringVar(&concurrency, "concurrency", "16,32", "comma-separated client concurrencies of the accept and replay measurements (settle runs at the first)")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON instead of a table")
	fs.IntVar(&apiMaxConns, "api-max-conns", 0, "the API's --max-conns (default: the API's default)")
	fs.IntVar(&workerConcurrency, "worker-concurrency", 0, "the worker's --concurrency (default: the worker's default)")
	fs.StringVar(&dir, "dir", os.TempDir(), "where the run's folder (process logs, the provider's ledger) goes")
	fs.BoolVar(&keep, "keep", false, "keep the database and the logs")
	var scale, samples int
	var duty float64
	fs.IntVar(&scale, "scale", 0, "instead of the ratios: seed databases of 1,000 charges and of this many, and time every operation on both (docs/benchmarks.md, \"At scale\")")
	fs.IntVar(&samples, "samples", 200, "with --scale: how many times each operation runs at each size")
	fs.Float64Var(&duty, "retention-duty", retention.DefaultDuty, "with --scale: the share of its wall time the retention run spends deleting")
	var rates string
	fs.StringVar(&rates, "rates", "", "instead of the ratios: offer these charges a second in turn (comma-separated) and print each process's CPU per charge at each (docs/benchmarks.md, \"Where end to end's CPU goes\")")
	if err := parseToolFlags(fs, e, args, "database-url", "log-level"); err != nil {
		return err
	}
	if scale > 0 {
		// The accepts beside retention run at 8 clients unless
		// --concurrency says otherwise (its first level).
		clients := 8
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "concurrency" {
				clients = 0
			}
		})
		if clients == 0 {
			levels, err := parseConcurrency(concurrency)
			if err != nil {
				return err
			}
			clients = levels[0]
		}
		return runScale(ctx, e, c.databaseURL, bench.ScaleOptions{Empty: scaleEmpty, Size: scale, Samples: samples,
			Concurrency: clients, Window: duration, RetentionDuty: duty, Keep: keep, Progress: e.stderr}, asJSON)
	}
	levels, err := parseConcurrency(concurrency)
	if err != nil {
		return err
	}
	var offered []float64
	if rates != "" {
		if offered, err = parseRates(rates); err != nil {
			return err
		}
	}
	binary, err := os.Executable()
	if err != nil {
		return err
	}
	sys, err := bench.StartProcesses(ctx, bench.ProcessConfig{
		Binary:            binary,
		Env:               os.Environ(),
		ServerURL:         c.databaseURL,
		Dir:               dir,
		APIMaxConns:       apiMaxConns,
		WorkerConcurrency: workerConcurrency,
		Keep:              keep,
	})
	if err != nil {
		return err
	}
	if offered != nil {
		report, runErr := bench.Rates(ctx, sys, bench.RatesOptions{Rates: offered, Duration: duration, Progress: e.stderr})
		if err := errors.Join(runErr, sys.Close(context.WithoutCancel(ctx))); err != nil {
			return err
		}
		return printReport(e, asJSON, report, bench.PrintRates)
	}
	report, runErr := bench.Run(ctx, sys, bench.Options{Duration: duration, SustainDuration: sustain, Concurrency: levels, Progress: e.stderr})
	if err := errors.Join(runErr, sys.Close(context.WithoutCancel(ctx))); err != nil {
		return err
	}
	if err := printReport(e, asJSON, report, bench.PrintTable); err != nil {
		return err
	}
	if v := report.Violations(); len(v) > 0 {
		return fmt.Errorf("duplicate storm violated its invariants: %s", strings.Join(v, "; "))
	}
	return nil
}

// parseConcurrency reads "16,32".
func parseConcurrency(s string) ([]int, error) {
	var levels []int
	for part := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--concurrency %q: want positive integers separated by commas", s)
		}
		levels = append(levels, n)
	}
	return levels, nil
}

// runScale runs bench.Scale and prints its report.
func runScale(ctx context.Context, e env, serverURL string, o bench.ScaleOptions, asJSON bool) error {
	o.ServerURL = serverURL
	report, err := bench.Scale(ctx, o)
	if err != nil {
		return err
	}
	return printReport(e, asJSON, report, bench.PrintScale)
}

// printReport writes report as indented JSON, or as print's table.
func printReport[R any](e env, asJSON bool, report R, print func(io.Writer, R) error) error {
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	return print(e.stdout, report)
}

// parseRates reads "200,1000".
func parseRates(s string) ([]float64, error) {
	var rates []float64
	for part := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("--rates %q: want positive charges a second separated by commas", s)
		}
		rates = append(rates, v)
	}
	return rates, nil
}
