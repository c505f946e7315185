package fakepsp_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
)

// authorization is a charge request to be captured later that the
// provider authorizes.
func authorization(key string) psp.ChargeRequest {
	req := visa(key)
	req.CaptureLater = true
	return req
}

// operation is a capture or cancel of charge under key, for amount.
func operation(key string, charge psp.Charge, amount int64) psp.OperationRequest {
	return psp.OperationRequest{Key: key, Charge: charge.ID, Amount: amount, Currency: charge.Currency,
		Reference: "op_" + key, ChargeReference: charge.Reference}
}

// find looks charge up as the reconciler does an operation's: by the
// charge's key, with its provider id.
func (b *testBundle) find(t *testing.T, charge psp.Charge, key string) psp.Charge {
	t.Helper()

	found, err := b.client.Find(t.Context(), psp.LookupRequest{Key: key, ProviderID: charge.ID, Reference: charge.Reference})
	require.NoError(t, err)
	return found
}

// postOperation sends a raw capture or cancel ("capture", "cancel") of
// charge id.
func (b *testBundle) postOperation(t *testing.T, kind, id, key, body string) response {
	t.Helper()

	return b.do(t, http.MethodPost, "/v1/charges/"+id+"/"+kind, http.Header{"Idempotency-Key": {key}}, body)
}

func TestCaptureThroughPSPClient(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	require.True(t, b.client.Capabilities().SeparateCapture)

	charge := b.charge(t, authorization("pk_1"))
	require.Equal(t, psp.StatusRequiresCapture, charge.Status)
	require.Zero(t, charge.AmountCaptured)
	require.Equal(t, charge, b.find(t, charge, "pk_1"), "held until captured")

	// Nothing moved yet: not refundable.
	refund, err := b.client.Refund(t.Context(), psp.RefundRequest{Key: "rk_0", Charge: charge.ID, Amount: 100, Currency: "USD", Reference: "re_0"})
	require.NoError(t, err)
	require.Equal(t, psp.CodeChargeNotRefundable, refund.FailureCode)

	// More than was authorized is refused, and the hold stays.
	req := operation("ck_big", charge, 1001)
	refused, err := b.client.Capture(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, req.Refused(psp.CodeCaptureExceedsAuthorization), refused)
	require.Equal(t, psp.StatusRequiresCapture, b.find(t, charge, "pk_1").Status)

	captured, err := b.client.Capture(t.Context(), operation("ck_1", charge, 600))
	require.NoError(t, err)
	want := charge
	want.Status, want.AmountCaptured = psp.StatusSucceeded, 600
	require.Equal(t, want, captured, "the charge as the capture left it: the rest released")
	require.Equal(t, want, b.find(t, charge, "pk_1"))

	// The same capture again answers the first result.
	again, err := b.client.Capture(t.Context(), operation("ck_1", charge, 600))
	require.NoError(t, err)
	require.Equal(t, captured, again)

	// Another capture, or a cancel, is refused: the hold is settled.
	req = operation("ck_2", charge, 100)
	refused, err = b.client.Capture(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, req.Refused(psp.CodeChargeNotCapturable), refused)
	req = operation("xk_1", charge, 1000)
	refused, err = b.client.Cancel(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, req.Refused(psp.CodeChargeNotCapturable), refused)

	// Refunds apply to what was captured.
	refund, err = b.client.Refund(t.Context(), psp.RefundRequest{Key: "rk_1", Charge: charge.ID, Amount: 601, Currency: "USD", Reference: "re_1"})
	require.NoError(t, err)
	require.Equal(t, psp.CodeRefundExceedsCharge, refund.FailureCode)
	refund, err = b.client.Refund(t.Context(), psp.RefundRequest{Key: "rk_2", Charge: charge.ID, Amount: 600, Currency: "USD", Reference: "re_2"})
	require.NoError(t, err)
	require.Equal(t, psp.StatusSucceeded, refund.Status)

	// The admin ledger reports the capture under its charge.
	ledger := b.ledger(t, false)
	require.Len(t, ledger, 1)
	require.Equal(t, psp.StatusSucceeded, ledger[0].Status)
	require.True(t, ledger[0].CaptureLater)
	require.Equal(t, int64(600), ledger[0].AmountCaptured)
	require.Len(t, ledger[0].Operations, 1)
	op := ledger[0].Operations[0]
	require.Equal(t, fakepsp.OperationEntry{ID: op.ID, Type: "capture", IdempotencyKey: "ck_1", Reference: "op_ck_1", Charge: charge.ID,
		Amount: 600, Currency: "USD", Status: psp.StatusSucceeded, CreatedAt: op.CreatedAt}, op)
	operations, err := fakepsp.FetchOperations(t.Context(), b.url)
	require.NoError(t, err)
	require.Equal(t, ledger[0].Operations, operations)
	require.Equal(t, operations, b.provider.Operations())
	audit := b.provider.Audit()
	require.Equal(t, 1, audit.Charges)
	require.Equal(t, 1, audit.Captures)
	require.Equal(t, []fakepsp.Total{{Currency: "USD", Charges: 1, Amount: 600, Refunds: 1, Refunded: 600}}, audit.Totals)
}

