package api

import (
	"errors"
	"fmt"

	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/api/jsoncanon"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/resource"
)

const refundsRoute = "/v1/refunds"

// refundRequest is a validated POST /v1/refunds body. Amount 0 means what
// is left of the charge.
type refundRequest struct {
	Charge   string
	Amount   int64
	Reason   string
	Metadata map[string]string
}

// refundReasons are the reasons a merchant may give, as Stripe names them.
var refundReasons = map[string]bool{"requested_by_customer": true, "duplicate": true, "fraudulent": true}

// refundFromJSON validates a parsed body as a refund request, naming the
// field it refuses.
func refundFromJSON(v jsoncanon.Value) (refundRequest, error) {
	if v.Kind != jsoncanon.Object {
		return refundRequest{}, NewProblem(CodeInvalidJSON, "the body must be a JSON object")
	}
	var req refundRequest
	for _, m := range v.Members {
		var err error
		switch m.Name {
		case "charge":
			if m.Value.Kind != jsoncanon.String || !ids.Valid("ch", m.Value.String) {
				err = FieldProblem(CodeInvalidField, "charge", "charge must be the id of a charge, such as \"ch_…\"")
			}
			req.Charge = m.Value.String
		case "amount":
			req.Amount, err = parseAmount(m.Value)
		case "reason":
			switch {
			case m.Value.Kind == jsoncanon.Null:
			case m.Value.Kind != jsoncanon.String || !refundReasons[m.Value.String]:
				err = FieldProblem(CodeInvalidField, "reason", "reason must be requested_by_customer, duplicate, fraudulent or null")
			default:
				req.Reason = m.Value.String
			}
		case "metadata":
			req.Metadata, err = parseMetadata(m.Value)
		default:
			err = FieldProblem(CodeUnknownField, SafeFieldName(m.Name), "this field is not part of a refund request")
		}
		if err != nil {
			return refundRequest{}, err
		}
	}
	if req.Charge == "" {
		return refundRequest{}, FieldProblem(CodeMissingField, "charge", "charge is required")
	}
	return req, nil
}

// createRefund accepts a refund once per idempotency key, in the order of
// createCharge (docs/api.md): key, body, strict JSON and fingerprint,
// replay, validation, one statement. Whether the charge can be refunded by
// that much is the database's to say, in that statement (docs/refunds.md,
// "Where refunds live"); the read before it only finds the charge's
// currency, and what is left of it when the request names no amount.
// Refunds of one charge take turns (chargeTurn), so that what is left is
// read once this one's turn has come.
func (s *Server) createRefund(c echo.Context) error {
	t := tenantOf(c)
	k, replayed, err := s.readKeyed(c, refundsRoute)
	if k.cancel != nil {
		defer k.cancel()
	}
	if err != nil || replayed {
		return err
	}
	req, err := refundFromJSON(k.parsed)
	if err != nil {
		return err
	}
	ctx, charge, done, err := s.chargeTurn(c, t.ID, req.Charge)
	if errors.Is(err, intent.ErrNotFound) {
		return FieldProblem(CodeNotFound, "charge", "no such charge")
	}
	if err != nil {
		return err
	}
	defer done()
	if charge.State != intent.StateSucceeded {
		detail := "only a succeeded charge can be refunded; this one is " + string(charge.State)
		if charge.State == intent.StateRequiresCapture {
			detail += ": it is held, not captured; capture it first, or cancel it to release the hold"
		}
		return FieldProblem(CodeChargeNotRefundable, "charge", detail)
	}
	// Refunds apply to what the charge took: for one captured later, what
	// its capture took.
	captured := resource.AmountCaptured(charge)
	if req.Amount == 0 {
		req.Amount = captured - charge.AmountReserved
		if req.Amount <= 0 {
			// What took the rest may be this very request, sent before with
			// the key and committed between the replay check and the read of
			// the charge: then its answer is the answer, not a refusal.
			if rec, found, err := s.cfg.Accept.Record(ctx, t.ID, k.keyHash); err != nil || found {
				if err != nil {
					return err
				}
				return s.replay(c, rec, k.fingerprint)
			}
			return FieldProblem(CodeRefundExceedsCharge, "amount", "nothing is left to refund on this charge")
		}
	}

	refund := s.childOf(intent.KindRefund, charge, req.Amount)
	refund.Reason, refund.Metadata = req.Reason, req.Metadata
	return s.acceptChild(c, ctx, k, refund, resource.RefundOf(refund), func(err error) error {
		switch {
		case errors.Is(err, intent.ErrNotRefundable):
			return FieldProblem(CodeChargeNotRefundable, "charge", "only a succeeded charge can be refunded, in its own currency")
		case errors.Is(err, intent.ErrRefundExceedsCharge):
			limit := "its amount"
			if charge.CaptureLater {
				limit = "what its capture took"
			}
			return FieldProblem(CodeRefundExceedsCharge, "amount", fmt.Sprintf(
				"the charge's refunds that are not failed may add up to at most %s, %d %s; %d was left when this request read it",
				limit, captured, charge.Currency, max(0, captured-charge.AmountReserved)))
		}
		return nil
	})
}

// getRefund answers one refund; another tenant's id is 404.
func (s *Server) getRefund(c echo.Context) error {
	return getChild(s, c, intent.KindRefund, resource.RefundOf)
}

// listRefunds answers a page of a charge's refunds, newest first; an
// unknown charge (or another tenant's) is 404.
func (s *Server) listRefunds(c echo.Context) error {
	id, err := chargeIDParam(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.DBContext(c)
	defer cancel()
	if _, err := intent.Get(ctx, s.cfg.DB, tenantOf(c).ID, id); err != nil {
		return err
	}
	return ListPage(s, c, intent.ListParams{TenantID: tenantOf(c).ID, Kind: intent.KindRefund, ParentID: id, Limit: 10}, resource.RefundOf)
}
