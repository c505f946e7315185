package fakepsp

import (
	"cmp"
	"crypto/rand"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/chargeflow/chargeflow/psp"
)

// This file is the part of a request that every operation and every wire
// protocol shares: the fault schedule, the idempotency key rules and the
// ledger. An operation (a charge, a refund) only says what executing it
// records (operation.fillLocked), and a protocol only reads its request into
// a request and words the answers (answers), so each fault behaves the same
// whatever the operation and whichever protocol the provider speaks.

var (
	// errKeyReused: a known key arrived with different parameters.
	errKeyReused = errors.New("fakepsp: idempotency key reused with different parameters")

	// errKeyInUse: a request with the key is still executing, or a delayed
	// apply for it has not happened yet.
	errKeyInUse = errors.New("fakepsp: idempotency key in use by a request still being processed")
)

// request is one validated request, whatever operation it asks for and
// whatever protocol carried it.
type request struct {
	// key is the idempotency key.
	key string

	// tag is the tenant tag the ledger files the record under.
	tag string

	// reference is the caller's own id for what it asks: our charge id for
	// a charge, our refund id for a refund.
	reference string

	// op is what the request asks the provider to do.
	op operation

	// hash fingerprints every parameter of the request, as the protocol
	// defines them; a known key is only replayed for the same fingerprint.
	hash string

	// idPrefix starts the id of what the request makes: "py_" and "rf_"
	// under the fake protocol, a Stripe PaymentIntent's "pi_" and refund's
	// "re_" under Stripe's.
	idPrefix string

	// newID, when set, makes the id instead (Adyen's pspReference).
	newID func() string
}

// id is a new id for what the request makes.
func (r request) id() string {
	if r.newID != nil {
		return r.newID()
	}
	return r.idPrefix + rand.Text()
}

// operation is what a request asks the provider to do, a charge
// (chargeParams), a refund (refundParams), a capture or a cancel
// (holdParams): the part of the pipeline that differs between them.
type operation interface {
	// on names the fault rules the request draws (Rule.On).
	on() string

	// fillLocked completes the record of executing the operation: c
	// arrives with what every record holds (key, reference, tenant tag,
	// time, fingerprint, a new id) and leaves as what executing did. s.mu is
	// held, so what it reads of the ledger (what is left of a charge) cannot
	// change before c is appended: that is how two refunds racing never
	// refund more than the charge together.
	fillLocked(s *Server, c *record)
}

// keyRules are the idempotency rules of a protocol: when a key starts to
// count, and which answers it keeps. With de-duplication off every protocol
// has the same rules: no key is remembered, locked or saved.
type keyRules struct {
	// atExecution locks a key from the moment its request starts
	// executing, so a concurrent request with the key is refused rather
	// than made to wait, and answers a key with a saved answer from it
	// before anything executes. Without it (keysAtApply) a key counts
	// once its record is applied.
	atExecution bool

	// savesErrorBeforeApply makes error_before_apply's 500, given once
	// execution started, the key's saved answer. Without it that 500 is
	// given in front of the key layer, so nothing is locked or saved.
	savesErrorBeforeApply bool

	// marksReplays sets Idempotent-Replayed: true on an answer replayed
	// for a known key.
	marksReplays bool
}

var (
	// keysAtApply are the fake protocol's rules: a key is remembered when
	// its charge or refund is applied, and a request for a key whose record
	// is being applied waits for that record. Nothing is saved for a request
	// that applied nothing, but for a refused refund: the refusal is the
	// provider's decision about the request, as a decline is.
	keysAtApply = keyRules{marksReplays: true}

	// keysAtExecution are Stripe's rules: the key is locked from the start
	// of execution (409 to a concurrent request), and the first answer
	// given once execution started is saved for the key, a 500 that
	// applied nothing included (error_before_apply).
	keysAtExecution = keyRules{atExecution: true, savesErrorBeforeApply: true, marksReplays: true}

	// keysAdyen are Adyen's rules as its documentation gives them: the key
	// is locked from the start of execution (a concurrent request is
	// refused, 422 704), the result of an execution is saved for the key,
	// and a replay carries no marker. error_before_apply's 500 is a
	// failure in front of execution, so a retry with the key executes.
	keysAdyen = keyRules{atExecution: true}
)

// chargeParams are the validated parameters of a charge request.
type chargeParams struct {
	Amount        int64
	Currency      string // ISO 4217, upper case, whatever the wire said
	PaymentMethod string
	Reference     string

	// Description and Metadata are a Stripe PaymentIntent's, kept with the
	// charge so that reads show them.
	Description string
	Metadata    map[string]string

	// MerchantAccount is an Adyen payment's.
	MerchantAccount string

	// CaptureLater asks for an authorization only: a charge the payment
	// method lets through is held (requires_capture) until a capture or
	// a cancel, or until the hold window passes (capture.go).
	CaptureLater bool
}

