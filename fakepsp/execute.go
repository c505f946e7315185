package fakepsp

import (
	"crypto/rand"
	"errors"
	"log/slog"
	"net/http"
	"time"
)

// This file is the part of a charge that every wire protocol shares: the
// fault schedule, the idempotency key rules and the ledger. A protocol only
// reads its request into a chargeRequest and words the answers
// (chargeAnswers), so each fault behaves the same whichever protocol the
// provider speaks.

var (
	// errKeyReused: a known key arrived with different parameters.
	errKeyReused = errors.New("fakepsp: idempotency key reused with different parameters")

	// errKeyInUse: a request with the key is still executing, or a delayed
	// apply for it has not happened yet.
	errKeyInUse = errors.New("fakepsp: idempotency key in use by a request still being processed")
)

// chargeRequest is one validated charge request, whatever protocol carried
// it.
type chargeRequest struct {
	// key is the idempotency key.
	key string

	// tag is the tenant tag the ledger files the charge under.
	tag string

	// params decide the charge.
	params chargeParams

	// hash fingerprints every parameter of the request, as the protocol
	// defines them; a known key is only replayed for the same fingerprint.
	hash string
}

// chargeParams are the validated parameters of a charge request.
type chargeParams struct {
	Amount        int64
	Currency      string
	PaymentMethod string
	Reference     string
}

// charge is a processed charge in memory.
type charge struct {
	ledgerRecord

	// committed completes when the charge's ledger line is on disk. Nobody
	// sees the charge (answer, replay, lookup, admin) before that.
	committed *commitBatch
}

// failure is an answer that is not a charge. Each protocol words it its own
// way (chargeAnswers.failure).
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

// chargeAnswers is how a protocol words the answers of the shared charge
// pipeline. The pipeline sets Idempotent-Replayed itself.
type chargeAnswers interface {
	// charge answers with a processed charge, new or replayed.
	charge(w http.ResponseWriter, c *charge)

	// failure answers with anything but a charge.
	failure(w http.ResponseWriter, f failure)
}

// applyOptions say how apply records a charge.
type applyOptions struct {
	// dedupe answers a known key with its charge instead of applying anew.
	dedupe bool

	// reserved says the caller holds the key's in-flight mark (the late half
	// of a delayed_apply): apply removes it and always applies a charge.
	reserved bool

	// expireKey and keyTTL implement key_expiry.
	expireKey bool
	keyTTL    time.Duration

	// replayStatus implements error_after_apply.
	replayStatus int
}

// runCharge takes a validated charge request through the fault schedule,
// the provider's key de-duplication and the ledger, and answers it through
// answers.
func (s *Server) runCharge(w http.ResponseWriter, r *http.Request, req chargeRequest, answers chargeAnswers) {
	decision := s.drawFault(OnCharge, req.key)

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
		s.delayApply(req, decision)
		s.hold(r.Context(), decision.duration)
		s.dropConnection(w, false)
		return
	}

	options := applyOptions{dedupe: decision.dedupe}
	switch decision.fault {
	case FaultKeyExpiry:
		options.expireKey, options.keyTTL = true, decision.duration
	case FaultErrorAfterApply:
		options.replayStatus = http.StatusInternalServerError
	}
	c, replayed, err := s.apply(req, options)
	if err != nil {
		answers.failure(w, s.applyFailure(err))
		return
	}
	s.deliver(w, r, answers, decision, c, replayed)
}

// deliver answers with c, through the faults that act after the charge was
// applied (or, for a known key, replayed): they only change how the answer
// is delivered.
func (s *Server) deliver(w http.ResponseWriter, r *http.Request, answers chargeAnswers, decision decision, c *charge, replayed bool) {
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
		w.Header().Set("Idempotent-Replayed", "true")
		if c.ReplayStatus != 0 {
			answers.failure(w, failReplayedError)
			return
		}
	}
	answers.charge(w, c)
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

// apply records a charge for req, or with dedupe on and a known key returns
// the key's charge with replayed set. It returns once the charge is on disk.
func (s *Server) apply(req chargeRequest, options applyOptions) (c *charge, replayed bool, err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, false, ErrClosed
	}
	switch {
	case options.reserved:
		delete(s.inFlight, req.key)
	case options.dedupe:
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

	status, declineCode := outcome(req.params.PaymentMethod)
	record := ledgerRecord{
		LedgerEntry: LedgerEntry{
			ID:             "py_" + rand.Text(),
			IdempotencyKey: req.key,
			Reference:      req.params.Reference,
			Amount:         req.params.Amount,
			Currency:       req.params.Currency,
			Status:         status,
			DeclineCode:    declineCode,
			TenantTag:      req.tag,
			CreatedAt:      s.now().UTC(),
		},
		RequestHash:  req.hash,
		ReplayStatus: options.replayStatus,
	}
	if options.expireKey {
		record.KeyExpiresAt = record.CreatedAt.Add(options.keyTTL)
	}
	// Appending under s.mu keeps the file in the same order as s.charges.
	batch, err := s.ledger.append(record)
	if err != nil {
		s.mu.Unlock()
		return nil, false, err
	}
	c = &charge{ledgerRecord: record, committed: batch}
	s.charges = append(s.charges, c)
	s.byKey[req.key] = c
	s.mu.Unlock()

	if err := batch.wait(); err != nil {
		return nil, false, err
	}
	s.logger.Debug("fakepsp: charge applied", slog.String("id", c.ID), slog.String("key", req.key),
		slog.String("reference", c.Reference), slog.String("status", string(c.Status)), slog.String("decline_code", c.DeclineCode))
	return c, false, nil
}

// rememberedLocked returns the charge the provider remembers for key, or nil
// if there is none or its key expired. s.mu must be held.
func (s *Server) rememberedLocked(key string) *charge {
	c := s.byKey[key]
	if c == nil || (!c.KeyExpiresAt.IsZero() && !s.now().Before(c.KeyExpiresAt)) {
		return nil
	}
	return c
}

// delayApply starts the late half of delayed_apply: the charge is applied
// decision.duration from now. With dedupe on, the key is marked in flight
// until then; a known or in-flight key applies nothing new.
func (s *Server) delayApply(req chargeRequest, decision decision) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if decision.dedupe {
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
// it when a fault fires.
func (s *Server) drawFault(on, key string) decision {
	d := s.faults.draw(on, key)
	if d.fault != "" {
		s.logger.Info("fakepsp: fault fired", slog.String("on", on), slog.String("fault", d.fault),
			slog.String("key", key), slog.Duration("duration", d.duration))
	}
	return d
}
