package client_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The client is what a merchant compiles in: everything it depends on, all
// the way down, is the standard library — no package of the server, no
// other module. (docs/architecture.md's table holds it to no imports of
// ours; this holds it to no imports of anyone's.)
func TestOnlyTheStandardLibrary(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/chargeflow/chargeflow/client").Output()
	require.NoError(t, err)
	require.Equal(t, []string{"github.com/chargeflow/chargeflow/client"}, strings.Fields(string(out)))
}
