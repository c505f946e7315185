package client_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/client"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
)

// heldVisa is visa, to be captured later.
func heldVisa(key string) client.ChargeParams {
	p := visa(key)
	p.CaptureLater = true
	return p
}

// authorized creates a charge to be captured later through c and waits
// until the provider authorized it.
func authorized(ctx context.Context, t *testing.T, c *client.Client) *client.Charge {
	t.Helper()
	charge, err := c.CreateCharge(ctx, heldVisa(""))
	require.NoError(t, err)
	require.False(t, charge.Capture, "created to be captured later")
	charge, err = c.WaitForOutcome(ctx, charge.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusRequiresCapture, charge.Status, "WaitForOutcome returns once the provider authorized it")
	require.Zero(t, charge.AmountCaptured)
	return charge
}

// Authorize now, capture later, end to end with the worker carrying the
// charge, its capture and its cancel to the fake provider: a charge
// created with CaptureLater waits in requires_capture, a capture of part
// of it succeeds and the charge with it, refunds apply to what was
// captured, and a second held charge is canceled. A charge captured at
// once says so, and its whole amount is captured.
func TestCaptureLater(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := start(t)
	s.runWorker(t)
	c, _ := s.newClient(t, s.url)

	held := authorized(ctx, t, c)

	key := client.NewIdempotencyKey()
	capture, err := c.CaptureCharge(ctx, held.ID, client.CaptureParams{Amount: 600, IdempotencyKey: key})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(capture.ID, "cp_"), capture.ID)
	require.Equal(t, "capture", capture.Object)
	require.Equal(t, held.ID, capture.Charge)
	require.Equal(t, int64(600), capture.Amount)
	require.Equal(t, "USD", capture.Currency)
	capture, err = c.WaitForCapture(ctx, capture.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusSucceeded, capture.Status, "WaitForCapture polls until the provider captured")

	charge, err := c.GetCharge(ctx, held.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusSucceeded, charge.Status, "the capture's success moved the charge")
	require.Equal(t, int64(600), charge.AmountCaptured)
	require.False(t, charge.Capture)
	again, err := c.CaptureCharge(ctx, held.ID, client.CaptureParams{Amount: 600, IdempotencyKey: key})
	require.NoError(t, err)
	require.True(t, again.Replayed, "the key's stored answer, although the charge has moved since")
	require.Equal(t, capture.ID, again.ID)
	_, err = c.CancelCharge(ctx, held.ID, client.CancelParams{})
	requireRefused(t, err, http.StatusConflict, client.CodeChargeNotCapturable)

	refund, err := c.CreateRefund(ctx, client.RefundParams{Charge: held.ID})
	require.NoError(t, err)
	require.Equal(t, int64(600), refund.Amount, "a refund's default is what was captured")

	released := authorized(ctx, t, c)
	cancelOp, err := c.CancelCharge(ctx, released.ID, client.CancelParams{})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(cancelOp.ID, "cx_"), cancelOp.ID)
	require.Equal(t, "cancel", cancelOp.Object)
	require.Equal(t, int64(1000), cancelOp.Amount, "a cancel releases what was authorized")
	cancelOp, err = c.WaitForCancel(ctx, cancelOp.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusSucceeded, cancelOp.Status)
	released, err = c.GetCharge(ctx, released.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusCanceled, released.Status)
	require.Zero(t, released.AmountCaptured)
	_, err = c.CaptureCharge(ctx, released.ID, client.CaptureParams{})
	requireRefused(t, err, http.StatusConflict, client.CodeChargeNotCapturable)
	_, err = c.CreateRefund(ctx, client.RefundParams{Charge: released.ID})
	requireRefused(t, err, http.StatusConflict, client.CodeChargeNotRefundable)

	atOnce, err := c.CreateCharge(ctx, visa(""))
	require.NoError(t, err)
	require.True(t, atOnce.Capture)
	atOnce, err = c.WaitForOutcome(ctx, atOnce.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusSucceeded, atOnce.Status)
	require.Equal(t, int64(1000), atOnce.AmountCaptured, "captured at once: all of it")
}

