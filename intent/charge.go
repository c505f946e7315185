package intent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Errors that callers branch on. They are wrapped with context; use errors.Is.
var (
	// ErrNotFound means no such row exists for the tenant.
	ErrNotFound = errors.New("intent: not found")

	// ErrConflict means a compare-and-set found the charge in another state
	// than expected: someone else moved it first. It is never overwritten.
	ErrConflict = errors.New("intent: charge was moved by someone else")

	// ErrFenced means the caller's lease token is stale: its lease expired
	// and another lease was taken (the charge may have moved since, too).
	// The caller must drop its result.
	ErrFenced = errors.New("intent: lease token is stale")

	// ErrIllegalMove means the move is not in the state machine. In Go it is
	// refused before any SQL; the database refuses it too (SQLSTATE CF001).
	ErrIllegalMove = errors.New("intent: illegal state move")

	// ErrTooSoon means an operator forced a lookup too soon after the last
	// one; *TooSoonError says how long to wait.
	ErrTooSoon = errors.New("intent: too soon after the last lookup")

	// ErrNotRefundable means a refund names a charge that is not a
	// succeeded charge of the tenant in the refund's currency. The database
	// decides it (SQLSTATE CF010), under the charge's row lock.
	ErrNotRefundable = errors.New("intent: charge is not refundable")

	// ErrRefundExceedsCharge means a refund would take the charge's refunds
	// that are not failed past its amount. The database decides it (the
	// constraint charges_refunds_within_amount), under the charge's row
	// lock, so no number of concurrent requests can pass it.
	ErrRefundExceedsCharge = errors.New("intent: refunds would exceed the charge")

	// ErrNotCapturable means a capture or cancel names a charge that is not
	// authorized and held (requires_capture) in the operation's currency
	// and at its provider (SQLSTATE CF012); ErrOperationInProgress, a held
	// charge with another capture or cancel on its way (CF011);
	// ErrCaptureExceedsAuthorization, a capture of more than was
	// authorized (CF013). The database decides each, under the charge's
	// row lock (operations_account).
	ErrNotCapturable               = errors.New("intent: charge is not held for capture")
	ErrOperationInProgress         = errors.New("intent: another capture or cancel of the charge is in flight")
	ErrCaptureExceedsAuthorization = errors.New("intent: capture exceeds the authorization")

	// ErrOutcomeUnknown means a statement that commits (an accept, or the
	// commit of a transaction) was sent and no answer came back: the
	// connection was lost or the caller's deadline passed while the server
	// had it. It may have committed or not. Retrying the request with the
	// same idempotency key is what tells: the replay, or the first write.
	ErrOutcomeUnknown = errors.New("intent: whether the write committed is unknown")
)

// CommitFailed wraps err, the failure of a statement that commits, with
// ErrOutcomeUnknown unless it proves nothing was committed: an error the
// server answered (the statement failed, so its transaction did not
// commit), a connection that could not be made, or the caller's deadline
// passing before anything was sent (waiting for a pooled connection). pgx
// can report a connection that closed while an answer was awaited as one
// that was closed before (SafeToRetry), so that is not taken as proof.
func CommitFailed(err error) error {
	var pgErr *pgconn.PgError
	var connectErr *pgconn.ConnectError
	switch {
	case err == nil, errors.As(err, &pgErr), errors.As(err, &connectErr):
		return err
	case (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) && !pgconn.Timeout(err):
		return err // pgconn wraps a deadline that passed while it waited for the server
	}
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
}

// TooSoonError says how long until another forced lookup is allowed. It
// matches ErrTooSoon with errors.Is.
type TooSoonError struct {
	ChargeID string
	Wait     time.Duration
}

func (e *TooSoonError) Error() string {
	return fmt.Sprintf("charge %s: looked up too recently; wait %s", e.ChargeID, e.Wait)
}

// Is makes errors.Is(err, ErrTooSoon) work.
func (e *TooSoonError) Is(target error) bool { return target == ErrTooSoon }

// ConflictError says what the charge looked like when a move lost its
// compare-and-set. It matches ErrConflict or ErrFenced with errors.Is.
type ConflictError struct {
	ChargeID   string
	Current    State
	LeaseToken int64
	fenced     bool
}

