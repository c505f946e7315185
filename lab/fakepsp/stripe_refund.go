package fakepsp

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// This file is the Stripe protocol's refunds: POST /v1/refunds of a
// PaymentIntent, form-encoded as stripe-go sends it, GET /v1/refunds/{id}
// and GET /v1/refunds, both strongly consistent. The refund itself is the
// operation both protocols share (refund.go), under Stripe's key rules
// (keysAtExecution); what is modeled and how Stripe's errors were checked
// is in docs/provider.md ("The Stripe protocol").

// MetadataRefund is the metadata key chargeflow's Stripe adapter files a
// refund under: our refund id, the reference the ledger files the refund
// under. The fake requires it, as it requires MetadataCharge on a
// PaymentIntent.
const MetadataRefund = "chargeflow_refund"

// stripeRefund is the refund object as the fake shows it: the fields of
// Stripe's refund that the fake has values for, and the nulls a card
// refund has.
type stripeRefund struct {
	ID                     string            `json:"id"`
	Object                 string            `json:"object"`
	Amount                 int64             `json:"amount"`
	BalanceTransaction     *string           `json:"balance_transaction"`
	Charge                 string            `json:"charge"`
	Created                int64             `json:"created"`
	Currency               string            `json:"currency"`
	Metadata               map[string]string `json:"metadata"`
	PaymentIntent          string            `json:"payment_intent"`
	Reason                 *string           `json:"reason"`
	ReceiptNumber          *string           `json:"receipt_number"`
	SourceTransferReversal *string           `json:"source_transfer_reversal"`
	Status                 string            `json:"status"`
	TransferReversal       *string           `json:"transfer_reversal"`
}

// stripeRefundObject shows a refund as Stripe's refund object, derived from
// its ledger record alone, so that a create, a replay, a retrieve and a
// list say the same. Its charge is the PaymentIntent's latest_charge.
func stripeRefundObject(c *record) stripeRefund {
	metadata := c.Metadata
	if metadata == nil {
		// A refund the fake protocol made shows its reference where the
		// Stripe adapter would have put it.
		metadata = map[string]string{MetadataRefund: c.Reference}
	}
	refund := stripeRefund{
		ID:            c.ID,
		Object:        "refund",
		Amount:        c.Amount,
		Charge:        stripeChargeID(c.Charge),
		Created:       c.CreatedAt.Unix(),
		Currency:      strings.ToLower(c.Currency),
		Metadata:      metadata,
		PaymentIntent: c.Charge,
		Status:        "succeeded",
	}
	if c.Reason != "" {
		refund.Reason = &c.Reason
	}
	return refund
}

// handleStripeRefund serves POST /v1/refunds.
func (s *Server) handleStripeRefund(w http.ResponseWriter, r *http.Request) {
	s.serveStripePost(w, r, stripeRefundAnswers{}, func(form url.Values) (request, *stripeError) {
		params, problem := decodeStripeRefund(form)
		if problem != nil {
			return request{}, problem
		}
		// An unknown PaymentIntent is refused in front of the idempotency
		// layer, like an unknown PaymentMethod: Stripe resolves the objects
		// a request names before it executes it, so nothing is saved for
		// the key.
		if s.find(kindCharge, params.Charge) == nil {
			e := stripeParamError("payment_intent", "resource_missing", "No such payment_intent: '"+params.Charge+"'")
			return request{}, &e
		}
		// The fingerprint starts with the endpoint: Stripe's keys are one
		// namespace, so a PaymentIntent's key reused here is a reuse with
		// other parameters.
		return request{tag: params.Metadata[MetadataTenant], reference: params.Reference, op: params,
			hash: fingerprint("refund\x00%s", stripeHash(form)), idPrefix: "re_"}, nil
	})
}

// decodeStripeRefund validates the parameters of a refund create. Only a
// refund of a PaymentIntent is modeled; every parameter Stripe has beyond
// those below (charge, refund_application_fee, reverse_transfer, …) is
// unknown to the fake, and refused rather than ignored.
func decodeStripeRefund(form url.Values) (refundParams, *stripeError) {
	params := refundParams{Metadata: map[string]string{}}
	fail := func(param, code, message string) (refundParams, *stripeError) {
		e := stripeParamError(param, code, message)
		return refundParams{}, &e
	}

	for _, name := range sortedNames(form) {
		value := form.Get(name)
		switch {
		case name == "payment_intent", name == "amount":
			// Checked below.
		case name == "reason":
			if !validRefundReason(value) {
				return fail(name, "", "Invalid reason: must be one of duplicate, fraudulent or requested_by_customer.")
			}
			params.Reason = value
		case isStripeMetadata(name):
			if problem := addStripeMetadata(params.Metadata, name, value); problem != nil {
				return refundParams{}, problem
			}
		default:
			return fail(name, "parameter_unknown", "Received unknown parameter: "+name+".")
		}
	}
	if len(params.Metadata) > maxMetadataKeys {
		return fail("metadata", "", "At most 50 metadata keys are allowed.")
	}

	if params.Charge = form.Get("payment_intent"); params.Charge == "" {
		return fail("payment_intent", "parameter_missing",
			"Missing required param: payment_intent (this fake only refunds PaymentIntents).")
	}
	if amount := form.Get("amount"); amount != "" {
		var ok bool
		if params.Amount, ok = parsePositiveInteger(amount); !ok {
			return fail("amount", "parameter_invalid_integer", "amount must be a positive integer in the currency's minor unit.")
		}
	}
	if params.Reference = params.Metadata[MetadataRefund]; params.Reference == "" {
		return fail("metadata["+MetadataRefund+"]", "parameter_missing",
			"The fake provider files every refund under metadata["+MetadataRefund+"], our refund id: it is required.")
	}
	return params, nil
}