// The refusals of a capture and a cancel are definitive and store nothing:
// a charge not held, an amount above the authorization, another operation
// in flight, a charge that is not the tenant's. No worker runs, so the
// charge is moved to requires_capture as the worker would, and the first
// capture stays in flight.
func TestCaptureRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := start(t)
	clock := &testClock{}
	c, seen := s.newClient(t, s.url, client.WithClock(clock))

	created, err := c.CreateCharge(ctx, heldVisa(""))
	require.NoError(t, err)
	require.Equal(t, client.StatusPending, created.Status)
	_, err = c.CaptureCharge(ctx, created.ID, client.CaptureParams{})
	requireRefused(t, err, http.StatusConflict, client.CodeChargeNotCapturable)
	row, err := intent.Find(ctx, s.pool, created.ID)
	require.NoError(t, err)
	dbtest.Walk(t, s.pool, row, "py_held_by_the_test", intent.StateSubmitting, intent.StateRequiresCapture)
	held, err := c.WaitForOutcome(ctx, created.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusRequiresCapture, held.Status)
	atOnce, err := c.CreateCharge(ctx, visa(""))
	require.NoError(t, err)

	before := s.stored(t)
	requests := len(seen.exchanges())
	for _, tc := range []struct {
		name   string
		call   func() error
		status int
		code   client.Code
		field  string
	}{
		{"CaptureOfChargeCapturedAtOnce", func() error {
			_, err := c.CaptureCharge(ctx, atOnce.ID, client.CaptureParams{})
			return err
		}, http.StatusConflict, client.CodeChargeNotCapturable, ""},
		{"CancelOfChargeCapturedAtOnce", func() error {
			_, err := c.CancelCharge(ctx, atOnce.ID, client.CancelParams{})
			return err
		}, http.StatusConflict, client.CodeChargeNotCapturable, ""},
		{"MoreThanAuthorized", func() error {
			_, err := c.CaptureCharge(ctx, held.ID, client.CaptureParams{Amount: 1001})
			return err
		}, http.StatusUnprocessableEntity, client.CodeCaptureExceedsAuthorization, "amount"},
		{"NoSuchCharge", func() error {
			_, err := c.CaptureCharge(ctx, "ch_00000000000000000000000000", client.CaptureParams{})
			return err
		}, http.StatusNotFound, client.CodeNotFound, ""},
		{"NoSuchCapture", func() error { _, err := c.GetCapture(ctx, "cp_00000000000000000000000000"); return err },
			http.StatusNotFound, client.CodeNotFound, ""},
		{"NoSuchCancel", func() error { _, err := c.GetCancel(ctx, "cx_00000000000000000000000000"); return err },
			http.StatusNotFound, client.CodeNotFound, ""},
	} {
		err := tc.call()
		apiErr := requireRefused(t, err, tc.status, tc.code)
		require.Equal(t, tc.field, apiErr.Field, "%s: %v", tc.name, err)
		requests++
		require.Len(t, seen.exchanges(), requests, "%s: one request, no retry", tc.name)
	}
	require.Equal(t, before, s.stored(t), "the refusals stored nothing")

	key := client.NewIdempotencyKey()
	capture, err := c.CaptureCharge(ctx, held.ID, client.CaptureParams{Amount: 600, IdempotencyKey: key})
	require.NoError(t, err)
	require.False(t, capture.Replayed)
	require.Equal(t, client.StatusPending, capture.Status)
	got, err := c.GetCapture(ctx, capture.ID)
	require.NoError(t, err)
	require.Equal(t, capture, got)
	replay, err := c.CaptureCharge(ctx, held.ID, client.CaptureParams{Amount: 600, IdempotencyKey: key})
	require.NoError(t, err)
	require.True(t, replay.Replayed)
	replay.Replayed = false
	require.Equal(t, capture, replay)
	_, err = c.CaptureCharge(ctx, held.ID, client.CaptureParams{Amount: 700, IdempotencyKey: key})
	requireRefused(t, err, http.StatusUnprocessableEntity, client.CodeIdempotencyKeyReused)
	after := s.stored(t)
	require.Equal(t, before.Operations+1, after.Operations, "one capture, and its job")
	require.Equal(t, before.Jobs+1, after.Jobs)

	// The capture is in flight (no worker takes it): no other operation
	// of the charge is accepted until it settles.
	_, err = c.CancelCharge(ctx, held.ID, client.CancelParams{})
	requireRefused(t, err, http.StatusConflict, client.CodeOperationInProgress)
	_, err = c.CaptureCharge(ctx, held.ID, client.CaptureParams{})
	requireRefused(t, err, http.StatusConflict, client.CodeOperationInProgress)
	require.Equal(t, after, s.stored(t))
	require.Empty(t, clock.waits(), "nothing was retried")
}
