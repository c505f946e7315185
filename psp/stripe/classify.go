package stripe

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	stripego "github.com/stripe/stripe-go/v82"

	"chargeflow/psp"
)

// The PaymentIntent metadata keys the adapter files a charge under.
const (
	// MetadataKey holds our reference (chargeflow's charge id); a lookup by
	// reference matches on it.
	MetadataKey = "chargeflow_charge"

	// MetadataTenantKey holds the charge's tenant tag, when it has one, so
	// that Stripe's records (and the fake's audit) can be read per tenant.
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
)

// pspOp is the psp.Op an op is recorded as: a charge, or a lookup.
func (o op) pspOp() psp.Op {
	if o == opCharge {
		return psp.OpCharge
	}
	return psp.OpLookup
}

// intentPage is one page of GET /v1/payment_intents, or of its search, as
// stripe-go decodes it. stripe-go's own page types are unexported and its
// iterators hide has_more, which the scan must see to know that it read
// every page and the search to know that it saw every hit.
type intentPage struct {
	stripego.APIResource
	HasMore bool                      `json:"has_more"`
	Object  string                    `json:"object"`
	Data    []*stripego.PaymentIntent `json:"data"`
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

	// page is the decoded page of a list that stripe-go returned without
	// error.
	page *intentPage
}

// classify turns one request to Stripe into a charge or an error, and is
// the only place where that decision is made. The rules, in order:
//
//   - No answer: the transport rules of psp.Classify (not applied only for
//     a charge whose connection was never obtained; else unknown).
//   - A Stripe error: classifyAPIError.
//   - An answer stripe-go could not read or decode, or a non-2xx one that
//     is not a Stripe error (a proxy's page, a 3xx): the status rules of
//     psp.Classify over an unreadable body (a 2xx is malformed_body).
//   - A 2xx list or search page: nil error when it is a well-formed page
//     (the scan or the search reads it), malformed_body otherwise.
//   - A 2xx PaymentIntent: chargeOf.
//
// A "not applied" whose answer Stripe replayed is made unknown
// (replayed_error): Stripe saves an answer only once it began executing
// the request, so a replayed refusal is no longer a refusal before
// execution. A lookup is never "not applied": a lookup that failed proves
// nothing about the charge.
func classify(a attempt) (psp.Charge, error) {
	charge, err := classifyAnswer(a)
	var pspErr *psp.Error
	if errors.As(err, &pspErr) && pspErr.Kind == psp.ErrNotApplied {
		switch {
		case a.op != opCharge:
			pspErr.Kind = psp.ErrUnknownOutcome
		case a.replayed:
			pspErr.Kind, pspErr.Reason = psp.ErrUnknownOutcome, "replayed_error"
		}
	}
	return charge, err
}

// classifyAnswer is classify without the final rules on "not applied".
func classifyAnswer(a attempt) (psp.Charge, error) {
	if a.status == 0 {
		return psp.Classify(psp.Attempt{Op: a.op.pspOp(), Err: a.err, GotConn: a.gotConn, WroteRequest: a.wroteRequest})
	}

	var stripeErr *stripego.Error
	if errors.As(a.err, &stripeErr) {
		return classifyAPIError(a, stripeErr)
	}

	if a.err != nil || a.status < 200 || a.status > 299 {
		// stripe-go's decoding errors quote the body, which can hold the
		// payment method and the metadata: only the status and the body's
		// read error are kept.
		return psp.Classify(psp.Attempt{Op: a.op.pspOp(), Err: a.bodyErr, GotConn: true, WroteRequest: true, StatusCode: a.status})
	}

	if a.op == opList || a.op == opSearch {
		if err := checkPage(a.page, a.op); err != nil {
			return psp.Charge{}, &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "malformed_body", StatusCode: a.status, Err: err}
		}
		return psp.Charge{}, nil
	}
	return chargeOf(a.intent, "")
}

