package client

import (
	"context"
	"iter"
	"net/url"
	"strconv"
	"time"
)

// Status is where a charge or a refund is (docs/api.md; the state machine is
// drawn in `go doc ./intent`).
type Status string

// The statuses. A charge is accepted pending; the worker moves it to
// submitting while it calls the provider; it ends succeeded or failed. When
// the provider's answer was lost it is unknown until the reconciler proves
// the outcome, and needs_review when it cannot and a person must decide.
// A charge created with CaptureLater is authorized only: it waits in
// requires_capture, the money held, until a capture moves it to succeeded
// or a cancel (or the provider's release of an expired hold) to canceled.
// Refunds, captures and cancels have the statuses of a charge captured at
// once.
const (
	StatusPending         Status = "pending"
	StatusSubmitting      Status = "submitting"
	StatusUnknown         Status = "unknown"
	StatusRequiresCapture Status = "requires_capture"
	StatusSucceeded       Status = "succeeded"
	StatusCanceled        Status = "canceled"
	StatusFailed          Status = "failed"
	StatusNeedsReview     Status = "needs_review"
)

// ChargeParams is a charge to create.
type ChargeParams struct {
	// Amount is in the currency's minor unit: cents for USD, yen for JPY.
	Amount int64
	// Currency is the ISO 4217 code, upper case ("USD").
	Currency string
	// PaymentMethod is a payment method token, never a card number.
	PaymentMethod string
	// Description and Metadata are optional; empty ones are not sent.
	Description string
	Metadata    map[string]string
	// CaptureLater asks the provider only to authorize the charge: it
	// ends in StatusRequiresCapture, the money held, until CaptureCharge
	// takes it (or part of it) or CancelCharge releases it. The charge's
	// provider must capture separately; if it does not, the API refuses
	// with CodeCaptureNotSupported and stores nothing. False (the
	// default) captures at once.
	CaptureLater bool

	// IdempotencyKey names this charge for the API: every request with it
	// (16 to 255 printable ASCII characters) gets the one charge it made.
	// Leave it empty and the client makes one for this call; but a merchant
	// should make it with NewIdempotencyKey and store it with the order
	// before calling, so that a retry after a crash carries the same key
	// (see the package documentation).
	IdempotencyKey string
}

