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

// Notified is a notification's answer, read as Moves reads a lookup's, and
// the kind of row it is about: a charge's answer as it is, a refund's
// through AnswerOf.
func Notified(n psp.Notification) (psp.Charge, intent.Kind) {
	if n.Kind == psp.NotificationRefund {
		return AnswerOf(n.Refund), intent.KindRefund
	}
	return n.Charge, intent.KindCharge
}
