package client

import (
	"context"
	"net/url"
	"time"
)

// Operation is a capture or a cancel of a charge created with CaptureLater,
// as the API shows it (Object says which). Each is a request of its own,
// carried to the provider as a refund is, with the statuses of one: when it
// succeeds, the charge moves — to succeeded, with AmountCaptured, for a
// capture; to canceled for a cancel. One capture or cancel of a charge is
// in flight at a time.
type Operation struct {
	ID string `json:"id"`
	// Object is "capture" (an id cp_…) or "cancel" (cx_…).
	Object string `json:"object"`
	// Charge is the id of the charge it captures or cancels.
	Charge string `json:"charge"`
	// Amount is what a capture takes; a cancel's is the amount authorized,
	// which it releases.
	Amount       int64     `json:"amount"`
	Currency     string    `json:"currency"`
	Status       Status    `json:"status"`
	FailureCode  string    `json:"failure_code"`
	Attempts     int       `json:"attempts"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	ReviewReason string    `json:"review_reason"`

	// Replayed is set by CaptureCharge and CancelCharge as Charge.Replayed
	// is by CreateCharge.
	Replayed bool `json:"-"`
}

// CaptureParams is a capture to make.
type CaptureParams struct {
	// Amount is what to take, in the charge's minor unit, at most what was
	// authorized; the rest is released. Zero takes all of it.
	Amount int64
	// IdempotencyKey names this capture, as ChargeParams.IdempotencyKey
	// names a charge: make it once, store it, reuse it on every call for
	// it.
	IdempotencyKey string
}

// captureRequest is the body of POST /v1/charges/{id}/capture.
type captureRequest struct {
	Amount int64 `json:"amount,omitempty"`
}

// CancelParams is a cancel to make.
type CancelParams struct {
	// IdempotencyKey names this cancel, as CaptureParams.IdempotencyKey
	// names a capture.
	IdempotencyKey string
}

// CaptureCharge captures a charge created with CaptureLater, all of what
// was authorized or p.Amount of it, under the same idempotency contract and
// retries as CreateCharge. The answer is the capture, pending: the provider
// is called after it (WaitForCapture). The API refuses, with nothing
// stored, a charge that is not in requires_capture
// (CodeChargeNotCapturable), one with another capture or cancel in flight
// (CodeOperationInProgress) and an amount above the authorization
// (CodeCaptureExceedsAuthorization); a charge of another tenant, or none,
// is CodeNotFound.
func (c *Client) CaptureCharge(ctx context.Context, chargeID string, p CaptureParams) (*Operation, error) {
	return c.operate(ctx, chargeID, "/capture", captureRequest{Amount: p.Amount}, p.IdempotencyKey)
}

// CancelCharge releases a charge created with CaptureLater: nothing is
// taken. It is refused as CaptureCharge is.
func (c *Client) CancelCharge(ctx context.Context, chargeID string, p CancelParams) (*Operation, error) {
	return c.operate(ctx, chargeID, "/cancel", struct{}{}, p.IdempotencyKey)
}

func (c *Client) operate(ctx context.Context, chargeID, action string, body any, key string) (*Operation, error) {
	var op Operation
	replayed, err := c.create(ctx, "/v1/charges/"+url.PathEscape(chargeID)+action, body, key, &op)
	if err != nil {
		return nil, err
	}
	op.Replayed = replayed
	return &op, nil
}

// GetCapture returns the capture as it is now.
func (c *Client) GetCapture(ctx context.Context, id string) (*Operation, error) {
	return c.getOperation(ctx, "/v1/captures/", id)
}

// GetCancel returns the cancel as it is now.
func (c *Client) GetCancel(ctx context.Context, id string) (*Operation, error) {
	return c.getOperation(ctx, "/v1/cancels/", id)
}

func (c *Client) getOperation(ctx context.Context, under, id string) (*Operation, error) {
	var op Operation
	if err := c.get(ctx, under+url.PathEscape(id), nil, &op); err != nil {
		return nil, err
	}
	return &op, nil
}

// WaitForCapture is WaitForOutcome for a capture: it polls until the
// capture is succeeded, failed or needs_review and returns it. When it
// succeeded, GetCharge shows the charge succeeded with AmountCaptured.
func (c *Client) WaitForCapture(ctx context.Context, captureID string) (*Operation, error) {
	return c.waitForOperation(ctx, captureID, c.GetCapture)
}

// WaitForCancel is WaitForCapture for a cancel; the charge of a cancel that
// succeeded is canceled.
func (c *Client) WaitForCancel(ctx context.Context, cancelID string) (*Operation, error) {
	return c.waitForOperation(ctx, cancelID, c.GetCancel)
}

func (c *Client) waitForOperation(ctx context.Context, id string, get func(context.Context, string) (*Operation, error)) (*Operation, error) {
	return waitFor(ctx, c, func(ctx context.Context) (*Operation, Status, error) {
		op, err := get(ctx, id)
		if err != nil {
			return nil, "", err
		}
		return op, op.Status, nil
	})
}