// on makes chargeParams an operation: a charge draws the charge rules.
func (chargeParams) on() string {
	return OnCharge
}

// fillLocked records a charge: the payment method decides its outcome. A
// charge to be captured later that goes through is held for the server's
// hold window from now.
func (p chargeParams) fillLocked(s *Server, c *record) {
	c.Amount, c.Currency = p.Amount, p.Currency
	c.Status, c.DeclineCode = outcome(p.PaymentMethod)
	c.Description, c.Metadata, c.MerchantAccount = p.Description, p.Metadata, p.MerchantAccount
	if c.CaptureLater = p.CaptureLater; c.CaptureLater && c.Status == psp.StatusSucceeded {
		c.Status, c.HoldExpiresAt = psp.StatusRequiresCapture, c.CreatedAt.Add(s.holdWindow)
	}
}

// record is a ledger record in memory: a processed charge, a refund, a
// capture or a cancel, or (Kind kindSavedError) a key whose saved answer
// applied nothing.
type record struct {
	ledgerRecord

	// committed completes when the record's ledger line is on disk. Nobody
	// sees it (answer, replay, lookup, admin) before that.
	committed *commitBatch

	// position is the record's index in Server.charges or Server.refunds,
	// the ledger order of its kind, which list cursors count from.
	position int

	// refunds and refunded are a charge's refunds, in ledger order, and the
	// sum of their amounts: what is left of the charge is its amount less
	// refunded. Both change under Server.mu only; refunds only grows, so a
	// copy of the slice taken under the mutex may be read without it.
	refunds  []*record
	refunded int64

	// charge is a refund's, a capture's or a cancel's charge.
	charge *record

	// settlement is, for a charge captured later, the capture or cancel
	// that settled its hold, nil while none has. It is set under
	// Server.mu once, and read without it (holdAt).
	settlement atomic.Pointer[record]

	// captured is, on a capture, what the charge's captures took up to
	// and with it: its amount, unless the provider captures in parts
	// (Config.MultipleCaptures). Set by addLocked.
	captured int64
}

// isCharge reports whether c is a processed charge.
func (c *record) isCharge() bool {
	return c.Kind == kindCharge
}

// isRefund reports whether c is a refund that moved money.
func (c *record) isRefund() bool {
	return c.Kind == kindRefund
}

// failure is an answer that is not the key's record. Each protocol words it
// its own way (answers.failure).
type failure int

const (
	// failErrorBeforeApply is error_before_apply's 500: nothing applied.
	failErrorBeforeApply failure = iota + 1

	// failErrorAfterApply is error_after_apply's 500: the charge applied.
	failErrorAfterApply

	// failReplayedError is a later request replaying a key's saved 500.
	failReplayedError

	// failNotProcessed is not_processed's 429: nothing applied.
	failNotProcessed

	// failKeyReused answers a known key with other parameters.
	failKeyReused

	// failKeyInUse answers a key whose request is still executing.
	failKeyInUse

	// failClosed answers a request that arrived while the provider closes.
	failClosed

	// failLedger answers a request whose ledger write failed.
	failLedger
)

// answers is how a protocol words the answers of the shared pipeline for
// one operation. The pipeline sets Idempotent-Replayed itself.
type answers interface {
	// result answers with the key's record, new or replayed.
	result(w http.ResponseWriter, c *record)

	// failure answers with anything else.
	failure(w http.ResponseWriter, f failure)
}

// applyOptions say how apply records an operation.
type applyOptions struct {
	// dedupe answers a known key with its record instead of applying anew.
	dedupe bool

	// reserved says the caller holds the key's in-flight mark (the late half
	// of a delayed_apply): apply removes it and always executes.
	reserved bool

	// expireKey and keyTTL implement key_expiry.
	expireKey bool
	keyTTL    time.Duration

	// replayStatus implements error_after_apply.
	replayStatus int
}

