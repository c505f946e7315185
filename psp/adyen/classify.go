package adyen

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/chargeflow/chargeflow/psp"
)

// The wire objects the adapter reads: only the fields a decision needs.
// Adyen's free text (refusalReason, a ServiceError's message) is never
// read, so no error, span or log can carry it.

// amount is Adyen's Amount: the value in minor units and the ISO 4217
// code. Value is a pointer so that a missing value is told from zero.
type amount struct {
	Currency string `json:"currency"`
	Value    *int64 `json:"value"`
}

// paymentResponse is what classify reads of a PaymentResponse.
type paymentResponse struct {
	PSPReference      string  `json:"pspReference"`
	ResultCode        string  `json:"resultCode"`
	MerchantReference string  `json:"merchantReference"`
	Amount            *amount `json:"amount"`
	RefusalReasonCode string  `json:"refusalReasonCode"`
}

// modificationResponse is what classify reads of the acknowledgement of
// a modification: a PaymentRefundResponse, PaymentCaptureResponse or
// PaymentCancelResponse.
type modificationResponse struct {
	PSPReference string `json:"pspReference"`
	Status       string `json:"status"`
}

// serviceError is what classify reads of Adyen's ServiceError, the body of
// every error answer. Its pspReference never becomes an error's
// ProviderID: after a refusal there is no payment, and a 704's may name the
// refused duplicate rather than the payment in flight; a wrong ProviderID
// would make the payment's own notification look like another payment's.
type serviceError struct {
	Status       int    `json:"status"`
	ErrorCode    string `json:"errorCode"`
	ErrorType    string `json:"errorType"`
	PSPReference string `json:"pspReference"`
}

// The result codes (PaymentResponse.resultCode) classify knows.
const (
	resultAuthorised = "Authorised"
	resultRefused    = "Refused"
	resultCancelled  = "Cancelled"
	resultError      = "Error"
)

// pendingResults are the result codes the description lists that are not
// a final state, each with its reason: the payment exists (pspReference
// names it) but is not settled, so the answer is an unknown outcome that
// the re-send or the AUTHORISATION notification settles. A stored card
// sent as ContAuth needs no shopper, so the shopper actions should never
// come; if they do, nothing is guessed.
var pendingResults = map[string]string{
	"Pending":                   "result_pending",
	"Received":                  "result_received",
	"PresentToShopper":          "result_present_to_shopper",
	"RedirectShopper":           "result_redirect_shopper",
	"IdentifyShopper":           "result_identify_shopper",
	"ChallengeShopper":          "result_challenge_shopper",
	"AuthenticationFinished":    "result_authentication_finished",
	"AuthenticationNotRequired": "result_authentication_not_required",
	"PartiallyAuthorised":       "result_partially_authorised",
	"Success":                   "result_success",
}

// refusalCodes maps Adyen's refusalReasonCode to the decline codes the
// other adapters use for the same refusal (docs/provider.md, "The Adyen
// adapter"). Any other code is "adyen_refusal_<code>".
var refusalCodes = map[string]string{
	"2":  "generic_decline",
	"6":  "expired_card",
	"12": "insufficient_funds",
	"24": "incorrect_cvc",
}

// declineCodeOf is the decline code of a refusal whose refusalReasonCode
// is code: the shared code where one exists, "adyen_refusal_<code>" for
// another numeral (Adyen's codes are numerals), "adyen_refusal" when there
// is none or it is not a short numeral. Never Adyen's refusalReason text.
func declineCodeOf(code string) string {
	if shared, ok := refusalCodes[code]; ok {
		return shared
	}
	if code == "" || len(code) > 4 || strings.Trim(code, "0123456789") != "" {
		return "adyen_refusal"
	}
	return "adyen_refusal_" + code
}

// CodeIdempotencyKeyInUse is Adyen's errorCode for a request whose
// idempotency key another request is still being processed under ("request
// already processed or in progress"), answered with 422 or 409.
const CodeIdempotencyKeyInUse = "704"

