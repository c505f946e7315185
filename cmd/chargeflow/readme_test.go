//go:build lab

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
)

// readmeRunMarker precedes each README block a test runs as pasted.
const readmeRunMarker = "<!-- run as pasted by cmd/chargeflow's TestReadmeCaptureLater"

// README.md's "Authorize now, capture later" commands, pasted into bash as
// they are with the variables the banner printed, against `chargeflow all`
// in the fake's protocol and in Stripe's: the held charge is captured in
// part, and ends succeeded with what was captured.
func TestReadmeCaptureLater(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "sed", "grep", "seq", "date"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the README's commands need %s on PATH", tool)
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	require.NoError(t, err)
	_, block, found := strings.Cut(string(readme), readmeRunMarker)
	require.True(t, found, "README.md has no %q", readmeRunMarker)
	_, block, found = strings.Cut(block, "```sh\n")
	require.True(t, found)
	script, _, found := strings.Cut(block, "```")
	require.True(t, found)

	for _, protocol := range []string{"fake", "stripe"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			all := start(t, []string{"DATABASE_URL=" + dbtest.URL(t)}, "all", "--psp", protocol, "--addr", "127.0.0.1:0",
				"--psp-addr", "127.0.0.1:0", "--max-conns", "6", "--concurrency", "4", "--ledger", filepath.Join(t.TempDir(), "ledger.jsonl"))
			b := waitBanner(t, all)
			sh := exec.Command("bash", "-e", "-o", "pipefail", "-c", script)
			sh.Env = []string{"PATH=" + os.Getenv("PATH"), "CHARGEFLOW_API_URL=" + b.apiURL, "CHARGEFLOW_API_KEY=" + b.apiKey}
			out, err := sh.CombinedOutput()
			require.NoError(t, err, "the pasted commands:\n%s\nprinted:\n%s", script, out)
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			require.Regexp(t, `^ch_[0-9a-z]{26}$`, lines[0], "%s", out)
			require.Regexp(t, `"id":"cp_[0-9a-z]{26}","object":"capture","charge":"`+lines[0]+`","amount":600,"currency":"USD","status":"pending"`, string(out))
			last := lines[len(lines)-1]
			require.Contains(t, last, `"id":"`+lines[0]+`","status":"succeeded"`)
			require.Contains(t, last, `"capture":false,"amount_captured":600`)
		})
	}
}
