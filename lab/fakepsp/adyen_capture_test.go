package fakepsp_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
)

// heldPayment is the payment chargeflow's Adyen adapter sends for a
// charge to be captured later: manual capture.
func heldPayment(reference string) map[string]any {
	return with(payment(reference, fakepsp.PaymentMethodVisa), "additionalData", map[string]any{"manualCapture": "true"})
}

// hold authorises a payment of 10.00 EUR for manual capture under key,
// for the reference "ch_" + key.
func (b *adyenBundle) hold(t *testing.T, key string) paymentResponse {
	t.Helper()

	answer := b.pay(t, key, heldPayment("ch_"+key))
	require.Equal(t, "Authorised", answer.ResultCode, "a manual capture is authorised as any payment is")
	return answer
}

// captureRequest is the capture chargeflow's Adyen adapter sends: amount
// of the payment, for our capture reference.
func captureRequest(reference string, amount int64) map[string]any {
	return map[string]any{
		"amount":          map[string]any{"currency": "EUR", "value": amount},
		"merchantAccount": merchantAccount,
		"reference":       reference,
	}
}

// cancelRequest is the cancel chargeflow's Adyen adapter sends.
func cancelRequest(reference string) map[string]any {
	return map[string]any{"merchantAccount": merchantAccount, "reference": reference}
}

func capturePath(pspReference string) string { return "/v71/payments/" + pspReference + "/captures" }
func cancelPath(pspReference string) string  { return "/v71/payments/" + pspReference + "/cancels" }

// modificationResponse is Adyen's PaymentCaptureResponse and
// PaymentCancelResponse (which has no amount).
type modificationResponse struct {
	MerchantAccount     string        `json:"merchantAccount"`
	PaymentPSPReference string        `json:"paymentPspReference"`
	PSPReference        string        `json:"pspReference"`
	Reference           string        `json:"reference"`
	Status              string        `json:"status"`
	Amount              *amountObject `json:"amount"`
}

// requireReceived requires resp to be the 201 "received" of a capture (of
// amount) or a cancel (amount nil) of the payment, for reference.
func requireReceived(t *testing.T, resp response, pspReference, reference string, amount *amountObject) modificationResponse {
	t.Helper()

	require.Equal(t, http.StatusCreated, resp.status, "body: %s", resp.body)
	var answer modificationResponse
	require.NoError(t, json.Unmarshal(resp.body, &answer))
	require.Regexp(t, pspReferencePattern, answer.PSPReference)
	require.Equal(t, modificationResponse{MerchantAccount: merchantAccount, PaymentPSPReference: pspReference,
		PSPReference: answer.PSPReference, Reference: reference, Status: "received", Amount: amount}, answer)
	return answer
}

// capture asks under key for a capture of amount of the payment, for the
// reference "cp_" + key, and requires it acknowledged.
func (b *adyenBundle) capture(t *testing.T, key, pspReference string, amount int64) modificationResponse {
	t.Helper()

	resp := b.post(t, capturePath(pspReference), key, captureRequest("cp_"+key, amount), nil)
	return requireReceived(t, resp, pspReference, "cp_"+key, &amountObject{Currency: "EUR", Value: amount})
}

// cancel asks under key for a cancel of the payment, for the reference
// "cx_" + key, and requires it acknowledged.
func (b *adyenBundle) cancel(t *testing.T, key, pspReference string) modificationResponse {
	t.Helper()

	resp := b.post(t, cancelPath(pspReference), key, cancelRequest("cx_"+key), nil)
	return requireReceived(t, resp, pspReference, "cx_"+key, nil)
}

// entry is the ledger's entry of the payment, declines included.
func (b *adyenBundle) entry(t *testing.T, pspReference string) fakepsp.LedgerEntry {
	t.Helper()

	for _, e := range b.ledger(t, true) {
		if e.ID == pspReference {
			return e
		}
	}
	t.Fatalf("no payment %s in the ledger", pspReference)
	return fakepsp.LedgerEntry{}
}

