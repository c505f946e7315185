package fakepsp

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// This file is the Stripe protocol's capture and cancel of a PaymentIntent
// created with capture_method=manual: POST
// /v1/payment_intents/{id}/capture and /cancel, form-encoded. Each is the
// operation every protocol shares (capture.go), under Stripe's key rules
// (keysAtExecution); what is modeled is in docs/provider.md ("The Stripe
// protocol").

// The cancellation reasons a cancel may give, Stripe's (its OpenAPI
// description's enum for the cancel's cancellation_reason).
var stripeCancellationReasons = []string{"duplicate", "fraudulent", "requested_by_customer", "abandoned"}

// handleStripeCapture serves POST /v1/payment_intents/{id}/capture.
func (s *Server) handleStripeCapture(w http.ResponseWriter, r *http.Request) {
	s.serveStripeHold(w, r, kindCapture)
}

// handleStripeCancel serves POST /v1/payment_intents/{id}/cancel.
func (s *Server) handleStripeCancel(w http.ResponseWriter, r *http.Request) {
	s.serveStripeHold(w, r, kindCancel)
}

// serveStripeHold serves a capture or a cancel (kind) of the Stripe
// protocol. An unknown PaymentIntent is 404 resource_missing, refused in
// front of the idempotency layer as a refund's is: nothing is saved for
// the key.
func (s *Server) serveStripeHold(w http.ResponseWriter, r *http.Request, kind string) {
	id := r.PathValue("id")
	intent := s.find(kindCharge, id)
	if intent == nil {
		writeStripeError(w, http.StatusNotFound, stripeParamError("intent", "resource_missing", "No such payment_intent: '"+id+"'"))
		return
	}
	s.serveStripePost(w, r, stripeHoldAnswers{kind: kind, s: s}, func(form url.Values) (request, *stripeError) {
		params, problem := decodeStripeHold(form, kind)
		params.Charge = id
		// The fingerprint names the endpoint and the intent: Stripe's keys
		// are one namespace, so another request's key reused here is a
		// reuse with other parameters. A capture or cancel is filed under
		// its intent's tenant.
		return request{tag: intent.TenantTag, op: params,
			hash: fingerprint("%s\x00%s\x00%s", kind, id, stripeHash(form)), idPrefix: kind[:3] + "_"}, problem
	})
}

// decodeStripeHold validates the parameters of a capture (amount_to_capture,
// all that is capturable when absent) or a cancel (cancellation_reason).
// Every other parameter Stripe has (application_fee_amount, final_capture,
// metadata, statement_descriptor_suffix, …) is unknown to the fake, and
// refused rather than ignored.
func decodeStripeHold(form url.Values, kind string) (holdParams, *stripeError) {
	params := holdParams{Kind: kind}
	for _, name := range sortedNames(form) {
		value := form.Get(name)
		switch {
		case kind == kindCapture && name == "amount_to_capture":
			amount, ok := parsePositiveInteger(value)
			if !ok {
				e := stripeParamError(name, "parameter_invalid_integer", "amount_to_capture must be a positive integer in the currency's minor unit.")
				return holdParams{}, &e
			}
			params.Amount = amount
		case kind == kindCancel && name == "cancellation_reason":
			if !slices.Contains(stripeCancellationReasons, value) {
				e := stripeParamError(name, "", "Invalid cancellation_reason: must be one of duplicate, fraudulent, requested_by_customer or abandoned.")
				return holdParams{}, &e
			}
			params.Reason = value
		default:
			e := stripeParamError(name, "parameter_unknown", "Received unknown parameter: "+name+".")
			return holdParams{}, &e
		}
	}
	return params, nil
}

// stripeHoldAnswers words a capture's or a cancel's (kind's) answers as
// Stripe does; s finds a refused operation's intent.
type stripeHoldAnswers struct {
	kind string
	s    *Server
}

// result answers with the PaymentIntent as the operation left it, or with
// the refusal the key saved, as Stripe words it (docs/provider.md): a 400
// invalid_request_error, amount_too_large for a capture beyond what is
// capturable, payment_intent_unexpected_state for an intent in a status
// the operation does not apply to (captured, canceled, declined, or its
// hold expired: Stripe cancels it then, automatic), carrying the intent.
// The status of an intent so refused is final, so the intent shown now is
// the one the refusal saw.
func (a stripeHoldAnswers) result(w http.ResponseWriter, c *record) {
	switch {
	case c.FailureCode == "":
		writeJSON(w, http.StatusOK, stripeIntent(c.charge, c.leftHeld()))
	case c.FailureCode == captureExceedsAuthorization:
		writeStripeError(w, http.StatusBadRequest, stripeError{Type: stripeInvalidRequest, Code: "amount_too_large", Param: "amount_to_capture",
			Message: fmt.Sprintf("The payment could not be captured because the requested capture amount is greater than the amount you can capture for this charge (%d %s).",
				c.Capturable, strings.ToLower(c.Currency))})
	default:
		status := stripeStatus(holdState{status: c.HeldStatus})
		e := stripeError{Type: stripeInvalidRequest, Code: "payment_intent_unexpected_state",
			Message: "This PaymentIntent could not be captured because it has a status of " + status +
				". Only a PaymentIntent with one of the following statuses may be captured: requires_capture."}
		if c.Refused == kindCancel {
			e.Message = "You cannot cancel this PaymentIntent because it has a status of " + status +
				". Only a PaymentIntent with one of the following statuses may be canceled: requires_capture (the only one the fake cancels)."
		}
		if intent := a.s.find(kindCharge, c.Charge); intent != nil {
			shown := a.s.stripeIntentNow(intent)
			e.PaymentIntent = &shown
		}
		writeStripeError(w, http.StatusBadRequest, e)
	}
}

func (a stripeHoldAnswers) failure(w http.ResponseWriter, f failure) {
	writeStripeFailure(w, f, a.kind)
}
