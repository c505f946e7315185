// Package resource renders what the API shows of a row — a charge, a refund,
// a capture or a cancel, a webhook endpoint, an event: the resources of
// docs/api.md.
// The API's responses, the events Postgres keeps and the webhook deliveries
// all go through these renderers, so a merchant sees one shape of each
// resource wherever it comes from (docs/webhooks.md). Field order is the
// JSON's, and stored 201 bodies are replayed as they were written, so
// fields are only ever added at the end.
package resource

import (
	"time"

	"github.com/chargeflow/chargeflow/intent"
)

// Charge is the API's charge resource. Its field order is the order of the
// JSON, and stored 201 bodies are replayed as they were written, so fields
// are only ever added at the end.
type Charge struct {
	ID               string            `json:"id"`
	Status           intent.State      `json:"status"`
	Amount           int64             `json:"amount"`
	Currency         string            `json:"currency"`
	PaymentMethod    string            `json:"payment_method"`
	Description      *string           `json:"description"`
	Metadata         map[string]string `json:"metadata"`
	ProviderChargeID *string           `json:"provider_charge_id"`
	FailureCode      *string           `json:"failure_code"`
	Attempts         int               `json:"attempts"`
	CreatedAt        time.Time         `json:"created_at"`
	UpdatedAt        time.Time         `json:"updated_at"`
	// ReviewReason says why automation handed the charge to an operator.
	ReviewReason *string `json:"review_reason"`
	// AmountRefunded is the sum of the charge's succeeded refunds.
	AmountRefunded int64 `json:"amount_refunded"`
	// Capture is false for a charge only authorized, to be captured or
	// canceled later (docs/capture.md). AmountCaptured is what it took
	// (the function AmountCaptured).
	Capture        bool  `json:"capture"`
	AmountCaptured int64 `json:"amount_captured"`
}

// ChargeOf renders a charge.
func ChargeOf(c intent.Charge) Charge {
	metadata := c.Metadata
	if metadata == nil {
		metadata = map[string]string{}
	}
	return Charge{
		ID:               c.ID,
		Status:           c.State,
		Amount:           c.Amount,
		Currency:         c.Currency,
		PaymentMethod:    c.PaymentMethod,
		Description:      c.Description,
		Metadata:         metadata,
		ProviderChargeID: nonEmpty(c.ProviderChargeID),
		FailureCode:      nonEmpty(c.FailureCode),
		Attempts:         c.Attempts,
		CreatedAt:        c.CreatedAt.UTC(),
		UpdatedAt:        c.UpdatedAt.UTC(),
		ReviewReason:     nonEmpty(c.ReviewReason),
		AmountRefunded:   c.AmountRefunded,
		Capture:          !c.CaptureLater,
		AmountCaptured:   AmountCaptured(c),
	}
}

// AmountCaptured is what charge c took from its customer, before refunds:
// its amount once it succeeded, when captured at once; what its capture
// took, when captured later; otherwise nothing. Refunds apply to it.
func AmountCaptured(c intent.Charge) int64 {
	switch {
	case c.CaptureLater:
		return c.AmountCaptured
	case c.State == intent.StateSucceeded:
		return c.Amount
	}
	return 0
}

// Refund is the API's refund resource. As with a charge, its field order
// is the JSON's and fields are only ever added at the end.
type Refund struct {
	ID               string            `json:"id"`
	Charge           string            `json:"charge"`
	Amount           int64             `json:"amount"`
	Currency         string            `json:"currency"`
	Status           intent.State      `json:"status"`
	Reason           *string           `json:"reason"`
	Metadata         map[string]string `json:"metadata"`
	ProviderRefundID *string           `json:"provider_refund_id"`
	FailureCode      *string           `json:"failure_code"`
	Attempts         int               `json:"attempts"`
	CreatedAt        time.Time         `json:"created_at"`
	UpdatedAt        time.Time         `json:"updated_at"`
	ReviewReason     *string           `json:"review_reason"`
}

