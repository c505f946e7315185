package adyen_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
	pspadyen "github.com/chargeflow/chargeflow/psp/adyen"
)

// fakeHMACKey is the fake's notification key, in hex as Adyen gives it.
const fakeHMACKey = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"

// The adapter against the bundled fake speaking Adyen's Checkout API:
// authorise now, capture or cancel later, each settled only by the signed
// notification the fake sends, which ParseNotifications verifies and
// reads; the fake's ledger is the ground truth of what moved. A subtest a
// case, as the reconciler's TestAdyenDecisions is organized.
func TestCaptureAgainstTheFake(t *testing.T) {
	t.Parallel()

	// fake is the provider, its receiver of notifications, how far its
	// clock was moved on, and an adapter pointed at it.
	type fake struct {
		provider *fakepsptest.Provider
		receiver *fakepsptest.Receiver
		later    *atomic.Int64
		adapter  *pspadyen.Adapter
	}
	start := func(t *testing.T, schedule fakepsp.Schedule) fake {
		t.Helper()
		f := fake{receiver: fakepsptest.StartReceiver(t, nil), later: &atomic.Int64{}}
		base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
		now := func() time.Time { return base.Add(time.Duration(f.later.Load())) }
		f.provider = fakepsptest.Start(t, fakepsp.Config{Protocol: fakepsp.ProtocolAdyen, Now: now, HoldWindow: pspadyen.DefaultHoldWindow,
			Faults:        schedule,
			Notifications: fakepsp.Notifications{URL: f.receiver.URL, Secret: fakeHMACKey, Backoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}})
		f.adapter = pspadyen.New(pspadyen.Config{BaseURL: f.provider.URL + "/v71", APIKey: "test_key", MerchantAccount: "ChargeflowTest",
			Timeout: 2 * time.Second})
		return f
	}
	// notified is the next notification the fake sent, verified and read.
	notified := func(t *testing.T, f fake) psp.Notification {
		t.Helper()
		d := f.receiver.Next(t, 10*time.Second)
		notifications, err := pspadyen.ParseNotifications(fakeHMACKey, d.Body)
		require.NoError(t, err)
		require.Len(t, notifications, 1)
		return notifications[0]
	}
	// hold authorises a charge of 10.00 EUR to be captured later, our
	// charge ch_<key>, and reads its AUTHORISATION.
	hold := func(t *testing.T, f fake, key string) psp.Charge {
		t.Helper()
		held, err := f.adapter.Charge(t.Context(), psp.ChargeRequest{Key: key, Amount: 1000, Currency: "EUR",
			PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_" + key, Tag: "tn_1", CaptureLater: true})
		require.NoError(t, err)
		require.Equal(t, psp.Charge{ID: held.ID, Status: psp.StatusRequiresCapture, Amount: 1000, Currency: "EUR", Reference: "ch_" + key}, held)
		authorised := notified(t, f)
		require.True(t, authorised.Authorization)
		require.Equal(t, held, authorised.AnswerFor(true), "the AUTHORISATION of a charge held says what the answer said")
		return held
	}
	operation := func(charge psp.Charge, key, reference string, amount int64) psp.OperationRequest {
		return psp.OperationRequest{Key: key, Charge: charge.ID, Amount: amount, Currency: "EUR", Reference: reference,
			ChargeReference: charge.Reference, Tag: "tn_1"}
	}
	// acknowledged requires err to be the acknowledgement of a
	// modification, and returns its pspReference.
	acknowledged := func(t *testing.T, err error, reason string) string {
		t.Helper()
		require.ErrorIs(t, err, psp.ErrUnknownOutcome)
		var pspErr *psp.Error
		require.ErrorAs(t, err, &pspErr)
		require.Equal(t, reason, pspErr.Reason, "error: %v", err)
		require.NotEmpty(t, pspErr.ProviderID)
		return pspErr.ProviderID
	}
	entry := func(t *testing.T, f fake, id string) fakepsp.LedgerEntry {
		t.Helper()
		for _, e := range f.provider.Server.Ledger(true) {
			if e.ID == id {
				return e
			}
		}
		t.Fatalf("no payment %s in the fake's ledger", id)
		return fakepsp.LedgerEntry{}
	}

	t.Run("a capture is settled by its CAPTURE, and its re-send captures nothing more", func(t *testing.T) {
		t.Parallel()
		f := start(t, fakepsp.Schedule{})
		held := hold(t, f, "cf_1")
		req := operation(held, "cf_cp_1", "cp_1", 600)

		charge, err := f.adapter.Capture(t.Context(), req)
		require.Zero(t, charge)
		capture := acknowledged(t, err, "capture_received")
		require.Equal(t, f.provider.Server.Operations()[0].ID, capture, "the capture's pspReference")

		n := notified(t, f)
		require.Equal(t, psp.NotificationCapture, n.Kind)
		require.Equal(t, "cp_1", n.Reference, "our capture's id, echoed")
		require.Equal(t, capture, n.ProviderID, "the pspReference the acknowledgement named")
		require.Equal(t, psp.Charge{ID: held.ID, Status: psp.StatusSucceeded, Currency: "EUR", AmountCaptured: 600}, n.Charge)

		_, err = f.adapter.Capture(t.Context(), req)
		require.Equal(t, capture, acknowledged(t, err, "capture_received"), "the re-send is answered with the first acknowledgement")
		require.Len(t, f.provider.Server.Operations(), 1)
		require.Equal(t, int64(600), entry(t, f, held.ID).AmountCaptured)
		f.receiver.Quiet(t, 200*time.Millisecond)
	})

	t.Run("a cancel is settled by its CANCELLATION", func(t *testing.T) {
		t.Parallel()
		f := start(t, fakepsp.Schedule{})
		held := hold(t, f, "cf_1")
		req := operation(held, "cf_cx_1", "cx_1", 1000)

		_, err := f.adapter.Cancel(t.Context(), req)
		cancel := acknowledged(t, err, "cancel_received")
		n := notified(t, f)
		require.Equal(t, psp.NotificationCancel, n.Kind)
		require.Equal(t, "cx_1", n.Reference)
		require.Equal(t, cancel, n.ProviderID)
		require.Equal(t, psp.Charge{ID: held.ID, Status: psp.StatusCanceled, Amount: 1000, Currency: "EUR"}, n.Charge)
		require.Equal(t, psp.StatusCanceled, entry(t, f, held.ID).Status)

		// A capture after it is acknowledged, and refused in its CAPTURE.
		_, err = f.adapter.Capture(t.Context(), operation(held, "cf_cp_1", "cp_1", 1000))
		acknowledged(t, err, "capture_received")
		n = notified(t, f)
		require.Equal(t, psp.NotificationCapture, n.Kind)
		require.Equal(t, psp.Charge{ID: held.ID, Status: psp.StatusFailed, Amount: 1000, Currency: "EUR", DeclineCode: pspadyen.CaptureRefusedCode}, n.Charge)
		require.Len(t, f.provider.Server.Operations(), 1)
	})

	t.Run("a cancel of a charge captured is refused in its CANCELLATION", func(t *testing.T) {
		t.Parallel()
		f := start(t, fakepsp.Schedule{})
		held := hold(t, f, "cf_1")
		_, err := f.adapter.Capture(t.Context(), operation(held, "cf_cp_1", "cp_1", 1000))
		acknowledged(t, err, "capture_received")
		require.Equal(t, psp.StatusSucceeded, notified(t, f).Charge.Status)

		_, err = f.adapter.Cancel(t.Context(), operation(held, "cf_cx_1", "cx_1", 1000))
		acknowledged(t, err, "cancel_received")
		n := notified(t, f)
		require.Equal(t, psp.NotificationCancel, n.Kind)
		require.Equal(t, psp.StatusFailed, n.Charge.Status)
		require.Equal(t, pspadyen.CancelRefusedCode, n.Charge.DeclineCode)
		require.Equal(t, psp.StatusSucceeded, entry(t, f, held.ID).Status)
	})

	t.Run("a capture after the hold window fails in its CAPTURE_FAILED", func(t *testing.T) {
		t.Parallel()
		f := start(t, fakepsp.Schedule{})
		held := hold(t, f, "cf_1")
		f.later.Add(int64(f.adapter.Capabilities().Hold()))

		_, err := f.adapter.Capture(t.Context(), operation(held, "cf_cp_1", "cp_1", 1000))
		acknowledged(t, err, "capture_received")
		n := notified(t, f)
		require.Equal(t, pspadyen.EventCaptureFailed, n.EventType)
		require.Equal(t, psp.Charge{ID: held.ID, Status: psp.StatusFailed, Amount: 1000, Currency: "EUR", DeclineCode: pspadyen.CaptureFailedCode}, n.Charge)
		require.Empty(t, f.provider.Server.Operations())
		require.Equal(t, "hold_expired", entry(t, f, held.ID).CanceledReason)
	})

	t.Run("a capture whose acknowledgement was lost is learnt by its re-send", func(t *testing.T) {
		t.Parallel()
		f := start(t, fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{{On: fakepsp.OnCapture, Fault: fakepsp.FaultApplyThenReset, P: 1}}})
		held := hold(t, f, "cf_1")
		req := operation(held, "cf_cp_1", "cp_1", 1000)

		_, err := f.adapter.Capture(t.Context(), req)
		require.ErrorIs(t, err, psp.ErrUnknownOutcome)
		require.Empty(t, psp.ProviderIDOf(err), "nothing came back")
		require.Len(t, f.provider.Server.Operations(), 1, "captured all the same")

		require.NoError(t, f.provider.Server.SetFaults(fakepsp.Schedule{}))
		_, err = f.adapter.Capture(t.Context(), req)
		require.Equal(t, f.provider.Server.Operations()[0].ID, acknowledged(t, err, "capture_received"))
		require.Len(t, f.provider.Server.Operations(), 1, "and captured once")
		require.Equal(t, psp.NotificationCapture, notified(t, f).Kind)
	})

	t.Run("a cancel in flight under its key is unknown", func(t *testing.T) {
		t.Parallel()
		f := start(t, fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{{On: fakepsp.OnCancel, Fault: fakepsp.FaultDelayedApply, P: 1, MS: 3000}}})
		held := hold(t, f, "cf_1")
		req := operation(held, "cf_cx_1", "cx_1", 1000)
		short := pspadyen.New(pspadyen.Config{BaseURL: f.provider.URL + "/v71", APIKey: "test_key", MerchantAccount: "ChargeflowTest",
			Timeout: 100 * time.Millisecond})
		_, err := short.Cancel(t.Context(), req)
		require.ErrorIs(t, err, psp.ErrUnknownOutcome)

		require.NoError(t, f.provider.Server.SetFaults(fakepsp.Schedule{}))
		_, err = f.adapter.Cancel(t.Context(), req)
		require.ErrorIs(t, err, psp.ErrUnknownOutcome)
		var pspErr *psp.Error
		require.ErrorAs(t, err, &pspErr)
		require.Equal(t, "idempotency_key_in_use", pspErr.Reason)
		require.Empty(t, f.provider.Server.Operations(), "not applied yet")
	})

	t.Run("a capture of a payment the account does not hold is not applied", func(t *testing.T) {
		t.Parallel()
		f := start(t, fakepsp.Schedule{})
		_, err := f.adapter.Capture(t.Context(), operation(psp.Charge{ID: "PSPREF0000000001", Reference: "ch_x"}, "cf_cp_1", "cp_1", 1000))
		require.ErrorIs(t, err, psp.ErrNotApplied)
		var pspErr *psp.Error
		require.ErrorAs(t, err, &pspErr)
		require.Equal(t, "validation", pspErr.Reason)
		require.Equal(t, "167", pspErr.ProviderCode)
	})
}