// classify turns one call to Adyen (a charge, psp.OpCharge; a refund,
// psp.OpRefund; a capture or a cancel, psp.OpCapture and psp.OpCancel) into what
// it proves, and is the only place where that decision is made. A
// modification's answer (a refund's, a capture's, a cancel's) is never
// final: Adyen settles one only by its notification (REFUND, CAPTURE or
// CAPTURE_FAILED, CANCELLATION), so for one classify returns an error
// only. The rules, in order:
//
//   - No answer: psp.Classify's transport rules for a call that moves
//     money (not applied when no connection was obtained; otherwise
//     unknown).
//   - A 2xx whose body could not be read whole: unknown (timeout,
//     body_read_failed).
//   - A 2xx answering a modification: unknown, refund_received,
//     capture_received or cancel_received, naming the modification's
//     pspReference (acknowledged).
//   - A 2xx answering a charge: its resultCode decides (chargeOf).
//   - Anything else: classifyError.
func classify(a psp.Attempt) (psp.Charge, error) {
	switch {
	case a.StatusCode == 0:
		// A request that never reached Adyen applied nothing.
		_, err := psp.Classify(psp.Attempt{Op: a.Op, Err: a.Err, GotConn: a.GotConn, WroteRequest: a.WroteRequest})
		return psp.Charge{}, err
	case a.StatusCode < 200 || a.StatusCode > 299:
		return psp.Charge{}, classifyError(a)
	case a.Err != nil:
		// A body cut off or timed out: psp.Classify's rule for a 2xx.
		_, err := psp.Classify(psp.Attempt{Op: a.Op, Err: a.Err, GotConn: true, WroteRequest: true, StatusCode: a.StatusCode})
		return psp.Charge{}, err
	case a.Op == psp.OpRefund || a.Op == psp.OpCapture || a.Op == psp.OpCancel:
		return psp.Charge{}, acknowledged(a)
	default:
		return chargeOf(a)
	}
}

// unknown is the unknown outcome of a, for reason, naming the provider's
// id of the payment or refund when the answer gave one.
func unknown(a psp.Attempt, reason, providerID string, err error) *psp.Error {
	return &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: reason, StatusCode: a.StatusCode, ProviderID: providerID, Err: err}
}

// chargeOf maps a 2xx PaymentResponse to what it proves. Authorised is a
// charge; Refused, Cancelled and Error are declines (Adyen documents all
// four as final states). A final answer must name the payment
// (pspReference), its money (amount) and our reference
// (merchantReference): the caller settles a charge only on an answer with
// our money and reference, so an answer without them is malformed, an
// unknown outcome, rather than a charge that could only end in review.
// Every other result code is not final: an unknown outcome naming the
// payment.
func chargeOf(a psp.Attempt) (psp.Charge, error) {
	var r paymentResponse
	if err := json.Unmarshal(a.Body, &r); err != nil {
		return psp.Charge{}, unknown(a, "malformed_body", "", err)
	}
	if r.ResultCode == "" {
		return psp.Charge{}, unknown(a, "malformed_body", r.PSPReference, errors.New("payment response without a resultCode"))
	}

	var status psp.Status
	var declineCode string
	switch r.ResultCode {
	case resultAuthorised:
		status = psp.StatusSucceeded
	case resultRefused:
		status, declineCode = psp.StatusFailed, declineCodeOf(r.RefusalReasonCode)
	case resultCancelled:
		status, declineCode = psp.StatusFailed, "canceled"
	case resultError:
		status, declineCode = psp.StatusFailed, "processing_error"
	default:
		reason, known := pendingResults[r.ResultCode]
		if !known {
			reason = "unknown_status"
		}
		return psp.Charge{}, unknown(a, reason, r.PSPReference, fmt.Errorf("payment %s is not final", cmp.Or(r.PSPReference, "without a pspReference")))
	}

	switch {
	case r.PSPReference == "":
		return psp.Charge{}, unknown(a, "malformed_body", "", errors.New("final payment response without a pspReference"))
	case r.Amount == nil || r.Amount.Value == nil || r.Amount.Currency == "":
		return psp.Charge{}, unknown(a, "malformed_body", r.PSPReference, fmt.Errorf("payment %s: final response without its amount", r.PSPReference))
	case r.MerchantReference == "":
		return psp.Charge{}, unknown(a, "malformed_body", r.PSPReference, fmt.Errorf("payment %s: final response without its merchantReference", r.PSPReference))
	}
	return psp.Charge{
		ID:          r.PSPReference,
		Status:      status,
		Amount:      *r.Amount.Value,
		Currency:    r.Amount.Currency,
		Reference:   r.MerchantReference,
		DeclineCode: declineCode,
	}, nil
}