// stripeRefundAnswers words a refund's answers as Stripe does.
type stripeRefundAnswers struct{}

// result answers with the refund, or with the refusal the key saved, as
// Stripe words it (docs/provider.md): a 400 invalid_request_error whose code
// is charge_already_refunded for a charge with nothing left, and that has no
// code for an amount beyond what is left (param amount) or a PaymentIntent
// without a successful charge.
func (stripeRefundAnswers) result(w http.ResponseWriter, c *record) {
	switch {
	case c.isRefund():
		writeJSON(w, http.StatusOK, stripeRefundObject(c))
	case c.FailureCode == chargeNotRefundable:
		writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeInvalidRequest,
			Message: "This PaymentIntent (" + c.Charge + ") does not have a successful charge to refund."})
	case c.Refundable == 0:
		writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeInvalidRequest, Code: "charge_already_refunded",
			Message: "Charge " + stripeChargeID(c.Charge) + " has already been refunded."})
	default:
		currency := strings.ToLower(c.Currency)
		writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeInvalidRequest, Param: "amount",
			Message: fmt.Sprintf("Refund amount (%d %s) is greater than unrefunded amount on charge (%d %s).", c.Amount, currency, c.Refundable, currency)})
	}
}

func (stripeRefundAnswers) failure(w http.ResponseWriter, f failure) {
	writeStripeFailure(w, f, "refund")
}

// handleStripeRefundRetrieve serves GET /v1/refunds/{id}: strongly
// consistent, so a refund is there as soon as its create answered. A lookup
// rule's key_prefix is matched against the refund's reference, our refund
// id.
func (s *Server) handleStripeRefundRetrieve(w http.ResponseWriter, r *http.Request) {
	s.stripeRetrieve(w, r, stripeRetrieval{kind: kindRefund, name: "refund",
		show: func(c *record) any { return stripeRefundObject(c) }, failure: stripeRefundAnswers{}.failure})
}

// handleStripeRefundList serves GET /v1/refunds: newest first, with cursor
// pagination and created filters, of every refund or, with payment_intent,
// of one PaymentIntent's. It is strongly consistent, never lagged. A lookup
// rule's key_prefix is matched against the PaymentIntent's reference, our
// charge id, and "" for a list of every refund.
func (s *Server) handleStripeRefundList(w http.ResponseWriter, r *http.Request) {
	values := r.URL.Query()
	if !checkStripeQuery(w, values, append([]string{"payment_intent"}, stripePagingParams...)...) {
		return
	}
	paging, ok := s.readStripePaging(w, values, kindRefund, "refund")
	if !ok {
		return
	}
	var intent *record
	if id := values.Get("payment_intent"); id != "" {
		if intent = s.find(kindCharge, id); intent == nil {
			writeStripeError(w, http.StatusBadRequest, stripeParamError("payment_intent", "resource_missing", "No such payment_intent: '"+id+"'"))
			return
		}
		cursor, param := paging.after, "starting_after"
		if paging.before != nil {
			cursor, param = paging.before, "ending_before"
		}
		if cursor != nil && cursor.charge != intent {
			writeStripeError(w, http.StatusBadRequest, stripeParamError(param, "resource_missing",
				"No such refund of "+id+": '"+cursor.ID+"'."))
			return
		}
	}

	subject := ""
	if intent != nil {
		subject = intent.Reference
	}
	if _, answered := s.stripeLookupFaults(w, r, subject, false); answered {
		return
	}
	page, hasMore := paging.page(s.refundView(intent))
	list := stripeList[stripeRefund]{Object: "list", Data: []stripeRefund{}, HasMore: hasMore, URL: "/v1/refunds"}
	for _, c := range page {
		list.Data = append(list.Data, stripeRefundObject(c))
	}
	writeJSON(w, http.StatusOK, list)
}

// refundView returns the refunds of charge in ledger order, or every
// refund when charge is nil. Like ledgerView, the slice is taken under s.mu
// and read without it: both lists only grow, and a refund never changes
// once appended.
func (s *Server) refundView(charge *record) []*record {
	s.mu.Lock()
	defer s.mu.Unlock()
	if charge != nil {
		return charge.refunds
	}
	return s.refunds
}
