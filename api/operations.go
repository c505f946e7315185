package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/api/jsoncanon"
	"github.com/chargeflow/chargeflow/crashpoint"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/ids"
	"github.com/chargeflow/chargeflow/resource"
	"github.com/chargeflow/chargeflow/submit"
)

// This file holds what the requests that act on a charge share — a
// refund, a capture, a cancel: each is a row of its own whose parent is
// the charge (docs/refunds.md, "Where refunds live"; docs/capture.md) —
// and the captures and cancels themselves.

const (
	capturesRoute = "/v1/captures"
	cancelsRoute  = "/v1/cancels"
)

// rowRoutes is where each kind of row is read, by its id's prefix.
var rowRoutes = map[string]string{
	intent.KindCharge.IDPrefix():  chargesRoute,
	intent.KindRefund.IDPrefix():  refundsRoute,
	intent.KindCapture.IDPrefix(): capturesRoute,
	intent.KindCancel.IDPrefix():  cancelsRoute,
}

// locationOf is where the row id is read, or "" for an id of no row (a
// webhook endpoint's, which has no route of its own).
func locationOf(id string) string {
	prefix, _, _ := strings.Cut(id, "_")
	if route, ok := rowRoutes[prefix]; ok {
		return route + "/" + id
	}
	return ""
}

// maxChargeTurnWait bounds how long a request that acts on a charge waits
// for those of the charge ahead of it: the HTTP server's write timeout,
// past which its answer could not be sent anyway.
const maxChargeTurnWait = 30 * time.Second

// chargeTurn waits for the turn of the requests that act on the tenant's
// charge id (accept.Turn), then reads the charge: what acts on it reads it
// once those ahead of it are done. The database work is bounded from then
// on (ctx), not from the request's arrival: waiting behind other requests
// is not the database being unavailable. Like the database work, the wait
// ignores a client that hangs up: its retry with the key queues behind
// this attempt and gets its answer. Unless err is set, the caller defers
// done, which passes the turn on.
func (s *Server) chargeTurn(c echo.Context, tenantID, id string) (ctx context.Context, charge intent.Charge, done func(), err error) {
	wait, cancelWait := context.WithTimeout(context.WithoutCancel(c.Request().Context()), maxChargeTurnWait)
	release, err := s.cfg.Accept.Turn(wait, tenantID+"/"+id)
	if err != nil {
		cancelWait()
		p := NewProblem(CodeDatabaseUnavailable, "the requests on this charge ahead of this one took too long; nothing was stored, retry with the same Idempotency-Key")
		p.RetryAfter = 1
		return nil, intent.Charge{}, nil, p
	}
	ctx, cancel := s.DBContext(c)
	done = func() {
		cancel()
		release()
		cancelWait()
	}
	charge, err = intent.Get(ctx, s.cfg.DB, tenantID, id)
	if err != nil {
		done()
		return nil, intent.Charge{}, nil, err
	}
	return ctx, charge, done, nil
}

// childOf is a new pending row of kind that acts on charge, for amount in
// its currency. It goes to the provider that took the charge, with a
// provider key of its own.
func (s *Server) childOf(kind intent.Kind, charge intent.Charge, amount int64) intent.Charge {
	now := s.cfg.Now().UTC().Truncate(time.Microsecond)
	id := ids.New(kind.IDPrefix(), now)
	return intent.Charge{
		TenantID: charge.TenantID, ID: id, State: intent.StatePending, Kind: kind, ParentID: charge.ID,
		Amount: amount, Currency: charge.Currency, Provider: charge.Provider, ProviderKey: intent.ProviderKeyFor(id),
		CreatedAt: now, UpdatedAt: now,
	}
}

// acceptChild accepts row, made by childOf, once per k's key: the row, its
// charge.submit job and the key's record in one statement, which is also
// the key's replay check and the database's judgment of the row under its
// charge's row lock. It answers 201 with view at the row's location, the
// replay of the key's request, or 422 for another request under the key.
// refused maps the database's refusal of the row (nothing was stored) to
// its problem, or nil for an error that is not one.
func (s *Server) acceptChild(c echo.Context, ctx context.Context, k keyed, row intent.Charge, view any, refused func(error) error) error {
	response, err := encodeJSON(view)
	if err != nil {
		return fmt.Errorf("encode %s: %w", row.Kind, err)
	}
	// The job names the row; the worker reads its kind (settle.Send).
	job, err := s.cfg.Jobs.Row(ctx, submit.ChargeArgs{TenantID: row.TenantID, ChargeID: row.ID}, row.CreatedAt)
	if err != nil {
		return err
	}
	rec, inserted, err := s.cfg.Accept.Accept(ctx, intent.Acceptance{
		Charge: row, Actor: "api", KeyHash: k.keyHash[:], Fingerprint: k.fingerprint, StatusCode: http.StatusCreated,
		ResponseBody: response, ExpiresAt: row.CreatedAt.Add(s.cfg.IdempotencyTTL), Job: job,
	})
	if err != nil {
		if p := refused(err); p != nil {
			return p
		}
		return err
	}
	if !inserted {
		return s.replay(c, rec, k.fingerprint)
	}
	c.Set(logChargeKey, row.ID)
	if err := s.cfg.CrashPoints.Hit(ctx, crashpoint.APIAfterCommitBeforeResponse); err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, locationOf(row.ID))
	return c.Blob(http.StatusCreated, echo.MIMEApplicationJSON, response)
}

