package stripemocktest

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd when the process that started it
// dies, so a test killed mid-run (a timeout's panic, a signal) leaves no
// stripe-mock behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
