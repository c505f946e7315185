package psp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"syscall"
)

// Attempt is everything Classify needs to know about one provider call. The
// Client fills it from a real round trip; tests fill it by hand, so the
// classification rules can be table-tested without a network.
type Attempt struct {
	// Op is the call that was made; a 404 means something else for a charge
	// than for a lookup.
	Op Op

	// Err is the error of the round trip when no response arrived, or the
	// error of reading the response body when one did.
	Err error

	// GotConn reports whether a connection to the provider was obtained
	// (net/http/httptrace's GotConn fired). Until it is, no byte of the
	// request can have reached the provider.
	GotConn bool

	// WroteRequest reports whether the whole request was written to the
	// connection (httptrace's WroteRequest fired without an error).
	WroteRequest bool

	// StatusCode is the HTTP status of the response, or 0 when none arrived.
	StatusCode int

	// Body is the response body, as much of it as was read.
	Body []byte
}

// Classify turns one provider call into a Charge or an error, and is the only
// place where that decision is made (ClassifyRefund makes it for refunds by
// the same rules). The rules, in order:
//
//   - No response and no connection: the request provably never left, so
//     ErrNotApplied (connection_refused, dns_failed, dial_timeout,
//     dial_failed, canceled). This holds for a call that moves money (a
//     charge, a refund: Op.Applies) only; for a lookup every failure is
//     ErrUnknownOutcome.
//   - No response after a connection was obtained: ErrUnknownOutcome
//     (timeout, canceled, reset_after_send, write_failed).
//   - A 2xx whose body decodes into a charge with an id and a known status:
//     that charge, with a nil error; a decline is such a charge, and so is
//     one authorized to be captured later, requires_capture or canceled.
//     Any other 2xx body is ErrUnknownOutcome (malformed_body,
//     unknown_status, body_read_failed).
//   - A charge or refund only: 429 and 400, 401, 403, 404, 405, 413, 415
//     mean the provider refused before processing: ErrNotApplied with reason
//     status_NNN.
//   - A lookup only: a 404 whose JSON error body carries the lookup's
//     not-found code (CodeChargeNotFound, CodeRefundNotFound) is
//     ErrNotFound. A bare 404 proves nothing.
//   - Anything else (1xx, 3xx, 408, 409, 422, other 4xx, 5xx):
//     ErrUnknownOutcome with reason status_NNN.
func Classify(a Attempt) (Charge, error) {
	return classifyAs(a, decodeCharge)
}

// ClassifyRefund turns one refund call (OpRefund) or refund lookup
// (OpRefundLookup) into a Refund or an error, by Classify's rules with one
// more before them: a 409 answering a refund whose error code is
// CodeRefundExceedsCharge or CodeChargeNotRefundable is the provider's
// decisive refusal, a failed Refund with that code as FailureCode and no
// ID (the adapter fills in the request: RefundRequest.Refused). A 2xx is a
// refund with an id and a known status; anything else is what Classify
// says of it.
func ClassifyRefund(a Attempt) (Refund, error) {
	if a.Op == OpRefund && a.StatusCode == http.StatusConflict && a.Err == nil {
		switch code := providerErrorCode(a.Body); code {
		case CodeRefundExceedsCharge, CodeChargeNotRefundable:
			return Refund{Status: StatusFailed, FailureCode: code}, nil
		}
	}
	return classifyAs(a, decodeRefund)
}

// ClassifyOperation turns one capture or cancel call (OpCapture, OpCancel)
// into a Charge or an error, by Classify's rules with one more before
// them: a 409 whose error code is CodeChargeNotCapturable,
// CodeCaptureExceedsAuthorization or CodeHoldExpired is the provider's
// decisive refusal, a failed Charge with that code as DeclineCode and no
// ID (the adapter fills in the request: OperationRequest.Refused). A 2xx
// is the authorized charge as the operation left it.
func ClassifyOperation(a Attempt) (Charge, error) {
	if (a.Op == OpCapture || a.Op == OpCancel) && a.StatusCode == http.StatusConflict && a.Err == nil {
		switch code := providerErrorCode(a.Body); code {
		case CodeChargeNotCapturable, CodeCaptureExceedsAuthorization, CodeHoldExpired:
			return Charge{Status: StatusFailed, DeclineCode: code}, nil
		}
	}
	return classifyAs(a, decodeCharge)
}