func (e *ConflictError) Error() string {
	if e.fenced {
		return fmt.Sprintf("charge %s: lease token is stale (now %d)", e.ChargeID, e.LeaseToken)
	}
	return fmt.Sprintf("charge %s was moved by someone else (now %s)", e.ChargeID, e.Current)
}

// Is makes errors.Is(err, ErrConflict) and errors.Is(err, ErrFenced) work.
func (e *ConflictError) Is(target error) bool {
	if e.fenced {
		return target == ErrFenced
	}
	return target == ErrConflict
}

// Kind is what an operation does at the provider. A refund, a capture and
// a cancel are rows of the same table as a charge, carried by the same
// machinery (docs/refunds.md, "Where refunds live"; docs/capture.md).
type Kind string

const (
	KindCharge  Kind = "charge"
	KindRefund  Kind = "refund"
	KindCapture Kind = "capture"
	KindCancel  Kind = "cancel"
)

// Operation reports whether k is an operation on a held charge: a capture
// or a cancel.
func (k Kind) Operation() bool { return k == KindCapture || k == KindCancel }

// IDPrefix is what every id of kind k starts with, before its "_".
func (k Kind) IDPrefix() string {
	switch k {
	case KindRefund:
		return "re"
	case KindCapture:
		return "cp"
	case KindCancel:
		return "cx"
	default:
		return "ch"
	}
}

// Charge is one operation as stored: a charge intent, or a refund of one
// (Kind, ParentID).
type Charge struct {
	TenantID string
	ID       string
	State    State

	// Kind is KindCharge, KindRefund, KindCapture or KindCancel ("" is a
	// charge when accepting). Any other kind's ParentID is the charge it
	// acts on and it has no PaymentMethod; a refund's Reason is the
	// merchant's.
	Kind     Kind
	ParentID string
	Reason   string

	// AmountReserved and AmountRefunded are, on a charge, the sums of its
	// refunds that are not failed and that succeeded; the database keeps
	// them (refunds_account), never Go.
	AmountReserved int64
	AmountRefunded int64

	// CaptureLater says a charge is only authorized at its provider and
	// waits in requires_capture for a capture or a cancel (rows of kinds
	// KindCapture and KindCancel whose ParentID is the charge). The
	// database keeps AmountCaptured, what its capture took, and
	// OpInFlight, the id of the operation on its way
	// (operations_account), never Go.
	CaptureLater   bool
	AmountCaptured int64
	OpInFlight     string

	Amount        int64
	Currency      string
	PaymentMethod string
	Description   *string
	Metadata      map[string]string

	// Provider names the provider the charge goes to; ProviderKey is the
	// idempotency key it is always sent with, fixed at creation.
	Provider         string
	ProviderKey      string
	ProviderChargeID string
	FailureCode      string
	ReviewReason     string

	Attempts       int
	FirstAttemptAt *time.Time
	LastAttemptAt  *time.Time
	UnknownSince   *time.Time
	LookupFailures int
	NextCheckAt    *time.Time

	LeaseOwner     string
	LeaseToken     int64
	LeaseExpiresAt *time.Time

	// LastLookupAt is when the reconciler last looked the key up without
	// settling the charge; ForcedCheckAt when an operator last forced a
	// lookup. Forced lookups are spaced by a floor from both.
	LastLookupAt  *time.Time
	ForcedCheckAt *time.Time

	CreatedAt time.Time
	UpdatedAt time.Time
}

// AuditEntry is one row of a charge's audit trail: a move, who made it and why.
type AuditEntry struct {
	ID       int64
	TenantID string
	ChargeID string
	From     State // "" for the creation entry
	To       State
	Actor    string
	Reason   string
	Attempt  int
	Evidence string
	// Action names an operator action that moved nothing (From is then
	// empty and To is the state the charge stayed in).
	Action    string
	CreatedAt time.Time
}

// operationRefusals are the SQLSTATEs of operations_account's refusals.
var operationRefusals = map[string]error{
	"CF011": ErrOperationInProgress,
	"CF012": ErrNotCapturable,
	"CF013": ErrCaptureExceedsAuthorization,
}

// RefundIDPrefix starts every refund's id, as "ch_" starts a charge's.
const RefundIDPrefix = "re_"

// ProviderKeyFor derives the provider idempotency key from a charge id. It
// never involves the client's idempotency key, and it is the same on every
// attempt, so the provider can deduplicate whatever we resend.
func ProviderKeyFor(chargeID string) string { return "cf_" + chargeID }
