package fakepsp

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"chargeflow/psp"
)

// The test payment methods. Each decides the outcome of a charge; any other
// method is declined with invalid_payment_method.
const (
	// PaymentMethodVisa succeeds.
	PaymentMethodVisa = "pm_card_visa"

	// PaymentMethodMastercard succeeds.
	PaymentMethodMastercard = "pm_card_mastercard"

	// PaymentMethodDeclined is declined with generic_decline.
	PaymentMethodDeclined = "pm_card_chargeDeclined"

	// PaymentMethodInsufficientFunds is declined with insufficient_funds.
	PaymentMethodInsufficientFunds = "pm_card_chargeDeclinedInsufficientFunds"

	// PaymentMethodExpiredCard is declined with expired_card.
	PaymentMethodExpiredCard = "pm_card_chargeDeclinedExpiredCard"

	// PaymentMethodIncorrectCVC is declined with incorrect_cvc.
	PaymentMethodIncorrectCVC = "pm_card_chargeDeclinedIncorrectCvc"
)

// outcome is what the provider does with a payment method.
func outcome(paymentMethod string) (psp.Status, string) {
	switch paymentMethod {
	case PaymentMethodVisa, PaymentMethodMastercard:
		return psp.StatusSucceeded, ""
	case PaymentMethodDeclined:
		return psp.StatusFailed, "generic_decline"
	case PaymentMethodInsufficientFunds:
		return psp.StatusFailed, "insufficient_funds"
	case PaymentMethodExpiredCard:
		return psp.StatusFailed, "expired_card"
	case PaymentMethodIncorrectCVC:
		return psp.StatusFailed, "incorrect_cvc"
	default:
		return psp.StatusFailed, "invalid_payment_method"
	}
}

const (
	// maxChargeBodyBytes bounds a charge request body.
	maxChargeBodyBytes = 64 << 10

	// maxKeyLength bounds an idempotency key, as real providers do.
	maxKeyLength = 255
)

var (
	// errKeyReused: a known key arrived with different parameters.
	errKeyReused = errors.New("fakepsp: idempotency key reused with different parameters")

	// errKeyInUse: a delayed apply for the key has not happened yet.
	errKeyInUse = errors.New("fakepsp: idempotency key in use by a request still being processed")
)

// charge is a processed charge in memory.
type charge struct {
	ledgerRecord

	// committed completes when the charge's ledger line is on disk. Nobody
	// sees the charge (answer, replay, lookup, admin) before that.
	committed *commitBatch
}

func (c *charge) wire() psp.Charge {
	return psp.Charge{
		ID:          c.ID,
		Status:      c.Status,
		Amount:      c.Amount,
		Currency:    c.Currency,
		Reference:   c.Reference,
		DeclineCode: c.DeclineCode,
	}
}

// chargeParams are the validated parameters of a charge request.
type chargeParams struct {
	Amount        int64
	Currency      string
	PaymentMethod string
	Reference     string
}

// hash fingerprints the parameters; a known key is only replayed for the
// same fingerprint.
func (p chargeParams) hash() string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d\x00%s\x00%s\x00%s", p.Amount, p.Currency, p.PaymentMethod, p.Reference))
	return hex.EncodeToString(sum[:16])
}

// applyOptions say how apply records a charge.
type applyOptions struct {
	// dedupe answers a known key with its charge instead of applying anew.
	dedupe bool

	// delayed marks the late half of a delayed_apply: the key's in-flight
	// mark is removed and a charge is always applied.
	delayed bool

	// expireKey and keyTTL implement key_expiry.
	expireKey bool
	keyTTL    time.Duration

	// replayStatus implements error_after_apply.
	replayStatus int
}

