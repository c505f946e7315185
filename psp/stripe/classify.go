package stripe

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	stripego "github.com/stripe/stripe-go/v82"

	"github.com/chargeflow/chargeflow/psp"
)

// The metadata keys the adapter files a charge (a PaymentIntent) and a
// refund under.
const (
	// MetadataKey holds our reference (chargeflow's charge id); a lookup by
	// reference matches on it.
	MetadataKey = "chargeflow_charge"

	// MetadataRefundKey holds a refund's reference (chargeflow's refund
	// id); a refund lookup without the refund's id matches on it.
	MetadataRefundKey = "chargeflow_refund"

	// MetadataTenantKey holds the charge's or refund's tenant tag, when it
	// has one, so that Stripe's records (and the fake's audit) can be read
	// per tenant.
	MetadataTenantKey = "chargeflow_tenant"
)

// op is the Stripe call an attempt belongs to.
type op int

const (
	// opCharge is POST /v1/payment_intents with confirm=true.
	opCharge op = iota
	// opRetrieve is GET /v1/payment_intents/{id}.
	opRetrieve
	// opList is one page of GET /v1/payment_intents.
	opList
	// opSearch is the first page of GET /v1/payment_intents/search.
	opSearch
	// opRefund is POST /v1/refunds.
	opRefund
	// opRefundRetrieve is GET /v1/refunds/{id}.
	opRefundRetrieve
	// opRefundList is one page of GET /v1/refunds?payment_intent=….
	opRefundList
	// opCapture is POST /v1/payment_intents/{id}/capture.
	opCapture
	// opCancel is POST /v1/payment_intents/{id}/cancel.
	opCancel
)

// pspOp is the psp.Op an op is recorded and classified as: a charge, a
// refund, a capture, a cancel, or the lookup of a charge or a refund.
func (o op) pspOp() psp.Op {
	switch o {
	case opCharge:
		return psp.OpCharge
	case opRefund:
		return psp.OpRefund
	case opCapture:
		return psp.OpCapture
	case opCancel:
		return psp.OpCancel
	case opRefundRetrieve, opRefundList:
		return psp.OpRefundLookup
	default:
		return psp.OpLookup
	}
}

// refunds reports whether o is a refund's call: a refund or its lookup.
func (o op) refunds() bool { return o == opRefund || o == opRefundRetrieve || o == opRefundList }

// retrieves reports whether o reads one object by its id, whose 404
// resource_missing proves that the object does not exist.
func (o op) retrieves() bool { return o == opRetrieve || o == opRefundRetrieve }

// pageObject is the object a page answering o must be: "search_result"
// for a search, "list" for a list, "" for an op that reads no page.
func (o op) pageObject() string {
	switch o {
	case opSearch:
		return "search_result"
	case opList, opRefundList:
		return "list"
	default:
		return ""
	}
}

// page is one page of a list (GET /v1/payment_intents, GET /v1/refunds) or
// of a search, as stripe-go decodes it. stripe-go's own page types are
// unexported and its iterators hide has_more, which a scan must see to know
// that it read every page and the search to know that it saw every hit.
type page[T any] struct {
	stripego.APIResource
	HasMore bool   `json:"has_more"`
	Object  string `json:"object"`
	Data    []*T   `json:"data"`
}

type (
	intentPage = page[stripego.PaymentIntent]
	refundPage = page[stripego.Refund]
)

// listing is what classify checks of a page.
type listing interface {
	// check refuses a page that does not prove what it says: one that is
	// not the object it must be, has an item without an id, or claims more
	// pages after an empty one (a scan could not page on from it).
	check(object string) error
}

func (p *page[T]) check(object string) error {
	switch {
	case p == nil || p.Object != object:
		return errors.New("answer is not a " + object)
	case p.HasMore && len(p.Data) == 0:
		return errors.New("empty page with has_more")
	}
	for _, item := range p.Data {
		if item == nil || idOf(item) == "" {
			return errors.New("list item without an id")
		}
	}
	return nil
}