// RefundOf renders a refund: a row of kind refund.
func RefundOf(r intent.Charge) Refund {
	metadata := r.Metadata
	if metadata == nil {
		metadata = map[string]string{}
	}
	return Refund{
		ID: r.ID, Charge: r.ParentID, Amount: r.Amount, Currency: r.Currency, Status: r.State,
		Reason: nonEmpty(r.Reason), Metadata: metadata, ProviderRefundID: nonEmpty(r.ProviderChargeID),
		FailureCode: nonEmpty(r.FailureCode), Attempts: r.Attempts, CreatedAt: r.CreatedAt.UTC(),
		UpdatedAt: r.UpdatedAt.UTC(), ReviewReason: nonEmpty(r.ReviewReason),
	}
}

// Operation is the API's capture and cancel resources, which Object tells
// apart. As with a charge, its field order is the JSON's and fields are
// only ever added at the end.
type Operation struct {
	ID           string       `json:"id"`
	Object       intent.Kind  `json:"object"`
	Charge       string       `json:"charge"`
	Amount       int64        `json:"amount"`
	Currency     string       `json:"currency"`
	Status       intent.State `json:"status"`
	FailureCode  *string      `json:"failure_code"`
	Attempts     int          `json:"attempts"`
	CreatedAt    time.Time    `json:"created_at"`
	UpdatedAt    time.Time    `json:"updated_at"`
	ReviewReason *string      `json:"review_reason"`
}

// OperationOf renders a capture or a cancel: a row of kind capture or
// cancel.
func OperationOf(op intent.Charge) Operation {
	return Operation{
		ID: op.ID, Object: op.Kind, Charge: op.ParentID, Amount: op.Amount, Currency: op.Currency, Status: op.State,
		FailureCode: nonEmpty(op.FailureCode), Attempts: op.Attempts, CreatedAt: op.CreatedAt.UTC(),
		UpdatedAt: op.UpdatedAt.UTC(), ReviewReason: nonEmpty(op.ReviewReason),
	}
}

// nonEmpty is s as a JSON string, or null when empty.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Event is the API's event resource, as GET /v1/events shows it and a
// webhook delivery sends it: the type, and the charge, refund, capture or
// cancel as the move that caused the event left it. (The audit trail of
// GET /v1/charges/{id}/events is another thing: every move, for people.)
type Event struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	Data      any       `json:"data"`
}

// EventOf renders an event of type typ about a charge, refund, capture or
// cancel.
func EventOf(id, typ string, createdAt time.Time, about intent.Charge) Event {
	var data any
	switch {
	case about.Kind == intent.KindRefund:
		data = RefundOf(about)
	case about.Kind.Operation():
		data = OperationOf(about)
	default:
		data = ChargeOf(about)
	}
	return Event{ID: id, Type: typ, CreatedAt: createdAt.UTC(), Data: data}
}

// EndpointEventOf renders an event about a webhook endpoint
// (webhook_endpoint.disabled). The endpoint has no secret in it.
func EndpointEventOf(id, typ string, createdAt time.Time, about Endpoint) Event {
	about.Secret = nil
	return Event{ID: id, Type: typ, CreatedAt: createdAt.UTC(), Data: about}
}

// Endpoint is the API's webhook endpoint resource. Secret is shown in the
// answer to its creation only; fields are only ever added at the end.
type Endpoint struct {
	ID             string    `json:"id"`
	URL            string    `json:"url"`
	Events         []string  `json:"events"`
	Secret         *string   `json:"secret,omitempty"`
	Status         string    `json:"status"`
	DisabledReason *string   `json:"disabled_reason"`
	CreatedAt      time.Time `json:"created_at"`
}

// EndpointOf renders an endpoint, without its secret: status is enabled,
// or disabled when disabledAt is set.
func EndpointOf(id, url string, events []string, disabledAt *time.Time, disabledReason string, createdAt time.Time) Endpoint {
	e := Endpoint{ID: id, URL: url, Events: events, Status: "enabled", DisabledReason: nonEmpty(disabledReason), CreatedAt: createdAt.UTC()}
	if disabledAt != nil {
		e.Status = "disabled"
	}
	return e
}