// handleCharge serves POST /v1/charges.
func (s *Server) handleCharge(w http.ResponseWriter, r *http.Request) {
	key, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	params, ok := decodeChargeParams(w, r)
	if !ok {
		return
	}
	tag := r.Header.Get("X-Tenant-Tag")

	decision := s.drawFault(OnCharge, key)

	// Faults that act before anything is applied.
	switch decision.fault {
	case FaultLatency:
		s.wait(decision.duration)
	case FaultDropBeforeApply:
		s.hold(r.Context(), decision.duration)
		s.dropConnection(w, false)
		return
	case FaultErrorBeforeApply:
		writeError(w, http.StatusInternalServerError, "internal_error", "injected fault error_before_apply: nothing was applied")
		return
	case FaultNotProcessed:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "rate_limited", "injected fault not_processed: nothing was applied")
		return
	case FaultDelayedApply:
		s.delayApply(key, tag, params, decision)
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
	c, replayed, err := s.apply(key, tag, params, options)
	if err != nil {
		s.writeApplyError(w, err)
		return
	}

	// Faults that act after the charge was applied (or, for a known key,
	// replayed): they only change how the answer is delivered.
	switch decision.fault {
	case FaultApplyThenTimeout:
		s.hold(r.Context(), decision.duration)
		s.dropConnection(w, false)
		return
	case FaultApplyThenReset:
		s.dropConnection(w, true)
		return
	case FaultErrorAfterApply:
		writeError(w, http.StatusInternalServerError, "internal_error", "injected fault error_after_apply: the charge was applied")
		return
	}

	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
		if c.ReplayStatus != 0 {
			writeError(w, c.ReplayStatus, "internal_error", "replay of an earlier error_after_apply: the charge was applied")
			return
		}
	}
	writeJSON(w, http.StatusOK, c.wire())
}

// writeApplyError answers a failed apply.
func (s *Server) writeApplyError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errKeyReused):
		writeError(w, http.StatusConflict, "idempotency_key_reused", "this idempotency key was used with different parameters")
	case errors.Is(err, errKeyInUse):
		writeError(w, http.StatusConflict, "idempotency_key_in_use", "a request with this idempotency key is still being processed")
	case errors.Is(err, ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "shutting_down", "the provider is shutting down")
	default:
		s.logger.Error("fakepsp: ledger write failed", slog.Any("error", err))
		writeError(w, http.StatusInternalServerError, "ledger_unavailable", "the charge could not be recorded durably")
	}
}