// idOf is the id of a page's item.
func idOf[T any](item *T) string {
	switch v := any(item).(type) {
	case *stripego.PaymentIntent:
		return v.ID
	case *stripego.Refund:
		return v.ID
	default:
		return ""
	}
}

// attempt is everything classify needs to know about one request to Stripe.
// The adapter fills it from a real round trip (what stripe-go returned, and
// what its transport observed beneath stripe-go); tests fill it by hand, so
// the rules can be table-tested without a network.
type attempt struct {
	op op

	// gotConn and wroteRequest are httptrace's: until a connection was
	// obtained, no byte of the request can have reached Stripe.
	gotConn, wroteRequest bool

	// status is the HTTP status of the answer, 0 when none arrived.
	status int

	// replayed reports the Idempotent-Replayed: true header: the answer is
	// the one Stripe saved for the key when it first executed the request.
	replayed bool

	// bodyErr is the error of reading the answer's body, if any.
	bodyErr error

	// err is what stripe-go returned: nil, a *stripego.Error, a transport
	// error, or an error decoding the body.
	err error

	// intent is the decoded PaymentIntent of a charge or a retrieve that
	// stripe-go returned without error.
	intent *stripego.PaymentIntent

	// refund is the decoded Refund of a refund or a refund retrieve that
	// stripe-go returned without error.
	refund *stripego.Refund

	// page is the decoded page of a list or a search that stripe-go
	// returned without error.
	page listing
}

// answer is what one request to Stripe settled: the charge of a charge or
// a retrieve, the refund of a refund or a refund retrieve. A page settles
// nothing by itself: its caller reads it.
type answer struct {
	charge psp.Charge
	refund psp.Refund
}

// classify turns one request to Stripe into what it proves, and is the
// only place where that decision is made, for charges and refunds alike.
// The rules, in order:
//
//   - No answer: the transport rules of psp.Classify (not applied only for
//     a charge or a refund whose connection was never obtained; else
//     unknown).
//   - A Stripe error: classifyAPIError.
//   - An answer stripe-go could not read or decode, or a non-2xx one that
//     is not a Stripe error (a proxy's page, a 3xx): the status rules of
//     psp.Classify over an unreadable body (a 2xx is malformed_body).
//   - A 2xx list or search page: nil error when it is a well-formed page
//     (the scan or the search reads it), malformed_body otherwise.
//   - A 2xx PaymentIntent: chargeOf. A 2xx Refund: refundOf.
//
// A "not applied" whose answer Stripe replayed is made unknown
// (replayed_error): Stripe saves an answer only once it began executing
// the request, so a replayed refusal is no longer a refusal before
// execution. A lookup is never "not applied": a lookup that failed proves
// nothing about the charge or the refund.
func classify(a attempt) (answer, error) {
	got, err := classifyAnswer(a)
	var pspErr *psp.Error
	if errors.As(err, &pspErr) && pspErr.Kind == psp.ErrNotApplied {
		switch {
		case !a.op.pspOp().Applies():
			pspErr.Kind = psp.ErrUnknownOutcome
		case a.replayed:
			pspErr.Kind, pspErr.Reason = psp.ErrUnknownOutcome, "replayed_error"
		}
	}
	return got, err
}

// classifyAnswer is classify without the final rules on "not applied".
func classifyAnswer(a attempt) (answer, error) {
	if a.status == 0 {
		_, err := psp.Classify(psp.Attempt{Op: a.op.pspOp(), Err: a.err, GotConn: a.gotConn, WroteRequest: a.wroteRequest})
		return answer{}, err
	}

	var stripeErr *stripego.Error
	if errors.As(a.err, &stripeErr) {
		return classifyAPIError(a, stripeErr)
	}

	if a.err != nil || a.status < 200 || a.status > 299 {
		// stripe-go's decoding errors quote the body, which can hold the
		// payment method and the metadata: only the status and the body's
		// read error are kept.
		_, err := psp.Classify(psp.Attempt{Op: a.op.pspOp(), Err: a.bodyErr, GotConn: true, WroteRequest: true, StatusCode: a.status})
		return answer{}, err
	}

	switch {
	case a.op.pageObject() != "":
		if err := checkPage(a.page, a.op); err != nil {
			return answer{}, &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "malformed_body", StatusCode: a.status, Err: err}
		}
		return answer{}, nil
	case a.op.refunds():
		refund, err := refundOf(a.refund)
		return answer{refund: refund}, err
	default:
		charge, err := chargeOf(a.intent, "")
		return answer{charge: charge}, err
	}
}

