package fakepsp

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/chargeflow/chargeflow/psp"
)

// This file is the Adyen protocol's payment: POST /v71/payments of Adyen's
// Checkout API v71 with a stored card, captured at once or authorised for
// a manual capture, behind an API key. What it models and what it leaves
// out is in docs/provider.md ("The Adyen protocol"); the faults, the key
// rules and the ledger are the shared ones (execute.go), under Adyen's key
// rules (keysAdyen). Every answer is one the published description
// (psp/adyen/checkoutspec) allows for its route and status, but the few
// statuses it lists for no route (404, 429).

// AdyenMetadataTenant, in a payment's metadata, is the tenant tag the
// ledger and the audit file the payment under; without it the
// shopperReference is.
const AdyenMetadataTenant = "chargeflow_tenant"

// The categories of Adyen's ServiceError (errorType).
const (
	adyenValidation = "validation"
	adyenSecurity   = "security"
	adyenInternal   = "internal"
)

// Adyen's limits, from its description, which the fake enforces so that
// a request that passes here does not fail at Adyen.
const (
	maxAdyenKeyLength            = 64 // Idempotency-Key
	maxAdyenReferenceLength      = 80
	minAdyenShopperReference     = 3
	maxAdyenShopperReference     = 256
	maxAdyenReturnURLLength      = 8000
	maxAdyenMetadataKeys         = 20
	maxAdyenMetadataKeyLength    = 20
	maxAdyenMetadataValueLength  = 80
	adyenPSPReferenceLength      = 16
	adyenStoredPaymentMethodType = "scheme"
)

// adyenServiceError is Adyen's error answer (ServiceError).
type adyenServiceError struct {
	Status    int    `json:"status"`
	ErrorCode string `json:"errorCode"`
	Message   string `json:"message"`
	ErrorType string `json:"errorType"`
}

// adyenError is a ServiceError with the HTTP status it is answered with.
func adyenError(status int, code, errorType, message string) *adyenServiceError {
	return &adyenServiceError{Status: status, ErrorCode: code, Message: message, ErrorType: errorType}
}

// adyenInvalid is a 422 validation error: refused before execution, so
// nothing is saved for the key.
func adyenInvalid(code, message string) *adyenServiceError {
	return adyenError(http.StatusUnprocessableEntity, code, adyenValidation, message)
}

// adyenMissing is the validation error of a required field left out.
func adyenMissing(field string) *adyenServiceError {
	return adyenInvalid("702", "Required field '"+field+"' is null")
}

// adyenUnparsable is the 400 of a body that is not the JSON object asked
// for, as Adyen words it ("Unexpected input").
func adyenUnparsable(detail string) *adyenServiceError {
	return adyenError(http.StatusBadRequest, "702", adyenValidation, "Unexpected input: "+detail)
}

// writeAdyenError writes a ServiceError.
func writeAdyenError(w http.ResponseWriter, e *adyenServiceError) {
	writeJSON(w, e.Status, e)
}

// adyen wraps an Adyen route: every answer echoes the Idempotency-Key, as
// Adyen's do, and a request without an X-API-Key is refused before
// anything else happens. Any non-empty key is accepted.
func (s *Server) adyen(handler http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if key := r.Header.Get("Idempotency-Key"); key != "" {
			w.Header().Set("Idempotency-Key", key)
		}
		if r.Header.Get("X-API-Key") == "" {
			writeAdyenError(w, adyenError(http.StatusUnauthorized, "000", adyenSecurity, "HTTP Status Response - Unauthorized"))
			return
		}
		handler(w, r)
	})
}

// handleAdyenNotFound answers a path or method the Adyen protocol does not
// have.
func handleAdyenNotFound(w http.ResponseWriter, r *http.Request) {
	writeAdyenError(w, adyenError(http.StatusNotFound, "000", adyenValidation,
		"Not Found: "+r.Method+" "+r.URL.Path+"; the fake provider models only the endpoints in docs/provider.md"))
}

// newAdyenPSPReference is a new pspReference: 16 upper-case alphanumerics,
// Adyen's length and alphabet.
func newAdyenPSPReference() string {
	return rand.Text()[:adyenPSPReferenceLength]
}