// A payment for manual capture is held; a capture takes some of it and
// releases the rest, once; a re-send under its key is acknowledged again
// and captures nothing more; a second capture is acknowledged and refused.
func TestAdyenManualCaptureIsHeldThenCaptured(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setupAdyen(t, fakepsp.Config{Now: clock.Now, HoldWindow: 24 * time.Hour})
	held := b.hold(t, "cf_held")
	entry := b.entry(t, held.PSPReference)
	require.Equal(t, psp.StatusRequiresCapture, entry.Status)
	require.True(t, entry.CaptureLater)
	require.Equal(t, clock.Now().Add(24*time.Hour), entry.HoldExpiresAt)
	require.Empty(t, b.ledger(t, false), "no money moved yet")
	// A payment captured at once is one manualCapture "false" asks for too.
	now := b.pay(t, "cf_now", with(payment("ch_now", fakepsp.PaymentMethodVisa), "additionalData", map[string]any{"manualCapture": "false"}))
	require.Equal(t, psp.StatusSucceeded, b.entry(t, now.PSPReference).Status)

	clock.Advance(time.Hour)
	first := b.capture(t, "ck_1", held.PSPReference, 600)
	require.NotEqual(t, held.PSPReference, first.PSPReference)
	entry = b.entry(t, held.PSPReference)
	require.Equal(t, psp.StatusSucceeded, entry.Status)
	require.Equal(t, int64(600), entry.AmountCaptured)
	require.Equal(t, []fakepsp.OperationEntry{{ID: first.PSPReference, Type: "capture", IdempotencyKey: "ck_1", Reference: "cp_ck_1",
		Charge: held.PSPReference, Amount: 600, Currency: "EUR", Status: psp.StatusSucceeded, TenantTag: "tn_tenant", CreatedAt: clock.Now()}},
		entry.Operations, "the capture's tenant is its payment's")

	// The same key is answered with the first acknowledgement, whatever
	// the body.
	again := b.post(t, capturePath(held.PSPReference), "ck_1", captureRequest("cp_other", 1000), nil)
	require.Equal(t, first, requireReceived(t, again, held.PSPReference, "cp_ck_1", &amountObject{Currency: "EUR", Value: 600}))
	require.Len(t, b.provider.Operations(), 1)

	// Another capture is acknowledged and refused: the hold is settled.
	b.capture(t, "ck_2", held.PSPReference, 400)
	require.Len(t, b.provider.Operations(), 1)
	require.Equal(t, int64(600), b.entry(t, held.PSPReference).AmountCaptured)

	// What was captured can be refunded, and no more.
	b.refundPayment(t, "rk_1", held.PSPReference, 600)
	b.refundPayment(t, "rk_2", held.PSPReference, 1)
	require.Len(t, b.refunds(t), 1)

	// After a restart the ledger answers the same.
	require.NoError(t, b.provider.Close())
	restarted := setupAdyen(t, fakepsp.Config{LedgerPath: b.ledgerPath, Now: clock.Now})
	requireReceived(t, restarted.post(t, capturePath(held.PSPReference), "ck_1", captureRequest("cp_ck_1", 600), nil),
		held.PSPReference, "cp_ck_1", &amountObject{Currency: "EUR", Value: 600})
	require.Equal(t, int64(600), restarted.entry(t, held.PSPReference).AmountCaptured)
}

