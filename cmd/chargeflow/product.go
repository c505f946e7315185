//go:build !lab

// The product build's side of the laboratory (lab.go is the lab build's):
// the image the Dockerfile builds has no crash points to arm and no
// negative control and its clock cannot be skewed, so a role told to use
// them refuses to start rather than run as if it had them.

package main

import (
	"log/slog"
	"strings"

	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/internal/app"
)

// labCommands are none in this build: run names labCommandNames with how
// to get the build that has them.
func labCommands() []command { return nil }

// crashPoints refuses CHARGEFLOW_CRASHPOINTS and its seed: this build has
// no crash point that could be armed (crashpoint), and a setting that
// silently did nothing would let a deployment believe it had.
func crashPoints(e env, _ *slog.Logger) (*crashpoint.Set, error) {
	return nil, refuseLabModes(e, "CHARGEFLOW_CRASHPOINTS", "CHARGEFLOW_CRASHPOINT_SEED")
}

// refuseLabModes is an error naming every variable of names that is set.
func refuseLabModes(e env, names ...string) error {
	var set []string
	for _, name := range names {
		if e.getenv(name) != "" {
			set = append(set, name)
		}
	}
	if len(set) == 0 {
		return nil
	}
	verb := "is"
	if len(set) > 1 {
		verb = "are"
	}
	return usageErrorf("%s %s set, but this build has no laboratory modes (crash points, a skewed clock, the negative control); %s",
		strings.Join(set, " and "), verb, labBuild)
}

// clockSkew refuses CHARGEFLOW_CLOCK_SKEW: this build's clock cannot be
// skewed (internal/clock), and a deployment must never be able to set its
// decisions' clock off the wall clock by an environment variable.
func clockSkew(e env, _ *slog.Logger) error {
	return refuseLabModes(e, "CHARGEFLOW_CLOCK_SKEW")
}

// brokenModes refuses CHARGEFLOW_BROKEN: this build has no negative
// control (outbox.Lab is empty), and it must never be possible to switch a
// production worker into re-sending by an environment variable.
func brokenModes(e env, _ *app.Options, _ *slog.Logger) error {
	return refuseLabModes(e, "CHARGEFLOW_BROKEN")
}
