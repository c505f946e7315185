package fakepsp

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chargeflow/chargeflow/psp"
)

var (
	// ErrCorruptLedger is returned by New when a complete line of the ledger
	// file cannot be read back. Only a torn last line, the trace of a crash
	// in the middle of a write, is tolerated.
	ErrCorruptLedger = errors.New("fakepsp: corrupt ledger file")

	// ErrClosed is returned for work that arrives after Close.
	ErrClosed = errors.New("fakepsp: server closed")
)

// LedgerEntry is one charge the provider processed, as GET /_admin/ledger
// reports it, with its refunds and, for a charge authorized to be captured
// later, its capture or cancel.
type LedgerEntry struct {
	// ID is the provider's charge id: "py_…" under the fake protocol, the
	// PaymentIntent's "pi_…" under Stripe's.
	ID string `json:"id"`

	// IdempotencyKey is the Idempotency-Key the charge was created with.
	IdempotencyKey string `json:"idempotency_key"`

	// Reference is the caller's reference: the fake protocol's reference
	// field, Stripe's metadata[chargeflow_charge].
	Reference string `json:"reference"`

	// Amount is in the currency's minor unit.
	Amount int64 `json:"amount"`

	// Currency is the ISO 4217 code.
	Currency string `json:"currency"`

	// Status is psp.StatusSucceeded (money moved) or psp.StatusFailed; for
	// a charge authorized to be captured later, psp.StatusRequiresCapture
	// while it is held and psp.StatusCanceled once released, by a cancel
	// or because its hold expired. The ledger file keeps the status the
	// charge was created with; a report says what it is now.
	Status psp.Status `json:"status"`

	// DeclineCode says why a failed charge was declined.
	DeclineCode string `json:"decline_code,omitempty"`

	// TenantTag is the fake protocol's X-Tenant-Tag header or Stripe's
	// metadata[chargeflow_tenant], "" when absent.
	TenantTag string `json:"tenant_tag"`

	// CreatedAt is when the charge was applied.
	CreatedAt time.Time `json:"created_at"`

	// CaptureLater says the charge was asked to be authorized only: it
	// moved money only once captured, and only AmountCaptured. An
	// authorization holds Amount until HoldExpiresAt, when the provider
	// releases it itself (Config.HoldWindow).
	CaptureLater  bool      `json:"capture_later,omitempty"`
	HoldExpiresAt time.Time `json:"hold_expires_at,omitzero"`

	// AmountCaptured is what a capture took of a charge captured later;
	// CanceledReason says why a released one was: "requested" (a cancel)
	// or "hold_expired". Like Operations, both are only ever filled in a
	// report: the file keeps a capture or cancel on a line of its own.
	AmountCaptured int64  `json:"amount_captured,omitempty"`
	CanceledReason string `json:"canceled_reason,omitempty"`

	// Operations are the capture or cancel applied to a charge captured
	// later: at most one, since either settles the hold; nil when none.
	Operations []OperationEntry `json:"operations,omitempty"`

	// Refunds are the charge's refunds, in the order they were applied;
	// nil when it has none. The ledger file keeps each refund on a line of
	// its own (docs/refunds.md), so this is only ever filled in a report.
	Refunds []RefundEntry `json:"refunds,omitempty"`
}

// RefundEntry is one refund the provider applied, as GET /_admin/ledger
// reports it under its charge. Only refunds that moved money are recorded
// as refunds: a refused refund applied nothing and is only its key's saved
// answer.
type RefundEntry struct {
	// ID is the provider's refund id: "rf_…" under the fake protocol,
	// Stripe's "re_…" under Stripe's.
	ID string `json:"id"`

	// IdempotencyKey is the Idempotency-Key the refund was created with.
	IdempotencyKey string `json:"idempotency_key"`

	// Reference is the caller's reference: the fake protocol's reference
	// field, Stripe's metadata[chargeflow_refund].
	Reference string `json:"reference"`

	// Charge is the provider's id of the charge refunded.
	Charge string `json:"charge"`

	// Amount is in the charge's minor unit, Currency the charge's ISO 4217
	// code.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`

	// Status is psp.StatusSucceeded: the money went back.
	Status psp.Status `json:"status"`

	// Reason is "", requested_by_customer, duplicate or fraudulent.
	Reason string `json:"reason,omitempty"`

	// TenantTag is the fake protocol's X-Tenant-Tag header or Stripe's
	// metadata[chargeflow_tenant], "" when absent.
	TenantTag string `json:"tenant_tag"`

	// CreatedAt is when the refund was applied.
	CreatedAt time.Time `json:"created_at"`
}