// A cancel releases the hold, once; a capture after it is acknowledged and
// refused, and so is a capture of more than was authorised.
func TestAdyenCancelReleasesTheHold(t *testing.T) {
	t.Parallel()

	b := setupAdyen(t, fakepsp.Config{})
	held := b.hold(t, "cf_held")
	beyond := b.capture(t, "ck_beyond", held.PSPReference, 1001)
	require.Empty(t, b.provider.Operations(), "more than was authorised captures nothing")
	require.Equal(t, psp.StatusRequiresCapture, b.entry(t, held.PSPReference).Status)

	released := b.cancel(t, "xk_1", held.PSPReference)
	entry := b.entry(t, held.PSPReference)
	require.Equal(t, psp.StatusCanceled, entry.Status)
	require.Equal(t, "requested", entry.CanceledReason)
	require.Equal(t, released.PSPReference, entry.Operations[0].ID)
	require.Equal(t, int64(1000), entry.Operations[0].Amount, "a cancel releases what was held")

	require.Equal(t, released, b.cancel(t, "xk_1", held.PSPReference), "the same key, the same acknowledgement")
	b.capture(t, "ck_late", held.PSPReference, 1000)
	b.cancel(t, "xk_2", held.PSPReference)
	require.Len(t, b.provider.Operations(), 1, "released once, captured never")
	require.Equal(t, beyond, b.capture(t, "ck_beyond", held.PSPReference, 1001), "a refusal is its key's saved answer")

	// A payment captured at once, or refused, holds nothing to capture.
	now := b.authorise(t, "cf_now")
	b.capture(t, "ck_now", now.PSPReference, 1000)
	refused := b.pay(t, "cf_refused", with(heldPayment("ch_refused"), "paymentMethod",
		map[string]any{"type": "scheme", "storedPaymentMethodId": fakepsp.PaymentMethodDeclined}))
	require.Equal(t, "Refused", refused.ResultCode)
	b.cancel(t, "xk_refused", refused.PSPReference)
	require.Len(t, b.provider.Operations(), 1)
}

// Past the hold window the hold is released by the provider itself: a
// capture is acknowledged and refused, and the ledger says canceled.
func TestAdyenCaptureAfterTheHoldExpired(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setupAdyen(t, fakepsp.Config{Now: clock.Now, HoldWindow: time.Hour})
	held := b.hold(t, "cf_held")
	clock.Advance(time.Hour)
	b.capture(t, "ck_1", held.PSPReference, 1000)
	b.cancel(t, "xk_1", held.PSPReference)
	require.Empty(t, b.provider.Operations())
	entry := b.entry(t, held.PSPReference)
	require.Equal(t, psp.StatusCanceled, entry.Status)
	require.Equal(t, "hold_expired", entry.CanceledReason)
}

