package fakepsp_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp"
)

func TestAdyenRefundIsAcknowledgedAndDecided(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setupAdyen(t, fakepsp.Config{Now: clock.Now})
	paid := b.authorise(t, "cf_paid")

	reason := with(refundRequest("re_1", 400), "merchantRefundReason", "CUSTOMER REQUEST")
	resp := b.post(t, refundPath(paid.PSPReference), "rk_1", reason, nil)
	first := requireAcknowledged(t, resp, paid.PSPReference, "re_1", 400)
	require.Equal(t, "rk_1", resp.header.Get("Idempotency-Key"))
	require.NotEqual(t, paid.PSPReference, first.PSPReference)

	// Decided at once, under the payment's lock, and in the ledger under
	// our reference, the payment's tenant.
	require.Equal(t, []fakepsp.RefundEntry{{
		ID: first.PSPReference, IdempotencyKey: "rk_1", Reference: "re_1", Charge: paid.PSPReference, Amount: 400,
		Currency: "EUR", Status: psp.StatusSucceeded, Reason: "requested_by_customer", TenantTag: "tn_tenant", CreatedAt: clock.Now(),
	}}, b.refunds(t))

	// A re-send gets the same acknowledgement, whatever the body.
	again := b.post(t, refundPath(paid.PSPReference), "rk_1", refundRequest("re_other", 1), nil)
	require.Equal(t, string(resp.body), string(again.body))
	require.Len(t, b.refunds(t), 1)

	// What is left is refunded in part and in full; the next is refused.
	b.refundPayment(t, "rk_2", paid.PSPReference, 600)
	b.refundPayment(t, "rk_3", paid.PSPReference, 1)
	refunds := b.refunds(t)
	require.Len(t, refunds, 2, "nothing was left for rk_3")
	var audit fakepsp.Audit
	b.getJSON(t, "/_admin/audit", &audit)
	require.Empty(t, audit.OverRefunded)
}

// A refund Adyen would not make is acknowledged all the same, saved for
// its key with the pspReference it was given, and moves no money; its
// REFUND notification tells (TestAdyenNotifications).
func TestAdyenRefundRefused(t *testing.T) {
	t.Parallel()

	b := setupAdyen(t, fakepsp.Config{})
	paid := b.authorise(t, "cf_paid")
	refused := b.pay(t, "cf_refused", payment("ch_refused", fakepsp.PaymentMethodDeclined))

	beyond := b.refundPayment(t, "rk_beyond", paid.PSPReference, 1001)
	notAuthorised := b.refundPayment(t, "rk_declined", refused.PSPReference, 100)
	require.Empty(t, b.refunds(t), "no money moved")

	// Saved for the key: a re-send gets the same acknowledgement, also
	// after a restart, and once the ledger moved on.
	b.refundPayment(t, "rk_part", paid.PSPReference, 500)
	require.Equal(t, beyond, b.refundPayment(t, "rk_beyond", paid.PSPReference, 1001))
	require.NoError(t, b.provider.Close())
	restarted := setupAdyen(t, fakepsp.Config{LedgerPath: b.ledgerPath})
	require.Equal(t, beyond, restarted.refundPayment(t, "rk_beyond", paid.PSPReference, 1001))
	require.Equal(t, notAuthorised, restarted.refundPayment(t, "rk_declined", refused.PSPReference, 100))
	require.Len(t, restarted.refunds(t), 1, "rk_part alone")
}

// A refund of a payment the merchant account does not hold, or in another
// currency, is refused before execution: nothing is saved for the key.
func TestAdyenRefundValidationSavesNothing(t *testing.T) {
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
		{"unknown payment", func(string) string { return refundPath("PSPREF0000000001") }, refundRequest("re_v", 100), nil, http.StatusUnprocessableEntity, "167"},
		{"a refund's pspReference", nil, refundRequest("re_v", 100), nil, http.StatusUnprocessableEntity, "167"},
		{"another merchant account", refundPath, with(refundRequest("re_v", 100), "merchantAccount", "Other"), nil, http.StatusUnprocessableEntity, "167"},
		{"another currency", refundPath, with(refundRequest("re_v", 100), "amount", map[string]any{"currency": "USD", "value": 100}), nil, http.StatusUnprocessableEntity, "137"},
		{"no amount", refundPath, with(refundRequest("re_v", 100), "amount", nil), invalid, http.StatusUnprocessableEntity, "100"},
		{"zero amount", refundPath, refundRequest("re_v", 0), nil, http.StatusUnprocessableEntity, "137"},
		{"no merchant account", refundPath, with(refundRequest("re_v", 100), "merchantAccount", nil), invalid, http.StatusUnprocessableEntity, "702"},
		{"no reference", refundPath, with(refundRequest("re_v", 100), "reference", nil), nil, http.StatusUnprocessableEntity, "702"},
		{"unknown reason", refundPath, with(refundRequest("re_v", 100), "merchantRefundReason", "BORED"), invalid, http.StatusUnprocessableEntity, "702"},
		{"a field the fake does not model", refundPath, with(refundRequest("re_v", 100), "store", "Amsterdam"), nil, http.StatusUnprocessableEntity, "702"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupAdyen(t, fakepsp.Config{})
			paid := b.authorise(t, "cf_paid")
			path := tt.path
			if path == nil {
				other := b.refundPayment(t, "rk_other", paid.PSPReference, 1)
				path = func(string) string { return refundPath(other.PSPReference) }
			}
			resp := b.post(t, path(paid.PSPReference), "rk_v", tt.body, tt.header)
			requireServiceError(t, resp, tt.status, tt.code, "validation")
			before := len(b.refunds(t))

			// Nothing was saved for the key: it executes now.
			b.refundPayment(t, "rk_v", paid.PSPReference, 100)
			require.Len(t, b.refunds(t), before+1)
		})
	}
}