// run takes a validated request through the fault schedule, the provider's
// key de-duplication under rules and the ledger, and answers it through
// answers. With de-duplication off both rules are the same: no key is
// remembered, locked or saved.
func (s *Server) run(w http.ResponseWriter, r *http.Request, req request, answers answers, rules keyRules) {
	decision := s.drawFault(req.op.on(), req.key, nil)
	if rules.atExecution && decision.dedupe {
		s.runExecution(w, r, req, answers, rules, decision)
		return
	}

	// Faults that act before anything is applied.
	switch decision.fault {
	case FaultLatency:
		s.wait(decision.duration)
	case FaultDropBeforeApply:
		s.hold(r.Context(), decision.duration)
		s.dropConnection(w, false)
		return
	case FaultErrorBeforeApply:
		answers.failure(w, failErrorBeforeApply)
		return
	case FaultNotProcessed:
		answers.failure(w, failNotProcessed)
		return
	case FaultDelayedApply:
		s.delayApply(req, decision, false)
		s.hold(r.Context(), decision.duration)
		s.dropConnection(w, false)
		return
	}

	c, replayed, err := s.apply(req, decision.applyOptions(false))
	if err != nil {
		answers.failure(w, s.applyFailure(err))
		return
	}
	s.deliver(w, r, answers, rules, decision, c, replayed)
}

// runExecution is run under rules that lock a key at execution (Stripe's,
// Adyen's) with de-duplication on.
func (s *Server) runExecution(w http.ResponseWriter, r *http.Request, req request, answers answers, rules keyRules, decision decision) {
	// In front of the idempotency layer: the request never starts
	// executing, so nothing is locked or saved.
	switch {
	case decision.fault == FaultDropBeforeApply:
		s.hold(r.Context(), decision.duration)
		s.dropConnection(w, false)
		return
	case decision.fault == FaultNotProcessed:
		answers.failure(w, failNotProcessed)
		return
	case decision.fault == FaultErrorBeforeApply && !rules.savesErrorBeforeApply:
		answers.failure(w, failErrorBeforeApply)
		return
	}

	known, err := s.reserve(req)
	if err != nil {
		answers.failure(w, s.applyFailure(err))
		return
	}
	if known != nil {
		// The saved answer is replayed before anything executes, so the
		// faults of an execution have nothing to act on; a slow answer and
		// the faults on its way back still do.
		switch decision.fault {
		case FaultLatency:
			s.wait(decision.duration)
		case FaultApplyThenTimeout, FaultApplyThenReset:
		default:
			decision.fault = ""
		}
		s.deliver(w, r, answers, rules, decision, known, true)
		return
	}

	// Executing: the key is locked until its answer is saved.
	switch decision.fault {
	case FaultLatency:
		s.wait(decision.duration)
	case FaultErrorBeforeApply:
		if err := s.saveError(req, http.StatusInternalServerError); err != nil {
			answers.failure(w, s.applyFailure(err))
			return
		}
		answers.failure(w, failErrorBeforeApply)
		return
	case FaultDelayedApply:
		s.delayApply(req, decision, true)
		s.hold(r.Context(), decision.duration)
		s.dropConnection(w, false)
		return
	}

	c, _, err := s.apply(req, decision.applyOptions(true))
	if err != nil {
		answers.failure(w, s.applyFailure(err))
		return
	}
	s.deliver(w, r, answers, rules, decision, c, false)
}

// applyOptions are the options of the apply a decision leads to; reserved
// says the caller holds the key's in-flight mark.
func (d decision) applyOptions(reserved bool) applyOptions {
	options := applyOptions{dedupe: d.dedupe, reserved: reserved}
	switch d.fault {
	case FaultKeyExpiry:
		options.expireKey, options.keyTTL = true, d.duration
	case FaultErrorAfterApply:
		options.replayStatus = http.StatusInternalServerError
	}
	return options
}

// reserve is Stripe's idempotency layer in front of an execution: it
// returns the key's saved answer, refuses the key while another request
// with it executes (errKeyInUse) or with other parameters (errKeyReused),
// or else marks the key in flight, which the caller's apply or saveError
// clears.
func (s *Server) reserve(req request) (*record, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if _, busy := s.inFlight[req.key]; busy {
		s.mu.Unlock()
		return nil, errKeyInUse
	}
	if known := s.rememberedLocked(req.key); known != nil {
		s.mu.Unlock()
		if known.RequestHash != req.hash {
			return nil, errKeyReused
		}
		if err := known.committed.wait(); err != nil {
			return nil, err
		}
		return known, nil
	}
	s.inFlight[req.key] = struct{}{}
	s.mu.Unlock()
	return nil, nil
}

// saveError saves status as the key's answer when its execution failed
// before applying anything (Stripe's rules), and clears the key's in-flight
// mark. It returns once the record is on disk.
func (s *Server) saveError(req request, status int) error {
	rec := ledgerRecord{
		LedgerEntry: LedgerEntry{
			IdempotencyKey: req.key,
			Reference:      req.reference,
			TenantTag:      req.tag,
			CreatedAt:      s.now().UTC(),
		},
		Kind:         kindSavedError,
		RequestHash:  req.hash,
		ReplayStatus: status,
	}

	s.mu.Lock()
	delete(s.inFlight, req.key)
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	batch, err := s.ledger.append(rec)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	s.addLocked(&record{ledgerRecord: rec, committed: batch})
	s.mu.Unlock()
	return batch.wait()
}

