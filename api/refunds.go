package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/api/jsoncanon"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/resource"
	"github.com/chargeflow/chargeflow/submit"
)

const refundsRoute = "/v1/refunds"

// maxRefundWait bounds how long a refund waits for the refunds of its
// charge ahead of it: the HTTP server's write timeout, past which its
// answer could not be sent anyway.
const maxRefundWait = 30 * time.Second

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
func (s *Server) createRefund(c echo.Context) error {
	t := tenantOf(c)
	k, replayed, err := s.readKeyed(c, refundsRoute)
	if k.cancel != nil {
		defer k.cancel()
	}
	if err != nil || replayed {
		return err
	}
	fp, keyHash := k.fingerprint, k.keyHash
	req, err := refundFromJSON(k.parsed)
	if err != nil {
		return err
	}
	// Refunds of one charge take turns, and what is left of the charge is
	// read once this one's turn has come. The database work is bounded
	// from then on, not from the request's arrival: waiting behind other
	// refunds is not the database being unavailable. Like the database
	// work, the wait ignores a client that hangs up: its retry with the
	// key queues behind this attempt and gets its answer.
	wait, cancelWait := context.WithTimeout(context.WithoutCancel(c.Request().Context()), maxRefundWait)
	defer cancelWait()
	release, err := s.cfg.Accept.Turn(wait, t.ID+"/"+req.Charge)
	if err != nil {
		p := NewProblem(CodeDatabaseUnavailable, "the refunds of this charge ahead of this one took too long; nothing was stored, retry with the same Idempotency-Key")
		p.RetryAfter = 1
		return p
	}
	defer release()
	ctx, cancel := s.DBContext(c)
	defer cancel()
	charge, err := intent.Get(ctx, s.cfg.DB, t.ID, req.Charge)
	if errors.Is(err, intent.ErrNotFound) {
		return FieldProblem(CodeNotFound, "charge", "no such charge")
	}
	if err != nil {
		return err
	}
	if charge.State != intent.StateSucceeded {
		return FieldProblem(CodeChargeNotRefundable, "charge", "only a succeeded charge can be refunded; this one is "+string(charge.State))
	}
	if req.Amount == 0 {
		req.Amount = charge.Amount - charge.AmountReserved
		if req.Amount <= 0 {
			// What took the rest may be this very request, sent before with
			// the key and committed between the replay check and the read of
			// the charge: then its answer is the answer, not a refusal.
			if rec, found, err := s.cfg.Accept.Record(ctx, t.ID, keyHash); err != nil || found {
				if err != nil {
					return err
				}
				return s.replay(c, rec, fp)
			}
			return FieldProblem(CodeRefundExceedsCharge, "amount", "nothing is left to refund on this charge")
		}
	}

	now := s.cfg.Now().UTC().Truncate(time.Microsecond)
	id := ids.New("re", now)
	refund := intent.Charge{
		TenantID: t.ID, ID: id, State: intent.StatePending, Kind: intent.KindRefund, ParentID: charge.ID,
		Reason: req.Reason, Amount: req.Amount, Currency: charge.Currency, Metadata: req.Metadata,
		// A refund goes to the provider that took the charge.
		Provider: charge.Provider, ProviderKey: intent.ProviderKeyFor(id), CreatedAt: now, UpdatedAt: now,
	}
	response, err := encodeJSON(resource.RefundOf(refund))
	if err != nil {
		return fmt.Errorf("encode refund: %w", err)
	}
	// The job names the row; the worker reads its kind (settle.Send).
	job, err := s.cfg.Jobs.Row(ctx, submit.ChargeArgs{TenantID: t.ID, ChargeID: id}, now)
	if err != nil {
		return err
	}
	rec, inserted, err := s.cfg.Accept.Accept(ctx, intent.Acceptance{
		Charge: refund, Actor: "api", KeyHash: keyHash[:], Fingerprint: fp, StatusCode: http.StatusCreated,
		ResponseBody: response, ExpiresAt: now.Add(s.cfg.IdempotencyTTL), Job: job,
	})
	switch {
	case errors.Is(err, intent.ErrNotRefundable):
		return FieldProblem(CodeChargeNotRefundable, "charge", "only a succeeded charge can be refunded, in its own currency")
	case errors.Is(err, intent.ErrRefundExceedsCharge):
		return FieldProblem(CodeRefundExceedsCharge, "amount", fmt.Sprintf(
			"the charge's refunds that are not failed may add up to at most its amount, %d %s; %d was left when this request read it",
			charge.Amount, charge.Currency, max(0, charge.Amount-charge.AmountReserved)))
	case err != nil:
		return err
	}
	if !inserted {
		return s.replay(c, rec, fp)
	}
	c.Set(logChargeKey, id)
	c.Response().Header().Set(echo.HeaderLocation, refundsRoute+"/"+id)
	return c.Blob(http.StatusCreated, echo.MIMEApplicationJSON, response)
}

// getRefund answers one refund; another tenant's id is 404.
func (s *Server) getRefund(c echo.Context) error {
	id := c.Param("id")
	if !ids.Valid("re", id) {
		return NewProblem(CodeNotFound, "no such refund")
	}
	ctx, cancel := s.DBContext(c)
	defer cancel()
	refund, err := intent.Get(ctx, s.cfg.DB, tenantOf(c).ID, id)
	if errors.Is(err, intent.ErrNotFound) {
		return NewProblem(CodeNotFound, "no such refund")
	}
	if err != nil {
		return err
	}
	return s.WriteJSON(c, http.StatusOK, resource.RefundOf(refund))
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