// The kinds of ledger record.
const (
	// kindCharge is a processed charge, succeeded or declined. It is the
	// empty string, so files written before kinds existed read back as they
	// were.
	kindCharge = ""

	// kindSavedError is an idempotency key whose saved first answer is an
	// error and that applied nothing: under Stripe's key rules, the 500 of
	// error_before_apply, and under every protocol a refused refund
	// (FailureCode). It has no status or money, and no id but an Adyen
	// refund's, which was acknowledged with one before it was refused.
	kindSavedError = "saved_error"

	// kindRefund is a refund that moved money: a line of its own, after
	// its charge's, so the file stays append-only (docs/refunds.md).
	kindRefund = "refund"

	// kindCapture and kindCancel are a capture and a cancel applied to a
	// charge captured later, each a line of its own after its charge's
	// (capture.go).
	kindCapture = "capture"
	kindCancel  = "cancel"
)

// ledgerRecord is one line of the ledger file: a LedgerEntry plus what the
// provider must remember about the key across a restart.
type ledgerRecord struct {
	LedgerEntry

	// Kind is kindCharge, kindRefund, kindCapture, kindCancel or
	// kindSavedError.
	Kind string `json:"kind,omitempty"`

	// Charge is the id of the charge a refund, a capture or a cancel, or a
	// refused one, is of.
	Charge string `json:"charge,omitempty"`

	// Reason is a refund's or a cancel's reason, as it was asked.
	Reason string `json:"reason,omitempty"`

	// Refused names, on a refused operation's saved answer
	// (kindSavedError with a FailureCode), the operation refused:
	// kindCapture or kindCancel, "" for a refund.
	Refused string `json:"refused,omitempty"`

	// Capturable is, on a refused capture or cancel, what the charge held
	// then, and HeldStatus the status it had (requires_capture,
	// succeeded, canceled, failed), so that a replay words the refusal as
	// the first answer did.
	Capturable int64      `json:"capturable,omitempty"`
	HeldStatus psp.Status `json:"held_status,omitempty"`

	// FailureCode says why a refund was refused (refundExceedsCharge,
	// chargeNotRefundable), or a capture or cancel (capture.go); its Amount is the amount asked (0: what was
	// left) and Refundable what was left of the charge then. Each protocol
	// words the refusal from them, a replay included.
	FailureCode string `json:"failure_code,omitempty"`
	Refundable  int64  `json:"refundable,omitempty"`

	// Description and Metadata are what a Stripe PaymentIntent was created
	// with (Metadata, a Stripe refund too), kept so that every later read
	// shows them as Stripe would.
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`

	// MerchantAccount is the Adyen merchant account a payment or refund
	// was made for, which its answers and notifications name.
	MerchantAccount string `json:"merchant_account,omitempty"`

	// RequestHash fingerprints the request parameters, so a reused key with
	// different parameters is refused after a restart too, without the file
	// holding payment methods.
	RequestHash string `json:"request_hash"`

	// KeyExpiresAt, when set, is when the provider forgets the key (the
	// key_expiry fault).
	KeyExpiresAt time.Time `json:"key_expires_at,omitzero"`

	// ReplayStatus, when set, is the status every later POST with the key
	// replays (the error_after_apply fault).
	ReplayStatus int `json:"replay_status,omitempty"`
}

// commitBatch is one group commit: every record appended to the ledger
// between two flushes shares it and learns its outcome when done is closed.
type commitBatch struct {
	done chan struct{}
	err  error // written before done is closed
}

func newCommitBatch() *commitBatch {
	return &commitBatch{done: make(chan struct{})}
}

// wait blocks until the batch is on disk and returns the flush error.
func (b *commitBatch) wait() error {
	<-b.done
	return b.err
}

// durable reports, without blocking, whether the batch is safely on disk.
func (b *commitBatch) durable() bool {
	select {
	case <-b.done:
		return b.err == nil
	default:
		return false
	}
}

// ledger is the append-only JSON-lines file of processed charges, refunds
// and saved answers.
//
// Appends use group commit: append adds the line to an in-memory buffer and
// returns the batch it joined; a single flusher goroutine repeatedly takes the
// whole buffer, writes it with one write and one fsync, and completes the
// batch. Requests that arrive while an fsync is running accumulate in the
// next batch, so under load many charges share one fsync and none is
// acknowledged before it is on disk.
type ledger struct {
	file *os.File

	// beforeFlush, when set before start, runs before each flush; tests
	// use it to hold the flusher and observe batching.
	beforeFlush func()

	// flushes counts completed write+fsync rounds.
	flushes atomic.Int64

	mu      sync.Mutex
	pending []byte       // lines waiting for the next flush
	spare   []byte       // the buffer of the previous flush, reused
	batch   *commitBatch // the batch the pending lines belong to
	closed  bool
	failure error // the first flush error; the ledger refuses appends after it

	wake chan struct{} // capacity 1: "there is something to flush"
	stop chan struct{}
	done chan struct{}
}

// openLedger opens or creates the ledger file at path and reads back every
// record in it. A torn last line is logged, cut off the file and ignored; any
// other unreadable line is ErrCorruptLedger. The ledger does not accept
// appends until start is called.
func openLedger(path string, logger *slog.Logger) (*ledger, []ledgerRecord, error) {
	_, statErr := os.Stat(path)
	created := errors.Is(statErr, fs.ErrNotExist)

	file, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("fakepsp: open ledger: %w", err)
	}

	records, validSize, tornBytes, err := readLedger(file)
	if err != nil {
		_ = file.Close()
		return nil, nil, fmt.Errorf("fakepsp: read ledger %s: %w", path, err)
	}
	if tornBytes > 0 {
		logger.Warn("fakepsp: ignoring a torn last line in the ledger, left by a crash during a write",
			slog.String("path", path), slog.Int("bytes", tornBytes), slog.Int64("offset", validSize))
		if err := truncateAndSync(file, validSize); err != nil {
			_ = file.Close()
			return nil, nil, fmt.Errorf("fakepsp: cut the torn line off ledger %s: %w", path, err)
		}
	}
	if created {
		// Make the new file's directory entry durable too.
		if err := syncDir(filepath.Dir(path)); err != nil {
			_ = file.Close()
			return nil, nil, fmt.Errorf("fakepsp: sync ledger directory: %w", err)
		}
	}

	return &ledger{
		file:  file,
		batch: newCommitBatch(),
		wake:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}, records, nil
}

// readLedger reads records from r up to the last newline. It returns the size
// of the valid prefix and the length of a trailing fragment without a
// newline (a torn write), if any.
func readLedger(r io.Reader) (records []ledgerRecord, validSize int64, tornBytes int, err error) {
	reader := bufio.NewReader(r)
	for lineNumber := 1; ; lineNumber++ {
		line, err := reader.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return records, validSize, len(line), nil
		}
		if err != nil {
			return nil, 0, 0, err
		}
		validSize += int64(len(line))

		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var record ledgerRecord
		if err := json.Unmarshal(line, &record); err != nil {
			return nil, 0, 0, fmt.Errorf("%w: line %d: %w", ErrCorruptLedger, lineNumber, err)
		}
		if err := record.validate(); err != nil {
			return nil, 0, 0, fmt.Errorf("%w: line %d: %w", ErrCorruptLedger, lineNumber, err)
		}
		records = append(records, record)
	}
}

// validate checks that a record read back is one the provider could have
// written.
func (r ledgerRecord) validate() error {
	switch {
	case r.IdempotencyKey == "":
		return errors.New("record without a key")
	case len(r.Refunds) > 0:
		return errors.New("record with nested refunds: a refund is a line of its own")
	case r.Kind == kindSavedError && r.ReplayStatus == 0 && r.FailureCode == "":
		return errors.New("saved error without a status or a failure code")
	case r.Kind == kindSavedError:
		return nil
	case r.Kind == kindRefund && (r.ID == "" || r.Charge == "" || r.Amount <= 0 || r.Status != psp.StatusSucceeded):
		return errors.New("refund without an id, a charge, an amount or status succeeded")
	case r.Kind == kindRefund:
		return nil
	case r.Kind == kindCapture && (r.ID == "" || r.Charge == "" || r.Amount <= 0 || r.Status != psp.StatusSucceeded):
		return errors.New("capture without an id, a charge, an amount or status succeeded")
	case r.Kind == kindCancel && (r.ID == "" || r.Charge == "" || r.Status != psp.StatusCanceled):
		return errors.New("cancel without an id, a charge or status canceled")
	case r.Kind == kindCapture || r.Kind == kindCancel:
		return nil
	case r.Kind != kindCharge:
		return fmt.Errorf("record of unknown kind %q", r.Kind)
	case len(r.Operations) > 0 || r.AmountCaptured != 0 || r.CanceledReason != "":
		return errors.New("charge with a capture or cancel in it: each is a line of its own")
	case r.ID == "" || (r.Status != psp.StatusSucceeded && r.Status != psp.StatusFailed && r.Status != psp.StatusRequiresCapture):
		return errors.New("charge without an id or a known status")
	case r.Status == psp.StatusRequiresCapture && (!r.CaptureLater || r.HoldExpiresAt.IsZero()):
		return errors.New("authorization without capture_later or hold_expires_at")
	case r.Status == psp.StatusSucceeded && r.CaptureLater:
		return errors.New("charge captured later created succeeded: its capture is a line of its own")
	}
	return nil
}

func truncateAndSync(file *os.File, size int64) error {
	if err := file.Truncate(size); err != nil {
		return err
	}
	return file.Sync()
}

func syncDir(dir string) error {
	handle, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer handle.Close()
	return handle.Sync()
}

// start starts the flusher goroutine.
func (l *ledger) start() {
	go l.run()
}

// append queues record for the next group commit and returns the batch it
// joined; the record is durable once the batch's wait returns nil. Records
// are written in the order append is called.
func (l *ledger) append(record ledgerRecord) (*commitBatch, error) {
	line, err := json.Marshal(record)
	if err != nil {
		return nil, fmt.Errorf("fakepsp: encode ledger record: %w", err)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, ErrClosed
	}
	if l.failure != nil {
		return nil, fmt.Errorf("fakepsp: ledger failed earlier: %w", l.failure)
	}
	l.pending = append(l.pending, line...)
	l.pending = append(l.pending, '\n')
	select {
	case l.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
	return l.batch, nil
}

// run is the flusher loop. On stop it flushes what is pending, then exits.
func (l *ledger) run() {
	defer close(l.done)
	for {
		select {
		case <-l.wake:
			l.flush()
		case <-l.stop:
			l.flush()
			return
		}
	}
}

// flush writes and fsyncs everything pending as one batch.
func (l *ledger) flush() {
	l.mu.Lock()
	if len(l.pending) == 0 {
		l.mu.Unlock()
		return
	}
	data, batch := l.pending, l.batch
	l.pending, l.batch = l.spare[:0], newCommitBatch()
	l.mu.Unlock()

	if l.beforeFlush != nil {
		l.beforeFlush()
	}
	_, err := l.file.Write(data)
	if err == nil {
		err = l.file.Sync()
	}
	l.flushes.Add(1)

	l.mu.Lock()
	l.spare = data[:0]
	if err != nil && l.failure == nil {
		l.failure = err
	}
	l.mu.Unlock()

	if err != nil {
		batch.err = fmt.Errorf("fakepsp: write ledger: %w", err)
	}
	close(batch.done)
}

// close flushes what is pending, stops the flusher and closes the file.
func (l *ledger) close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()

	close(l.stop)
	<-l.done
	if err := l.file.Close(); err != nil {
		return fmt.Errorf("fakepsp: close ledger: %w", err)
	}
	return nil
}
