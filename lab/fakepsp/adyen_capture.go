package fakepsp

import (
	"net/http"
)

// This file is the Adyen protocol's capture and cancel of a payment
// authorised for manual capture: POST
// /v71/payments/{paymentPspReference}/captures and /cancels. Like a
// refund, each is acknowledged at once (201, status "received") and its
// outcome told only in a notification (adyen_notify.go): the fake decides
// it in the request, under the lock every operation on the payment is
// decided under (capture.go), and answers the acknowledgement whatever the
// decision. A capture or cancel refused (the payment not held any more, a
// capture beyond what it holds, a hold expired) applies nothing and is
// saved for its key with the pspReference it was acknowledged with.

// adyenCaptureRequest is the part of Adyen's PaymentCaptureRequest the
// fake models; any other field (lineItems, splits, …) is refused.
type adyenCaptureRequest struct {
	Amount          *adyenAmountIn `json:"amount"`
	MerchantAccount string         `json:"merchantAccount"`
	Reference       string         `json:"reference"`
}

// adyenCancelRequest is the part of Adyen's PaymentCancelRequest the fake
// models: a cancel names no amount.
type adyenCancelRequest struct {
	MerchantAccount string `json:"merchantAccount"`
	Reference       string `json:"reference"`
}

// handleAdyenCapture serves POST
// /v71/payments/{paymentPspReference}/captures.
func (s *Server) handleAdyenCapture(w http.ResponseWriter, r *http.Request) {
	s.serveAdyenPost(w, r, adyenModificationAnswers{kind: kindCapture}, func(data []byte) (request, *adyenServiceError) {
		var body adyenCaptureRequest
		if problem := decodeAdyenJSON(data, &body); problem != nil {
			return request{}, problem
		}
		amount, problem := body.Amount.read()
		if problem != nil {
			return request{}, problem
		}
		return s.adyenModification(r, kindCapture, body.MerchantAccount, body.Reference, &amount)
	})
}

// handleAdyenCancel serves POST /v71/payments/{paymentPspReference}/cancels.
func (s *Server) handleAdyenCancel(w http.ResponseWriter, r *http.Request) {
	s.serveAdyenPost(w, r, adyenModificationAnswers{kind: kindCancel}, func(data []byte) (request, *adyenServiceError) {
		var body adyenCancelRequest
		if problem := decodeAdyenJSON(data, &body); problem != nil {
			return request{}, problem
		}
		return s.adyenModification(r, kindCancel, body.MerchantAccount, body.Reference, nil)
	})
}

// adyenModification makes the request of a capture (with its amount) or
// a cancel (amount nil) of the payment in the path. Anything the hold
// decides (capture.go) is acknowledged and told by the notification.
func (s *Server) adyenModification(r *http.Request, kind, merchantAccount, reference string, amount *adyenAmount) (request, *adyenServiceError) {
	payment, problem := s.adyenPaymentOf(r, merchantAccount, reference, amount)
	if problem != nil {
		return request{}, problem
	}
	params := holdParams{Kind: kind, Charge: payment.ID, Reference: reference, MerchantAccount: merchantAccount, Acknowledged: true}
	if amount != nil {
		params.Amount = amount.Value
	} else {
		// A cancel's record carries the payment's amount, which its
		// CANCELLATION names, a refusal's too, as Adyen's does.
		params.Amount = payment.Amount
	}
	// The operation's tenant is its payment's; the fingerprint names the
	// endpoint alone, as a payment's and a refund's do.
	return request{tag: payment.TenantTag, reference: reference, op: params, hash: fingerprint("adyen\x00%s", kind)}, nil
}

// adyenPaymentOf validates what every modification of a payment (a
// refund, a capture, a cancel) names: the merchant account and our
// reference, which the fake requires, and the payment in the path, one the
// merchant account holds, in amount's currency (nil: a cancel names none).
// A payment the merchant account does not hold is refused before
// execution, so nothing is saved for the key.
func (s *Server) adyenPaymentOf(r *http.Request, merchantAccount, reference string, amount *adyenAmount) (*record, *adyenServiceError) {
	if merchantAccount == "" {
		return nil, adyenMissing("merchantAccount")
	}
	if problem := readAdyenReference(reference); problem != nil {
		return nil, problem
	}
	payment := s.find(kindCharge, r.PathValue("paymentPspReference"))
	switch {
	case payment == nil || payment.MerchantAccount != merchantAccount:
		return nil, adyenInvalid("167", "Original pspReference required for this operation")
	case amount != nil && amount.Currency != payment.Currency:
		return nil, adyenInvalid("137", "Invalid amount specified")
	}
	return payment, nil
}

// adyenModificationResponse is Adyen's PaymentCaptureResponse (with its
// amount) and PaymentCancelResponse (without): the request received, not
// its outcome.
type adyenModificationResponse struct {
	MerchantAccount     string       `json:"merchantAccount"`
	PaymentPSPReference string       `json:"paymentPspReference"`
	PSPReference        string       `json:"pspReference"`
	Reference           string       `json:"reference"`
	Status              string       `json:"status"`
	Amount              *adyenAmount `json:"amount,omitempty"`
}

// adyenModificationAnswers words a capture's or a cancel's answers (kind)
// as Adyen does.
type adyenModificationAnswers struct{ kind string }

// result acknowledges the capture or cancel, applied or refused alike:
// the record of either has the pspReference the request was given.
func (a adyenModificationAnswers) result(w http.ResponseWriter, c *record) {
	answer := adyenModificationResponse{MerchantAccount: c.MerchantAccount, PaymentPSPReference: c.Charge,
		PSPReference: c.ID, Reference: c.Reference, Status: "received"}
	if a.kind == kindCapture {
		answer.Amount = &adyenAmount{Currency: c.Currency, Value: c.Amount}
	}
	writeJSON(w, http.StatusCreated, answer)
}

func (a adyenModificationAnswers) failure(w http.ResponseWriter, f failure) {
	writeAdyenFailure(w, f, a.kind)
}