// checkPage refuses a page that does not prove what it says (listing.check)
// for o: a search_result for a search, a list for a list.
func checkPage(page listing, o op) error {
	if page == nil {
		return errors.New("answer is not a " + o.pageObject())
	}
	return page.check(o.pageObject())
}

// classifyAPIError classifies an answer Stripe gave as an error object. The
// rules, in order:
//
//   - A lookup: a retrieve's 404 resource_missing is psp.ErrNotFound; any
//     other error is unknown.
//   - idempotency_error: the key was used before with other parameters, so
//     a request with this key exists: unknown (idempotency_key_reused).
//   - 409: a request with this key is still executing, and it may apply:
//     unknown (idempotency_key_in_use, conflict).
//   - A refund that Stripe refused for the charge's state (refusesRefund):
//     a failed refund with Stripe's code as its failure code, a value.
//   - A capture or cancel that Stripe refused for the intent's state or
//     the amount (refusesOperation): a failed charge without an id whose
//     decline code is Stripe's code, or psp.CodeHoldExpired when the hold
//     had expired (operationRefusal), a value (the adapter fills in the
//     request: psp.OperationRequest.Refused).
//   - A charge whose error carries the PaymentIntent: the intent's state
//     decides (chargeOf); a card error's decline_code, else its code, is
//     the decline code. A card decline is a failed charge: a value.
//   - A charge's card error without an intent: unknown
//     (card_error_without_intent).
//   - 5xx: unknown (status_NNN); Stripe saves a 500 for the key.
//   - 429: refused before execution: not applied (lock_timeout,
//     rate_limited).
//   - 401, 403: not applied (authentication_failed, permission_denied).
//   - 400, 404 invalid_request_error: refused by validation before
//     execution: not applied (invalid_request).
//   - Anything else: unknown (status_NNN).
//
// A PaymentIntent inside an error names the intent, never a refund: only
// for a charge's calls does it become the error's ProviderID, which a
// refund's lookup would otherwise retrieve as a refund's id.
func classifyAPIError(a attempt, e *stripego.Error) (answer, error) {
	status := cmp.Or(a.status, e.HTTPStatusCode)
	fail := func(kind error, reason string) (answer, error) {
		pspErr := &psp.Error{Kind: kind, Reason: reason, StatusCode: status, ProviderCode: string(e.Code), Err: apiError{
			typ: string(e.Type), code: string(e.Code), declineCode: string(e.DeclineCode), status: status, requestID: e.RequestID,
		}}
		if e.PaymentIntent != nil && !a.op.refunds() {
			pspErr.ProviderID = e.PaymentIntent.ID
		}
		return answer{}, pspErr
	}
	statusReason := "status_" + strconv.Itoa(status)
	refusal, refused := refusesRefund(status, e)

	if !a.op.pspOp().Applies() {
		if a.op.retrieves() && status == http.StatusNotFound && e.Code == stripego.ErrorCodeResourceMissing && a.bodyErr == nil {
			return answer{}, psp.ErrNotFound
		}
		return fail(psp.ErrUnknownOutcome, statusReason)
	}

	switch {
	case e.Type == stripego.ErrorTypeIdempotency:
		return fail(psp.ErrUnknownOutcome, "idempotency_key_reused")
	case status == http.StatusConflict && e.Code == stripego.ErrorCodeIdempotencyKeyInUse:
		return fail(psp.ErrUnknownOutcome, "idempotency_key_in_use")
	case status == http.StatusConflict:
		return fail(psp.ErrUnknownOutcome, "conflict")
	case a.op == opRefund && refused:
		return answer{refund: psp.Refund{Status: psp.StatusFailed, FailureCode: refusal}}, nil
	case (a.op == opCapture || a.op == opCancel) && refusesOperation(status, e):
		return answer{charge: psp.Charge{Status: psp.StatusFailed, DeclineCode: operationRefusal(e)}}, nil
	case a.op == opCharge && e.PaymentIntent != nil && e.PaymentIntent.ID != "":
		declineCode := ""
		if e.Type == stripego.ErrorTypeCard {
			declineCode = cmp.Or(string(e.DeclineCode), string(e.Code))
		}
		charge, err := chargeOf(e.PaymentIntent, declineCode)
		return answer{charge: charge}, err
	case a.op == opCharge && e.Type == stripego.ErrorTypeCard:
		return fail(psp.ErrUnknownOutcome, "card_error_without_intent")
	case status >= 500:
		return fail(psp.ErrUnknownOutcome, statusReason)
	case status == http.StatusTooManyRequests && e.Code == stripego.ErrorCodeLockTimeout:
		return fail(psp.ErrNotApplied, "lock_timeout")
	case status == http.StatusTooManyRequests:
		return fail(psp.ErrNotApplied, "rate_limited")
	case status == http.StatusUnauthorized:
		return fail(psp.ErrNotApplied, "authentication_failed")
	case status == http.StatusForbidden:
		return fail(psp.ErrNotApplied, "permission_denied")
	case (status == http.StatusBadRequest || status == http.StatusNotFound) && e.Type == stripego.ErrorTypeInvalidRequest:
		return fail(psp.ErrNotApplied, "invalid_request")
	default:
		return fail(psp.ErrUnknownOutcome, statusReason)
	}
}

