// Package clock is the process's wall clock as the product's decisions read
// it wherever one process's time meets another's: a timestamp the API
// writes, a webhook signature's time, a provider notification's age
// (docs/operations.md, "Clocks"). Durations a process measures on its own
// (timeouts, caches, backoffs) keep reading time.Now: Go measures them on
// the monotonic clock, which no skew of the wall clock moves.
//
// The package has two builds, as crashpoint has. Built without the lab tag
// (the product, as the Dockerfile builds it), Now is time.Now and nothing
// can change it. Built with -tags lab, Skew offsets it, so that a scenario
// can run a role whose clock is wrong (clock_lab.go): Linux's time
// namespaces offset only the monotonic and boot-time clocks, never the wall
// clock, so they cannot.
package clock

import "time"

// Now is the wall clock, offset by the laboratory's skew when one is set.
func Now() time.Time { return time.Now().Add(offset()) }