// serveAdyenPost serves a POST of the Adyen protocol: the Idempotency-Key,
// the JSON body, which decode validates into a request (a problem is
// answered before execution, so nothing is saved), and then the shared
// pipeline under Adyen's key rules.
func (s *Server) serveAdyenPost(w http.ResponseWriter, r *http.Request, answers answers, decode func(data []byte) (request, *adyenServiceError)) {
	key, _, problem := readIdempotencyKey(r)
	if problem == "" && len(key) > maxAdyenKeyLength {
		problem = "the Idempotency-Key header is longer than 64 characters"
	}
	if problem != "" {
		// Adyen makes the key optional; chargeflow always sends one, and
		// the fake's ledger files every payment and refund under its key.
		writeAdyenError(w, adyenInvalid("702", "This fake provider needs an Idempotency-Key on every POST: "+problem))
		return
	}
	data, tooLarge, err := readBody(w, r)
	switch {
	case tooLarge:
		writeAdyenError(w, adyenUnparsable("the request body is larger than 64 KiB"))
		return
	case err != nil:
		writeAdyenError(w, adyenUnparsable("the request body could not be read"))
		return
	}
	req, invalid := decode(data)
	if invalid != nil {
		writeAdyenError(w, invalid)
		return
	}
	req.key, req.newID = key, newAdyenPSPReference
	s.run(w, r, req, answers, keysAdyen)
}

// decodeAdyenJSON reads data into v, strictly: one JSON object of v's
// fields and nothing after it. A body that does not parse is a 400; a field
// of the wrong type or one the fake does not model is a 422.
func decodeAdyenJSON(data []byte, v any) *adyenServiceError {
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.DisallowUnknownFields()
	err := decoder.Decode(v)
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case err == nil:
	case errors.As(err, &syntaxErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return adyenUnparsable("the request body is not a JSON object")
	case errors.As(err, &typeErr):
		return adyenInvalid("702", "Field '"+typeErr.Field+"' has the wrong type")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return adyenInvalid("702", "Field "+strings.TrimPrefix(err.Error(), "json: unknown field ")+" is not modeled by the fake provider")
	default:
		return adyenUnparsable("the request body is not a JSON object")
	}
	if _, err := decoder.Token(); !errors.Is(err, io.EOF) {
		return adyenUnparsable("data after the JSON object")
	}
	return nil
}

// adyenAmount is Adyen's Amount: value in the currency's minor unit.
type adyenAmount struct {
	Currency string `json:"currency"`
	Value    int64  `json:"value"`
}

// adyenAmountIn is an Amount as a request sends it, so that a missing
// field is told from a zero.
type adyenAmountIn struct {
	Currency *string `json:"currency"`
	Value    *int64  `json:"value"`
}

// read validates the amount of a payment or refund: present, a positive
// value and a three-letter upper-case currency.
func (a *adyenAmountIn) read() (adyenAmount, *adyenServiceError) {
	switch {
	case a == nil:
		return adyenAmount{}, adyenInvalid("100", "Required object 'amount' is not provided.")
	case a.Value == nil || *a.Value <= 0 || a.Currency == nil || !isCurrencyCode(*a.Currency):
		// The fake takes no zero-value verification.
		return adyenAmount{}, adyenInvalid("137", "Invalid amount specified")
	}
	return adyenAmount{Currency: *a.Currency, Value: *a.Value}, nil
}

// readAdyenReference validates the reference of a payment or refund, which
// the fake requires: our id, the reference the ledger files it under.
func readAdyenReference(reference string) *adyenServiceError {
	switch {
	case reference == "":
		return adyenMissing("reference")
	case len(reference) > maxAdyenReferenceLength:
		return adyenInvalid("702", "Field 'reference' is longer than 80 characters")
	}
	return nil
}

// adyenPaymentMethodIn is the payment method the fake models: a stored
// card, by the test payment method's id.
type adyenPaymentMethodIn struct {
	Type                  string `json:"type"`
	StoredPaymentMethodID string `json:"storedPaymentMethodId"`
}

// adyenPaymentRequest is the part of Adyen's PaymentRequest the fake
// models; any other field is refused.
type adyenPaymentRequest struct {
	AdditionalData           map[string]string     `json:"additionalData"`
	Amount                   *adyenAmountIn        `json:"amount"`
	MerchantAccount          string                `json:"merchantAccount"`
	Reference                string                `json:"reference"`
	PaymentMethod            *adyenPaymentMethodIn `json:"paymentMethod"`
	ShopperReference         *string               `json:"shopperReference"`
	ShopperInteraction       *string               `json:"shopperInteraction"`
	RecurringProcessingModel *string               `json:"recurringProcessingModel"`
	ReturnURL                *string               `json:"returnUrl"`
	Metadata                 map[string]string     `json:"metadata"`
}

