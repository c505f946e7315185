package fakepsp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/chargeflow/chargeflow/psp"
)

// The test payment methods, the same under both protocols (they are Stripe's
// own test PaymentMethods). Each decides the outcome of a charge; the fake
// protocol declines any other method with invalid_payment_method, the Stripe
// protocol refuses it as an unknown PaymentMethod.
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

// knownPaymentMethod reports whether paymentMethod is one of the test
// payment methods. Stripe refuses any other before it starts executing,
// where the fake protocol declines it.
func knownPaymentMethod(paymentMethod string) bool {
	switch paymentMethod {
	case PaymentMethodVisa, PaymentMethodMastercard, PaymentMethodDeclined, PaymentMethodInsufficientFunds,
		PaymentMethodExpiredCard, PaymentMethodIncorrectCVC:
		return true
	}
	return false
}

const (
	// maxChargeBodyBytes bounds a charge or refund request body.
	maxChargeBodyBytes = 64 << 10

	// maxKeyLength bounds an idempotency key, as real providers do.
	maxKeyLength = 255
)

// wire is the charge as it was created, in psp's wire format: what its
// create answers, a replay included, and its notification.
func (c *record) wire() psp.Charge {
	return psp.Charge{
		ID:          c.ID,
		Status:      c.Status,
		Amount:      c.Amount,
		Currency:    c.Currency,
		Reference:   c.Reference,
		DeclineCode: c.DeclineCode,
	}
}

// fakeCharge is the fake protocol's charge object: psp.Charge's wire
// format and, for a charge captured later, until when it is held
// (requires_capture) or why it was released (canceled: requested or
// hold_expired).
type fakeCharge struct {
	psp.Charge
	HoldExpiresAt  *time.Time `json:"hold_expires_at,omitempty"`
	CanceledReason string     `json:"canceled_reason,omitempty"`
}

// wireAt is the charge in state hold, as the fake protocol shows it. A
// charge not captured later shows as psp.Charge alone.
func (c *record) wireAt(hold holdState) fakeCharge {
	charge := fakeCharge{Charge: c.wire(), CanceledReason: hold.canceledReason}
	charge.Status, charge.AmountCaptured = hold.status, hold.captured
	if hold.status == psp.StatusRequiresCapture {
		charge.HoldExpiresAt = &c.HoldExpiresAt
	}
	return charge
}

// hash fingerprints the parameters of the fake protocol; a known key is only
// replayed for the same fingerprint. A charge to be captured later differs
// from the same charge captured at once; a charge's fingerprint is the one
// it had before captures existed.
func (p chargeParams) hash() string {
	hash := fingerprint("%d\x00%s\x00%s\x00%s", p.Amount, p.Currency, p.PaymentMethod, p.Reference)
	if p.CaptureLater {
		hash = fingerprint("capture_later\x00%s", hash)
	}
	return hash
}

// fingerprint hashes a request's parameters, formatted, into what the
// ledger keeps of them (ledgerRecord.RequestHash): enough to tell two
// requests apart, nothing to read a payment method back from.
func fingerprint(format string, args ...any) string {
	sum := sha256.Sum256(fmt.Appendf(nil, format, args...))
	return hex.EncodeToString(sum[:16])
}

// handleCharge serves POST /v1/charges.
func (s *Server) handleCharge(w http.ResponseWriter, r *http.Request) {
	s.serveFakePost(w, r, fakeChargeAnswers{}, func() (request, bool) {
		params, ok := decodeChargeParams(w, r)
		return request{reference: params.Reference, op: params, hash: params.hash(), idPrefix: "py_"}, ok
	})
}

// serveFakePost serves a POST of the fake protocol: the Idempotency-Key,
// the body, which decode reads into a request (answering 400 or 413 itself
// when it cannot), the X-Tenant-Tag, and then the shared pipeline under the
// fake protocol's key rules.
func (s *Server) serveFakePost(w http.ResponseWriter, r *http.Request, answers answers, decode func() (request, bool)) {
	key, ok := idempotencyKey(w, r)
	if !ok {
		return
	}
	req, ok := decode()
	if !ok {
		return
	}
	req.key, req.tag = key, r.Header.Get("X-Tenant-Tag")
	s.run(w, r, req, answers, keysAtApply)
}

