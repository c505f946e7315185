//go:build !lab

package outbox

import (
	"context"
	"log/slog"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/submit"
)

// Lab is the worker's laboratory modes: none in the product build. The lab
// build's (lab.go) has the negative control; this one cannot be switched
// into re-sending.
type Lab struct{}

// resendOnRerun never resends in the product build: a charge found
// submitting always goes to unknown.
func (*Worker) resendOnRerun(context.Context, submit.ChargeArgs, *slog.Logger) (intent.Charge, bool, error) {
	return intent.Charge{}, false, nil
}