// The values of the enumerations the fake checks, from the description.
var (
	adyenShopperInteractions       = []string{"Ecommerce", "ContAuth", "Moto", "POS"}
	adyenRecurringProcessingModels = []string{"CardOnFile", "Subscription", "UnscheduledCardOnFile"}
)

// decodeAdyenPayment validates a payment request into a charge and the
// tenant tag: metadata chargeflow_tenant, else the shopperReference.
func decodeAdyenPayment(data []byte) (chargeParams, string, *adyenServiceError) {
	var body adyenPaymentRequest
	if problem := decodeAdyenJSON(data, &body); problem != nil {
		return chargeParams{}, "", problem
	}
	amount, problem := body.Amount.read()
	if problem != nil {
		return chargeParams{}, "", problem
	}
	if body.MerchantAccount == "" {
		return chargeParams{}, "", adyenMissing("merchantAccount")
	}
	if problem := readAdyenReference(body.Reference); problem != nil {
		return chargeParams{}, "", problem
	}
	method := body.PaymentMethod
	switch {
	case method == nil:
		return chargeParams{}, "", adyenMissing("paymentMethod")
	case method.Type != adyenStoredPaymentMethodType || method.StoredPaymentMethodID == "":
		return chargeParams{}, "", adyenInvalid("702", "Field 'paymentMethod' must be of type scheme with a storedPaymentMethodId: the fake provider models only stored cards")
	case !knownPaymentMethod(method.StoredPaymentMethodID):
		return chargeParams{}, "", adyenInvalid("803", "PaymentDetail not found")
	}
	switch {
	case body.ReturnURL == nil || *body.ReturnURL == "":
		return chargeParams{}, "", adyenInvalid("14_030", "Return URL is missing.")
	case len(*body.ReturnURL) > maxAdyenReturnURLLength:
		return chargeParams{}, "", adyenInvalid("702", "Field 'returnUrl' is longer than 8000 characters")
	case body.ShopperReference != nil && (len(*body.ShopperReference) < minAdyenShopperReference || len(*body.ShopperReference) > maxAdyenShopperReference):
		return chargeParams{}, "", adyenInvalid("702", "Field 'shopperReference' must be 3 to 256 characters long")
	case !oneOfOrAbsent(body.ShopperInteraction, adyenShopperInteractions):
		return chargeParams{}, "", adyenInvalid("702", "Field 'shopperInteraction' is not one of Ecommerce, ContAuth, Moto, POS")
	case !oneOfOrAbsent(body.RecurringProcessingModel, adyenRecurringProcessingModels):
		return chargeParams{}, "", adyenInvalid("702", "Field 'recurringProcessingModel' is not one of CardOnFile, Subscription, UnscheduledCardOnFile")
	}
	if problem := checkAdyenMetadata(body.Metadata); problem != nil {
		return chargeParams{}, "", problem
	}
	captureLater, problem := readAdyenManualCapture(body.AdditionalData)
	if problem != nil {
		return chargeParams{}, "", problem
	}

	tag := body.Metadata[AdyenMetadataTenant]
	if tag == "" && body.ShopperReference != nil {
		tag = *body.ShopperReference
	}
	return chargeParams{Amount: amount.Value, Currency: amount.Currency, PaymentMethod: method.StoredPaymentMethodID,
		Reference: body.Reference, MerchantAccount: body.MerchantAccount, CaptureLater: captureLater}, tag, nil
}

// adyenManualCapture is the one additionalData entry the fake models:
// "manualCapture" "true" authorises the payment only, to be captured or
// cancelled later (adyen_capture.go); "false" is the account's default,
// captured at once.
const adyenManualCapture = "manualCapture"

// readAdyenManualCapture reads a payment's additionalData: whether it asks
// for manual capture. Any other entry is refused, as a field the fake does
// not model is.
func readAdyenManualCapture(additionalData map[string]string) (bool, *adyenServiceError) {
	for key, value := range additionalData {
		switch {
		case key != adyenManualCapture:
			return false, adyenInvalid("702", "Field 'additionalData."+key+"' is not modeled by the fake provider")
		case value != "true" && value != "false":
			return false, adyenInvalid("702", "Field 'additionalData.manualCapture' must be true or false")
		}
	}
	return additionalData[adyenManualCapture] == "true", nil
}

// oneOfOrAbsent reports whether value is nil or one of values.
func oneOfOrAbsent(value *string, values []string) bool {
	return value == nil || slices.Contains(values, *value)
}