// A capture or a cancel of a payment the merchant account does not hold,
// or that is not Adyen's to make, is refused before execution: nothing is
// saved for the key, which then executes.
func TestAdyenModificationValidationSavesNothing(t *testing.T) {
	t.Parallel()

	invalid := http.Header{expectHeader: {expectInvalid}}
	tests := []struct {
		name   string
		path   func(paid string) string
		body   map[string]any
		header http.Header
		status int
		code   string
	}{
		{"capture of an unknown payment", func(string) string { return capturePath("PSPREF0000000001") }, captureRequest("cp_v", 100), nil, http.StatusUnprocessableEntity, "167"},
		{"capture for another merchant account", capturePath, with(captureRequest("cp_v", 100), "merchantAccount", "Other"), nil, http.StatusUnprocessableEntity, "167"},
		{"capture in another currency", capturePath, with(captureRequest("cp_v", 100), "amount", map[string]any{"currency": "USD", "value": 100}), nil, http.StatusUnprocessableEntity, "137"},
		{"capture without an amount", capturePath, with(captureRequest("cp_v", 100), "amount", nil), invalid, http.StatusUnprocessableEntity, "100"},
		{"capture of nothing", capturePath, captureRequest("cp_v", 0), nil, http.StatusUnprocessableEntity, "137"},
		{"capture without a reference", capturePath, with(captureRequest("cp_v", 100), "reference", nil), nil, http.StatusUnprocessableEntity, "702"},
		{"capture without a merchant account", capturePath, with(captureRequest("cp_v", 100), "merchantAccount", nil), invalid, http.StatusUnprocessableEntity, "702"},
		{"capture with a field the fake does not model", capturePath, with(captureRequest("cp_v", 100), "lineItems", []any{}), nil, http.StatusUnprocessableEntity, "702"},
		{"cancel of an unknown payment", func(string) string { return cancelPath("PSPREF0000000001") }, cancelRequest("cx_v"), nil, http.StatusUnprocessableEntity, "167"},
		{"cancel with an amount", cancelPath, with(cancelRequest("cx_v"), "amount", map[string]any{"currency": "EUR", "value": 100}), invalid, http.StatusUnprocessableEntity, "702"},
		{"cancel without a reference", cancelPath, with(cancelRequest("cx_v"), "reference", nil), nil, http.StatusUnprocessableEntity, "702"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupAdyen(t, fakepsp.Config{})
			held := b.hold(t, "cf_held")
			resp := b.post(t, tt.path(held.PSPReference), "mk_v", tt.body, tt.header)
			requireServiceError(t, resp, tt.status, tt.code, "validation")
			require.Empty(t, b.provider.Operations())

			// Nothing was saved for the key: it executes now.
			b.capture(t, "mk_v", held.PSPReference, 100)
			require.Len(t, b.provider.Operations(), 1)
		})
	}

	t.Run("additionalData the fake does not model", func(t *testing.T) {
		t.Parallel()

		b := setupAdyen(t, fakepsp.Config{})
		for _, data := range []map[string]any{{"manualCapture": "yes"}, {"authorisationType": "PreAuth"}} {
			resp := b.post(t, "/v71/payments", "cf_v", with(heldPayment("ch_v"), "additionalData", data), nil)
			requireServiceError(t, resp, http.StatusUnprocessableEntity, "702", "validation")
		}
		require.Empty(t, b.ledger(t, true))
		b.hold(t, "cf_v")
	})
}

// Captures and cancels racing for one hold are decided one at a time under
// the payment's lock: each is acknowledged, and exactly one settles it.
func TestAdyenModificationsRacingSettleOnce(t *testing.T) {
	t.Parallel()

	b := setupAdyen(t, fakepsp.Config{})
	held := b.hold(t, "cf_race")

	const racers = 10
	counts := b.race(t, racers, func(i int) (string, string, any) {
		key := fmt.Sprintf("mk_%02d", i)
		if i%2 == 1 {
			return cancelPath(held.PSPReference), key, cancelRequest("cx_" + key)
		}
		return capturePath(held.PSPReference), key, captureRequest("cp_"+key, 1000)
	})
	require.Equal(t, map[int]int{http.StatusCreated: racers}, counts, "every one acknowledged")
	require.Len(t, b.provider.Operations(), 1, "exactly one settled the hold")
}

