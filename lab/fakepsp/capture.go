package fakepsp

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/chargeflow/chargeflow/psp"
)

// This file is authorize now, capture later, the part every protocol
// shares. A charge asked to be captured later (chargeParams.CaptureLater)
// is only authorized: its record says requires_capture and holds its
// amount until HoldExpiresAt (Config.HoldWindow from its creation). A
// capture takes some or all of the hold and releases the rest, a cancel
// releases all of it; each is an operation of its own (holdParams)
// through the pipeline a charge and a refund go through (execute.go): the
// same faults ("on": "capture", "cancel"), key rules and ledger, decided
// under the server's mutex, so only one of any number racing settles the
// hold. A hold that reaches HoldExpiresAt unsettled is released by the
// provider itself: nothing is written then, every read and every later
// operation works it out from the time (holdState).

// Why the provider refuses a capture or a cancel, in the fake protocol's
// words, which are psp's. A refusal applies nothing and is the key's saved
// answer (FailureCode on a kindSavedError record, Refused naming the
// operation); each protocol words it its own way.
const (
	// chargeNotCapturable: the ledger holds no charge with the id, or it
	// was not authorized to be captured later, was declined, or was
	// captured or released already.
	chargeNotCapturable = psp.CodeChargeNotCapturable

	// captureExceedsAuthorization: the capture asks for more than the
	// authorization holds.
	captureExceedsAuthorization = psp.CodeCaptureExceedsAuthorization

	// holdExpired: the hold expired before the operation, which released
	// it.
	holdExpired = psp.CodeHoldExpired
)

// Why a charge captured later was released (LedgerEntry.CanceledReason).
const (
	canceledRequested   = "requested"
	canceledHoldExpired = "hold_expired"
)

// DefaultHoldWindow is how long the provider holds an authorization when
// Config.HoldWindow names no other: psp.DefaultHoldWindow, Stripe's seven
// days.
const DefaultHoldWindow = psp.DefaultHoldWindow

// OperationEntry is a capture or a cancel the provider applied, as GET
// /_admin/ledger reports it under its charge. A refused one applied
// nothing and is only its key's saved answer.
type OperationEntry struct {
	// ID is the provider's id of the operation: "cap_…" or "can_…", or
	// the id the protocol acknowledged it with.
	ID string `json:"id"`

	// Type is "capture" or "cancel".
	Type string `json:"type"`

	// IdempotencyKey is the Idempotency-Key the operation was sent with.
	IdempotencyKey string `json:"idempotency_key"`

	// Reference is the caller's reference for the operation: the fake
	// protocol's reference field; empty under Stripe's protocol, whose
	// capture and cancel carry none (the key names the operation).
	Reference string `json:"reference"`

	// Charge is the provider's id of the charge captured or released.
	Charge string `json:"charge"`

	// Amount is, for a capture, what it captured; for a cancel, what it
	// released. Currency is the charge's.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`

	// Status is psp.StatusSucceeded for a capture, psp.StatusCanceled for a
	// cancel.
	Status psp.Status `json:"status"`

	// Reason is a cancel's reason as it was asked, "" when none was.
	Reason string `json:"reason,omitempty"`

	// TenantTag is the request's tenant tag (the fake protocol's
	// X-Tenant-Tag), else its charge's.
	TenantTag string `json:"tenant_tag"`

	// CreatedAt is when the operation was applied.
	CreatedAt time.Time `json:"created_at"`
}

// holdParams are the validated parameters of a capture or a cancel,
// whatever protocol carried it.
type holdParams struct {
	// Kind is kindCapture or kindCancel.
	Kind string

	// Charge is the provider's id of the authorized charge.
	Charge string

	// Amount is, for a capture, what to capture; 0 asks for all the
	// authorization holds. A cancel has none.
	Amount int64

	// Reference is the caller's own id for the operation (our "cp_…",
	// "cx_…"); "" when the protocol carries none.
	Reference string

	// Reason is a cancel's reason, as asked (Stripe's
	// cancellation_reason); "" when none was.
	Reason string

	// Metadata is a Stripe operation's, MerchantAccount an Adyen one's.
	Metadata        map[string]string
	MerchantAccount string

	// Acknowledged says the protocol answers the request with the id it
	// makes whatever the decision (Adyen's 201 "received"), so a refusal
	// keeps that id.
	Acknowledged bool
}

// on makes holdParams an operation: a capture draws the capture rules, a
// cancel the cancel rules.
func (p holdParams) on() string {
	if p.Kind == kindCancel {
		return OnCancel
	}
	return OnCapture
}

