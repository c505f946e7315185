//go:build lab

package main

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/scenario"
)

// The runner, driven the way `chargeflow scenario run` drives it, with this
// test binary standing in for chargeflow. (`make test` runs the whole
// catalogue, the negative control and a soak with the built binary.)
func TestScenarioRunner(t *testing.T) {
	t.Parallel()
	var progress bytes.Buffer
	runner, err := scenario.NewRunner(scenario.Config{
		Binary:      os.Args[0],
		Env:         append(os.Environ(), "CHARGEFLOW_TEST_AS_MAIN=1"),
		DatabaseURL: serverURL(),
		Dir:         t.TempDir(),
		Seed:        99,
		Short:       true,
		Progress:    &progress,
	})
	require.NoError(t, err)

	var reports []scenario.Report
	for _, name := range []string{"duplicates-200", "key-reuse-different-body", "webhooks-receiver-errors"} {
		sc, ok := scenario.Find(name)
		require.True(t, ok, name)
		rep, err := runner.Run(context.Background(), sc)
		require.NoError(t, err, "progress:\n%s", progress.String())
		require.True(t, rep.Passed, "%s: %v", name, rep.Violations)
		require.Positive(t, rep.Charges)
		require.Equal(t, rep.Charges, rep.Acked)
		reports = append(reports, rep)
	}
	var table bytes.Buffer
	scenario.PrintTable(&table, reports)
	require.Contains(t, table.String(), "duplicates-200")
	require.Contains(t, table.String(), "at-most-once")
	require.Contains(t, table.String(), "webhooks:delivered=")
	t.Log("\n" + table.String())
}

// serverURL is the server tests use (DATABASE_URL, or the local default).
func serverURL() string {
	if url := os.Getenv("DATABASE_URL"); url != "" {
		return url
	}
	return dbtest.DefaultServer
}
