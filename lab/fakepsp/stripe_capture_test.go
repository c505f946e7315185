package fakepsp_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp"
)

// manualIntent creates a PaymentIntent with capture_method manual that the
// card authorizes, for the reference "ch_" + key, and requires that it
// was.
func (b *stripeBundle) manualIntent(t *testing.T, key string) *stripe.PaymentIntent {
	t.Helper()

	params := intentParams("ch_"+key, fakepsp.PaymentMethodVisa)
	params.CaptureMethod = stripe.String("manual")
	intent, err := b.create(t, key, params)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresCapture, intent.Status)
	return intent
}

// capture captures amount (all when 0) of intent under key.
func (b *stripeBundle) capture(t *testing.T, key, intent string, amount int64) (*stripe.PaymentIntent, error) {
	t.Helper()

	params := &stripe.PaymentIntentCaptureParams{}
	if amount > 0 {
		params.AmountToCapture = stripe.Int64(amount)
	}
	params.SetIdempotencyKey(key)
	return b.client.V1PaymentIntents.Capture(t.Context(), intent, params)
}

// cancel cancels intent under key, giving reason when set.
func (b *stripeBundle) cancel(t *testing.T, key, intent, reason string) (*stripe.PaymentIntent, error) {
	t.Helper()

	params := &stripe.PaymentIntentCancelParams{}
	if reason != "" {
		params.CancellationReason = stripe.String(reason)
	}
	params.SetIdempotencyKey(key)
	return b.client.V1PaymentIntents.Cancel(t.Context(), intent, params)
}

func TestStripeManualCapture(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{})
	intent := b.manualIntent(t, "cf_1")
	require.Equal(t, stripe.PaymentIntentCaptureMethodManual, intent.CaptureMethod)
	require.Equal(t, int64(1000), intent.AmountCapturable)
	require.Zero(t, intent.AmountReceived)
	require.NotNil(t, intent.PaymentMethod)
	require.Nil(t, intent.LastPaymentError)
	retrieved, err := b.retrieve(t, intent.ID)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresCapture, retrieved.Status)

	// More than is capturable: amount_too_large, and the hold stays.
	_, err = b.capture(t, "cf_capture_big", intent.ID, 1001)
	e := requireStripeError(t, err, 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeAmountTooLarge)
	require.Equal(t, "amount_to_capture", e.Param)

	captured, err := b.capture(t, "cf_capture_1", intent.ID, 600)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, captured.Status)
	require.Equal(t, int64(600), captured.AmountReceived)
	require.Zero(t, captured.AmountCapturable)
	require.Equal(t, int64(1000), captured.Amount)
	require.False(t, replayed(captured.LastResponse))

	// The same request again answers the first result; other parameters
	// under the key are refused.
	again, err := b.capture(t, "cf_capture_1", intent.ID, 600)
	require.NoError(t, err)
	require.True(t, replayed(again.LastResponse))
	require.Equal(t, captured.AmountReceived, again.AmountReceived)
	_, err = b.capture(t, "cf_capture_1", intent.ID, 0)
	requireStripeError(t, err, 400, stripe.ErrorTypeIdempotency, "")

	// Captured: neither another capture nor a cancel applies; the error
	// carries the intent.
	_, err = b.capture(t, "cf_capture_2", intent.ID, 100)
	e = requireStripeError(t, err, 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodePaymentIntentUnexpectedState)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, e.PaymentIntent.Status)
	_, err = b.cancel(t, "cf_cancel_1", intent.ID, "")
	e = requireStripeError(t, err, 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodePaymentIntentUnexpectedState)
	require.Contains(t, e.Msg, "status of succeeded")

	// Refunds apply to what was captured.
	_, err = b.createRefund(t, "cf_refund_1", refundOf(intent.ID, "re_1", 601))
	requireStripeError(t, err, 400, stripe.ErrorTypeInvalidRequest, "")
	refund, err := b.createRefund(t, "cf_refund_2", refundOf(intent.ID, "re_2", 600))
	require.NoError(t, err)
	require.Equal(t, stripe.RefundStatusSucceeded, refund.Status)

	operations := b.provider.Operations()
	require.Len(t, operations, 1)
	require.Equal(t, fakepsp.OperationEntry{ID: operations[0].ID, Type: "capture", IdempotencyKey: "cf_capture_1", Charge: intent.ID,
		Amount: 600, Currency: "USD", Status: psp.StatusSucceeded, CreatedAt: operations[0].CreatedAt}, operations[0])
}