// fillLocked decides a capture or a cancel under s.mu, where every
// operation on the charge is decided, so that of two racing only the
// first settles the hold and the other is refused. A refusal applies
// nothing: c becomes the key's saved answer, with the failure code, what
// the charge held and its status then.
func (p holdParams) fillLocked(s *Server, c *record) {
	c.Charge, c.Reason, c.Metadata, c.MerchantAccount = p.Charge, p.Reason, p.Metadata, p.MerchantAccount
	charge := s.findLocked(kindCharge, p.Charge)
	if charge == nil {
		p.refuse(c, chargeNotCapturable, holdState{})
		return
	}
	c.Currency = charge.Currency
	if c.TenantTag == "" {
		c.TenantTag = charge.TenantTag
	}
	now := s.now()
	hold := charge.holdAt(now, true)
	again := p.Kind == kindCapture && hold.settled != nil && s.capturesAgain(hold.settled)
	switch {
	case hold.status == psp.StatusCanceled && hold.canceledReason == canceledHoldExpired,
		again && !now.Before(charge.HoldExpiresAt):
		p.refuse(c, holdExpired, hold)
		return
	case hold.status != psp.StatusRequiresCapture && !again:
		p.refuse(c, chargeNotCapturable, hold)
		return
	}
	c.charge = charge
	if p.Kind == kindCancel {
		c.Kind, c.Amount, c.Status = kindCancel, charge.Amount, psp.StatusCanceled
		return
	}
	capturable := charge.Amount - hold.captured
	amount := cmp.Or(p.Amount, capturable)
	if amount > capturable {
		c.charge = nil
		p.refuse(c, captureExceedsAuthorization, hold)
		return
	}
	c.Kind, c.Amount, c.Status = kindCapture, amount, psp.StatusSucceeded
}

// capturesAgain reports whether the provider captures a charge once more
// after op settled its hold: op is a capture, and the provider captures in
// parts (Config.MultipleCaptures).
func (s *Server) capturesAgain(op *record) bool {
	return s.multipleCaptures && op.Kind == kindCapture
}

// refuse makes c a refused capture or cancel: no money, only the key's
// answer, with the amount asked, what the charge held and its status
// then. It keeps its id only when the request was acknowledged with it.
func (p holdParams) refuse(c *record, code string, hold holdState) {
	c.Kind, c.Refused, c.FailureCode, c.Amount = kindSavedError, p.Kind, code, p.Amount
	c.Capturable, c.HeldStatus = hold.capturable, hold.status
	if !p.Acknowledged {
		c.ID = ""
	}
}

// holdState is a charge as it stands at one time: its status, what a
// capture took and why it was released, with the capture or cancel that
// settled it, if any, and what it still holds.
type holdState struct {
	status         psp.Status
	captured       int64
	canceledReason string
	capturable     int64
	settled        *record
}

// holdAt is c, a charge, as it stands at now. A capture or a cancel
// settles it once appended (locked: the caller holds s.mu and decides an
// operation, which must see every one decided before it) or once on disk
// (a read, which must show nothing that is not); a hold that neither
// settled by its HoldExpiresAt is released by then.
func (c *record) holdAt(now time.Time, locked bool) holdState {
	if !c.CaptureLater || c.Status != psp.StatusRequiresCapture {
		return holdState{status: c.Status}
	}
	if op := c.settlement.Load(); op != nil && (locked || op.committed.durable()) {
		return op.leftHeld()
	}
	if !now.Before(c.HoldExpiresAt) {
		return holdState{status: psp.StatusCanceled, canceledReason: canceledHoldExpired}
	}
	return holdState{status: psp.StatusRequiresCapture, capturable: c.Amount}
}

// leftHeld is the charge as the capture or cancel c left it: what every
// answer of c, a replay included, shows.
func (c *record) leftHeld() holdState {
	if c.Kind == kindCancel {
		return holdState{status: psp.StatusCanceled, canceledReason: canceledRequested, settled: c}
	}
	return holdState{status: psp.StatusSucceeded, captured: cmp.Or(c.captured, c.Amount), settled: c}
}

// isOperation reports whether c is a capture or a cancel that was applied.
func (c *record) isOperation() bool {
	return c.Kind == kindCapture || c.Kind == kindCancel
}

// operationEntry is a capture or cancel as the admin ledger reports it.
func (c *record) operationEntry() OperationEntry {
	return OperationEntry{
		ID:             c.ID,
		Type:           c.Kind,
		IdempotencyKey: c.IdempotencyKey,
		Reference:      c.Reference,
		Charge:         c.Charge,
		Amount:         c.Amount,
		Currency:       c.Currency,
		Status:         c.Status,
		Reason:         c.Reason,
		TenantTag:      c.TenantTag,
		CreatedAt:      c.CreatedAt,
	}
}