func TestCancelReleasesTheHold(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	charge := b.charge(t, authorization("pk_1"))

	canceled, err := b.client.Cancel(t.Context(), operation("xk_1", charge, charge.Amount))
	require.NoError(t, err)
	want := charge
	want.Status = psp.StatusCanceled
	require.Equal(t, want, canceled)
	require.Equal(t, want, b.find(t, charge, "pk_1"))

	req := operation("ck_1", charge, 500)
	refused, err := b.client.Capture(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, req.Refused(psp.CodeChargeNotCapturable), refused)

	require.Empty(t, b.ledger(t, false), "a released hold moved no money")
	all := b.ledger(t, true)
	require.Len(t, all, 1)
	require.Equal(t, psp.StatusCanceled, all[0].Status)
	require.Equal(t, "requested", all[0].CanceledReason)
	require.Equal(t, "cancel", all[0].Operations[0].Type)
	require.Equal(t, int64(1000), all[0].Operations[0].Amount, "a cancel releases the whole authorization")
	audit := b.provider.Audit()
	require.Equal(t, 1, audit.Cancels)
	require.Zero(t, audit.Charges)
	require.Zero(t, audit.Declines)

	// A charge captured at once, or declined, is not capturable.
	for _, req := range []psp.ChargeRequest{visa("pk_2"), {Key: "pk_3", Amount: 100, Currency: "USD", PaymentMethod: fakepsp.PaymentMethodDeclined, Reference: "ch_3", CaptureLater: true}} {
		other := b.charge(t, req)
		op := operation("xk_"+req.Key, other, other.Amount)
		refused, err := b.client.Cancel(t.Context(), op)
		require.NoError(t, err)
		require.Equal(t, op.Refused(psp.CodeChargeNotCapturable), refused, req.Key)
	}
	// A declined authorization is a decline.
	require.Equal(t, psp.StatusFailed, b.find(t, psp.Charge{}, "pk_3").Status)
}