// refundRefusals are the codes of Stripe's 400 invalid_request_error with
// which it refuses a refund for the state of the charge or the intent, not
// for the request's form: the charge is refunded already, the amount is
// more than Stripe allows, the charge is disputed or not refundable, or the
// PaymentIntent is in a state no refund applies to. Each is one of the
// error codes Stripe documents (its OpenAPI spec's api_errors.code, from
// which stripe-go's ErrorCode constants are generated), and each describes
// the charge, which a re-send with the same key cannot change. Nothing else
// ends a refund: a 400 without a code, whatever its param or message, has
// the shape of a request Stripe refused for its form (an API version the
// account does not accept, a parameter it rejects), which says nothing
// about the charge. docs/refunds.md ("Stripe's refusals, and what they rest
// on") has the evidence and the cost.
var refundRefusals = map[stripego.ErrorCode]bool{
	stripego.ErrorCodeChargeAlreadyRefunded:        true,
	stripego.ErrorCodeAmountTooLarge:               true,
	stripego.ErrorCodeChargeNotRefundable:          true,
	stripego.ErrorCodeChargeDisputed:               true,
	stripego.ErrorCodeRefundDisputedPayment:        true,
	stripego.ErrorCodePaymentIntentUnexpectedState: true,
}

// refusesRefund reports whether e, answering a refund, is Stripe's decisive
// refusal of it, and the failure code it stands for: a 400
// invalid_request_error whose code is one of refundRefusals, whatever its
// param; the failure code is Stripe's. A refusal Stripe replays is the
// refusal of the request's first execution, as final as a fresh one.
func refusesRefund(status int, e *stripego.Error) (string, bool) {
	if status != http.StatusBadRequest || e.Type != stripego.ErrorTypeInvalidRequest || !refundRefusals[e.Code] {
		return "", false
	}
	return string(e.Code), true
}

// refusesOperation reports whether e, answering a capture or a cancel, is
// Stripe's decisive refusal of it: a 400 invalid_request_error whose code
// is payment_intent_unexpected_state (the intent is not requires_capture:
// captured, canceled, or released when its authorization expired) or
// amount_too_large (more than amount_capturable). Each describes the
// intent, which a re-send with the same key cannot change; any other 400
// is the request's form, not applied.
func refusesOperation(status int, e *stripego.Error) bool {
	return status == http.StatusBadRequest && e.Type == stripego.ErrorTypeInvalidRequest &&
		(e.Code == stripego.ErrorCodePaymentIntentUnexpectedState || e.Code == stripego.ErrorCodeAmountTooLarge ||
			e.Code == stripego.ErrorCodeChargeExpiredForCapture)
}