// deliver answers with c, through the faults that act after the request
// was applied (or, for a known key, replayed): they only change how the
// answer is delivered.
func (s *Server) deliver(w http.ResponseWriter, r *http.Request, answers answers, rules keyRules, decision decision, c *record, replayed bool) {
	switch decision.fault {
	case FaultApplyThenTimeout:
		s.hold(r.Context(), decision.duration)
		s.dropConnection(w, false)
		return
	case FaultApplyThenReset:
		s.dropConnection(w, true)
		return
	case FaultErrorAfterApply:
		answers.failure(w, failErrorAfterApply)
		return
	}

	if replayed {
		if rules.marksReplays {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		if c.ReplayStatus != 0 {
			answers.failure(w, failReplayedError)
			return
		}
	}
	answers.result(w, c)
}

// applyFailure names the answer to a failed apply, logging what only the
// provider can fix.
func (s *Server) applyFailure(err error) failure {
	switch {
	case errors.Is(err, errKeyReused):
		return failKeyReused
	case errors.Is(err, errKeyInUse):
		return failKeyInUse
	case errors.Is(err, ErrClosed):
		return failClosed
	default:
		s.logger.Error("fakepsp: ledger write failed", slog.Any("error", err))
		return failLedger
	}
}

// apply executes req's operation and records what it did, or with dedupe on
// and a known key returns the key's record with replayed set. It returns
// once the record is on disk.
func (s *Server) apply(req request, options applyOptions) (c *record, replayed bool, err error) {
	s.mu.Lock()
	if options.reserved {
		delete(s.inFlight, req.key)
	}
	if s.closed {
		s.mu.Unlock()
		return nil, false, ErrClosed
	}
	if options.dedupe && !options.reserved {
		if _, busy := s.inFlight[req.key]; busy {
			s.mu.Unlock()
			return nil, false, errKeyInUse
		}
		if known := s.rememberedLocked(req.key); known != nil {
			s.mu.Unlock()
			if known.RequestHash != req.hash {
				return nil, false, errKeyReused
			}
			if err := known.committed.wait(); err != nil {
				return nil, false, err
			}
			return known, true, nil
		}
	}

	rec := ledgerRecord{
		LedgerEntry: LedgerEntry{
			ID:             req.id(),
			IdempotencyKey: req.key,
			Reference:      req.reference,
			TenantTag:      req.tag,
			CreatedAt:      s.now().UTC(),
		},
		RequestHash:  req.hash,
		ReplayStatus: options.replayStatus,
	}
	if options.expireKey {
		rec.KeyExpiresAt = rec.CreatedAt.Add(options.keyTTL)
	}
	c = &record{ledgerRecord: rec}
	req.op.fillLocked(s, c)
	// Appending under s.mu keeps the file in the same order as memory.
	batch, err := s.ledger.append(c.ledgerRecord)
	if err != nil {
		s.mu.Unlock()
		return nil, false, err
	}
	c.committed = batch
	s.addLocked(c)
	s.mu.Unlock()

	if err := batch.wait(); err != nil {
		return nil, false, err
	}
	s.logApplied(c)
	s.notify(c)
	return c, false, nil
}

// notify hands the notifier what an execution recorded, which the
// protocol notifies or not (a charge or a refund always; a refused refund
// under Adyen's), with the notification faults drawn for it once it is
// to be notified. Queuing never waits for the receiver, so the answer is
// not held up.
func (s *Server) notify(c *record) {
	if s.notifier == nil {
		return
	}
	s.notifier.notify(c, func() decision { return s.drawFault(OnNotification, c.IdempotencyKey, nil) })
}

// addLocked files c in memory: under its key, and a charge, a refund, a
// capture or a cancel in the ledger order of its kind and by id; a refund
// also counts against its charge, and a capture or a cancel settles its
// charge's hold (c.charge, set by fillLocked or linkLocked). s.mu must be
// held.
//
// A saved answer that applied nothing does not take the key from a record
// that moved money and is still remembered. With dedupe on that never
// happens (a remembered key is replayed, not executed); with dedupe off a
// refused retry would otherwise hide the refund before it from the lookups,
// which show the latest money-moving record for the key.
func (s *Server) addLocked(c *record) {
	if known := s.rememberedLocked(c.IdempotencyKey); c.Kind != kindSavedError || known == nil || known.Kind == kindSavedError {
		s.byKey[c.IdempotencyKey] = c
	}
	switch c.Kind {
	case kindCharge:
		c.position = len(s.charges)
		s.charges = append(s.charges, c)
		s.byID[c.ID] = c
	case kindRefund:
		c.position = len(s.refunds)
		s.refunds = append(s.refunds, c)
		s.byID[c.ID] = c
		c.charge.refunds = append(c.charge.refunds, c)
		c.charge.refunded += c.Amount
	case kindCapture, kindCancel:
		c.captured = c.Amount
		if prev := c.charge.settlement.Load(); prev != nil && c.Kind == kindCapture {
			c.captured += prev.captured // MultipleCaptures
		}
		c.position = len(s.operations)
		s.operations = append(s.operations, c)
		s.byID[c.ID] = c
		c.charge.settlement.Store(c)
	}
}

// findLocked returns the record of kind with id, nil when there is none.
// Charges and refunds share one map: their ids cannot collide, but a read
// of one kind must not find the other. s.mu must be held.
func (s *Server) findLocked(kind, id string) *record {
	if c := s.byID[id]; c != nil && c.Kind == kind {
		return c
	}
	return nil
}

// find is findLocked for a caller that does not hold s.mu.
func (s *Server) find(kind, id string) *record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.findLocked(kind, id)
}

