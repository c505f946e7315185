//go:build lab

// The laboratory's side of the command, built only with -tags lab (make
// run, make test, the scenarios and the benchmark build it so): arming crash
// points. product.go is what the product build has in its place.

package main

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/chargeflow/chargeflow/crashpoint"
)

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