// operationRefusal is the failure code of a refused capture or cancel:
// psp.CodeHoldExpired when the refusal shows the hold expired (the intent
// it carries canceled automatic, which is how Stripe releases an expired
// authorization, or charge_expired_for_capture), so that a merchant reads
// the same code from every provider; else Stripe's code.
func operationRefusal(e *stripego.Error) string {
	pi := e.PaymentIntent
	if e.Code == stripego.ErrorCodeChargeExpiredForCapture ||
		pi != nil && pi.Status == stripego.PaymentIntentStatusCanceled && pi.CancellationReason == stripego.PaymentIntentCancellationReasonAutomatic {
		return psp.CodeHoldExpired
	}
	return string(e.Code)
}

// chargeOf maps a PaymentIntent to what it proves. succeeded is a charge;
// requires_payment_method after a failed confirmation, and canceled, are
// declines (a value: no money moved, and none will without a new
// confirmation, which only we could send); declineCode, when set, is the
// decline code, else the last payment error's. Every other status
// (processing, requires_action, requires_confirmation) is not final: an
// unknown outcome whose ProviderID lets the reconciler retrieve the intent
// by id. requires_payment_method without a payment error is one too: it
// was never confirmed, which we always ask for.
//
// An intent created to be captured later (capture_method manual) is
// authorized and held in requires_capture (psp.StatusRequiresCapture), a
// value; canceled is psp.StatusCanceled, released by a cancel or when its
// authorization expired; succeeded is captured, AmountCaptured its
// amount_received.
func chargeOf(pi *stripego.PaymentIntent, declineCode string) (psp.Charge, error) {
	if pi == nil || pi.ID == "" || pi.Status == "" {
		return psp.Charge{}, &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "malformed_body", Err: errors.New("payment intent without id or status")}
	}
	charge := psp.Charge{
		ID:        pi.ID,
		Amount:    pi.Amount,
		Currency:  strings.ToUpper(string(pi.Currency)),
		Reference: pi.Metadata[MetadataKey],
	}
	if lpe := pi.LastPaymentError; lpe != nil {
		declineCode = cmp.Or(declineCode, string(lpe.DeclineCode), string(lpe.Code))
	}
	unknown := func(reason string) (psp.Charge, error) {
		return psp.Charge{}, &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: reason, ProviderID: pi.ID,
			Err: fmt.Errorf("payment intent %s is %s", pi.ID, pi.Status)}
	}

	later := pi.CaptureMethod == stripego.PaymentIntentCaptureMethodManual
	switch pi.Status {
	case stripego.PaymentIntentStatusSucceeded:
		charge.Status = psp.StatusSucceeded
		if later {
			charge.AmountCaptured = pi.AmountReceived
		}
		return charge, nil
	case stripego.PaymentIntentStatusRequiresCapture:
		if !later {
			return unknown("intent_requires_capture")
		}
		charge.Status = psp.StatusRequiresCapture
		return charge, nil
	case stripego.PaymentIntentStatusCanceled:
		if later {
			charge.Status = psp.StatusCanceled
			return charge, nil
		}
		charge.Status, charge.DeclineCode = psp.StatusFailed, cmp.Or(declineCode, "canceled")
		return charge, nil
	case stripego.PaymentIntentStatusRequiresPaymentMethod:
		if declineCode == "" {
			return unknown("intent_requires_payment_method")
		}
		charge.Status, charge.DeclineCode = psp.StatusFailed, declineCode
		return charge, nil
	case stripego.PaymentIntentStatusProcessing,
		stripego.PaymentIntentStatusRequiresAction,
		stripego.PaymentIntentStatusRequiresConfirmation:
		return unknown("intent_" + string(pi.Status))
	default:
		return unknown("unknown_status")
	}
}