func TestHoldExpires(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setup(t, fakepsp.Config{Now: clock.Now, HoldWindow: time.Hour})
	charge := b.charge(t, authorization("pk_1"))

	var object map[string]any
	b.getJSON(t, "/v1/charges/"+charge.ID, &object)
	require.Equal(t, clock.Now().Add(time.Hour).Format(time.RFC3339), object["hold_expires_at"])

	clock.Advance(time.Hour - time.Second)
	require.Equal(t, psp.StatusRequiresCapture, b.find(t, charge, "pk_1").Status)

	clock.Advance(time.Second)
	want := charge
	want.Status = psp.StatusCanceled
	require.Equal(t, want, b.find(t, charge, "pk_1"), "released by the provider itself")
	object = nil
	b.getJSON(t, "/v1/charges/"+charge.ID, &object)
	require.Equal(t, "hold_expired", object["canceled_reason"])
	require.NotContains(t, object, "hold_expires_at")

	for _, kind := range []string{"capture", "cancel"} {
		req := operation(kind, charge, charge.Amount)
		call := b.client.Capture
		if kind == "cancel" {
			call = b.client.Cancel
		}
		refused, err := call(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, req.Refused(psp.CodeHoldExpired), refused, kind)
	}

	all := b.ledger(t, true)
	require.Equal(t, "hold_expired", all[0].CanceledReason)
	require.Empty(t, all[0].Operations)
	require.Equal(t, 1, b.provider.Audit().HoldsExpired)
}

func TestCaptureWireProtocol(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	resp := b.postCharge(t, "pk_1", `{"amount":1000,"currency":"EUR","payment_method":"pm_card_visa","reference":"ch_1","capture":false}`)
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	var charge map[string]any
	require.NoError(t, json.Unmarshal(resp.body, &charge))
	require.Equal(t, "requires_capture", charge["status"])
	require.NotContains(t, charge, "amount_captured")
	id := charge["id"].(string)

	// The same key with capture true (or absent) is another request.
	resp = b.postCharge(t, "pk_1", `{"amount":1000,"currency":"EUR","payment_method":"pm_card_visa","reference":"ch_1"}`)
	require.Equal(t, http.StatusConflict, resp.status)
	require.Equal(t, "idempotency_key_reused", resp.errorCode(t))
	resp = b.postCharge(t, "pk_2", `{"amount":1000,"currency":"EUR","payment_method":"pm_card_visa","reference":"ch_2","capture":true}`)
	require.Equal(t, http.StatusOK, resp.status)
	require.NoError(t, json.Unmarshal(resp.body, &charge))
	require.Equal(t, "succeeded", charge["status"])

	for name, tc := range map[string]struct {
		kind, body, param string
	}{
		"NoReference":      {"capture", `{"amount":100}`, "reference"},
		"ZeroAmount":       {"capture", `{"amount":0,"reference":"cp_1"}`, "amount"},
		"StringAmount":     {"capture", `{"amount":"100","reference":"cp_1"}`, "amount"},
		"CancelNoRef":      {"cancel", `{}`, "reference"},
		"CancelWithAmount": {"cancel", `{"amount":100,"reference":"cx_1"}`, ""},
	} {
		resp := b.postOperation(t, tc.kind, id, "k_"+name, tc.body)
		require.Equal(t, http.StatusBadRequest, resp.status, name)
		if tc.param != "" {
			require.Contains(t, string(resp.body), `"param":"`+tc.param+`"`, name)
		}
	}
	resp = b.postOperation(t, "capture", id, "", `{"reference":"cp_1"}`)
	require.Equal(t, http.StatusBadRequest, resp.status)
	require.Equal(t, "idempotency_key_missing", resp.errorCode(t))

	// An unknown charge is refused, and the refusal is the key's answer.
	resp = b.postOperation(t, "capture", "py_nope", "ck_nope", `{"reference":"cp_nope"}`)
	require.Equal(t, http.StatusConflict, resp.status)
	require.Equal(t, psp.CodeChargeNotCapturable, resp.errorCode(t))
	again := b.postOperation(t, "capture", "py_nope", "ck_nope", `{"reference":"cp_nope"}`)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, string(resp.body), string(again.body))

	// Without an amount a capture takes all; the same key with an amount
	// is another request; the charge key reused for a capture too.
	resp = b.postOperation(t, "capture", id, "ck_1", `{"reference":"cp_1"}`)
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	require.NoError(t, json.Unmarshal(resp.body, &charge))
	require.Equal(t, "succeeded", charge["status"])
	require.EqualValues(t, 1000, charge["amount_captured"])
	again = b.postOperation(t, "capture", id, "ck_1", `{"reference":"cp_1"}`)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, string(resp.body), string(again.body))
	resp = b.postOperation(t, "capture", id, "ck_1", `{"amount":1000,"reference":"cp_1"}`)
	require.Equal(t, http.StatusConflict, resp.status)
	require.Equal(t, "idempotency_key_reused", resp.errorCode(t))
	resp = b.postOperation(t, "cancel", id, "ck_1", `{"reference":"cp_1"}`)
	require.Equal(t, "idempotency_key_reused", resp.errorCode(t))
	resp = b.postOperation(t, "capture", id, "pk_1", `{"reference":"cp_1"}`)
	require.Equal(t, "idempotency_key_reused", resp.errorCode(t))

	// GET by id and by key show the charge as it is now; an unknown id is
	// not found, with the code that proves it.
	var byID, byKey map[string]any
	b.getJSON(t, "/v1/charges/"+id, &byID)
	b.getJSON(t, "/v1/charges/by-key/pk_1", &byKey)
	require.Equal(t, byID, byKey)
	require.Equal(t, "succeeded", byID["status"])
	require.EqualValues(t, 1000, byID["amount_captured"])
	resp = b.do(t, http.MethodGet, "/v1/charges/py_nope", nil, "")
	require.Equal(t, http.StatusNotFound, resp.status)
	require.Equal(t, psp.CodeChargeNotFound, resp.errorCode(t))
	resp = b.do(t, http.MethodGet, "/v1/charges/by-key/ck_1", nil, "")
	require.Equal(t, http.StatusNotFound, resp.status, "a capture's key is no charge's")
}

