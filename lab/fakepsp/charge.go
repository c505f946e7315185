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

// hash fingerprints the parameters of the fake protocol; a known key is only
// replayed for the same fingerprint.
func (p chargeParams) hash() string {
	return fingerprint("%d\x00%s\x00%s\x00%s", p.Amount, p.Currency, p.PaymentMethod, p.Reference)
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
	writeJSON(w, http.StatusOK, c.wire())
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

// handleLookup serves GET /v1/charges/by-key/{key}.
func (s *Server) handleLookup(w http.ResponseWriter, r *http.Request) {
	s.lookupByKey(w, r, byKeyLookup{
		kind: kindCharge, name: "charge", notFoundCode: psp.CodeChargeNotFound, notFound: "no charge exists for this idempotency key",
		show: func(c *record) any { return c.wire() },
	})
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

	s.mu.Lock()
	c := s.rememberedLocked(key)
	s.mu.Unlock()
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
	return chargeParams{Amount: amount, Currency: body.Currency, PaymentMethod: body.PaymentMethod, Reference: body.Reference}, true
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