// Refunds racing for one payment are decided one at a time under its
// lock: together they never refund more than the payment.
func TestAdyenRefundsRacingNeverExceedThePayment(t *testing.T) {
	t.Parallel()

	b := setupAdyen(t, fakepsp.Config{})
	paid := b.pay(t, "cf_race", with(payment("ch_race", fakepsp.PaymentMethodVisa), "amount", map[string]any{"currency": "EUR", "value": 7}))

	const refunds = 20
	counts := b.race(t, refunds, func(i int) (string, string, any) {
		key := fmt.Sprintf("rk_%02d", i)
		return refundPath(paid.PSPReference), key, refundRequest("re_"+key, 1)
	})
	require.Equal(t, map[int]int{http.StatusCreated: refunds}, counts, "every refund acknowledged")

	var total int64
	for _, refund := range b.refunds(t) {
		total += refund.Amount
	}
	require.Equal(t, int64(7), total, "exactly the payment")
}

// The faults act on a refund as on a payment; a re-send with the key
// learns what a lost acknowledgement said.
func TestAdyenRefundFaults(t *testing.T) {
	t.Parallel()

	// setupPaid starts a provider with a payment, then schedule.
	setupPaid := func(t *testing.T, rule fakepsp.Rule) (*adyenBundle, paymentResponse) {
		b := setupAdyen(t, fakepsp.Config{})
		paid := b.authorise(t, "cf_paid")
		require.NoError(t, b.provider.SetFaults(faults(rule)))
		return b, paid
	}

	for _, fault := range []string{fakepsp.FaultApplyThenTimeout, fakepsp.FaultApplyThenReset} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()

			b, paid := setupPaid(t, always(fakepsp.OnRefund, fault, 200))
			_, err := b.send(t, b.client(100*time.Millisecond), refundPath(paid.PSPReference), "rk_lost", refundRequest("re_rk_lost", 100), nil)
			require.Error(t, err, "no answer at all")
			eventually(t, func() bool { return len(b.provider.Refunds()) == 1 }, "decided all the same")

			require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
			answer := b.refundPayment(t, "rk_lost", paid.PSPReference, 100)
			require.Equal(t, b.provider.Refunds()[0].ID, answer.PSPReference, "the re-send gets the first acknowledgement")
			require.Len(t, b.refunds(t), 1)
		})
	}

	for _, tt := range []struct {
		fault  string
		status int
	}{
		{fakepsp.FaultErrorBeforeApply, http.StatusInternalServerError},
		{fakepsp.FaultNotProcessed, http.StatusTooManyRequests},
	} {
		t.Run(tt.fault, func(t *testing.T) {
			t.Parallel()

			b, paid := setupPaid(t, always(fakepsp.OnRefund, tt.fault, 0))
			resp := b.post(t, refundPath(paid.PSPReference), "rk_err", refundRequest("re_rk_err", 100), nil)
			requireServiceError(t, resp, tt.status, "000", "internal")
			require.Empty(t, b.refunds(t))
			require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
			b.refundPayment(t, "rk_err", paid.PSPReference, 100)
			require.Len(t, b.refunds(t), 1, "nothing saved: the re-send executes")
		})
	}

	t.Run("error_after_apply", func(t *testing.T) {
		t.Parallel()

		b, paid := setupPaid(t, always(fakepsp.OnRefund, fakepsp.FaultErrorAfterApply, 0))
		first := b.post(t, refundPath(paid.PSPReference), "rk_500", refundRequest("re_rk_500", 100), nil)
		requireServiceError(t, first, http.StatusInternalServerError, "000", "internal")
		require.Len(t, b.refunds(t), 1, "decided")
		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		again := b.post(t, refundPath(paid.PSPReference), "rk_500", refundRequest("re_rk_500", 100), nil)
		require.Equal(t, string(first.body), string(again.body), "the first result was the 500")
	})

	t.Run("delayed_apply", func(t *testing.T) {
		t.Parallel()

		b, paid := setupPaid(t, always(fakepsp.OnRefund, fakepsp.FaultDelayedApply, 3000))
		_, err := b.send(t, b.client(50*time.Millisecond), refundPath(paid.PSPReference), "rk_late", refundRequest("re_rk_late", 100), nil)
		require.Error(t, err, "no answer at all")

		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		resp := b.post(t, refundPath(paid.PSPReference), "rk_late", refundRequest("re_rk_late", 100), nil)
		requireServiceError(t, resp, http.StatusUnprocessableEntity, "704", "validation")
		require.Empty(t, b.refunds(t), "not decided yet")

		eventually(t, func() bool { return len(b.provider.Refunds()) == 1 }, "the delayed refund is decided")
		answer := b.refundPayment(t, "rk_late", paid.PSPReference, 100)
		require.Equal(t, b.provider.Refunds()[0].ID, answer.PSPReference)
	})
}