// Faults act on a capture as on a charge: the outcome the client cannot
// know is learned by the charge's lookup, and the same key settles it.
func TestCaptureFaults(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{Faults: faults(
		fakepsp.Rule{On: fakepsp.OnCapture, Fault: fakepsp.FaultApplyThenReset, P: 1, KeyPrefix: "ck_reset"},
		fakepsp.Rule{On: fakepsp.OnCapture, Fault: fakepsp.FaultNotProcessed, P: 1, KeyPrefix: "ck_busy"},
		fakepsp.Rule{On: fakepsp.OnCancel, Fault: fakepsp.FaultErrorAfterApply, P: 1, KeyPrefix: "xk_err"},
	)})

	charge := b.charge(t, authorization("pk_1"))
	_, err := b.client.Capture(t.Context(), operation("ck_busy", charge, 400))
	requirePSPError(t, err, psp.ErrNotApplied, "status_429")
	require.Equal(t, psp.StatusRequiresCapture, b.find(t, charge, "pk_1").Status)

	_, err = b.client.Capture(t.Context(), operation("ck_reset", charge, 400))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
	found := b.find(t, charge, "pk_1")
	require.Equal(t, psp.StatusSucceeded, found.Status, "the lookup shows what the lost answer said")
	require.Equal(t, int64(400), found.AmountCaptured)

	other := b.charge(t, authorization("pk_2"))
	_, err = b.client.Cancel(t.Context(), operation("xk_err", other, other.Amount))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "status_500")
	require.Equal(t, psp.StatusCanceled, b.find(t, other, "pk_2").Status)
	require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
	_, err = b.client.Cancel(t.Context(), operation("xk_err", other, other.Amount))
	requirePSPError(t, err, psp.ErrUnknownOutcome, "status_500")
}