// The faults act on a capture and a cancel as on a refund; a re-send with
// the key learns what a lost acknowledgement said.
func TestAdyenModificationFaults(t *testing.T) {
	t.Parallel()

	// setupHeld starts a provider with a held payment, then rule.
	setupHeld := func(t *testing.T, rule fakepsp.Rule) (*adyenBundle, paymentResponse) {
		b := setupAdyen(t, fakepsp.Config{})
		held := b.hold(t, "cf_held")
		require.NoError(t, b.provider.SetFaults(faults(rule)))
		return b, held
	}

	t.Run(fakepsp.FaultApplyThenReset, func(t *testing.T) {
		t.Parallel()

		b, held := setupHeld(t, always(fakepsp.OnCapture, fakepsp.FaultApplyThenReset, 0))
		_, err := b.send(t, b.client(0), capturePath(held.PSPReference), "ck_lost", captureRequest("cp_ck_lost", 1000), nil)
		require.Error(t, err, "no answer at all")
		require.Len(t, b.provider.Operations(), 1, "captured all the same")

		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		answer := b.capture(t, "ck_lost", held.PSPReference, 1000)
		require.Equal(t, b.provider.Operations()[0].ID, answer.PSPReference, "the re-send gets the first acknowledgement")
		require.Len(t, b.provider.Operations(), 1)
	})

	t.Run(fakepsp.FaultNotProcessed, func(t *testing.T) {
		t.Parallel()

		b, held := setupHeld(t, always(fakepsp.OnCancel, fakepsp.FaultNotProcessed, 0))
		resp := b.post(t, cancelPath(held.PSPReference), "xk_429", cancelRequest("cx_xk_429"), nil)
		requireServiceError(t, resp, http.StatusTooManyRequests, "000", "internal")
		require.Empty(t, b.provider.Operations())
		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		b.cancel(t, "xk_429", held.PSPReference)
		require.Len(t, b.provider.Operations(), 1, "nothing saved: the re-send executes")
	})

	t.Run(fakepsp.FaultDelayedApply, func(t *testing.T) {
		t.Parallel()

		b, held := setupHeld(t, always(fakepsp.OnCapture, fakepsp.FaultDelayedApply, 3000))
		_, err := b.send(t, b.client(50*time.Millisecond), capturePath(held.PSPReference), "ck_late", captureRequest("cp_ck_late", 1000), nil)
		require.Error(t, err, "no answer at all")

		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		resp := b.post(t, capturePath(held.PSPReference), "ck_late", captureRequest("cp_ck_late", 1000), nil)
		requireServiceError(t, resp, http.StatusUnprocessableEntity, "704", "validation")
		require.Empty(t, b.provider.Operations(), "not decided yet")

		eventually(t, func() bool { return len(b.provider.Operations()) == 1 }, "the delayed capture is decided")
		answer := b.capture(t, "ck_late", held.PSPReference, 1000)
		require.Equal(t, b.provider.Operations()[0].ID, answer.PSPReference)
	})
}