// fakeChargeAnswers words a charge's answers in the fake protocol.
type fakeChargeAnswers struct{}

func (fakeChargeAnswers) result(w http.ResponseWriter, c *record) {
	writeJSON(w, http.StatusOK, c.wireAt(holdState{status: c.Status}))
}

func (fakeChargeAnswers) failure(w http.ResponseWriter, f failure) {
	writeFakeFailure(w, f, "charge")
}

// writeFakeFailure words a failure of the pipeline in the fake protocol;
// what names the operation ("charge", "refund").
func writeFakeFailure(w http.ResponseWriter, f failure, what string) {
	switch f {
	case failErrorBeforeApply:
		writeError(w, http.StatusInternalServerError, "internal_error", "injected fault error_before_apply: nothing was applied")
	case failErrorAfterApply:
		writeError(w, http.StatusInternalServerError, "internal_error", "injected fault error_after_apply: the "+what+" was applied")
	case failReplayedError:
		writeError(w, http.StatusInternalServerError, "internal_error", "replay of an earlier error_after_apply: the "+what+" was applied")
	case failNotProcessed:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "rate_limited", "injected fault not_processed: nothing was applied")
	case failKeyReused:
		writeError(w, http.StatusConflict, "idempotency_key_reused", "this idempotency key was used with different parameters")
	case failKeyInUse:
		writeError(w, http.StatusConflict, "idempotency_key_in_use", "a request with this idempotency key is still being processed")
	case failClosed:
		writeError(w, http.StatusServiceUnavailable, "shutting_down", "the provider is shutting down")
	default:
		writeError(w, http.StatusInternalServerError, "ledger_unavailable", "the "+what+" could not be recorded durably")
	}
}

// handleLookup serves GET /v1/charges/by-key/{key}: the charge as it
// stands now.
func (s *Server) handleLookup(w http.ResponseWriter, r *http.Request) {
	s.lookupByKey(w, r, s.chargeLookup("no charge exists for this idempotency key"))
}

// handleChargeByID serves GET /v1/charges/{id}: the charge as it stands
// now, through the same lookup faults as a lookup by key, whose
// key_prefix is matched against the charge's idempotency key.
func (s *Server) handleChargeByID(w http.ResponseWriter, r *http.Request) {
	c := s.find(kindCharge, r.PathValue("id"))
	key := ""
	if c != nil {
		key = c.IdempotencyKey
	}
	s.lookup(w, r, key, func() *record { return c }, s.chargeLookup("no charge exists with this id"))
}

// chargeLookup is what a lookup of a charge finds: the charge as it
// stands now, or 404 charge_not_found saying notFound.
func (s *Server) chargeLookup(notFound string) byKeyLookup {
	return byKeyLookup{
		kind: kindCharge, name: "charge", notFoundCode: psp.CodeChargeNotFound, notFound: notFound,
		show: func(c *record) any { return c.wireAt(c.holdAt(s.now(), false)) },
	}
}

// byKeyLookup is what a lookup by key of the fake protocol finds: the
// record of one kind (named name in an error) that a key has, shown by
// show, or notFoundCode.
type byKeyLookup struct {
	kind         string
	name         string
	notFoundCode string
	notFound     string
	show         func(c *record) any
}

// lookupByKey serves a lookup by idempotency key of the fake protocol
// through the lookup faults. A key whose record is of another kind (a
// charge's key asked for a refund) or a saved answer that applied nothing
// is not found; lookup_lag hides a record younger than the fault's
// duration, as an eventually consistent read would.
func (s *Server) lookupByKey(w http.ResponseWriter, r *http.Request, lookup byKeyLookup) {
	key := r.PathValue("key")
	s.lookup(w, r, key, func() *record {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.rememberedLocked(key)
	}, lookup)
}

// lookup serves a lookup of the fake protocol through the lookup faults
// drawn for key: the record find returns once the faults let the lookup
// through, shown by lookup.show, or 404 when it is not of lookup's kind.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, key string, find func() *record, lookup byKeyLookup) {
	decision := s.drawFault(OnLookup, key, nil)
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

	c := find()
	if c == nil || c.Kind != lookup.kind {
		writeError(w, http.StatusNotFound, lookup.notFoundCode, lookup.notFound)
		return
	}
	if err := c.committed.wait(); err != nil {
		writeFakeFailure(w, s.applyFailure(err), lookup.name)
		return
	}
	if decision.fault == FaultLookupLag && s.now().Sub(c.CreatedAt) < decision.duration {
		writeError(w, http.StatusNotFound, lookup.notFoundCode, lookup.notFound)
		return
	}
	writeJSON(w, http.StatusOK, lookup.show(c))
}

