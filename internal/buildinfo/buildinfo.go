// Package buildinfo says which build of chargeflow is running: the version
// and commit the Go toolchain stamped into the binary. A build in a git
// checkout (make run, go build, the Dockerfile, whose context keeps .git)
// is stamped with its commit and a version derived from it (a tag, or a
// pseudo-version, "+dirty" when the tree had changes); `go install
// github.com/chargeflow/chargeflow/cmd/chargeflow@VERSION` with the module's
// version. `chargeflow version`, GET /healthz and the chargeflow_build_info
// metric all read it here, so they cannot disagree.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Info is one build's identity.
type Info struct {
	// Version is the module's version: a tag, a pseudo-version, or
	// "(devel)" when the toolchain knew none.
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from, "unknown"
	// when it was built outside a checkout.
	Commit string `json:"commit"`
	// GoVersion is the toolchain that built it.
	GoVersion string `json:"go_version"`
}

var read = sync.OnceValue(func() Info {
	info := Info{Version: "(devel)", Commit: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	if bi.Main.Version != "" {
		info.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			info.Commit = s.Value
		}
	}
	return info
})

// Read returns the running binary's build.
func Read() Info { return read() }
