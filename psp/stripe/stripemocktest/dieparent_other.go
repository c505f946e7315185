//go:build !linux

package stripemocktest

import "os/exec"

// dieWithParent does nothing where the kernel cannot tie a child's life to
// its parent's; t.Cleanup still stops stripe-mock when the test ends.
func dieWithParent(*exec.Cmd) {}