// acknowledged reads a 2xx answering a modification of a payment (a
// PaymentRefundResponse, PaymentCaptureResponse or PaymentCancelResponse):
// Adyen received it (status "received") and will settle it in a
// notification, so the answer is an unknown outcome naming the
// modification's pspReference, reason <op>_received (refund_received,
// capture_received, cancel_received). A body that is not an
// acknowledgement is malformed; a status other than "received", which the
// description does not allow, is unknown_status.
func acknowledged(a psp.Attempt) error {
	var r modificationResponse
	if err := json.Unmarshal(a.Body, &r); err != nil {
		return unknown(a, "malformed_body", "", err)
	}
	switch {
	case r.PSPReference == "" || r.Status == "":
		return unknown(a, "malformed_body", "", fmt.Errorf("%s response without a pspReference or a status", a.Op))
	case r.Status != "received":
		return unknown(a, "unknown_status", r.PSPReference, fmt.Errorf("%s %s: status %q", a.Op, r.PSPReference, r.Status))
	default:
		return unknown(a, string(a.Op)+"_received", r.PSPReference, fmt.Errorf("%s %s received, settled by its notification", a.Op, r.PSPReference))
	}
}

// classifyError classifies an answer that is not a 2xx, for a charge and a
// modification alike. The rules, in order:
//
//   - errorCode 704, whatever the status (Adyen answers 422 or 409): a
//     request with this key is still being processed, and it may apply:
//     unknown (idempotency_key_in_use).
//   - 401, 403: refused by authentication before processing: not applied
//     (authentication_failed, permission_denied).
//   - 400: a request Adyen could not read: not applied (invalid_request).
//   - 429: refused by rate limiting: not applied (rate_limited).
//   - 422 of errorType "validation": refused by validation before
//     processing: not applied (validation).
//   - Anything else (any other 422, every 5xx, a 3xx, a 404, a 409): unknown
//     (status_NNN): it may come after processing began.
//
// The statuses decide where the body is not Adyen's (a proxy's page), as
// psp.Classify's do. The error keeps Adyen's errorCode as ProviderCode and
// its type, code and pspReference, never its message.
func classifyError(a psp.Attempt) error {
	var e serviceError
	adyenError := a.Err == nil && json.Unmarshal(a.Body, &e) == nil && (e.ErrorCode != "" || e.ErrorType != "")
	fail := func(kind error, reason string) error {
		pspErr := &psp.Error{Kind: kind, Reason: reason, StatusCode: a.StatusCode, Err: a.Err}
		if adyenError {
			pspErr.ProviderCode = e.ErrorCode
			pspErr.Err = apiError{status: a.StatusCode, typ: e.ErrorType, code: e.ErrorCode, pspReference: e.PSPReference}
		}
		return pspErr
	}

	switch {
	case adyenError && e.ErrorCode == CodeIdempotencyKeyInUse:
		return fail(psp.ErrUnknownOutcome, "idempotency_key_in_use")
	case a.StatusCode == http.StatusUnauthorized:
		return fail(psp.ErrNotApplied, "authentication_failed")
	case a.StatusCode == http.StatusForbidden:
		return fail(psp.ErrNotApplied, "permission_denied")
	case a.StatusCode == http.StatusBadRequest:
		return fail(psp.ErrNotApplied, "invalid_request")
	case a.StatusCode == http.StatusTooManyRequests:
		return fail(psp.ErrNotApplied, "rate_limited")
	case a.StatusCode == http.StatusUnprocessableEntity && adyenError && e.ErrorType == "validation":
		return fail(psp.ErrNotApplied, "validation")
	default:
		return fail(psp.ErrUnknownOutcome, "status_"+strconv.Itoa(a.StatusCode))
	}
}

// apiError is what a psp.Error keeps of Adyen's ServiceError: the status,
// type, code and pspReference. Never its message, which can quote the
// request.
type apiError struct {
	status       int
	typ, code    string
	pspReference string
}

// Error describes the Adyen error as "adyen: 422 validation (code 14_030,
// psp reference 8816118280275544)".
func (e apiError) Error() string {
	return psp.ErrorText("adyen", e.status, e.typ, "code", e.code, "psp reference", e.pspReference)
}