// getChild answers one row of kind by the path's {id}: a refund, a
// capture or a cancel. Another tenant's id, or a malformed one, is 404.
func getChild[V any](s *Server, c echo.Context, kind intent.Kind, view func(intent.Charge) V) error {
	notFound := NewProblem(CodeNotFound, "no such "+string(kind))
	id := c.Param("id")
	if !ids.Valid(kind.IDPrefix(), id) {
		return notFound
	}
	ctx, cancel := s.DBContext(c)
	defer cancel()
	row, err := intent.Get(ctx, s.cfg.DB, tenantOf(c).ID, id)
	if errors.Is(err, intent.ErrNotFound) {
		return notFound
	}
	if err != nil {
		return err
	}
	return s.WriteJSON(c, http.StatusOK, view(row))
}

// operationFromJSON validates a capture's or a cancel's body (kind): a
// capture's may name an amount (0: none), a cancel's nothing.
func operationFromJSON(v jsoncanon.Value, kind intent.Kind) (int64, error) {
	if v.Kind != jsoncanon.Object {
		return 0, NewProblem(CodeInvalidJSON, "the body must be a JSON object")
	}
	var amount int64
	for _, m := range v.Members {
		if m.Name != "amount" || kind != intent.KindCapture {
			return 0, FieldProblem(CodeUnknownField, SafeFieldName(m.Name), "this field is not part of a "+string(kind)+" request")
		}
		var err error
		if amount, err = parseAmount(m.Value); err != nil {
			return 0, err
		}
	}
	return amount, nil
}

// captureCharge accepts POST /v1/charges/{id}/capture.
func (s *Server) captureCharge(c echo.Context) error { return s.createOperation(c, intent.KindCapture) }

// cancelCharge accepts POST /v1/charges/{id}/cancel.
func (s *Server) cancelCharge(c echo.Context) error { return s.createOperation(c, intent.KindCancel) }

// createOperation accepts a capture or a cancel (kind) of the path's
// charge once per idempotency key, in the order of createRefund: the
// charge's id, key, body, strict JSON and fingerprint (over the path,
// which names the charge), replay, validation, one statement. The read of
// the charge before it only finds its authorized amount — a capture's
// default, a cancel's amount —, currency and provider. Whether the charge
// can be captured or canceled is the database's to say, in the statement,
// under the charge's row lock (operations_account), after the statement's
// own replay check: a retry whose first attempt committed after the
// replay check here is answered that attempt's replay, never a refusal.
func (s *Server) createOperation(c echo.Context, kind intent.Kind) error {
	t := tenantOf(c)
	chargeID, err := chargeIDParam(c)
	if err != nil {
		return err
	}
	k, replayed, err := s.readKeyed(c, chargesRoute+"/"+chargeID+"/"+string(kind))
	if k.cancel != nil {
		defer k.cancel()
	}
	if err != nil || replayed {
		return err
	}
	amount, err := operationFromJSON(k.parsed, kind)
	if err != nil {
		return err
	}
	ctx, charge, done, err := s.chargeTurn(c, t.ID, chargeID)
	if err != nil {
		return err
	}
	defer done()

	op := s.childOf(kind, charge, cmp.Or(amount, charge.Amount))
	return s.acceptChild(c, ctx, k, op, resource.OperationOf(op), func(err error) error {
		switch {
		case errors.Is(err, intent.ErrNotCapturable):
			// The charge may have moved since it was read: say how it is now.
			if now, err := intent.Get(ctx, s.cfg.DB, t.ID, charge.ID); err == nil {
				charge = now
			}
			detail := "only a charge held for capture (requires_capture) can be captured or canceled; this one is " + string(charge.State)
			if !charge.CaptureLater {
				detail = "this charge was made to be captured at once (it was not created with \"capture\": false); it is " + string(charge.State)
			}
			return NewProblem(CodeChargeNotCapturable, detail)
		case errors.Is(err, intent.ErrOperationInProgress):
			return NewProblem(CodeOperationInProgress, "another capture or cancel of this charge is on its way; "+
				"its outcome shows on the charge (GET /v1/charges/{id}), and a charge still held after it failed can be captured or canceled again")
		case errors.Is(err, intent.ErrCaptureExceedsAuthorization):
			return FieldProblem(CodeCaptureExceedsAuthorization, "amount", fmt.Sprintf(
				"a capture may take at most the %d authorized, in the minor unit of %s", charge.Amount, charge.Currency))
		}
		return nil
	})
}

// getCapture answers one capture; another tenant's id is 404.
func (s *Server) getCapture(c echo.Context) error {
	return getChild(s, c, intent.KindCapture, resource.OperationOf)
}

// getCancel answers one cancel; another tenant's id is 404.
func (s *Server) getCancel(c echo.Context) error {
	return getChild(s, c, intent.KindCancel, resource.OperationOf)
}