// Of captures and cancels racing under their own keys, one settles the
// hold and every other is refused.
func TestRacingOperationsSettleOnce(t *testing.T) {
	t.Parallel()

	b := setup(t, fakepsp.Config{})
	charge := b.charge(t, authorization("pk_1"))

	const racers = 16
	answers := make([]psp.Charge, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			req := operation(fmt.Sprintf("k_%02d", i), charge, 100+int64(i))
			call := b.client.Capture
			if i%2 == 1 {
				call = b.client.Cancel
			}
			answer, err := call(t.Context(), req)
			require.NoError(t, err)
			answers[i] = answer
		})
	}
	wg.Wait()

	settled := 0
	for _, answer := range answers {
		if answer.Status != psp.StatusFailed {
			settled++
			require.Equal(t, answer, b.find(t, charge, "pk_1"))
		} else {
			require.Equal(t, psp.CodeChargeNotCapturable, answer.DeclineCode)
		}
	}
	require.Equal(t, 1, settled)
	require.Len(t, b.provider.Operations(), 1)
}

func TestRestartKeepsHoldsAndOperations(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	first := setup(t, fakepsp.Config{LedgerPath: path, Now: clock.Now, HoldWindow: time.Hour})
	captured := first.charge(t, authorization("pk_1"))
	held := first.charge(t, authorization("pk_2"))
	answer, err := first.client.Capture(t.Context(), operation("ck_1", captured, 300))
	require.NoError(t, err)
	refused := first.postOperation(t, "cancel", captured.ID, "xk_1", `{"reference":"cx_1"}`)
	require.Equal(t, http.StatusConflict, refused.status)
	before := first.ledger(t, true)
	require.NoError(t, first.provider.Close())

	// A longer window after the restart does not change the holds made
	// before it.
	second := setup(t, fakepsp.Config{LedgerPath: path, Now: clock.Now, HoldWindow: 24 * time.Hour})
	require.Equal(t, before, second.ledger(t, true))
	again, err := second.client.Capture(t.Context(), operation("ck_1", captured, 300))
	require.NoError(t, err)
	require.Equal(t, answer, again)
	replayed := second.postOperation(t, "cancel", captured.ID, "xk_1", `{"reference":"cx_1"}`)
	require.Equal(t, string(refused.body), string(replayed.body))
	require.Equal(t, "true", replayed.header.Get("Idempotent-Replayed"))

	clock.Advance(time.Hour)
	require.Equal(t, psp.StatusCanceled, second.find(t, held, "pk_2").Status)
	require.Equal(t, psp.StatusSucceeded, second.find(t, captured, "pk_1").Status)
}

// An authorization, a capture and a cancel each reach the receiver as a
// notification psp's parser reads: the authorization as the charge's
// lookup would answer, a capture or cancel as the operation's answer
// under its own key and reference; a refused operation notifies nothing.
func TestNotificationOfHolds(t *testing.T) {
	t.Parallel()

	receiver := fakepsptest.StartReceiver(t, nil)
	b := notifying(t, receiver, fakepsp.Schedule{})

	charge := b.charge(t, authorization("pk_1"))
	n := verified(t, receiver.Next(t, wait))
	require.Equal(t, psp.EventChargeAuthorized, n.EventType)
	require.Equal(t, psp.NotificationCharge, n.Kind)
	require.Equal(t, charge, n.Charge)
	require.Equal(t, "pk_1", n.ProviderKey)

	captured, err := b.client.Capture(t.Context(), operation("ck_1", charge, 250))
	require.NoError(t, err)
	n = verified(t, receiver.Next(t, wait))
	require.Equal(t, psp.EventChargeCaptured, n.EventType)
	require.Equal(t, psp.NotificationCapture, n.Kind)
	require.Equal(t, captured, n.Charge, "the charge as the capture left it")
	require.Equal(t, charge.ID, n.ProviderID)
	require.Equal(t, "ck_1", n.ProviderKey, "the capture's own key")
	require.Equal(t, "op_ck_1", n.Reference, "the capture's own reference")

	_, err = b.client.Cancel(t.Context(), operation("xk_1", charge, charge.Amount))
	require.NoError(t, err)

	other := b.charge(t, authorization("pk_2"))
	verified(t, receiver.Next(t, wait))
	canceled, err := b.client.Cancel(t.Context(), operation("xk_2", other, other.Amount))
	require.NoError(t, err)
	n = verified(t, receiver.Next(t, wait))
	require.Equal(t, psp.EventChargeCanceled, n.EventType)
	require.Equal(t, psp.NotificationCancel, n.Kind)
	require.Equal(t, canceled, n.Charge)
	require.Equal(t, "xk_2", n.ProviderKey)
	require.Equal(t, "op_xk_2", n.Reference)

	stats := b.settled(t)
	require.Equal(t, 4, stats.Made, "the refused cancel notified nothing")
}

