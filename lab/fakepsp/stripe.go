package fakepsp

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/chargeflow/chargeflow/psp"
)

// This file is the Stripe protocol's charge: POST /v1/payment_intents with
// confirm=true, form-encoded, behind a test secret key. What it models and
// what it leaves out is listed in docs/provider.md ("The Stripe protocol");
// the faults, the key rules and the ledger are the shared ones
// (execute.go), under Stripe's key rules (keysAtExecution).

// The metadata keys chargeflow's Stripe adapter files a PaymentIntent under.
const (
	// MetadataCharge holds our charge id: the reference that the ledger
	// files the charge under and that a search finds it by. Required.
	MetadataCharge = "chargeflow_charge"

	// MetadataTenant, when present, is the tenant tag that the ledger and
	// the audit file the charge under (the fake protocol's X-Tenant-Tag).
	MetadataTenant = "chargeflow_tenant"
)

// The error types of Stripe's error object.
const (
	stripeInvalidRequest = "invalid_request_error"
	stripeAPIError       = "api_error"
	stripeCardError      = "card_error"
	stripeIdempotency    = "idempotency_error"
)

// Stripe's metadata limits, which the fake enforces so that an adapter that
// passes here does not fail at Stripe.
const (
	maxMetadataKeys        = 50
	maxMetadataKeyLength   = 40
	maxMetadataValueLength = 500
)

// stripeErrorBody is Stripe's error answer.
type stripeErrorBody struct {
	Error stripeError `json:"error"`
}

// stripeError is Stripe's error object, with the fields stripe-go reads.
type stripeError struct {
	Type          string               `json:"type"`
	Code          string               `json:"code,omitempty"`
	DeclineCode   string               `json:"decline_code,omitempty"`
	Message       string               `json:"message"`
	Param         string               `json:"param,omitempty"`
	Charge        string               `json:"charge,omitempty"`
	PaymentIntent *stripePaymentIntent `json:"payment_intent,omitempty"`
}

