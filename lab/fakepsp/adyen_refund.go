package fakepsp

import (
	"net/http"
)

// This file is the Adyen protocol's refund: POST
// /v71/payments/{paymentPspReference}/refunds. Adyen acknowledges a refund
// request at once (201, status "received") and tells its outcome only in a
// REFUND notification; the fake decides it in the request, under the lock
// every refund of the payment is decided under (refund.go), and answers
// the acknowledgement whatever the decision, which a REFUND notification
// then tells (adyen_notify.go).

// The reasons a refund may give (merchantRefundReason), Adyen's, and the
// ledger's reason for each; RETURN and OTHER have none of ours.
var adyenRefundReasons = map[string]string{
	"FRAUD":            "fraudulent",
	"CUSTOMER REQUEST": "requested_by_customer",
	"DUPLICATE":        "duplicate",
	"RETURN":           "",
	"OTHER":            "",
}

// adyenRefundRequest is the part of Adyen's PaymentRefundRequest the fake
// models; any other field (lineItems, splits, store, …) is refused.
type adyenRefundRequest struct {
	Amount               *adyenAmountIn `json:"amount"`
	MerchantAccount      string         `json:"merchantAccount"`
	Reference            string         `json:"reference"`
	MerchantRefundReason *string        `json:"merchantRefundReason"`
}

// handleAdyenRefund serves POST /v71/payments/{paymentPspReference}/refunds.
func (s *Server) handleAdyenRefund(w http.ResponseWriter, r *http.Request) {
	s.serveAdyenPost(w, r, adyenRefundAnswers{}, func(data []byte) (request, *adyenServiceError) {
		var body adyenRefundRequest
		if problem := decodeAdyenJSON(data, &body); problem != nil {
			return request{}, problem
		}
		amount, problem := body.Amount.read()
		if problem != nil {
			return request{}, problem
		}
		reason, known := "", true
		if body.MerchantRefundReason != nil {
			reason, known = adyenRefundReasons[*body.MerchantRefundReason]
		}
		if !known {
			return request{}, adyenInvalid("702", "Field 'merchantRefundReason' is not one of FRAUD, CUSTOMER REQUEST, RETURN, DUPLICATE, OTHER")
		}
		// A payment that was refused is refunded nothing, which the REFUND
		// notification tells.
		payment, problem := s.adyenPaymentOf(r, body.MerchantAccount, body.Reference, &amount)
		if problem != nil {
			return request{}, problem
		}
		params := refundParams{Charge: payment.ID, Amount: amount.Value, Reference: body.Reference, Reason: reason,
			MerchantAccount: body.MerchantAccount, Acknowledged: true}
		// The refund's tenant is its payment's; the fingerprint names the
		// endpoint alone, as a payment's does.
		return request{tag: payment.TenantTag, reference: params.Reference, op: params, hash: fingerprint("adyen\x00refund")}, nil
	})
}

// adyenRefundResponse is Adyen's PaymentRefundResponse: the request
// received, not its outcome.
type adyenRefundResponse struct {
	MerchantAccount     string      `json:"merchantAccount"`
	PaymentPSPReference string      `json:"paymentPspReference"`
	PSPReference        string      `json:"pspReference"`
	Reference           string      `json:"reference"`
	Status              string      `json:"status"`
	Amount              adyenAmount `json:"amount"`
}

// adyenRefundAnswers words a refund's answers as Adyen does.
type adyenRefundAnswers struct{}

// result acknowledges the refund, applied or refused alike: the record of
// either has the pspReference the request was given and the amount asked.
func (adyenRefundAnswers) result(w http.ResponseWriter, c *record) {
	writeJSON(w, http.StatusCreated, adyenRefundResponse{
		MerchantAccount: c.MerchantAccount, PaymentPSPReference: c.Charge, PSPReference: c.ID,
		Reference: c.Reference, Status: "received", Amount: adyenAmount{Currency: c.Currency, Value: c.Amount},
	})
}

func (adyenRefundAnswers) failure(w http.ResponseWriter, f failure) {
	writeAdyenFailure(w, f, "refund")
}