// chargeRequest is the body of POST /v1/charges.
type chargeRequest struct {
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentMethod string            `json:"payment_method"`
	Description   string            `json:"description,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	// Capture is sent, false, only for a charge captured later, so that a
	// charge captured at once is the same bytes as before it existed.
	Capture *bool `json:"capture,omitempty"`
}

// Charge is a charge as the API shows it.
type Charge struct {
	ID            string            `json:"id"`
	Status        Status            `json:"status"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentMethod string            `json:"payment_method"`
	Description   string            `json:"description"`
	Metadata      map[string]string `json:"metadata"`
	// ProviderChargeID is the provider's id, once it succeeded.
	ProviderChargeID string `json:"provider_charge_id"`
	// FailureCode says why it failed (a decline code).
	FailureCode string `json:"failure_code"`
	// ReviewReason says why automation handed it to a person.
	ReviewReason string `json:"review_reason"`
	// Attempts counts the calls to the provider.
	Attempts  int       `json:"attempts"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// AmountRefunded is the sum of its succeeded refunds.
	AmountRefunded int64 `json:"amount_refunded"`
	// Capture is false for a charge created with CaptureLater.
	// AmountCaptured is what was captured: the amount of a charge captured
	// at once that succeeded, what the capture took of one captured later,
	// and otherwise 0. Refunds apply to what was captured.
	Capture        bool  `json:"capture"`
	AmountCaptured int64 `json:"amount_captured"`

	// Replayed is set by CreateCharge when the answer is the stored answer
	// to an earlier request with the same idempotency key
	// (Idempotent-Replayed: true). A replay is the answer as it was first
	// given: Status is the status then (pending); GetCharge tells where the
	// charge is now.
	Replayed bool `json:"-"`
}

// CreateCharge creates a charge, or returns the one an earlier request with
// the same idempotency key created (then Replayed is true). It sends the
// same bytes with the same key until it gets a definitive answer; see the
// package documentation for what is retried. A definitive refusal is an
// *Error; an error wrapping ErrOutcomeUnknown means the call stopped without
// an answer and must be repeated with the same key.
func (c *Client) CreateCharge(ctx context.Context, p ChargeParams) (*Charge, error) {
	var charge Charge
	body := chargeRequest{
		Amount: p.Amount, Currency: p.Currency, PaymentMethod: p.PaymentMethod,
		Description: p.Description, Metadata: p.Metadata,
	}
	if p.CaptureLater {
		body.Capture = new(bool)
	}
	replayed, err := c.create(ctx, "/v1/charges", body, p.IdempotencyKey, &charge)
	if err != nil {
		return nil, err
	}
	charge.Replayed = replayed
	return &charge, nil
}

// GetCharge returns the charge as it is now. A charge of another tenant, or
// none, is an *Error with CodeNotFound.
func (c *Client) GetCharge(ctx context.Context, id string) (*Charge, error) {
	var charge Charge
	if err := c.get(ctx, "/v1/charges/"+url.PathEscape(id), nil, &charge); err != nil {
		return nil, err
	}
	return &charge, nil
}

// ListChargesParams selects a page of charges.
type ListChargesParams struct {
	// Status, when set, lists only charges in that status.
	Status Status
	// Limit is the page's size, 1 to 100; zero is the API's default (10).
	Limit int
	// StartingAfter is the id of the last charge of the previous page; empty
	// for the first page.
	StartingAfter string
}

// ChargeList is a page of charges, newest first.
type ChargeList struct {
	Data    []*Charge `json:"data"`
	HasMore bool      `json:"has_more"`
}

// ListCharges returns one page of the tenant's charges, newest first. The
// next page starts after the last charge of this one (AllCharges walks
// them all).
func (c *Client) ListCharges(ctx context.Context, p ListChargesParams) (*ChargeList, error) {
	query := url.Values{}
	if p.Status != "" {
		query.Set("status", string(p.Status))
	}
	if p.Limit != 0 {
		query.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.StartingAfter != "" {
		query.Set("starting_after", p.StartingAfter)
	}
	var list ChargeList
	if err := c.get(ctx, "/v1/charges", query, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// AllCharges walks every charge p selects, newest first, a page of p.Limit
// at a time. It stops at the first error, which it yields.
func (c *Client) AllCharges(ctx context.Context, p ListChargesParams) iter.Seq2[*Charge, error] {
	return func(yield func(*Charge, error) bool) {
		for {
			page, err := c.ListCharges(ctx, p)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, charge := range page.Data {
				if !yield(charge, nil) {
					return
				}
			}
			if !page.HasMore || len(page.Data) == 0 {
				return
			}
			p.StartingAfter = page.Data[len(page.Data)-1].ID
		}
	}
}

// WaitForOutcome polls the charge, with the client's backoff, until it is
// succeeded or failed, or needs_review (a person must decide; a webhook
// tells when they have), and returns it. A charge created with
// CaptureLater returns at requires_capture, when the provider has
// authorized it (and at canceled, if its hold was released before).
// unknown is not an outcome: the reconciler proves what happened, and
// polling goes on. It stops with an error when ctx ends (give it a
// deadline) or a read fails definitively.
//
// A webhook endpoint is the better way to learn outcomes at scale; this is
// for scripts, tests and a checkout page that waits a few seconds.
func (c *Client) WaitForOutcome(ctx context.Context, chargeID string) (*Charge, error) {
	return waitFor(ctx, c, func(ctx context.Context) (*Charge, Status, error) {
		charge, err := c.GetCharge(ctx, chargeID)
		if err != nil {
			return nil, "", err
		}
		return charge, charge.Status, nil
	})
}

// WaitForRefund is WaitForOutcome for a refund: it polls until the refund
// is succeeded, failed or needs_review and returns it.
func (c *Client) WaitForRefund(ctx context.Context, refundID string) (*Refund, error) {
	return waitFor(ctx, c, func(ctx context.Context) (*Refund, Status, error) {
		refund, err := c.GetRefund(ctx, refundID)
		if err != nil {
			return nil, "", err
		}
		return refund, refund.Status, nil
	})
}

// waitFor reads with get, sleeping the client's backoff between reads,
// until what it read is in an outcome state. requires_capture is one: for
// a charge captured later it is where the provider's answer leaves it
// (a charge captured at once, a refund, a capture or a cancel never has
// it).
func waitFor[T any](ctx context.Context, c *Client, get func(context.Context) (*T, Status, error)) (*T, error) {
	for attempt := 1; ; attempt++ {
		v, status, err := get(ctx)
		if err != nil {
			return nil, err
		}
		switch status {
		case StatusSucceeded, StatusFailed, StatusNeedsReview, StatusRequiresCapture, StatusCanceled:
			return v, nil
		}
		if err := c.clock.Sleep(ctx, c.backoff(attempt)); err != nil {
			return nil, err
		}
	}
}

// RefundReason says why a refund is made.
type RefundReason string

// The refund reasons the API takes.
const (
	RefundReasonRequestedByCustomer RefundReason = "requested_by_customer"
	RefundReasonDuplicate           RefundReason = "duplicate"
	RefundReasonFraudulent          RefundReason = "fraudulent"
)

// RefundParams is a refund to create.
type RefundParams struct {
	// Charge is the id of the succeeded charge to refund.
	Charge string
	// Amount is in the charge's minor unit; zero refunds what is left.
	Amount int64
	// Reason and Metadata are optional; empty ones are not sent.
	Reason   RefundReason
	Metadata map[string]string
	// IdempotencyKey names this refund, as ChargeParams.IdempotencyKey names
	// a charge: make it once, store it with the refund, reuse it on every
	// call for it.
	IdempotencyKey string
}

// refundRequest is the body of POST /v1/refunds.
type refundRequest struct {
	Charge   string            `json:"charge"`
	Amount   int64             `json:"amount,omitempty"`
	Reason   RefundReason      `json:"reason,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Refund is a refund as the API shows it.
type Refund struct {
	ID string `json:"id"`
	// Charge is the id of the refunded charge.
	Charge           string            `json:"charge"`
	Amount           int64             `json:"amount"`
	Currency         string            `json:"currency"`
	Status           Status            `json:"status"`
	Reason           RefundReason      `json:"reason"`
	Metadata         map[string]string `json:"metadata"`
	ProviderRefundID string            `json:"provider_refund_id"`
	FailureCode      string            `json:"failure_code"`
	ReviewReason     string            `json:"review_reason"`
	Attempts         int               `json:"attempts"`
	CreatedAt        time.Time         `json:"created_at"`
	UpdatedAt        time.Time         `json:"updated_at"`

	// Replayed is set by CreateRefund as Charge.Replayed is by
	// CreateCharge.
	Replayed bool `json:"-"`
}

// CreateRefund refunds part or all of a succeeded charge, under the same
// idempotency contract and retries as CreateCharge. The API refuses, with
// nothing stored, a charge that is not succeeded (CodeChargeNotRefundable)
// and a refund that would take the charge's refunds past its amount
// (CodeRefundExceedsCharge); a charge of another tenant, or none, is
// CodeNotFound.
func (c *Client) CreateRefund(ctx context.Context, p RefundParams) (*Refund, error) {
	var refund Refund
	replayed, err := c.create(ctx, "/v1/refunds", refundRequest{
		Charge: p.Charge, Amount: p.Amount, Reason: p.Reason, Metadata: p.Metadata,
	}, p.IdempotencyKey, &refund)
	if err != nil {
		return nil, err
	}
	refund.Replayed = replayed
	return &refund, nil
}

// GetRefund returns the refund as it is now.
func (c *Client) GetRefund(ctx context.Context, id string) (*Refund, error) {
	var refund Refund
	if err := c.get(ctx, "/v1/refunds/"+url.PathEscape(id), nil, &refund); err != nil {
		return nil, err
	}
	return &refund, nil
}