// apply records a charge for key, or with dedupe on and a known key returns
// the key's charge with replayed set. It returns once the charge is on disk.
func (s *Server) apply(key, tag string, params chargeParams, options applyOptions) (c *charge, replayed bool, err error) {
	hash := params.hash()

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, false, ErrClosed
	}
	switch {
	case options.delayed:
		delete(s.inFlight, key)
	case options.dedupe:
		if _, busy := s.inFlight[key]; busy {
			s.mu.Unlock()
			return nil, false, errKeyInUse
		}
		if known := s.rememberedLocked(key); known != nil {
			s.mu.Unlock()
			if known.RequestHash != hash {
				return nil, false, errKeyReused
			}
			if err := known.committed.wait(); err != nil {
				return nil, false, err
			}
			return known, true, nil
		}
	}

	status, declineCode := outcome(params.PaymentMethod)
	record := ledgerRecord{
		LedgerEntry: LedgerEntry{
			ID:             "py_" + rand.Text(),
			IdempotencyKey: key,
			Reference:      params.Reference,
			Amount:         params.Amount,
			Currency:       params.Currency,
			Status:         status,
			DeclineCode:    declineCode,
			TenantTag:      tag,
			CreatedAt:      s.now().UTC(),
		},
		RequestHash:  hash,
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
	s.byKey[key] = c
	s.mu.Unlock()

	if err := batch.wait(); err != nil {
		return nil, false, err
	}
	s.logger.Debug("fakepsp: charge applied", slog.String("id", c.ID), slog.String("key", key),
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
func (s *Server) delayApply(key, tag string, params chargeParams, decision decision) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if decision.dedupe {
		_, busy := s.inFlight[key]
		if busy || s.rememberedLocked(key) != nil {
			s.mu.Unlock()
			return
		}
		s.inFlight[key] = struct{}{}
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
		if _, _, err := s.apply(key, tag, params, applyOptions{dedupe: decision.dedupe, delayed: true}); err != nil {
			s.logger.Warn("fakepsp: delayed apply failed", slog.String("key", key), slog.Any("error", err))
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

// handleLookup serves GET /v1/charges/by-key/{key}.
func (s *Server) handleLookup(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")

	decision := s.drawFault(OnLookup, key)
	switch decision.fault {
	case FaultLatency:
		s.wait(decision.duration)
	case FaultUnavailable:
		if decision.duration > 0 {
			s.hold(r.Context(), decision.duration)
			s.dropConnection(w, false)
			return
		}
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "service_unavailable", "injected fault unavailable")
		return
	}

	s.mu.Lock()
	c := s.rememberedLocked(key)
	s.mu.Unlock()
	if c == nil {
		writeError(w, http.StatusNotFound, psp.CodeChargeNotFound, "no charge exists for this idempotency key")
		return
	}
	if err := c.committed.wait(); err != nil {
		s.writeApplyError(w, err)
		return
	}
	if decision.fault == FaultLookupLag && s.now().Sub(c.CreatedAt) < decision.duration {
		writeError(w, http.StatusNotFound, psp.CodeChargeNotFound, "no charge exists for this idempotency key")
		return
	}
	writeJSON(w, http.StatusOK, c.wire())
}

// idempotencyKey reads the Idempotency-Key header, answering 400 when it is
// missing, repeated, too long or not printable ASCII.
func idempotencyKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	values := r.Header.Values("Idempotency-Key")
	switch {
	case len(values) == 0 || values[0] == "":
		writeError(w, http.StatusBadRequest, "idempotency_key_missing", "the Idempotency-Key header is required")
		return "", false
	case len(values) > 1:
		writeError(w, http.StatusBadRequest, "idempotency_key_invalid", "the Idempotency-Key header must be sent once")
		return "", false
	case len(values[0]) > maxKeyLength:
		writeError(w, http.StatusBadRequest, "idempotency_key_invalid", "the Idempotency-Key header is longer than 255 bytes")
		return "", false
	}
	for _, b := range []byte(values[0]) {
		if b < 0x20 || b > 0x7e {
			writeError(w, http.StatusBadRequest, "idempotency_key_invalid", "the Idempotency-Key header must be printable ASCII")
			return "", false
		}
	}
	return values[0], true
}

// decodeChargeParams reads and validates the body of a charge request,
// answering 400 or 413 when it is not acceptable.
func decodeChargeParams(w http.ResponseWriter, r *http.Request) (chargeParams, bool) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxChargeBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", "the request body is larger than 64 KiB")
		} else {
			writeError(w, http.StatusBadRequest, "invalid_request", "the request body could not be read")
		}
		return chargeParams{}, false
	}

	var body struct {
		Amount        json.RawMessage `json:"amount"`
		Currency      string          `json:"currency"`
		PaymentMethod string          `json:"payment_method"`
		Reference     string          `json:"reference"`
	}
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_json", "the request body is not a valid charge object: "+err.Error())
		return chargeParams{}, false
	}
	if _, err := decoder.Token(); !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "invalid_json", "the request body has data after the charge object")
		return chargeParams{}, false
	}

	amount, ok := parseAmount(body.Amount)
	switch {
	case !ok:
		writeParamError(w, "amount", "amount must be a positive integer in the currency's minor unit")
		return chargeParams{}, false
	case !isCurrencyCode(body.Currency):
		writeParamError(w, "currency", "currency must be a three-letter upper-case ISO 4217 code")
		return chargeParams{}, false
	case body.PaymentMethod == "":
		writeParamError(w, "payment_method", "payment_method is required")
		return chargeParams{}, false
	case body.Reference == "":
		writeParamError(w, "reference", "reference is required")
		return chargeParams{}, false
	}
	return chargeParams{Amount: amount, Currency: body.Currency, PaymentMethod: body.PaymentMethod, Reference: body.Reference}, true
}

// parseAmount accepts a JSON integer literal above zero: no sign, fraction,
// exponent, leading zero or string.
func parseAmount(raw json.RawMessage) (int64, bool) {
	if len(raw) == 0 || raw[0] < '1' || raw[0] > '9' {
		return 0, false
	}
	for _, b := range raw {
		if b < '0' || b > '9' {
			return 0, false
		}
	}
	amount, err := strconv.ParseInt(string(raw), 10, 64)
	return amount, err == nil
}

func isCurrencyCode(code string) bool {
	if len(code) != 3 {
		return false
	}
	for _, b := range []byte(code) {
		if b < 'A' || b > 'Z' {
			return false
		}
	}
	return true
}