func TestStripeCancelAndExpiry(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setupStripe(t, fakepsp.Config{Now: clock.Now, HoldWindow: time.Hour})

	intent := b.manualIntent(t, "cf_1")
	canceled, err := b.cancel(t, "cf_cancel_1", intent.ID, "requested_by_customer")
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusCanceled, canceled.Status)
	require.Equal(t, stripe.PaymentIntentCancellationReasonRequestedByCustomer, canceled.CancellationReason)
	require.Equal(t, clock.Now().Unix(), canceled.CanceledAt)
	require.Zero(t, canceled.AmountCapturable)
	_, err = b.capture(t, "cf_capture_1", intent.ID, 0)
	e := requireStripeError(t, err, 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodePaymentIntentUnexpectedState)
	require.Equal(t, stripe.PaymentIntentStatusCanceled, e.PaymentIntent.Status)

	held := b.manualIntent(t, "cf_2")
	clock.Advance(time.Hour)
	expired, err := b.retrieve(t, held.ID)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusCanceled, expired.Status)
	require.Equal(t, stripe.PaymentIntentCancellationReasonAutomatic, expired.CancellationReason)
	require.Equal(t, clock.Now().Unix(), expired.CanceledAt)
	_, err = b.capture(t, "cf_capture_2", held.ID, 0)
	requireStripeError(t, err, 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodePaymentIntentUnexpectedState)
	_, err = b.cancel(t, "cf_cancel_2", held.ID, "")
	requireStripeError(t, err, 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodePaymentIntentUnexpectedState)

	// The search reads the same state.
	params := &stripe.PaymentIntentSearchParams{}
	params.Query = "status:'canceled'"
	found := 0
	for range b.client.V1PaymentIntents.Search(t.Context(), params) {
		found++
	}
	require.Equal(t, 2, found)

	// A PaymentIntent captured at once is not capturable either.
	automatic := b.visaIntent(t, "cf_3")
	_, err = b.capture(t, "cf_capture_3", automatic.ID, 0)
	e = requireStripeError(t, err, 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodePaymentIntentUnexpectedState)
	require.Contains(t, e.Msg, "status of succeeded")
}

func TestStripeCaptureValidationSavesNothing(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{})
	intent := b.manualIntent(t, "cf_1")
	post := func(path, key string, form url.Values) response {
		return b.do(t, http.MethodPost, path, http.Header{
			"Authorization": {"Bearer " + testSecretKey}, "Content-Type": {"application/x-www-form-urlencoded"}, "Idempotency-Key": {key},
		}, form.Encode())
	}
	capturePath, cancelPath := "/v1/payment_intents/"+intent.ID+"/capture", "/v1/payment_intents/"+intent.ID+"/cancel"
	for name, tc := range map[string]struct {
		path  string
		form  url.Values
		param string
	}{
		"CaptureAmountZero":   {capturePath, url.Values{"amount_to_capture": {"0"}}, "amount_to_capture"},
		"CaptureAmountText":   {capturePath, url.Values{"amount_to_capture": {"all"}}, "amount_to_capture"},
		"CaptureMetadata":     {capturePath, url.Values{"metadata[chargeflow_charge]": {"ch_1"}}, "metadata[chargeflow_charge]"},
		"CaptureFinal":        {capturePath, url.Values{"final_capture": {"false"}}, "final_capture"},
		"CancelReasonUnknown": {cancelPath, url.Values{"cancellation_reason": {"changed_mind"}}, "cancellation_reason"},
		"CancelAmount":        {cancelPath, url.Values{"amount_to_capture": {"100"}}, "amount_to_capture"},
	} {
		resp := post(tc.path, "cf_"+name, tc.form)
		require.Equal(t, http.StatusBadRequest, resp.status, "%s: %s", name, resp.body)
		var body struct {
			Error struct {
				Param string `json:"param"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(resp.body, &body))
		require.Equal(t, tc.param, body.Error.Param, name)
	}
	resp := post("/v1/payment_intents/pi_nope/capture", "cf_nope", url.Values{})
	require.Equal(t, http.StatusNotFound, resp.status)
	require.Contains(t, string(resp.body), "resource_missing")
	resp = post(capturePath, "", url.Values{})
	require.Equal(t, http.StatusBadRequest, resp.status)

	// Nothing was saved for those keys: a valid request under one executes.
	captured, err := b.capture(t, "cf_CaptureAmountZero", intent.ID, 0)
	require.NoError(t, err)
	require.Equal(t, int64(1000), captured.AmountReceived)
}

// Faults act on a capture under Stripe's key rules: error_before_apply's
// 500 is the key's saved answer, and a retry with the key replays it.
func TestStripeCaptureFaults(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{Faults: faults(
		fakepsp.Rule{On: fakepsp.OnCapture, Fault: fakepsp.FaultErrorBeforeApply, P: 1, KeyPrefix: "cf_err"},
		fakepsp.Rule{On: fakepsp.OnCancel, Fault: fakepsp.FaultApplyThenReset, P: 1, KeyPrefix: "cf_reset"},
	)})
	intent := b.manualIntent(t, "cf_1")
	_, err := b.capture(t, "cf_err", intent.ID, 0)
	requireStripeError(t, err, 500, stripe.ErrorTypeAPI, "")
	require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
	_, err = b.capture(t, "cf_err", intent.ID, 0)
	requireStripeError(t, err, 500, stripe.ErrorTypeAPI, "")
	retrieved, err := b.retrieve(t, intent.ID)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusRequiresCapture, retrieved.Status, "nothing was applied")

	require.NoError(t, b.provider.SetFaults(faults(fakepsp.Rule{On: fakepsp.OnCancel, Fault: fakepsp.FaultApplyThenReset, P: 1, KeyPrefix: "cf_reset"})))
	_, err = b.cancel(t, "cf_reset", intent.ID, "")
	require.Error(t, err)
	retrieved, err = b.retrieve(t, intent.ID)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusCanceled, retrieved.Status, "applied, the answer lost")
}