// idempotencyKey reads the Idempotency-Key header, answering 400 when it is
// missing, repeated, too long or not printable ASCII.
func idempotencyKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	key, code, problem := readIdempotencyKey(r)
	if problem != "" {
		writeError(w, http.StatusBadRequest, code, problem)
		return "", false
	}
	return key, true
}

// readIdempotencyKey reads the Idempotency-Key header. When it is missing,
// repeated, too long or not printable ASCII, problem says why and code names
// the problem in the fake protocol's words; each protocol answers 400 its
// own way.
func readIdempotencyKey(r *http.Request) (key, code, problem string) {
	values := r.Header.Values("Idempotency-Key")
	switch {
	case len(values) == 0 || values[0] == "":
		return "", "idempotency_key_missing", "the Idempotency-Key header is required"
	case len(values) > 1:
		return "", "idempotency_key_invalid", "the Idempotency-Key header must be sent once"
	case len(values[0]) > maxKeyLength:
		return "", "idempotency_key_invalid", "the Idempotency-Key header is longer than 255 bytes"
	}
	for _, b := range []byte(values[0]) {
		if b < 0x20 || b > 0x7e {
			return "", "idempotency_key_invalid", "the Idempotency-Key header must be printable ASCII"
		}
	}
	return values[0], "", ""
}

// decodeChargeParams reads and validates the body of a charge request,
// answering 400 or 413 when it is not acceptable.
func decodeChargeParams(w http.ResponseWriter, r *http.Request) (chargeParams, bool) {
	var body struct {
		Amount        json.RawMessage `json:"amount"`
		Currency      string          `json:"currency"`
		PaymentMethod string          `json:"payment_method"`
		Reference     string          `json:"reference"`
		Capture       *bool           `json:"capture"`
	}
	if !readJSONBody(w, r, &body, "charge") {
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
	return chargeParams{Amount: amount, Currency: body.Currency, PaymentMethod: body.PaymentMethod, Reference: body.Reference,
		CaptureLater: body.Capture != nil && !*body.Capture}, true
}

// readJSONBody reads a request body of at most 64 KiB into v, strictly:
// one JSON object of v's fields and nothing after it. Otherwise it answers
// 400 or 413 and returns false; what names the object ("charge",
// "refund").
func readJSONBody(w http.ResponseWriter, r *http.Request, v any, what string) bool {
	data, tooLarge, err := readBody(w, r)
	switch {
	case tooLarge:
		writeError(w, http.StatusRequestEntityTooLarge, "request_too_large", "the request body is larger than 64 KiB")
		return false
	case err != nil:
		writeError(w, http.StatusBadRequest, "invalid_request", "the request body could not be read")
		return false
	}
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_json", "the request body is not a valid "+what+" object: "+err.Error())
		return false
	}
	if _, err := decoder.Token(); !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "invalid_json", "the request body has data after the "+what+" object")
		return false
	}
	return true
}

// readBody reads a request body of at most 64 KiB; tooLarge says it was
// larger. Each protocol words the refusal its own way.
func readBody(w http.ResponseWriter, r *http.Request) (data []byte, tooLarge bool, err error) {
	data, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxChargeBodyBytes))
	var maxBytes *http.MaxBytesError
	return data, errors.As(err, &maxBytes), err
}

// parseAmount accepts a JSON integer literal above zero: no sign, fraction,
// exponent, leading zero or string.
func parseAmount(raw json.RawMessage) (int64, bool) {
	return parsePositiveInteger(string(raw))
}

// parsePositiveInteger accepts a decimal integer above zero that fits an
// int64, without sign or leading zero: the amount of both protocols.
func parsePositiveInteger(value string) (int64, bool) {
	if value == "" || value[0] < '1' || value[0] > '9' {
		return 0, false
	}
	for _, b := range []byte(value) {
		if b < '0' || b > '9' {
			return 0, false
		}
	}
	amount, err := strconv.ParseInt(value, 10, 64)
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