// checkAdyenMetadata holds metadata to Adyen's limits: at most 20 entries,
// keys of at most 20 characters, values of at most 80.
func checkAdyenMetadata(metadata map[string]string) *adyenServiceError {
	tooLarge := len(metadata) > maxAdyenMetadataKeys
	for key, value := range metadata {
		tooLarge = tooLarge || key == "" || len(key) > maxAdyenMetadataKeyLength || len(value) > maxAdyenMetadataValueLength
	}
	if tooLarge {
		return adyenInvalid("177", "Metadata size exceeds limit")
	}
	return nil
}

// handleAdyenPayment serves POST /v71/payments.
func (s *Server) handleAdyenPayment(w http.ResponseWriter, r *http.Request) {
	s.serveAdyenPost(w, r, adyenPaymentAnswers{}, func(data []byte) (request, *adyenServiceError) {
		params, tag, problem := decodeAdyenPayment(data)
		// Adyen's documentation says a key is answered with its first
		// result; it does not say that the body is compared. The
		// fingerprint names the endpoint alone, so only a key used on the
		// other endpoint is refused.
		return request{tag: tag, reference: params.Reference, op: params, hash: fingerprint("adyen\x00payment")}, problem
	})
}

// adyenPaymentResponse is Adyen's PaymentResponse as the fake gives it.
type adyenPaymentResponse struct {
	PSPReference      string      `json:"pspReference"`
	ResultCode        string      `json:"resultCode"`
	Amount            adyenAmount `json:"amount"`
	MerchantReference string      `json:"merchantReference"`
	RefusalReason     string      `json:"refusalReason,omitempty"`
	RefusalReasonCode string      `json:"refusalReasonCode,omitempty"`
}

// Adyen's result codes of a payment the fake makes.
const (
	adyenAuthorised = "Authorised"
	adyenRefused    = "Refused"
)

// adyenRefusal is the refusalReasonCode and refusalReason Adyen gives for
// a decline, by the fake's decline code.
func adyenRefusal(declineCode string) (code, reason string) {
	switch declineCode {
	case "insufficient_funds":
		return "12", "Not enough balance"
	case "expired_card":
		return "6", "Expired Card"
	case "incorrect_cvc":
		return "24", "CVC Declined"
	default:
		return "2", "Refused"
	}
}

// adyenPayment shows a charge as Adyen's PaymentResponse, derived from the
// ledger record alone, so a replay says what the first answer said: a
// payment authorised for manual capture is Authorised as one captured at
// once is, whatever became of its hold since.
func adyenPayment(c *record) adyenPaymentResponse {
	payment := adyenPaymentResponse{PSPReference: c.ID, ResultCode: adyenAuthorised,
		Amount: adyenAmount{Currency: c.Currency, Value: c.Amount}, MerchantReference: c.Reference}
	if c.Status == psp.StatusFailed {
		payment.ResultCode = adyenRefused
		payment.RefusalReasonCode, payment.RefusalReason = adyenRefusal(c.DeclineCode)
	}
	return payment
}

// adyenPaymentAnswers words a payment's answers as Adyen does: a refusal
// is a 200 with resultCode Refused, a value, not an error.
type adyenPaymentAnswers struct{}

func (adyenPaymentAnswers) result(w http.ResponseWriter, c *record) {
	writeJSON(w, http.StatusOK, adyenPayment(c))
}

func (adyenPaymentAnswers) failure(w http.ResponseWriter, f failure) {
	writeAdyenFailure(w, f, "payment")
}

// writeAdyenFailure words a failure of the pipeline as Adyen does; what
// names the operation ("payment", "refund").
func writeAdyenFailure(w http.ResponseWriter, f failure, what string) {
	switch f {
	case failErrorBeforeApply, failErrorAfterApply, failReplayedError:
		// One body for the three, so a replay repeats the first answer and
		// no 500 says whether money moved.
		writeAdyenError(w, adyenError(http.StatusInternalServerError, "000", adyenInternal,
			"An internal error occurred while processing the request (injected fault)."))
	case failNotProcessed:
		w.Header().Set("Retry-After", "1")
		writeAdyenError(w, adyenError(http.StatusTooManyRequests, "000", adyenInternal,
			"Too many requests (injected fault not_processed): nothing was executed."))
	case failKeyInUse, failKeyReused:
		// Reused: the key was used on the other endpoint, a request
		// already processed.
		writeAdyenError(w, adyenInvalid("704", "request already processed or in progress"))
	case failClosed:
		writeAdyenError(w, adyenError(http.StatusInternalServerError, "000", adyenInternal, "The provider is shutting down."))
	default:
		writeAdyenError(w, adyenError(http.StatusInternalServerError, "000", adyenInternal,
			fmt.Sprintf("The %s could not be recorded durably.", what)))
	}
}
