//go:build lab

package outbox

import (
	"context"
	"log/slog"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/submit"
)

// Lab is the worker's laboratory modes: deliberately broken behaviour the
// scenario runner's negative controls use to prove that the invariant
// checker can fail. Only the lab build (-tags lab) has them.
type Lab struct {
	// ResendOnRerun: a run that finds the charge submitting sends it again
	// instead of moving it to unknown. It can double-charge.
	ResendOnRerun bool
}

// resendOnRerun is the negative control's turn when a run finds its charge
// submitting: with ResendOnRerun it reads the charge to send it again, and
// says so.
func (w *Worker) resendOnRerun(ctx context.Context, args submit.ChargeArgs, log *slog.Logger) (intent.Charge, bool, error) {
	if !w.cfg.Lab.ResendOnRerun {
		return intent.Charge{}, false, nil
	}
	log.WarnContext(ctx, "broken mode: resending a charge found submitting")
	charge, err := intent.Get(ctx, w.cfg.DB, args.TenantID, args.ChargeID)
	return charge, true, err
}
