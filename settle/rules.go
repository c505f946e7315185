package settle

import (
	"time"

	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/psp"
)

// This file holds the rules every settler asks alike — the worker, the
// reconciler, an operator's resolution and a provider's notification:
// whether an answer is about this row's money and reference, how long a
// new attempt under a row's key is still de-duplicated, and what a
// notification's answer is.

// Matches reports whether answer is about exactly c: its amount, currency
// and reference (our id). Only such an answer may settle c; any other is a
// person's to look at, whatever its status.
func Matches(c intent.Charge, answer psp.Charge) bool {
	return answer.Amount == c.Amount && answer.Currency == c.Currency && answer.Reference == c.ID
}

// ResendWindow is how long after a row's first send the provider still
// de-duplicates its key, as far as a new attempt may rely on it: the
// provider's key window less margin, never negative; zero when the
// provider never de-duplicates (keyWindow zero).
func ResendWindow(keyWindow, margin time.Duration) time.Duration {
	if keyWindow <= 0 {
		return 0
	}
	return max(keyWindow-margin, 0)
}

// ResendCovered reports whether a new attempt of c made at now is still
// de-duplicated under its key, so that it cannot charge twice: c was never
// sent, or its first send is less than window (ResendWindow) before now.
// With a zero window only a row never sent is covered.
func ResendCovered(c intent.Charge, window time.Duration, now time.Time) bool {
	if c.FirstAttemptAt == nil {
		return true
	}
	return window > 0 && now.Before(c.FirstAttemptAt.Add(window))
}

// Notified is a notification's answer about row, read as Moves reads a
// lookup's, and the kind of row it is about: a refund's through AnswerOf,
// a capture's or cancel's as it is (the held charge as the operation left
// it), a charge's as it is, but for an authorization's of a charge
// captured later, which is a hold (psp.Notification.AnswerFor).
func Notified(n psp.Notification, row intent.Charge) (psp.Charge, intent.Kind) {
	switch n.Kind {
	case psp.NotificationRefund:
		return AnswerOf(n.Refund), intent.KindRefund
	case psp.NotificationCapture:
		return n.Charge, intent.KindCapture
	case psp.NotificationCancel:
		return n.Charge, intent.KindCancel
	}
	return n.AnswerFor(row.CaptureLater), intent.KindCharge
}

// Applied reports whether answer says the provider applied row of kind
// k, whatever the money: a charge or refund that succeeded, a charge held
// (and maybe released since), a capture whose charge was captured, a
// cancel whose charge was released.
func Applied(k intent.Kind, answer psp.Charge) bool {
	switch k {
	case intent.KindCancel:
		return answer.Status == psp.StatusCanceled
	case intent.KindCharge, "":
		return answer.Status == psp.StatusSucceeded || answer.Status == psp.StatusRequiresCapture ||
			answer.Status == psp.StatusCanceled
	}
	return answer.Status == psp.StatusSucceeded
}