// report is c's LedgerEntry as it stands in state hold.
func (c *record) report(hold holdState) LedgerEntry {
	entry := c.LedgerEntry
	entry.Status, entry.AmountCaptured, entry.CanceledReason = hold.status, hold.captured, hold.canceledReason
	if hold.settled != nil {
		entry.Operations = []OperationEntry{hold.settled.operationEntry()}
	}
	return entry
}

// Moved is what the charge moved: its Amount once it succeeded, of a
// charge captured later AmountCaptured, nothing otherwise.
func (e LedgerEntry) Moved() int64 {
	switch {
	case e.Status != psp.StatusSucceeded:
		return 0
	case e.CaptureLater:
		return e.AmountCaptured
	default:
		return e.Amount
	}
}

// The fake protocol's capture and cancel: POST /v1/charges/{id}/capture
// and /cancel (docs/provider.md).

// hash fingerprints a capture or cancel request of the fake protocol. It
// starts with the operation, so a key reused across endpoints is a reuse
// with other parameters, refused.
func (p holdParams) hash() string {
	return fingerprint("%s\x00%s\x00%d\x00%s", p.Kind, p.Charge, p.Amount, p.Reference)
}

// handleCapture serves POST /v1/charges/{id}/capture.
func (s *Server) handleCapture(w http.ResponseWriter, r *http.Request) {
	s.serveHold(w, r, kindCapture)
}

// handleCancel serves POST /v1/charges/{id}/cancel.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	s.serveHold(w, r, kindCancel)
}

// serveHold serves a capture or a cancel of the fake protocol.
func (s *Server) serveHold(w http.ResponseWriter, r *http.Request, kind string) {
	s.serveFakePost(w, r, fakeHoldAnswers{kind: kind}, func() (request, bool) {
		params, ok := decodeHoldParams(w, r, kind)
		return request{reference: params.Reference, op: params, hash: params.hash(), idPrefix: kind[:3] + "_"}, ok
	})
}

// decodeHoldParams reads and validates the body of a capture ({"amount",
// "reference"}, the amount optional: all of the authorization) or a cancel
// ({"reference"}), answering 400 or 413 when it is not acceptable.
func decodeHoldParams(w http.ResponseWriter, r *http.Request, kind string) (holdParams, bool) {
	params := holdParams{Kind: kind, Charge: r.PathValue("id")}
	var reference string
	if kind == kindCapture {
		var body struct {
			Amount    json.RawMessage `json:"amount"`
			Reference string          `json:"reference"`
		}
		if !readJSONBody(w, r, &body, kind) {
			return holdParams{}, false
		}
		if body.Amount != nil {
			amount, ok := parseAmount(body.Amount)
			if !ok {
				writeParamError(w, "amount", "amount must be a positive integer in the charge's minor unit, or absent to capture all of it")
				return holdParams{}, false
			}
			params.Amount = amount
		}
		reference = body.Reference
	} else {
		var body struct {
			Reference string `json:"reference"`
		}
		if !readJSONBody(w, r, &body, kind) {
			return holdParams{}, false
		}
		reference = body.Reference
	}
	if reference == "" {
		writeParamError(w, "reference", "reference is required")
		return holdParams{}, false
	}
	params.Reference = reference
	return params, true
}

// fakeHoldAnswers words a capture's or a cancel's (kind's) answers in the
// fake protocol.
type fakeHoldAnswers struct{ kind string }

// result answers with the charge as the operation left it, or with the
// refusal the key saved: 409, the code saying why.
func (fakeHoldAnswers) result(w http.ResponseWriter, c *record) {
	switch c.FailureCode {
	case "":
		writeJSON(w, http.StatusOK, c.charge.wireAt(c.leftHeld()))
	case holdExpired:
		writeError(w, http.StatusConflict, holdExpired, "the authorization's hold expired, which released it: nothing was captured")
	case captureExceedsAuthorization:
		writeError(w, http.StatusConflict, captureExceedsAuthorization,
			fmt.Sprintf("the amount is more than the %d authorized: nothing was captured", c.Capturable))
	default:
		writeError(w, http.StatusConflict, chargeNotCapturable, "the provider holds no authorization with this id waiting for a capture: nothing was "+verbOf(c.Refused))
	}
}

func (a fakeHoldAnswers) failure(w http.ResponseWriter, f failure) {
	writeFakeFailure(w, f, a.kind)
}

// verbOf is what an operation of kind does, for a refusal's message.
func verbOf(kind string) string {
	if kind == kindCancel {
		return "released"
	}
	return "captured"
}
