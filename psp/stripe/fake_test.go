package stripe_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
	pspstripe "github.com/chargeflow/chargeflow/psp/stripe"
)

// The adapter against the bundled fake speaking Stripe's API: its key
// rules, its declines and its faults, with the fake's ledger as the ground
// truth of what was charged.
func TestAgainstTheFakeStripe(t *testing.T) {
	t.Parallel()

	start := func(t *testing.T, cfg fakepsp.Config) (*fakepsptest.Provider, *pspstripe.Adapter) {
		cfg.Protocol = fakepsp.ProtocolStripe
		provider := fakepsptest.Start(t, cfg)
		return provider, newAdapter(provider.URL, func(c *pspstripe.Config) { c.Timeout = 500 * time.Millisecond })
	}
	request := func(key, reference, paymentMethod string) psp.ChargeRequest {
		return psp.ChargeRequest{Key: key, Amount: 1000, Currency: "EUR", PaymentMethod: paymentMethod, Reference: reference, Tag: "tn_1"}
	}
	lookup := func(reference string, since time.Time) psp.LookupRequest {
		return psp.LookupRequest{Reference: reference, FirstSent: since, LastSent: time.Now()}
	}
	always := func(on, fault string, ms int) fakepsp.Config {
		return fakepsp.Config{Faults: fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{{On: on, Fault: fault, P: 1, MS: ms}}}}
	}

	t.Run("charges, declines, replays and lookups", func(t *testing.T) {
		t.Parallel()
		provider, adapter := start(t, fakepsp.Config{})
		since := time.Now()

		charge, err := adapter.Charge(t.Context(), request("pk_1", "ch_1", "pm_card_visa"))
		require.NoError(t, err)
		require.Equal(t, psp.StatusSucceeded, charge.Status)
		require.Equal(t, psp.Charge{ID: charge.ID, Status: psp.StatusSucceeded, Amount: 1000, Currency: "EUR", Reference: "ch_1"}, charge)

		again, err := adapter.Charge(t.Context(), request("pk_1", "ch_1", "pm_card_visa"))
		require.NoError(t, err)
		require.Equal(t, charge, again, "the same key is the same charge")

		declined, err := adapter.Charge(t.Context(), request("pk_2", "ch_2", "pm_card_chargeDeclinedInsufficientFunds"))
		require.NoError(t, err, "a decline is a value")
		require.Equal(t, psp.StatusFailed, declined.Status)
		require.Equal(t, "insufficient_funds", declined.DeclineCode)

		_, err = adapter.Charge(t.Context(), request("pk_3", "ch_3", "pm_unknown"))
		requirePSPError(t, err, psp.ErrNotApplied, "invalid_request")

		other := request("pk_1", "ch_1", "pm_card_visa")
		other.Amount = 2000
		_, err = adapter.Charge(t.Context(), other)
		requirePSPError(t, err, psp.ErrUnknownOutcome, "idempotency_key_reused")

		found, err := adapter.Find(t.Context(), lookup("ch_1", since))
		require.NoError(t, err)
		require.Equal(t, charge, found)
		found, err = adapter.Find(t.Context(), psp.LookupRequest{ProviderID: charge.ID})
		require.NoError(t, err)
		require.Equal(t, charge, found)
		found, err = adapter.Find(t.Context(), lookup("ch_2", since))
		require.NoError(t, err)
		require.Equal(t, declined, found)
		_, err = adapter.Find(t.Context(), lookup("ch_3", since))
		require.Equal(t, psp.ErrNotFound, err, "refused before execution: nothing to find")
		_, err = adapter.Find(t.Context(), psp.LookupRequest{ProviderID: "pi_missing"})
		require.Equal(t, psp.ErrNotFound, err)

		ledger, err := fakepsp.FetchLedger(t.Context(), provider.URL, true)
		require.NoError(t, err)
		require.Len(t, ledger, 2, "one charge and one decline")
		require.Equal(t, "tn_1", ledger[0].TenantTag)
	})

	t.Run("a 500 after applying is unknown, and the lookup finds the charge", func(t *testing.T) {
		t.Parallel()
		_, adapter := start(t, always(fakepsp.OnCharge, fakepsp.FaultErrorAfterApply, 0))
		since := time.Now()

		_, err := adapter.Charge(t.Context(), request("pk_1", "ch_1", "pm_card_visa"))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "status_500")
		found, err := adapter.Find(t.Context(), lookup("ch_1", since))
		require.NoError(t, err)
		require.Equal(t, psp.StatusSucceeded, found.Status)
	})

	t.Run("a 500 before applying is unknown, and the lookup proves nothing was charged", func(t *testing.T) {
		t.Parallel()
		_, adapter := start(t, always(fakepsp.OnCharge, fakepsp.FaultErrorBeforeApply, 0))
		since := time.Now()

		_, err := adapter.Charge(t.Context(), request("pk_1", "ch_1", "pm_card_visa"))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "status_500")
		_, err = adapter.Find(t.Context(), lookup("ch_1", since))
		require.Equal(t, psp.ErrNotFound, err)
	})

	t.Run("rate limited is not applied", func(t *testing.T) {
		t.Parallel()
		_, adapter := start(t, always(fakepsp.OnCharge, fakepsp.FaultNotProcessed, 0))
		since := time.Now()

		_, err := adapter.Charge(t.Context(), request("pk_1", "ch_1", "pm_card_visa"))
		requirePSPError(t, err, psp.ErrNotApplied, "rate_limited")
		_, err = adapter.Find(t.Context(), lookup("ch_1", since))
		require.Equal(t, psp.ErrNotFound, err)
	})

	t.Run("a key still executing is unknown", func(t *testing.T) {
		t.Parallel()
		_, adapter := start(t, always(fakepsp.OnCharge, fakepsp.FaultDelayedApply, 3000))

		_, err := adapter.Charge(t.Context(), request("pk_1", "ch_1", "pm_card_visa"))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "timeout")
		_, err = adapter.Charge(t.Context(), request("pk_1", "ch_1", "pm_card_visa"))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "idempotency_key_in_use")
	})

	t.Run("authorized, captured in part, refunded what was captured", func(t *testing.T) {
		t.Parallel()
		provider, adapter := start(t, fakepsp.Config{})
		require.True(t, adapter.Capabilities().SeparateCapture)
		since := time.Now()

		req := request("pk_1", "ch_1", "pm_card_visa")
		req.CaptureLater = true
		held, err := adapter.Charge(t.Context(), req)
		require.NoError(t, err)
		require.Equal(t, psp.Charge{ID: held.ID, Status: psp.StatusRequiresCapture, Amount: 1000, Currency: "EUR", Reference: "ch_1"}, held)
		found, err := adapter.Find(t.Context(), lookup("ch_1", since))
		require.NoError(t, err)
		require.Equal(t, held, found, "held, found by reference")

		op := psp.OperationRequest{Key: "cpk_1", Charge: held.ID, Amount: 1001, Currency: "EUR", Reference: "cp_1", ChargeReference: "ch_1", Tag: "tn_1"}
		refused, err := adapter.Capture(t.Context(), op)
		require.NoError(t, err)
		require.Equal(t, op.Refused("amount_too_large"), refused)

		op.Key, op.Amount = "cpk_2", 600
		captured, err := adapter.Capture(t.Context(), op)
		require.NoError(t, err)
		want := held
		want.Status, want.AmountCaptured = psp.StatusSucceeded, 600
		require.Equal(t, want, captured)
		again, err := adapter.Capture(t.Context(), op)
		require.NoError(t, err)
		require.Equal(t, captured, again, "the same key is the same capture")
		found, err = adapter.Find(t.Context(), psp.LookupRequest{ProviderID: held.ID})
		require.NoError(t, err)
		require.Equal(t, want, found, "the operation's lookup is the charge's, by id")

		op.Key = "cxk_1"
		refused, err = adapter.Cancel(t.Context(), op)
		require.NoError(t, err)
		require.Equal(t, op.Refused("payment_intent_unexpected_state"), refused)
		op.Key = "cpk_3"
		refused, err = adapter.Capture(t.Context(), op)
		require.NoError(t, err)
		require.Equal(t, op.Refused("payment_intent_unexpected_state"), refused)

		_, err = adapter.Capture(t.Context(), psp.OperationRequest{Key: "cpk_4", Charge: "pi_missing", Amount: 1, Currency: "EUR"})
		requirePSPError(t, err, psp.ErrNotApplied, "invalid_request")

		// Refunds apply to what was captured: beyond it, Stripe's 400
		// without a code (docs/refunds.md), all of it, a refund.
		_, err = adapter.Refund(t.Context(), psp.RefundRequest{Key: "rk_1", Charge: held.ID, Amount: 601, Currency: "EUR", Reference: "re_1"})
		requirePSPError(t, err, psp.ErrNotApplied, "invalid_request")
		refund, err := adapter.Refund(t.Context(), psp.RefundRequest{Key: "rk_2", Charge: held.ID, Amount: 600, Currency: "EUR", Reference: "re_2"})
		require.NoError(t, err)
		require.Equal(t, psp.StatusSucceeded, refund.Status)

		operations, err := fakepsp.FetchOperations(t.Context(), provider.URL)
		require.NoError(t, err)
		require.Len(t, operations, 1)
		require.Equal(t, "cpk_2", operations[0].IdempotencyKey)
		require.Equal(t, int64(600), operations[0].Amount)
		require.Equal(t, "tn_1", operations[0].TenantTag, "filed under its intent's tenant")
	})

	t.Run("canceled, and a hold that expired", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		now := time.Now()
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		_, adapter := start(t, fakepsp.Config{Now: clock, HoldWindow: time.Hour})

		req := request("pk_1", "ch_1", "pm_card_visa")
		req.CaptureLater = true
		held, err := adapter.Charge(t.Context(), req)
		require.NoError(t, err)
		op := psp.OperationRequest{Key: "cxk_1", Charge: held.ID, Amount: 1000, Currency: "EUR", Reference: "cx_1", ChargeReference: "ch_1"}
		canceled, err := adapter.Cancel(t.Context(), op)
		require.NoError(t, err)
		want := held
		want.Status = psp.StatusCanceled
		require.Equal(t, want, canceled)

		req.Key, req.Reference = "pk_2", "ch_2"
		held, err = adapter.Charge(t.Context(), req)
		require.NoError(t, err)
		mu.Lock()
		now = now.Add(time.Hour)
		mu.Unlock()
		found, err := adapter.Find(t.Context(), psp.LookupRequest{ProviderID: held.ID})
		require.NoError(t, err)
		require.Equal(t, psp.StatusCanceled, found.Status, "released by the provider when the hold expired")
		op = psp.OperationRequest{Key: "cpk_2", Charge: held.ID, Amount: 1000, Currency: "EUR", Reference: "cp_2", ChargeReference: "ch_2"}
		refused, err := adapter.Capture(t.Context(), op)
		require.NoError(t, err)
		require.Equal(t, op.Refused(psp.CodeHoldExpired), refused, "Stripe's refusal of an intent canceled automatic is the hold's expiry")
	})

	t.Run("a capture whose answer is lost is found by the charge's lookup", func(t *testing.T) {
		t.Parallel()
		_, adapter := start(t, always(fakepsp.OnCapture, fakepsp.FaultApplyThenReset, 0))

		req := request("pk_1", "ch_1", "pm_card_visa")
		req.CaptureLater = true
		held, err := adapter.Charge(t.Context(), req)
		require.NoError(t, err)
		_, err = adapter.Capture(t.Context(), psp.OperationRequest{Key: "cpk_1", Charge: held.ID, Amount: 1000, Currency: "EUR", Reference: "cp_1", ChargeReference: "ch_1"})
		requirePSPError(t, err, psp.ErrUnknownOutcome, "reset_after_send")
		found, err := adapter.Find(t.Context(), psp.LookupRequest{ProviderID: held.ID})
		require.NoError(t, err)
		require.Equal(t, psp.StatusSucceeded, found.Status)
		require.Equal(t, int64(1000), found.AmountCaptured)
	})

	t.Run("without dedupe, two intents for one charge are never a pick", func(t *testing.T) {
		t.Parallel()
		dedupe := false
		_, adapter := start(t, fakepsp.Config{Dedupe: &dedupe})
		since := time.Now()

		for range 2 {
			_, err := adapter.Charge(t.Context(), request("pk_1", "ch_1", "pm_card_visa"))
			require.NoError(t, err)
		}
		_, err := adapter.Find(t.Context(), lookup("ch_1", since))
		requirePSPError(t, err, psp.ErrUnknownOutcome, "multiple_matches")
	})
}