// A manual capture's AUTHORISATION says success "true"; a CAPTURE and a
// CANCELLATION of every capture and cancel decided, each signed and naming
// its payment, the outcome in success and reason; a capture after the hold
// expired is a CAPTURE_FAILED. A replay notifies nothing.
func TestAdyenModificationNotifications(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	receiver := fakepsptest.StartReceiver(t, nil)
	b := adyenNotifying(t, receiver.URL, fakepsp.Schedule{}, func(c *fakepsp.Config) { c.Now, c.HoldWindow = clock.Now, time.Hour })

	held := b.hold(t, "cf_held")
	item := verifiedItem(t, receiver.Next(t, wait))
	require.Equal(t, []string{"AUTHORISATION", held.PSPReference, "ch_cf_held", "true", "1000"},
		[]string{item.EventCode, item.PSPReference, item.MerchantReference, item.Success, jsonNumber(item.Amount.Value)})

	captured := b.capture(t, "ck_1", held.PSPReference, 600)
	item = verifiedItem(t, receiver.Next(t, wait))
	require.Equal(t, notificationItem{
		AdditionalData: item.AdditionalData,
		Amount:         amountObject{Currency: "EUR", Value: 600}, EventCode: "CAPTURE",
		EventDate: clock.Now().Format(time.RFC3339), MerchantAccountCode: merchantAccount,
		MerchantReference: "cp_ck_1", OriginalReference: held.PSPReference, PSPReference: captured.PSPReference, Success: "true",
	}, item)
	b.capture(t, "ck_1", held.PSPReference, 600) // a replay

	again := b.capture(t, "ck_2", held.PSPReference, 400)
	item = verifiedItem(t, receiver.Next(t, wait))
	require.Equal(t, []string{"CAPTURE", again.PSPReference, held.PSPReference, "cp_ck_2", "400", "false", "Payment is not authorised for capture"},
		[]string{item.EventCode, item.PSPReference, item.OriginalReference, item.MerchantReference, jsonNumber(item.Amount.Value), item.Success, item.Reason})

	other := b.hold(t, "cf_other")
	verifiedItem(t, receiver.Next(t, wait))
	released := b.cancel(t, "xk_1", other.PSPReference)
	item = verifiedItem(t, receiver.Next(t, wait))
	require.Equal(t, []string{"CANCELLATION", released.PSPReference, other.PSPReference, "cx_xk_1", "1000", "true"},
		[]string{item.EventCode, item.PSPReference, item.OriginalReference, item.MerchantReference, jsonNumber(item.Amount.Value), item.Success})
	refusedCancel := b.cancel(t, "xk_2", other.PSPReference)
	item = verifiedItem(t, receiver.Next(t, wait))
	require.Equal(t, []string{"CANCELLATION", refusedCancel.PSPReference, other.PSPReference, "cx_xk_2", "1000", "false", "Payment is not authorised for cancellation"},
		[]string{item.EventCode, item.PSPReference, item.OriginalReference, item.MerchantReference, jsonNumber(item.Amount.Value), item.Success, item.Reason})

	expired := b.hold(t, "cf_expired")
	verifiedItem(t, receiver.Next(t, wait))
	clock.Advance(time.Hour)
	late := b.capture(t, "ck_late", expired.PSPReference, 1000)
	item = verifiedItem(t, receiver.Next(t, wait))
	require.Equal(t, []string{"CAPTURE_FAILED", late.PSPReference, expired.PSPReference, "cp_ck_late", "1000", "true", "Capture rejected by card scheme (capture expired)"},
		[]string{item.EventCode, item.PSPReference, item.OriginalReference, item.MerchantReference, jsonNumber(item.Amount.Value), item.Success, item.Reason})

	receiver.Quiet(t, 200*time.Millisecond)
	require.Equal(t, fakepsp.NotificationStats{Enabled: true, Made: 8, Sent: 8, Attempts: 8}, b.settled(t))
}

// The notification faults act on a capture's and a cancel's notifications
// as on any: duplicated, or late behind a later one.
func TestAdyenModificationNotificationFaults(t *testing.T) {
	t.Parallel()

	t.Run("duplicate", func(t *testing.T) {
		t.Parallel()
		receiver := fakepsptest.StartReceiver(t, nil)
		b := adyenNotifying(t, receiver.URL, firing(fakepsp.OnNotification, fakepsp.FaultDuplicate, 0, "ck_"))
		held := b.hold(t, "cf_1")
		verifiedItem(t, receiver.Next(t, wait))
		b.capture(t, "ck_1", held.PSPReference, 1000)
		first, second := receiver.Next(t, wait), receiver.Next(t, wait)
		require.Equal(t, string(first.Body), string(second.Body))
		require.Equal(t, "CAPTURE", verifiedItem(t, second).EventCode)
	})

	t.Run("delay", func(t *testing.T) {
		t.Parallel()
		receiver := fakepsptest.StartReceiver(t, nil)
		b := adyenNotifying(t, receiver.URL, firing(fakepsp.OnNotification, fakepsp.FaultDelay, 400, "xk_"))
		first, second := b.hold(t, "cf_1"), b.hold(t, "cf_2")
		verifiedItem(t, receiver.Next(t, wait))
		verifiedItem(t, receiver.Next(t, wait))
		b.cancel(t, "xk_1", first.PSPReference)
		b.capture(t, "ck_2", second.PSPReference, 1000)
		require.Equal(t, "CAPTURE", verifiedItem(t, receiver.Next(t, wait)).EventCode, "the later one first")
		require.Equal(t, "CANCELLATION", verifiedItem(t, receiver.Next(t, wait)).EventCode)
	})
}

// jsonNumber is an amount's value as its notification's text says it.
func jsonNumber(v int64) string {
	data, _ := json.Marshal(v)
	return string(data)
}
