//go:build !lab

package outbox

import (
	"context"
	"log/slog"

	"github.com/riverqueue/river"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/submit"
)

// Lab is the worker's laboratory modes: none in the product build. The lab
// build's (lab.go) has the negative controls; this one cannot be switched
// into re-sending, nor into rerouting a charge whose outcome is unknown.
type Lab struct{}

// resendOnRerun never resends in the product build: a charge found
// submitting always goes to unknown.
func (*Worker) resendOnRerun(context.Context, submit.ChargeArgs, *slog.Logger) (intent.Charge, bool, error) {
	return intent.Charge{}, false, nil
}

// rerouteOnTimeout never reroutes in the product build: an unknown outcome
// always goes to unknown, for the reconciler to prove.
func (*Worker) rerouteOnTimeout(context.Context, *river.Job[submit.ChargeArgs], *slog.Logger, intent.Charge, error) (bool, error) {
	return false, nil
}