// checkPage refuses a page that does not prove what it says: one that is
// not a list (a search_result, for a search), has an intent without an id,
// or claims more pages after an empty one (a scan could not page on from
// it).
func checkPage(page *intentPage, o op) error {
	object := "list"
	if o == opSearch {
		object = "search_result"
	}
	switch {
	case page == nil || page.Object != object:
		return errors.New("answer is not a " + object)
	case page.HasMore && len(page.Data) == 0:
		return errors.New("empty page with has_more")
	}
	for _, pi := range page.Data {
		if pi == nil || pi.ID == "" {
			return errors.New("list item without an id")
		}
	}
	return nil
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
//   - An error that carries the PaymentIntent: the intent's state decides
//     (chargeOf); a card error's decline_code, else its code, is the
//     decline code. A card decline is a failed charge: a value.
//   - A card error without an intent: unknown (card_error_without_intent).
//   - 5xx: unknown (status_NNN); Stripe saves a 500 for the key.
//   - 429: refused before execution: not applied (lock_timeout,
//     rate_limited).
//   - 401, 403: not applied (authentication_failed, permission_denied).
//   - 400, 404 invalid_request_error: refused by validation before
//     execution: not applied (invalid_request).
//   - Anything else: unknown (status_NNN).
func classifyAPIError(a attempt, e *stripego.Error) (psp.Charge, error) {
	status := cmp.Or(a.status, e.HTTPStatusCode)
	fail := func(kind error, reason string) (psp.Charge, error) {
		pspErr := &psp.Error{Kind: kind, Reason: reason, StatusCode: status, ProviderCode: string(e.Code), Err: apiError{
			typ: string(e.Type), code: string(e.Code), declineCode: string(e.DeclineCode), status: status, requestID: e.RequestID,
		}}
		if e.PaymentIntent != nil {
			pspErr.ProviderID = e.PaymentIntent.ID
		}
		return psp.Charge{}, pspErr
	}
	statusReason := "status_" + strconv.Itoa(status)

	if a.op != opCharge {
		if a.op == opRetrieve && status == http.StatusNotFound && e.Code == stripego.ErrorCodeResourceMissing && a.bodyErr == nil {
			return psp.Charge{}, psp.ErrNotFound
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
	case e.PaymentIntent != nil && e.PaymentIntent.ID != "":
		declineCode := ""
		if e.Type == stripego.ErrorTypeCard {
			declineCode = cmp.Or(string(e.DeclineCode), string(e.Code))
		}
		return chargeOf(e.PaymentIntent, declineCode)
	case e.Type == stripego.ErrorTypeCard:
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

// chargeOf maps a PaymentIntent to what it proves. succeeded is a charge;
// requires_payment_method after a failed confirmation, and canceled, are
// declines (a value: no money moved, and none will without a new
// confirmation, which only we could send); declineCode, when set, is the
// decline code, else the last payment error's. Every other status
// (processing, requires_action, requires_confirmation, requires_capture)
// is not final: an unknown outcome whose ProviderID lets the reconciler
// retrieve the intent by id. requires_payment_method without a payment
// error is one too: it was never confirmed, which we always ask for.
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

	switch pi.Status {
	case stripego.PaymentIntentStatusSucceeded:
		charge.Status = psp.StatusSucceeded
		return charge, nil
	case stripego.PaymentIntentStatusRequiresPaymentMethod:
		if declineCode == "" {
			return unknown("intent_requires_payment_method")
		}
		charge.Status, charge.DeclineCode = psp.StatusFailed, declineCode
		return charge, nil
	case stripego.PaymentIntentStatusCanceled:
		charge.Status, charge.DeclineCode = psp.StatusFailed, cmp.Or(declineCode, "canceled")
		return charge, nil
	case stripego.PaymentIntentStatusProcessing,
		stripego.PaymentIntentStatusRequiresAction,
		stripego.PaymentIntentStatusRequiresConfirmation,
		stripego.PaymentIntentStatusRequiresCapture:
		return unknown("intent_" + string(pi.Status))
	default:
		return unknown("unknown_status")
	}
}

// matchReference decides a complete scan: the intents whose metadata holds
// reference. None is psp.ErrNotFound, one is that intent (chargeOf), more
// than one is an unknown outcome: two intents for one charge would be a
// double charge, which a person must look at, never a pick.
func matchReference(intents []*stripego.PaymentIntent, reference string) (psp.Charge, error) {
	var matches []*stripego.PaymentIntent
	for _, pi := range intents {
		if pi != nil && pi.Metadata[MetadataKey] == reference {
			matches = append(matches, pi)
		}
	}
	switch len(matches) {
	case 0:
		return psp.Charge{}, psp.ErrNotFound
	case 1:
		return chargeOf(matches[0], "")
	default:
		ids := make([]string, len(matches))
		for i, pi := range matches {
			ids[i] = pi.ID
		}
		return psp.Charge{}, &psp.Error{Kind: psp.ErrUnknownOutcome, Reason: "multiple_matches",
			Err: fmt.Errorf("%d payment intents carry this reference: %s", len(matches), strings.Join(ids, ", "))}
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
	var b strings.Builder
	fmt.Fprintf(&b, "stripe: %d %s", e.status, cmp.Or(e.typ, "error"))
	var details []string
	if e.code != "" {
		details = append(details, "code "+e.code)
	}
	if e.declineCode != "" {
		details = append(details, "decline_code "+e.declineCode)
	}
	if e.requestID != "" {
		details = append(details, "request "+e.requestID)
	}
	if len(details) > 0 {
		b.WriteString(" (" + strings.Join(details, ", ") + ")")
	}
	return b.String()
}
