//go:build !lab

package crashpoint

import "context"

// Set is the armed points of one process; in this build (without the lab
// tag) it has none and cannot get any: nothing constructs an armed Set, so
// every point is a call that returns at once.
type Set struct{}

// Hit is a crash point. In this build it does nothing.
func (*Set) Hit(context.Context, string) error { return nil }

// Has reports whether the point name is armed: never, in this build.
func (*Set) Has(string) bool { return false }

// Armed reports whether any point is armed: never, in this build.
func (*Set) Armed() bool { return false }