// logApplied logs what an execution recorded: ids, keys, references and
// outcomes, never a payment method, a description or metadata.
func (s *Server) logApplied(c *record) {
	switch c.Kind {
	case kindCharge:
		s.logger.Debug("fakepsp: charge applied", slog.String("id", c.ID), slog.String("key", c.IdempotencyKey),
			slog.String("reference", c.Reference), slog.String("status", string(c.Status)), slog.String("decline_code", c.DeclineCode))
	case kindRefund:
		s.logger.Debug("fakepsp: refund applied", slog.String("id", c.ID), slog.String("key", c.IdempotencyKey),
			slog.String("reference", c.Reference), slog.String("charge", c.Charge))
	case kindCapture, kindCancel:
		s.logger.Debug("fakepsp: "+c.Kind+" applied", slog.String("id", c.ID), slog.String("key", c.IdempotencyKey),
			slog.String("reference", c.Reference), slog.String("charge", c.Charge), slog.Int64("amount", c.Amount))
	default:
		s.logger.Debug("fakepsp: "+cmp.Or(c.Refused, kindRefund)+" refused", slog.String("key", c.IdempotencyKey),
			slog.String("reference", c.Reference), slog.String("charge", c.Charge), slog.String("failure_code", c.FailureCode))
	}
}

// rememberedLocked returns the record the provider remembers for key, or
// nil if there is none or its key expired. s.mu must be held.
func (s *Server) rememberedLocked(key string) *record {
	c := s.byKey[key]
	if c == nil || (!c.KeyExpiresAt.IsZero() && !s.now().Before(c.KeyExpiresAt)) {
		return nil
	}
	return c
}

// delayApply starts the late half of delayed_apply: the request is applied
// decision.duration from now. With dedupe on, the key is marked in flight
// until then (reserved: the caller marked it already); a known or in-flight
// key applies nothing new.
func (s *Server) delayApply(req request, decision decision, reserved bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if decision.dedupe && !reserved {
		_, busy := s.inFlight[req.key]
		if busy || s.rememberedLocked(req.key) != nil {
			s.mu.Unlock()
			return
		}
		s.inFlight[req.key] = struct{}{}
	}
	s.background.Add(1)
	s.mu.Unlock()

	go func() {
		defer s.background.Done()

		timer := time.NewTimer(decision.duration)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-s.closing:
			return // dropped, as a crash would drop it
		}
		if _, _, err := s.apply(req, applyOptions{dedupe: decision.dedupe, reserved: decision.dedupe}); err != nil {
			s.logger.Warn("fakepsp: delayed apply failed", slog.String("key", req.key), slog.Any("error", err))
		}
	}()
}

// drawFault draws the fault schedule's decision for one request, and logs
// it when a fault fires. acts, when not nil, says which faults can act on
// this request (faultEngine.draw).
func (s *Server) drawFault(on, key string, acts func(fault string) bool) decision {
	d := s.faults.draw(on, key, acts)
	if d.fault != "" {
		s.logger.Info("fakepsp: fault fired", slog.String("on", on), slog.String("fault", d.fault),
			slog.String("key", key), slog.Duration("duration", d.duration))
	}
	return d
}
