//go:build lab && linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
)

// `make run` as a person sees it on a terminal: `chargeflow all` with
// stdout and stderr on a pseudo-terminal shows its banner within the first
// 15 lines, no JSON line before it, and the commands it prints, pasted into
// bash as they are, reach a succeeded charge and a refund of it.
func TestQuickstartAsPasted(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "sed", "grep", "seq"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the quickstart's commands need %s on PATH", tool)
	}
	ptmx, tty := openPTY(t)
	cmd := exec.Command(os.Args[0], "all", "--addr", "127.0.0.1:0", "--psp-addr", "127.0.0.1:0",
		"--ledger", filepath.Join(t.TempDir(), "ledger.jsonl"))
	cmd.Env = append(os.Environ(), "CHARGEFLOW_TEST_AS_MAIN=1", "DATABASE_URL="+dbtest.URL(t))
	cmd.Stdout, cmd.Stderr = tty, tty
	require.NoError(t, cmd.Start())
	tty.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); ptmx.Close() })

	lines := make(chan string, 1000)
	go func() {
		scanner := bufio.NewScanner(ptmx)
		for scanner.Scan() {
			lines <- strings.TrimRight(scanner.Text(), "\r")
		}
		close(lines)
	}()
	var seen []string
	deadline := time.After(2 * time.Minute)
	for done := false; !done; {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "chargeflow all ended:\n%s", strings.Join(seen, "\n"))
			seen = append(seen, line)
			done = strings.HasPrefix(line, "Other test cards:")
		case <-deadline:
			t.Fatalf("no banner in two minutes:\n%s", strings.Join(seen, "\n"))
		}
	}
	banner := -1
	for i, line := range seen {
		if strings.HasPrefix(line, "chargeflow is running") {
			banner = i
			break
		}
		require.False(t, strings.HasPrefix(strings.TrimSpace(line), "{"), "a JSON line before the banner: %q", line)
	}
	require.GreaterOrEqual(t, banner, 0, "no banner:\n%s", strings.Join(seen, "\n"))
	require.Less(t, banner, 15, "the banner is line %d:\n%s", banner+1, strings.Join(seen, "\n"))

	// The commands: the indented lines between "Paste these" and the CLI's.
	var script []string
	in := false
	for _, line := range seen[banner:] {
		switch {
		case strings.HasPrefix(line, "Paste these"):
			in = true
		case strings.HasPrefix(line, "The same with the CLI"):
			in = false
		case in && strings.HasPrefix(line, "  "):
			script = append(script, strings.TrimPrefix(line, "  "))
		}
	}
	require.NotEmpty(t, script)
	require.NotContains(t, strings.Join(script, "\n"), "<id>", "nothing to fill in by hand")
	sh := exec.Command("bash", "-e", "-o", "pipefail", "-c", strings.Join(script, "\n"))
	sh.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := sh.CombinedOutput()
	require.NoError(t, err, "the pasted commands:\n%s\nprinted:\n%s", strings.Join(script, "\n"), out)
	require.Contains(t, string(out), `"status":"succeeded"`, "%s", out)
	require.Regexp(t, `"id":"re_[0-9a-z]{26}","charge":"ch_[0-9a-z]{26}","amount":400`, string(out))
}

// openPTY opens a pseudo-terminal pair: the controlling side, and the
// terminal a child writes to.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	var unlock int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock)))
	require.Zero(t, errno, "unlock the pty")
	var n uint32
	_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, ptmx.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n)))
	require.Zero(t, errno, "name the pty")
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	return ptmx, tty
}
