package intent

import "slices"

// State is where a charge is in its life. The zero value is not a state.
type State string

const (
	// StatePending means accepted and durable: a charge.submit job exists and
	// the provider has not been called for the current attempt.
	StatePending State = "pending"

	// StateSubmitting is committed before the provider call. From here on a
	// provider charge may exist, so a rerun never sends again blindly.
	StateSubmitting State = "submitting"

	// StateUnknown means the outcome of a call is not known: a timeout, a
	// reset after sending, a 5xx, or a crash while submitting. Only the
	// reconciler moves a charge out of it, with proof.
	StateUnknown State = "unknown"

	// StateRequiresCapture means the provider authorized a charge accepted
	// to be captured later and holds the money: a capture or a cancel
	// (rows of their own) moves it on, or the provider's release of an
	// expired hold (docs/capture.md).
	StateRequiresCapture State = "requires_capture"

	// StateSucceeded means the provider confirmed the charge (for one
	// captured later, its capture). Terminal.
	StateSucceeded State = "succeeded"

	// StateCanceled means an authorized charge was released, by a cancel or
	// by its hold's expiry at the provider: no money moved. Terminal.
	StateCanceled State = "canceled"

	// StateFailed means the provider declined, or it is proven that no
	// provider charge exists and none will be attempted. Terminal.
	StateFailed State = "failed"

	// StateNeedsReview means automation could not prove the outcome within
	// policy. An operator resolves it, with written evidence.
	StateNeedsReview State = "needs_review"
)

// States lists every state, in the order of the state machine.
func States() []State {
	return []State{StatePending, StateSubmitting, StateUnknown, StateRequiresCapture, StateSucceeded, StateCanceled,
		StateFailed, StateNeedsReview}
}

// Valid reports whether s is one of the states.
func (s State) Valid() bool { return slices.Contains(States(), s) }

// Terminal reports whether nothing may move a charge out of s.
func (s State) Terminal() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCanceled
}

// Transition is one legal move of the state machine.
type Transition struct {
	From State
	To   State
}

// transitions is the state machine of the package doc, the only copy in Go. The
// charge_transitions table holds the same rows and the database enforces them.
var transitions = [...]Transition{
	{StatePending, StateSubmitting},
	{StatePending, StateFailed},
	{StateSubmitting, StateSucceeded},
	{StateSubmitting, StateFailed},
	{StateSubmitting, StateUnknown},
	{StateSubmitting, StatePending},
	{StateUnknown, StateSucceeded},
	{StateUnknown, StateFailed},
	{StateUnknown, StatePending},
	{StateUnknown, StateNeedsReview},
	{StateNeedsReview, StateSucceeded},
	{StateNeedsReview, StateFailed},
	{StateNeedsReview, StatePending},
	// Authorize now, capture later (docs/capture.md).
	{StateSubmitting, StateRequiresCapture},
	{StateSubmitting, StateCanceled},
	{StateUnknown, StateRequiresCapture},
	{StateUnknown, StateCanceled},
	{StateNeedsReview, StateRequiresCapture},
	{StateNeedsReview, StateCanceled},
	{StateRequiresCapture, StateSucceeded},
	{StateRequiresCapture, StateCanceled},
}

// Transitions returns every legal move.
func Transitions() []Transition {
	return append([]Transition(nil), transitions[:]...)
}

// CanMove reports whether from → to is a legal move.
func CanMove(from, to State) bool {
	for _, t := range transitions {
		if t.From == from && t.To == to {
			return true
		}
	}
	return false
}
