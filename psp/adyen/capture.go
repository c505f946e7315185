package adyen

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/chargeflow/chargeflow/psp"
)

// A capture and a cancel are Adyen modifications of an authorised
// payment, acknowledged at once (201, status "received") and settled only
// by a notification, as a refund is (docs/provider.md, "The Adyen
// adapter"). They move money as a charge does, so psp classifies their
// transport by a charge's rules (psp.Op.Applies).

// captureBody is the body of POST /payments/{paymentPspReference}/captures.
type captureBody struct {
	Amount          amount `json:"amount"`
	MerchantAccount string `json:"merchantAccount"`
	Reference       string `json:"reference"`
}

// cancelBody is the body of POST /payments/{paymentPspReference}/cancels:
// a cancel releases the whole authorisation, and names no amount.
type cancelBody struct {
	MerchantAccount string `json:"merchantAccount"`
	Reference       string `json:"reference"`
}

// Capture sends one capture of req.Amount of the payment req.Charge (POST
// /payments/{req.Charge}/captures) with req.Key as its Idempotency-Key and
// req.Reference (our capture's id) as its reference, which Adyen's
// CAPTURE notification carries back as its merchantReference. Adyen
// acknowledges a capture at once and settles it only by that
// notification (or by CAPTURE_FAILED), so a capture it received is an
// unknown outcome naming the capture's pspReference (capture_received),
// never a psp.Charge; errors are classified as a charge's. Sent again with
// the same key, the request is answered with the first one's
// acknowledgement and captures nothing more. A capture without a key, a
// payment, a positive amount or a reference is refused unsent, not
// applied. Exactly one request is sent.
func (a *Adapter) Capture(ctx context.Context, req psp.OperationRequest) (psp.Charge, error) {
	return psp.Charge{}, a.modify(ctx, psp.OpCapture, req, "/captures", func() (any, error) {
		if req.Amount <= 0 {
			// Adyen requires an amount; a capture of nothing names no money.
			return nil, notSent("capture amount not positive")
		}
		return captureBody{
			Amount:          amount{Currency: req.Currency, Value: &req.Amount},
			MerchantAccount: a.merchantAccount,
			Reference:       req.Reference,
		}, nil
	})
}

// Cancel sends one cancel of the payment req.Charge (POST
// /payments/{req.Charge}/cancels) with req.Key as its Idempotency-Key and
// req.Reference (our cancel's id) as its reference, which Adyen's
// CANCELLATION notification carries back. Like a capture, a cancel Adyen
// received is an unknown outcome naming the cancel's pspReference
// (cancel_received), settled by the notification, and the same request
// sent again with the same key releases nothing more. Exactly one request
// is sent.
func (a *Adapter) Cancel(ctx context.Context, req psp.OperationRequest) (psp.Charge, error) {
	return psp.Charge{}, a.modify(ctx, psp.OpCancel, req, "/cancels", func() (any, error) {
		return cancelBody{MerchantAccount: a.merchantAccount, Reference: req.Reference}, nil
	})
}

// modify makes the one call of op, a modification of the payment
// req.Charge at route under it with the body bodyOf makes, under op's
// span. Its answer is only ever an error: Adyen's acknowledgement is an
// unknown outcome (classify).
func (a *Adapter) modify(ctx context.Context, op psp.Op, req psp.OperationRequest, route string, bodyOf func() (any, error)) error {
	start := time.Now()
	header := http.Header{}
	ctx, span := a.telemetry.Start(ctx, op, header)
	err := a.checkSend(req.Key, req.Reference)
	var body any
	switch {
	case err != nil:
	case req.Charge == "":
		err = notSent("no payment to " + string(op))
	default:
		body, err = bodyOf()
	}
	if err == nil {
		_, err = a.send(ctx, op, "/payments/"+url.PathEscape(req.Charge)+route, req.Key, body, header)
	}
	a.telemetry.End(ctx, span, op, start, psp.Charge{}, err)
	return err
}