// stripePaymentIntent is the PaymentIntent object as the fake shows it:
// the fields stripe-go parses that the fake has values for.
type stripePaymentIntent struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCapturable   int64             `json:"amount_capturable"`
	AmountReceived     int64             `json:"amount_received"`
	CanceledAt         *int64            `json:"canceled_at"`
	CancellationReason *string           `json:"cancellation_reason"`
	CaptureMethod      string            `json:"capture_method"`
	ConfirmationMethod string            `json:"confirmation_method"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Description        *string           `json:"description"`
	LastPaymentError   *stripeError      `json:"last_payment_error"`
	LatestCharge       string            `json:"latest_charge"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	PaymentMethod      *string           `json:"payment_method"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	Status             string            `json:"status"`
}

// stripeIntent shows a charge in state hold as a PaymentIntent. It is
// derived from the ledger records alone (the charge's, and its capture's
// or cancel's), so every answer about a charge in one state, a replay
// included, says the same. The charge and payment method ids share the
// PaymentIntent's suffix; the test payment method itself is never stored.
//
// A charge captured later is a PaymentIntent with capture_method manual:
// requires_capture while held (amount_capturable), succeeded once
// captured (amount_received what was captured), canceled once released,
// with the cancel's cancellation_reason, or automatic when its hold
// expired.
func stripeIntent(c *record, hold holdState) stripePaymentIntent {
	metadata := c.Metadata
	if metadata == nil {
		// A charge the fake protocol made (stripeMetadataValue).
		metadata = map[string]string{MetadataCharge: c.Reference}
	}
	intent := stripePaymentIntent{
		ID:                 c.ID,
		Object:             "payment_intent",
		Amount:             c.Amount,
		CaptureMethod:      "automatic",
		ConfirmationMethod: "automatic",
		Created:            c.CreatedAt.Unix(),
		Currency:           strings.ToLower(c.Currency),
		LatestCharge:       stripeChargeID(c.ID),
		Metadata:           metadata,
		PaymentMethodTypes: []string{"card"},
	}
	if c.Description != "" {
		intent.Description = &c.Description
	}
	if c.CaptureLater {
		intent.CaptureMethod = "manual"
	}
	intent.Status = stripeStatus(hold)
	if hold.status == psp.StatusFailed {
		decline := stripeDecline(c)
		intent.LastPaymentError = &decline
		return intent
	}
	_, suffix, _ := strings.Cut(c.ID, "_")
	paymentMethod := "pm_" + suffix
	intent.PaymentMethod = &paymentMethod
	switch hold.status {
	case psp.StatusSucceeded:
		intent.AmountReceived = c.Amount
		if c.CaptureLater {
			intent.AmountReceived = hold.captured
		}
	case psp.StatusRequiresCapture:
		intent.AmountCapturable = c.Amount
	case psp.StatusCanceled:
		canceledAt, reason := c.HoldExpiresAt.Unix(), "automatic"
		if hold.settled != nil {
			canceledAt, reason = hold.settled.CreatedAt.Unix(), hold.settled.Reason
		}
		intent.CanceledAt = &canceledAt
		if reason != "" {
			intent.CancellationReason = &reason
		}
	}
	return intent
}

// stripeIntentNow is c's PaymentIntent as it stands now: what a read
// shows.
func (s *Server) stripeIntentNow(c *record) stripePaymentIntent {
	return stripeIntent(c, c.holdAt(s.now(), false))
}

// stripeChargeID is the id of the Charge of the PaymentIntent intentID, its
// latest_charge: the intent's suffix after "ch_". A refund names it too.
func stripeChargeID(intentID string) string {
	_, suffix, _ := strings.Cut(intentID, "_")
	return "ch_" + suffix
}

// stripeStatus is the status of a PaymentIntent whose charge is in state
// hold: a declined confirmation leaves the intent waiting for another
// payment method, with the decline as its last error; the states of a
// charge captured later are Stripe's own words.
func stripeStatus(hold holdState) string {
	if hold.status == psp.StatusFailed {
		return "requires_payment_method"
	}
	return string(hold.status)
}

// stripeMetadataValue is c's PaymentIntent's metadata value for key. A
// charge the fake protocol made shows its reference where the Stripe
// adapter would have put it.
func stripeMetadataValue(c *record, key string) string {
	if c.Metadata == nil && key == MetadataCharge {
		return c.Reference
	}
	return c.Metadata[key]
}

// stripeDecline is the card error of a declined charge. Stripe names an
// expired card and a wrong security code by their own error codes, and
// every other decline card_declined; the decline code is always set.
func stripeDecline(c *record) stripeError {
	decline := stripeError{Type: stripeCardError, Code: "card_declined", DeclineCode: c.DeclineCode,
		Message: "The test card was declined.", Charge: stripeChargeID(c.ID)}
	switch c.DeclineCode {
	case "expired_card":
		decline.Code, decline.Message = "expired_card", "The test card is expired."
	case "incorrect_cvc":
		decline.Code, decline.Message = "incorrect_cvc", "The test card's security code is wrong."
	}
	return decline
}

// writeStripeError writes a Stripe error answer.
func writeStripeError(w http.ResponseWriter, status int, e stripeError) {
	writeJSON(w, status, stripeErrorBody{Error: e})
}

// stripeParamError is Stripe's 400 for a parameter that failed validation:
// nothing executed, so nothing is saved for the key.
func stripeParamError(param, code, message string) stripeError {
	return stripeError{Type: stripeInvalidRequest, Code: code, Param: param, Message: message}
}

// stripe wraps a Stripe route: every answer carries a Request-Id, and a
// request without a test secret key is refused, as Stripe refuses it,
// before anything else happens.
func (s *Server) stripe(handler http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Request-Id", "req_"+rand.Text())
		if problem := stripeAuthProblem(r); problem != "" {
			writeStripeError(w, http.StatusUnauthorized, stripeError{Type: stripeInvalidRequest, Message: problem})
			return
		}
		handler(w, r)
	})
}

// stripeAuthProblem says why a request is not authorized, or "" when it
// carries a test secret key (sk_test_…), as a Bearer token or as the user of
// basic authentication. Any such key is accepted; a live key never is.
func stripeAuthProblem(r *http.Request) string {
	var key string
	authorization := r.Header.Get("Authorization")
	if bearer, ok := strings.CutPrefix(authorization, "Bearer "); ok {
		key = bearer
	} else if user, _, ok := r.BasicAuth(); ok {
		key = user
	}
	switch {
	case authorization == "":
		return "No API key provided: send a test secret key (sk_test_…) as a Bearer token."
	case !strings.HasPrefix(key, "sk_test_") || len(key) == len("sk_test_"):
		return "Invalid API key: this fake provider takes any test secret key (sk_test_…) and nothing else."
	}
	return ""
}

// handleStripeNotFound answers a path or method the Stripe protocol does
// not have.
func handleStripeNotFound(w http.ResponseWriter, r *http.Request) {
	writeStripeError(w, http.StatusNotFound, stripeError{Type: stripeInvalidRequest,
		Message: "Unrecognized request URL (" + r.Method + ": " + r.URL.Path + "); the fake provider models only the endpoints in docs/provider.md."})
}

// handleStripeCreate serves POST /v1/payment_intents.
func (s *Server) handleStripeCreate(w http.ResponseWriter, r *http.Request) {
	s.serveStripePost(w, r, stripeChargeAnswers{}, func(form url.Values) (request, *stripeError) {
		params, problem := decodeStripeCreate(form)
		return request{tag: params.Metadata[MetadataTenant], reference: params.Reference, op: params,
			hash: stripeHash(form), idPrefix: "pi_"}, problem
	})
}

// serveStripePost serves a POST of the Stripe protocol: the
// Idempotency-Key, the form, which decode validates into a request (a
// problem is Stripe's 400, refused before execution, so nothing is saved),
// and then the shared pipeline under Stripe's key rules.
func (s *Server) serveStripePost(w http.ResponseWriter, r *http.Request, answers answers, decode func(url.Values) (request, *stripeError)) {
	key, _, problem := readIdempotencyKey(r)
	if problem != "" {
		// Stripe makes the key optional; chargeflow always sends one, and
		// the fake's ledger files every charge and refund under its key.
		writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeInvalidRequest,
			Message: "This fake provider needs an Idempotency-Key on every POST: " + problem + "."})
		return
	}
	form, ok := readStripeForm(w, r)
	if !ok {
		return
	}
	req, invalid := decode(form)
	if invalid != nil {
		writeStripeError(w, http.StatusBadRequest, *invalid)
		return
	}
	req.key = key
	s.run(w, r, req, answers, keysAtExecution)
}

// readStripeForm reads a form-encoded request body, answering 400 or 413
// when it cannot be read, is JSON, or sends a parameter twice.
func readStripeForm(w http.ResponseWriter, r *http.Request) (url.Values, bool) {
	if mediaType, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); strings.TrimSpace(mediaType) == "application/json" {
		writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeInvalidRequest,
			Message: "Send the parameters form-encoded (application/x-www-form-urlencoded), not as JSON."})
		return nil, false
	}
	data, tooLarge, err := readBody(w, r)
	switch {
	case tooLarge:
		writeStripeError(w, http.StatusRequestEntityTooLarge, stripeError{Type: stripeInvalidRequest, Message: "The request body is larger than 64 KiB."})
		return nil, false
	case err != nil:
		writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeInvalidRequest, Message: "The request body could not be read."})
		return nil, false
	}
	form, err := url.ParseQuery(string(data))
	if err != nil {
		writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeInvalidRequest, Message: "The request body is not form-encoded: " + err.Error()})
		return nil, false
	}
	for _, name := range sortedNames(form) {
		if len(form[name]) > 1 {
			writeStripeError(w, http.StatusBadRequest, stripeParamError(name, "", "The parameter "+name+" was sent more than once."))
			return nil, false
		}
	}
	return form, true
}

// stripeHash fingerprints every parameter of a request, in a canonical
// order: Stripe compares all of them when a key comes back.
func stripeHash(form url.Values) string {
	hash := sha256.New()
	for _, name := range sortedNames(form) {
		hash.Write([]byte(name))
		hash.Write([]byte{0})
		hash.Write([]byte(form.Get(name)))
		hash.Write([]byte{0})
	}
	return hex.EncodeToString(hash.Sum(nil)[:16])
}

// sortedNames returns the parameter names of form in order.
func sortedNames(form url.Values) []string {
	names := make([]string, 0, len(form))
	for name := range form {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// decodeStripeCreate validates the parameters of a PaymentIntent create.
// A few parameters an adapter may need to send to real Stripe alongside
// confirm=true are accepted and count in the fingerprint, but change
// nothing; any other is unknown.
func decodeStripeCreate(form url.Values) (chargeParams, *stripeError) {
	params := chargeParams{Metadata: map[string]string{}}
	fail := func(param, code, message string) (chargeParams, *stripeError) {
		e := stripeParamError(param, code, message)
		return chargeParams{}, &e
	}

	for _, name := range sortedNames(form) {
		value := form.Get(name)
		switch {
		case name == "amount", name == "currency", name == "payment_method", name == "confirm", name == "description":
			// Checked below.
		case name == "capture_method":
			switch value {
			case "automatic", "automatic_async":
			case "manual":
				params.CaptureLater = true
			default:
				return fail(name, "", "capture_method must be automatic, automatic_async or manual.")
			}
		case name == "off_session", name == "error_on_requires_action", name == "automatic_payment_methods[enabled]":
			if value != "true" && value != "false" {
				return fail(name, "", name+" must be true or false.")
			}
		case name == "automatic_payment_methods[allow_redirects]":
			if value != "always" && value != "never" {
				return fail(name, "", name+" must be always or never.")
			}
		case name == "return_url":
			if value == "" {
				return fail(name, "parameter_invalid_empty", "return_url must not be empty.")
			}
		case strings.HasPrefix(name, "payment_method_types["):
			if value != "card" {
				return fail(name, "", "Only card payments are modeled.")
			}
		case isStripeMetadata(name):
			if problem := addStripeMetadata(params.Metadata, name, value); problem != nil {
				return chargeParams{}, problem
			}
		default:
			return fail(name, "parameter_unknown", "Received unknown parameter: "+name+".")
		}
	}
	if len(params.Metadata) > maxMetadataKeys {
		return fail("metadata", "", "At most 50 metadata keys are allowed.")
	}
	// Stripe's description requires enabled in automatic_payment_methods
	// whenever the hash is sent (stripe-mock refuses it without).
	if form.Has("automatic_payment_methods[allow_redirects]") && !form.Has("automatic_payment_methods[enabled]") {
		return fail("automatic_payment_methods[enabled]", "parameter_missing", "Missing required param: automatic_payment_methods[enabled].")
	}

	amount := form.Get("amount")
	if amount == "" {
		return fail("amount", "parameter_missing", "Missing required param: amount.")
	}
	var ok bool
	if params.Amount, ok = parsePositiveInteger(amount); !ok {
		return fail("amount", "parameter_invalid_integer", "amount must be a positive integer in the currency's minor unit.")
	}

	currency := strings.ToUpper(form.Get("currency"))
	switch {
	case currency == "":
		return fail("currency", "parameter_missing", "Missing required param: currency.")
	case !isCurrencyCode(currency):
		return fail("currency", "", "Invalid currency: give a three-letter ISO 4217 code.")
	}
	params.Currency = currency

	params.PaymentMethod = form.Get("payment_method")
	switch {
	case params.PaymentMethod == "":
		return fail("payment_method", "parameter_missing", "Missing required param: payment_method (this fake only confirms on creation).")
	case !knownPaymentMethod(params.PaymentMethod):
		return fail("payment_method", "resource_missing", "No such PaymentMethod; the fake provider knows only the test payment methods in docs/provider.md.")
	}

	if form.Get("confirm") != "true" {
		return fail("confirm", "", "This fake provider only creates PaymentIntents with confirm=true.")
	}

	params.Reference = params.Metadata[MetadataCharge]
	if params.Reference == "" {
		return fail("metadata["+MetadataCharge+"]", "parameter_missing",
			"The fake provider files every PaymentIntent under metadata["+MetadataCharge+"], our charge id: it is required.")
	}
	params.Description = form.Get("description")
	return params, nil
}

// isStripeMetadata reports whether the form parameter name is one metadata
// key's, metadata[key].
func isStripeMetadata(name string) bool {
	return strings.HasPrefix(name, "metadata[") && strings.HasSuffix(name, "]")
}

// addStripeMetadata adds the metadata parameter name=value to metadata,
// within Stripe's limits of a key's and a value's length; an empty value
// sets nothing, as at Stripe, where it unsets the key. The caller checks
// the number of keys once all are added.
func addStripeMetadata(metadata map[string]string, name, value string) *stripeError {
	key := strings.TrimSuffix(strings.TrimPrefix(name, "metadata["), "]")
	var problem string
	switch {
	case key == "":
		problem = "A metadata key must not be empty."
	case len(key) > maxMetadataKeyLength:
		problem = "A metadata key is at most 40 characters long."
	case len(value) > maxMetadataValueLength:
		problem = "A metadata value is at most 500 characters long."
	case value != "":
		metadata[key] = value
		return nil
	default:
		return nil
	}
	e := stripeParamError(name, "", problem)
	return &e
}

// stripeChargeAnswers words a charge's answers as Stripe does.
type stripeChargeAnswers struct{}

// result answers with the PaymentIntent, or for a decline with Stripe's 402
// card error carrying it.
func (stripeChargeAnswers) result(w http.ResponseWriter, c *record) {
	intent := stripeIntent(c, holdState{status: c.Status})
	if c.Status == psp.StatusFailed {
		decline := stripeDecline(c)
		decline.PaymentIntent = &intent
		writeStripeError(w, http.StatusPaymentRequired, decline)
		return
	}
	writeJSON(w, http.StatusOK, intent)
}

func (stripeChargeAnswers) failure(w http.ResponseWriter, f failure) {
	writeStripeFailure(w, f, "charge")
}

// writeStripeFailure words a failure of the pipeline as Stripe does; what
// names the operation ("charge", "refund").
func writeStripeFailure(w http.ResponseWriter, f failure, what string) {
	switch f {
	case failErrorBeforeApply, failErrorAfterApply, failReplayedError:
		// One body for the three, so a replay repeats the first answer and
		// no 500 says whether money moved.
		writeStripeError(w, http.StatusInternalServerError, stripeError{Type: stripeAPIError,
			Message: "An internal error occurred while processing the request (injected fault)."})
	case failNotProcessed:
		writeStripeError(w, http.StatusTooManyRequests, stripeError{Type: stripeInvalidRequest, Code: "rate_limit",
			Message: "Too many requests (injected fault not_processed): nothing was executed."})
	case failKeyReused:
		writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeIdempotency,
			Message: "This idempotency key was first used with other parameters; use a new key for a different request."})
	case failKeyInUse:
		// Nothing was saved for this request, so a later retry is safe.
		w.Header().Set("Stripe-Should-Retry", "true")
		writeStripeError(w, http.StatusConflict, stripeError{Type: stripeInvalidRequest, Code: "idempotency_key_in_use",
			Message: "Another request with this idempotency key is still being processed; retry later."})
	case failClosed:
		writeStripeError(w, http.StatusServiceUnavailable, stripeError{Type: stripeAPIError, Message: "The provider is shutting down."})
	default:
		writeStripeError(w, http.StatusInternalServerError, stripeError{Type: stripeAPIError, Message: "The " + what + " could not be recorded durably."})
	}
}
