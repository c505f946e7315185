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
// in the fake's protocol and in Stripe's: one held charge is captured in
// part and ends succeeded with what was captured, another is released and
// ends canceled.
func TestReadmeCaptureLater(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "sed", "grep", "seq", "date"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the README's commands need %s on PATH", tool)
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	require.NoError(t, err)
	var script strings.Builder
	blocks := strings.Split(string(readme), readmeRunMarker)[1:]
	require.Len(t, blocks, 2, "README.md's marked blocks: the capture, then the cancel")
	for _, block := range blocks {
		_, block, found := strings.Cut(block, "```sh\n")
		require.True(t, found)
		code, _, found := strings.Cut(block, "```")
		require.True(t, found)
		script.WriteString(code)
	}

	for _, protocol := range []string{"fake", "stripe"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			all := start(t, []string{"DATABASE_URL=" + dbtest.URL(t)}, "all", "--psp", protocol, "--addr", "127.0.0.1:0",
				"--psp-addr", "127.0.0.1:0", "--max-conns", "6", "--concurrency", "4", "--ledger", filepath.Join(t.TempDir(), "ledger.jsonl"))
			b := waitBanner(t, all)
			sh := exec.Command("bash", "-e", "-o", "pipefail", "-c", script.String())
			sh.Env = []string{"PATH=" + os.Getenv("PATH"), "CHARGEFLOW_API_URL=" + b.apiURL, "CHARGEFLOW_API_KEY=" + b.apiKey}
			out, err := sh.CombinedOutput()
			require.NoError(t, err, "the pasted commands:\n%s\nprinted:\n%s", script.String(), out)
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			require.Len(t, lines, 6, "each block prints the charge's id, the operation and the charge:\n%s", out)
			held, released := lines[0], lines[3]
			require.Regexp(t, `^ch_[0-9a-z]{26}$`, held)
			require.Regexp(t, `^\{"id":"cp_[0-9a-z]{26}","object":"capture","charge":"`+held+`","amount":600,"currency":"USD","status":"pending"`, lines[1])
			require.Contains(t, lines[2], `"id":"`+held+`","status":"succeeded"`)
			require.Contains(t, lines[2], `"capture":false,"amount_captured":600`)
			require.Regexp(t, `^ch_[0-9a-z]{26}$`, released)
			require.Regexp(t, `^\{"id":"cx_[0-9a-z]{26}","object":"cancel","charge":"`+released+`","amount":2500,"currency":"USD","status":"pending"`, lines[4])
			require.Contains(t, lines[5], `"id":"`+released+`","status":"canceled"`)
			require.Contains(t, lines[5], `"capture":false,"amount_captured":0`)
		})
	}
}