// classifyAs is Classify for an answer whose 2xx body decode reads.
func classifyAs[T any](a Attempt, decode func(Attempt) (T, error)) (T, error) {
	var none T
	switch {
	case a.StatusCode == 0:
		return none, classifyTransport(a)
	case a.StatusCode >= 200 && a.StatusCode <= 299:
		return decode(a)
	}

	providerCode := providerErrorCode(a.Body)
	statusErr := func(kind error) *Error {
		return &Error{
			Kind:         kind,
			Reason:       "status_" + strconv.Itoa(a.StatusCode),
			StatusCode:   a.StatusCode,
			ProviderCode: providerCode,
			Err:          a.Err,
		}
	}
	switch notFound := a.Op.notFoundCode(); {
	case a.Op.Applies() && refusedBeforeProcessing(a.StatusCode):
		return none, statusErr(ErrNotApplied)
	case notFound != "" && a.StatusCode == http.StatusNotFound && a.Err == nil && providerCode == notFound:
		return none, ErrNotFound
	default:
		return none, statusErr(ErrUnknownOutcome)
	}
}

// refusedBeforeProcessing reports whether a status answering a charge or
// refund POST proves that the provider did not process it. 429 is the provider's explicit
// "not processed"; the others are refusals of the request itself (bad
// parameters, authentication, routing, size, media type) that a provider gives
// before it applies anything. 408, 409 and 422 are deliberately absent: a 409
// or 422 about the key means a charge for it may exist.
func refusedBeforeProcessing(status int) bool {
	switch status {
	case http.StatusTooManyRequests,
		http.StatusBadRequest,
		http.StatusUnauthorized,
		http.StatusForbidden,
		http.StatusNotFound,
		http.StatusMethodNotAllowed,
		http.StatusRequestEntityTooLarge,
		http.StatusUnsupportedMediaType:
		return true
	default:
		return false
	}
}

// classifyTransport classifies a call that produced no response.
func classifyTransport(a Attempt) *Error {
	kind := ErrUnknownOutcome
	if a.Op.Applies() && !a.GotConn {
		kind = ErrNotApplied
	}
	return &Error{Kind: kind, Reason: transportReason(a), Err: a.Err}
}

// transportReason names why a call produced no response.
func transportReason(a Attempt) string {
	err := a.Err
	if err == nil {
		// Nothing went wrong and nothing came back: only a caller filling an
		// Attempt by hand can get here.
		return "no_response"
	}

	if !a.GotConn {
		var dnsErr *net.DNSError
		switch {
		case errors.Is(err, context.Canceled):
			return "canceled"
		case isTimeout(err):
			return "dial_timeout"
		case errors.Is(err, syscall.ECONNREFUSED):
			return "connection_refused"
		case errors.As(err, &dnsErr):
			return "dns_failed"
		default:
			return "dial_failed"
		}
	}

	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case isTimeout(err):
		return "timeout"
	case !a.WroteRequest:
		return "write_failed"
	default:
		// The request was written and the connection then ended without an
		// answer: a reset, an EOF, or net/http's "server closed idle
		// connection". The provider may have applied it.
		return "reset_after_send"
	}
}

// isTimeout reports whether err is a deadline: the context's, or a network
// deadline such as a dial timeout.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}

// decodeCharge decodes a 2xx body into a charge, refusing anything that is not
// a charge with an id and a known status: succeeded or failed, or for a
// charge captured later requires_capture or canceled.
func decodeCharge(a Attempt) (Charge, error) {
	return decodeAnswer(a, "charge", func(c Charge) (string, Status) { return c.ID, c.Status },
		StatusSucceeded, StatusFailed, StatusRequiresCapture, StatusCanceled)
}

// decodeRefund decodes a 2xx body into a refund, refusing anything that is
// not a refund with an id and a known status.
func decodeRefund(a Attempt) (Refund, error) {
	return decodeAnswer(a, "refund", func(r Refund) (string, Status) { return r.ID, r.Status }, StatusSucceeded, StatusFailed)
}

// decodeAnswer decodes a 2xx body into the object (named what) whose id and
// status identify returns, refusing anything without an id and one of the
// known statuses.
func decodeAnswer[T any](a Attempt, what string, identify func(T) (string, Status), known ...Status) (T, error) {
	var none T
	unknown := func(reason string, err error) (T, error) {
		return none, &Error{Kind: ErrUnknownOutcome, Reason: reason, StatusCode: a.StatusCode, Err: err}
	}

	if a.Err != nil {
		if isTimeout(a.Err) {
			return unknown("timeout", a.Err)
		}
		return unknown("body_read_failed", a.Err)
	}

	var answer T
	if err := json.Unmarshal(a.Body, &answer); err != nil {
		return unknown("malformed_body", err)
	}
	id, status := identify(answer)
	if id == "" || status == "" {
		return unknown("malformed_body", errors.New(what+" without id or status"))
	}
	if !slices.Contains(known, status) {
		return unknown("unknown_status", fmt.Errorf("%s status %q", what, status))
	}
	return answer, nil
}

// providerErrorCode returns the code of a provider error body
// {"error":{"code":"…"}}, or "" when the body is not one.
func providerErrorCode(body []byte) string {
	var envelope struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &envelope) != nil {
		return ""
	}
	return envelope.Error.Code
}