// refundOf maps a Stripe Refund to what it proves. succeeded is a
// refund; failed and canceled are a failed refund (a value: the money did
// not reach the customer, or never left), whose failure code is Stripe's
// failure_reason, else the status. pending and requires_action are not
// final: an unknown outcome whose ProviderID lets the reconciler retrieve
// the refund by id; so is a status we do not know.
func refundOf(r *stripego.Refund) (psp.Refund, error) {
	if r == nil || r.ID == "" || r.Status == "" {
		return psp.Refund{}, &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "malformed_body", Err: errors.New("refund without id or status")}
	}
	refund := psp.Refund{
		ID:        r.ID,
		Amount:    r.Amount,
		Currency:  strings.ToUpper(string(r.Currency)),
		Reference: r.Metadata[MetadataRefundKey],
	}
	if r.PaymentIntent != nil {
		refund.Charge = r.PaymentIntent.ID
	}
	unknown := func(reason string) (psp.Refund, error) {
		return psp.Refund{}, &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: reason, ProviderID: r.ID,
			Err: fmt.Errorf("refund %s is %s", r.ID, r.Status)}
	}

	switch r.Status {
	case stripego.RefundStatusSucceeded:
		refund.Status = psp.StatusSucceeded
		return refund, nil
	case stripego.RefundStatusFailed, stripego.RefundStatusCanceled:
		refund.Status, refund.FailureCode = psp.StatusFailed, cmp.Or(string(r.FailureReason), string(r.Status))
		return refund, nil
	case stripego.RefundStatusPending, stripego.RefundStatusRequiresAction:
		return unknown("refund_" + string(r.Status))
	default:
		return unknown("unknown_status")
	}
}

// matchReference decides a complete scan: the intents whose metadata holds
// reference. None is psp.ErrNotFound, one is that intent (chargeOf), more
// than one is an unknown outcome: two intents for one charge would be a
// double charge, which a person must look at, never a pick.
func matchReference(intents []*stripego.PaymentIntent, reference string) (psp.Charge, error) {
	pi, err := matchOne(intents, MetadataKey, reference)
	if err != nil {
		return psp.Charge{}, err
	}
	return chargeOf(pi, "")
}

// matchRefund decides a complete list of a charge's refunds: the refunds
// whose metadata holds reference. None is psp.ErrNotFound, one is that
// refund (refundOf), more than one is an unknown outcome: two refunds for
// one of ours would be a double refund, for a person to look at.
func matchRefund(refunds []*stripego.Refund, reference string) (psp.Refund, error) {
	r, err := matchOne(refunds, MetadataRefundKey, reference)
	if err != nil {
		return psp.Refund{}, err
	}
	return refundOf(r)
}

// matchOne returns the one item whose metadata key holds reference:
// psp.ErrNotFound for none, an unknown outcome (multiple_matches) naming
// them all for more than one.
func matchOne[T any](items []*T, key, reference string) (*T, error) {
	var matches []*T
	var ids []string
	for _, item := range items {
		if item != nil && metadataOf(item)[key] == reference {
			matches = append(matches, item)
			ids = append(ids, idOf(item))
		}
	}
	switch len(matches) {
	case 0:
		return nil, psp.ErrNotFound
	case 1:
		return matches[0], nil
	default:
		return nil, &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "multiple_matches",
			Err: fmt.Errorf("%d objects carry this reference: %s", len(matches), strings.Join(ids, ", "))}
	}
}

// metadataOf is the metadata of a page's item.
func metadataOf[T any](item *T) map[string]string {
	switch v := any(item).(type) {
	case *stripego.PaymentIntent:
		return v.Metadata
	case *stripego.Refund:
		return v.Metadata
	default:
		return nil
	}
}

// apiError is what a psp.Error keeps of a Stripe error: its type, codes,
// status and request id. Never its message, which can quote a payment
// method ("No such PaymentMethod: 'pm_…'"), nor the objects it carries;
// stripe-go's own Error() prints both.
type apiError struct {
	typ, code, declineCode string
	status                 int
	requestID              string
}

// Error describes the Stripe error as "stripe: 402 card_error (code
// card_declined, decline_code insufficient_funds, request req_1)".
func (e apiError) Error() string {
	return psp.ErrorText("stripe", e.status, e.typ, "code", e.code, "decline_code", e.declineCode, "request", e.requestID)
}