// A forged notification of a cancel, whose event carries no amount of
// its own, fails verification as every other forgery does.
func TestForgedCancelNotificationFails(t *testing.T) {
	t.Parallel()

	receiver := fakepsptest.StartReceiver(t, nil)
	b := notifying(t, receiver, firing(fakepsp.OnNotification, fakepsp.FaultForge, 0, "xk_"))
	charge := b.charge(t, authorization("pk_1"))
	verified(t, receiver.Next(t, wait))

	for i := range 2 {
		if i == 1 {
			charge = b.charge(t, authorization("pk_2"))
			verified(t, receiver.Next(t, wait))
		}
		_, err := b.client.Cancel(t.Context(), operation(fmt.Sprintf("xk_%d", i), charge, charge.Amount))
		require.NoError(t, err)
		d := receiver.Next(t, wait)
		_, err = psp.ParseNotification(notifySecret, d.Header, d.Body, time.Now(), 0)
		require.ErrorIs(t, err, psp.ErrNotificationForged, "forgery %d (a wrong secret, then an altered body)", i)
	}
}

// With MultipleCaptures an authorization is captured in parts while they
// fit in it and its hold lasts: a capture sent twice with its key and
// de-duplication off is captured twice, every part is in the ledger, and
// the charge says what they took together, across a restart too. A cancel
// still releases only a hold nothing captured.
func TestMultipleCaptures(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	cfg := fakepsp.Config{LedgerPath: path, Now: clock.Now, HoldWindow: time.Hour, Dedupe: ptr(false), MultipleCaptures: true}
	b := setup(t, cfg)
	charge := b.charge(t, authorization("pk_1"))

	first, err := b.client.Capture(t.Context(), operation("ck_1", charge, 400))
	require.NoError(t, err)
	require.Equal(t, int64(400), first.AmountCaptured)
	again, err := b.client.Capture(t.Context(), operation("ck_1", charge, 400))
	require.NoError(t, err)
	require.Equal(t, psp.StatusSucceeded, again.Status)
	require.Equal(t, int64(800), again.AmountCaptured, "the same capture, applied again")

	req := operation("ck_2", charge, 400)
	refused, err := b.client.Capture(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, req.Refused(psp.CodeCaptureExceedsAuthorization), refused, "only 200 is left")
	canceled, err := b.client.Cancel(t.Context(), operation("xk_1", charge, 1000))
	require.NoError(t, err)
	require.Equal(t, psp.CodeChargeNotCapturable, canceled.DeclineCode)

	entries := b.ledger(t, true)
	require.Len(t, entries, 1)
	require.Equal(t, int64(800), entries[0].AmountCaptured)
	require.Len(t, entries[0].Operations, 2)
	for _, op := range entries[0].Operations {
		require.Equal(t, "op_ck_1", op.Reference)
		require.Equal(t, int64(400), op.Amount)
	}

	clock.Advance(time.Hour)
	late := operation("ck_3", charge, 100)
	expired, err := b.client.Capture(t.Context(), late)
	require.NoError(t, err)
	require.Equal(t, late.Refused(psp.CodeHoldExpired), expired, "what is left is released with the hold")

	require.NoError(t, b.provider.Close())
	require.Equal(t, entries, setup(t, cfg).ledger(t, true), "read back from the ledger")
}
