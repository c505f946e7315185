package fakepsp_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp"
)

func TestNewRefusesAnUnknownProtocol(t *testing.T) {
	t.Parallel()

	_, err := fakepsp.New(fakepsp.Config{LedgerPath: filepath.Join(t.TempDir(), "ledger.jsonl"), Protocol: "paypal"})
	require.ErrorIs(t, err, fakepsp.ErrUnknownProtocol)
}

func TestStripeCreateConfirmAndRetrieve(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setupStripe(t, fakepsp.Config{Now: clock.Now})
	params := intentParams("ch_1", fakepsp.PaymentMethodVisa)
	params.AddMetadata(fakepsp.MetadataTenant, "tenant-a")
	params.Description = stripe.String("Order 1")

	intent, err := b.create(t, "cf_ch_1", params)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(intent.ID, "pi_"), intent.ID)
	require.Equal(t, "payment_intent", intent.Object)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, intent.Status)
	require.Equal(t, int64(1000), intent.Amount)
	require.Equal(t, int64(1000), intent.AmountReceived)
	require.Equal(t, stripe.Currency("usd"), intent.Currency)
	require.Equal(t, clock.Now().Unix(), intent.Created)
	require.Equal(t, "Order 1", intent.Description)
	require.Equal(t, map[string]string{fakepsp.MetadataCharge: "ch_1", fakepsp.MetadataTenant: "tenant-a"}, intent.Metadata)
	require.True(t, strings.HasPrefix(intent.LatestCharge.ID, "ch_"), intent.LatestCharge.ID)
	require.True(t, strings.HasPrefix(intent.PaymentMethod.ID, "pm_"), "a new PaymentMethod, never the test token")
	require.Nil(t, intent.LastPaymentError)
	require.False(t, replayed(intent.LastResponse))
	require.NotEmpty(t, intent.LastResponse.RequestID)

	found, err := b.retrieve(t, intent.ID)
	require.NoError(t, err)
	require.JSONEq(t, string(intent.LastResponse.RawJSON), string(found.LastResponse.RawJSON), "retrieve shows what create answered")

	// The ledger files it like any charge: our reference, the tenant tag,
	// the ISO currency.
	require.Equal(t, []fakepsp.LedgerEntry{{
		ID: intent.ID, IdempotencyKey: "cf_ch_1", Reference: "ch_1", Amount: 1000, Currency: "USD",
		Status: psp.StatusSucceeded, TenantTag: "tenant-a", CreatedAt: clock.Now(),
	}}, b.ledger(t, true))
}

func TestStripeDeclines(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{})
	tests := []struct {
		paymentMethod string
		code          stripe.ErrorCode
		declineCode   stripe.DeclineCode
	}{
		{fakepsp.PaymentMethodDeclined, stripe.ErrorCodeCardDeclined, stripe.DeclineCodeGenericDecline},
		{fakepsp.PaymentMethodInsufficientFunds, stripe.ErrorCodeCardDeclined, stripe.DeclineCodeInsufficientFunds},
		{fakepsp.PaymentMethodExpiredCard, stripe.ErrorCodeExpiredCard, stripe.DeclineCodeExpiredCard},
		{fakepsp.PaymentMethodIncorrectCVC, stripe.ErrorCodeIncorrectCVC, stripe.DeclineCodeIncorrectCVC},
	}
	for _, tt := range tests {
		t.Run(tt.paymentMethod, func(t *testing.T) {
			t.Parallel()

			key := "cf_" + tt.paymentMethod
			_, err := b.create(t, key, intentParams("ch_"+tt.paymentMethod, tt.paymentMethod))
			stripeErr := requireStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, tt.code)
			require.Equal(t, tt.declineCode, stripeErr.DeclineCode)
			var cardErr *stripe.CardError
			require.ErrorAs(t, err, &cardErr)
			require.Equal(t, tt.declineCode, cardErr.DeclineCode)

			// The error carries the PaymentIntent, waiting for another
			// payment method, and the failed charge.
			intent := stripeErr.PaymentIntent
			require.NotNil(t, intent)
			require.True(t, strings.HasPrefix(intent.ID, "pi_"))
			require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, intent.Status)
			require.Equal(t, int64(0), intent.AmountReceived)
			require.Equal(t, "ch_"+tt.paymentMethod, intent.Metadata[fakepsp.MetadataCharge])
			require.Equal(t, intent.LatestCharge.ID, stripeErr.ChargeID)
			require.Equal(t, tt.declineCode, intent.LastPaymentError.DeclineCode)

			// A retry replays the decline; retrieve shows the intent.
			_, err = b.create(t, key, intentParams("ch_"+tt.paymentMethod, tt.paymentMethod))
			again := requireStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, tt.code)
			require.True(t, replayed(again.LastResponse))
			require.Equal(t, intent.ID, again.PaymentIntent.ID)
			found, err := b.retrieve(t, intent.ID)
			require.NoError(t, err)
			require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, found.Status)
			require.Equal(t, tt.code, found.LastPaymentError.Code)
		})
	}
	t.Cleanup(func() {
		// Recorded as failed charges, like the fake protocol's declines.
		ledger := b.provider.Ledger(true)
		require.Len(t, ledger, len(tests))
		for _, entry := range ledger {
			require.Equal(t, psp.StatusFailed, entry.Status)
			require.NotEmpty(t, entry.DeclineCode)
		}
		require.Empty(t, b.provider.Ledger(false), "no money moved")
	})
}

func TestStripeKnownKeyIsReplayed(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{})
	first := b.visaIntent(t, "cf_replay")
	second := b.visaIntent(t, "cf_replay")
	require.Equal(t, first.ID, second.ID)
	require.True(t, replayed(second.LastResponse))
	require.JSONEq(t, string(first.LastResponse.RawJSON), string(second.LastResponse.RawJSON))
	require.Len(t, b.ledger(t, true), 1)
}

func TestStripeKeyReusedWithOtherParameters(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{})
	b.visaIntent(t, "cf_reused")

	changed := intentParams("ch_cf_reused", fakepsp.PaymentMethodVisa)
	changed.Amount = stripe.Int64(2000)
	_, err := b.create(t, "cf_reused", changed)
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeIdempotency, "")
	var idempotencyErr *stripe.IdempotencyError
	require.ErrorAs(t, err, &idempotencyErr)

	// Every parameter counts, metadata and description included.
	changed = intentParams("ch_cf_reused", fakepsp.PaymentMethodVisa)
	changed.Description = stripe.String("another order")
	_, err = b.create(t, "cf_reused", changed)
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeIdempotency, "")

	require.Len(t, b.ledger(t, true), 1)
}

func TestStripeKeyInFlightIsRefused(t *testing.T) {
	t.Parallel()

	t.Run("while its request executes", func(t *testing.T) {
		t.Parallel()

		// The first request takes 3 s to execute, holding its key
		// meanwhile; the second is sent only once the first is executing
		// (its latency fault has fired), however slow the machine.
		b := setupStripe(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultLatency, 3000))})
		succeeded, refused := sendWhileExecuting(t, b.testBundle, func() (*stripe.PaymentIntent, error) {
			return b.create(t, "cf_busy", intentParams("ch_busy", fakepsp.PaymentMethodVisa))
		})
		require.NotNil(t, succeeded, "one request executed")
		stripeErr := requireStripeError(t, refused, http.StatusConflict, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeIdempotencyKeyInUse)
		require.Equal(t, "true", stripeErr.LastResponse.Header.Get("Stripe-Should-Retry"))

		// The 409 was not saved: a retry now replays the charge.
		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		again, err := b.create(t, "cf_busy", intentParams("ch_busy", fakepsp.PaymentMethodVisa))
		require.NoError(t, err)
		require.Equal(t, succeeded.ID, again.ID)
		require.True(t, replayed(again.LastResponse))
		require.Len(t, b.ledger(t, true), 1)
	})

	t.Run("until a delayed apply lands", func(t *testing.T) {
		t.Parallel()

		// 3 s: long enough that the retry below arrives before it lands,
		// however slow the machine.
		b := setupStripe(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultDelayedApply, 3000))})
		_, err := createWith(t, b.clientWithTimeout(50*time.Millisecond), "cf_late", intentParams("ch_cf_late", fakepsp.PaymentMethodVisa))
		require.Error(t, err)
		var stripeErr *stripe.Error
		require.False(t, errors.As(err, &stripeErr), "no answer at all: %v", err)

		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		_, err = b.create(t, "cf_late", intentParams("ch_cf_late", fakepsp.PaymentMethodVisa))
		requireStripeError(t, err, http.StatusConflict, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeIdempotencyKeyInUse)
		require.Empty(t, b.listIDs(t), "not applied yet")

		eventually(t, func() bool { return len(b.provider.Ledger(false)) == 1 }, "the delayed charge lands")
		intent := b.visaIntent(t, "cf_late")
		require.True(t, replayed(intent.LastResponse))
		require.Equal(t, b.provider.Ledger(false)[0].ID, intent.ID)
	})
}

func TestStripeErrorAfterApplyIsSavedAndReplayed(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultErrorAfterApply, 0))})
	_, err := b.create(t, "cf_500", intentParams("ch_500", fakepsp.PaymentMethodVisa))
	first := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
	require.False(t, replayed(first.LastResponse))

	// The first answer is saved once execution started, a 500 included:
	// every retry with the key gets it, whatever the faults are now.
	require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
	for range 2 {
		_, err = b.create(t, "cf_500", intentParams("ch_500", fakepsp.PaymentMethodVisa))
		again := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
		require.True(t, replayed(again.LastResponse))
		require.Equal(t, string(first.LastResponse.RawJSON), string(again.LastResponse.RawJSON))
	}

	// Money moved, and every read shows it.
	ledger := b.ledger(t, false)
	require.Len(t, ledger, 1)
	require.Equal(t, []string{ledger[0].ID}, b.searchIDs(t, "ch_500"))
	require.Equal(t, []string{ledger[0].ID}, b.listIDs(t))
	intent, err := b.retrieve(t, ledger[0].ID)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, intent.Status)
}

func TestStripeErrorBeforeApplyIsSavedAndReplayed(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{Faults: faults(fakepsp.Rule{On: fakepsp.OnCharge, Fault: fakepsp.FaultErrorBeforeApply, P: 1, KeyPrefix: "cf_err"})})
	_, err := b.create(t, "cf_err", intentParams("ch_err", fakepsp.PaymentMethodVisa))
	first := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")

	require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
	_, err = b.create(t, "cf_err", intentParams("ch_err", fakepsp.PaymentMethodVisa))
	again := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
	require.True(t, replayed(again.LastResponse))
	require.Equal(t, string(first.LastResponse.RawJSON), string(again.LastResponse.RawJSON), "the same body whether money moved or not")

	// Nothing moved and nothing shows; the saved 500 survives a restart.
	require.Empty(t, b.ledger(t, true))
	require.Empty(t, b.searchIDs(t, "ch_err"))
	require.Empty(t, b.listIDs(t))
	require.NoError(t, b.provider.Close())
	restarted := setupStripe(t, fakepsp.Config{LedgerPath: b.ledgerPath})
	_, err = restarted.create(t, "cf_err", intentParams("ch_err", fakepsp.PaymentMethodVisa))
	after := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
	require.True(t, replayed(after.LastResponse))
	require.Empty(t, restarted.ledger(t, true))

	// Only a new key charges.
	restarted.visaIntent(t, "cf_err_2")
	require.Len(t, restarted.ledger(t, false), 1)
}

func TestStripeFaultsInFrontOfExecutionSaveNothing(t *testing.T) {
	t.Parallel()

	t.Run("not_processed", func(t *testing.T) {
		t.Parallel()

		b := setupStripe(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultNotProcessed, 0))})
		_, err := b.create(t, "cf_429", intentParams("ch_429", fakepsp.PaymentMethodVisa))
		requireStripeError(t, err, http.StatusTooManyRequests, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeRateLimit)
		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		intent := b.visaIntent(t, "cf_429")
		require.False(t, replayed(intent.LastResponse))
	})

	t.Run("drop_before_apply", func(t *testing.T) {
		t.Parallel()

		b := setupStripe(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultDropBeforeApply, 0))})
		_, err := b.create(t, "cf_drop", intentParams("ch_drop", fakepsp.PaymentMethodVisa))
		require.Error(t, err)
		require.Empty(t, b.ledger(t, true))
		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		intent := b.visaIntent(t, "cf_drop")
		require.False(t, replayed(intent.LastResponse))
	})
}

func TestStripeAnswerLostAfterApply(t *testing.T) {
	t.Parallel()

	for _, fault := range []string{fakepsp.FaultApplyThenReset, fakepsp.FaultApplyThenTimeout} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()

			b := setupStripe(t, fakepsp.Config{Faults: faults(always(fakepsp.OnCharge, fault, 200))})
			_, err := createWith(t, b.clientWithTimeout(50*time.Millisecond), "cf_lost", intentParams("ch_cf_lost", fakepsp.PaymentMethodVisa))
			require.Error(t, err)
			var stripeErr *stripe.Error
			require.False(t, errors.As(err, &stripeErr), "no answer at all: %v", err)

			// Applied all the same: search finds it, and with the faults
			// off a retry replays it.
			eventually(t, func() bool { return len(b.provider.Ledger(false)) == 1 }, "applied")
			require.Len(t, b.searchIDs(t, "ch_cf_lost"), 1)
			require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
			intent := b.visaIntent(t, "cf_lost")
			require.True(t, replayed(intent.LastResponse))
		})
	}
}

func TestStripeKeyExpiry(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setupStripe(t, fakepsp.Config{Now: clock.Now, Faults: faults(always(fakepsp.OnCharge, fakepsp.FaultKeyExpiry, 1000))})
	first := b.visaIntent(t, "cf_expiring")
	clock.Advance(999 * time.Millisecond)
	require.Equal(t, first.ID, b.visaIntent(t, "cf_expiring").ID, "within the window the key replays")

	clock.Advance(time.Millisecond)
	second := b.visaIntent(t, "cf_expiring")
	require.NotEqual(t, first.ID, second.ID, "the pruned key charged again")

	// The intents themselves are not forgotten.
	require.ElementsMatch(t, []string{first.ID, second.ID}, b.searchIDs(t, "ch_cf_expiring"))
	var audit fakepsp.Audit
	b.getJSON(t, "/_admin/audit", &audit)
	require.Len(t, audit.Duplicates, 1)
}

func TestStripeDedupe(t *testing.T) {
	t.Parallel()

	// send makes three attempts with one key and returns the intents'
	// ids.
	send := func(t *testing.T, b *stripeBundle) []string {
		var ids []string
		for range 3 {
			ids = append(ids, b.visaIntent(t, "cf_thrice").ID)
		}
		return ids
	}

	t.Run("on: one charge per key", func(t *testing.T) {
		t.Parallel()

		b := setupStripe(t, fakepsp.Config{})
		ids := send(t, b)
		require.Equal(t, []string{ids[0], ids[0], ids[0]}, ids)
		require.Len(t, b.ledger(t, true), 1)
		var audit fakepsp.Audit
		b.getJSON(t, "/_admin/audit", &audit)
		require.Equal(t, map[string]int{"1": 1}, audit.ChargesPerKey)
	})

	t.Run("off: every attempt charges", func(t *testing.T) {
		t.Parallel()

		b := setupStripe(t, fakepsp.Config{Dedupe: ptr(false)})
		ids := send(t, b)
		require.Len(t, b.ledger(t, false), 3)
		require.ElementsMatch(t, ids, b.searchIDs(t, "ch_cf_thrice"), "one reference, three PaymentIntents")
		var audit fakepsp.Audit
		b.getJSON(t, "/_admin/audit", &audit)
		require.Equal(t, map[string]int{"3": 1}, audit.ChargesPerKey)

		// Nothing is saved either: error_before_apply's 500 is not
		// replayed.
		require.NoError(t, b.provider.SetFaults(faults(always(fakepsp.OnCharge, fakepsp.FaultErrorBeforeApply, 0))))
		_, err := b.create(t, "cf_once", intentParams("ch_once", fakepsp.PaymentMethodVisa))
		requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		b.visaIntent(t, "cf_once")
	})
}

func TestStripeSearchLagsWhileRetrieveAndListDoNot(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setupStripe(t, fakepsp.Config{Now: clock.Now, Faults: faults(always(fakepsp.OnLookup, fakepsp.FaultLookupLag, 500))})
	intent := b.visaIntent(t, "cf_fresh")

	require.Empty(t, b.searchIDs(t, "ch_cf_fresh"), "the search index has not caught up")
	require.Equal(t, []string{intent.ID}, b.listIDs(t), "list is not lagged")
	found, err := b.retrieve(t, intent.ID)
	require.NoError(t, err, "retrieve is not lagged")
	require.Equal(t, intent.ID, found.ID)

	clock.Advance(499 * time.Millisecond)
	require.Empty(t, b.searchIDs(t, "ch_cf_fresh"))
	clock.Advance(time.Millisecond)
	require.Equal(t, []string{intent.ID}, b.searchIDs(t, "ch_cf_fresh"))

	// lookup_lag fired on the three searches only.
	require.Equal(t, map[string]int{fakepsp.FaultLookupLag: 3}, b.provider.Faults().Fired)
}

func TestStripeLookupUnavailable(t *testing.T) {
	t.Parallel()

	t.Run("503", func(t *testing.T) {
		t.Parallel()

		b := setupStripe(t, fakepsp.Config{})
		intent := b.visaIntent(t, "cf_1")
		require.NoError(t, b.provider.SetFaults(faults(always(fakepsp.OnLookup, fakepsp.FaultUnavailable, 0))))

		_, err := b.search(t, "ch_cf_1", 10)
		stripeErr := requireStripeError(t, err, http.StatusServiceUnavailable, stripe.ErrorTypeAPI, "")
		require.Equal(t, "true", stripeErr.LastResponse.Header.Get("Stripe-Should-Retry"))
		_, err = b.retrieve(t, intent.ID)
		requireStripeError(t, err, http.StatusServiceUnavailable, stripe.ErrorTypeAPI, "")
		_, err = b.list(t, &stripe.PaymentIntentListParams{})
		requireStripeError(t, err, http.StatusServiceUnavailable, stripe.ErrorTypeAPI, "")
		require.Equal(t, 3, b.provider.Faults().Fired[fakepsp.FaultUnavailable])
	})

	t.Run("held, then dropped", func(t *testing.T) {
		t.Parallel()

		b := setupStripe(t, fakepsp.Config{})
		b.visaIntent(t, "cf_1")
		require.NoError(t, b.provider.SetFaults(faults(always(fakepsp.OnLookup, fakepsp.FaultUnavailable, 150))))

		params := &stripe.PaymentIntentSearchParams{}
		params.Query = "metadata['chargeflow_charge']:'ch_cf_1'"
		started := time.Now()
		for _, err := range b.clientWithTimeout(5*time.Second).V1PaymentIntents.Search(t.Context(), params) {
			require.Error(t, err)
			var stripeErr *stripe.Error
			require.False(t, errors.As(err, &stripeErr), "no answer at all: %v", err)
		}
		require.GreaterOrEqual(t, time.Since(started), 150*time.Millisecond)
	})

	t.Run("key_prefix is matched against our charge reference", func(t *testing.T) {
		t.Parallel()

		b := setupStripe(t, fakepsp.Config{})
		broken := b.visaIntent(t, "cf_broken")
		fine := b.visaIntent(t, "cf_fine")
		require.NoError(t, b.provider.SetFaults(faults(fakepsp.Rule{On: fakepsp.OnLookup, Fault: fakepsp.FaultUnavailable, P: 1, KeyPrefix: "ch_cf_broken"})))

		_, err := b.search(t, "ch_cf_broken", 10)
		requireStripeError(t, err, http.StatusServiceUnavailable, stripe.ErrorTypeAPI, "")
		_, err = b.retrieve(t, broken.ID)
		requireStripeError(t, err, http.StatusServiceUnavailable, stripe.ErrorTypeAPI, "")
		require.Equal(t, []string{fine.ID}, b.searchIDs(t, "ch_cf_fine"))
		_, err = b.retrieve(t, fine.ID)
		require.NoError(t, err)
		require.Len(t, b.listIDs(t), 2, "a list concerns no single charge")
	})
}

func TestStripeRetrieveUnknown(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{})
	_, err := b.retrieve(t, "pi_nothing")
	stripeErr := requireStripeError(t, err, http.StatusNotFound, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
	require.Equal(t, "id", stripeErr.Param)
}

func TestStripeListIsNewestFirstWithCursors(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setupStripe(t, fakepsp.Config{Now: clock.Now})
	var ids []string // oldest first
	for i := range 5 {
		ids = append(ids, b.visaIntent(t, fmt.Sprintf("cf_%d", i)).ID)
		clock.Advance(time.Second)
	}
	newestFirst := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}

	// stripe-go follows has_more with starting_after.
	params := &stripe.PaymentIntentListParams{}
	params.Limit = stripe.Int64(2)
	all, err := b.list(t, params)
	require.NoError(t, err)
	require.Equal(t, newestFirst, all)

	// One page at a time.
	page := b.listPage(t, "?limit=2")
	require.Equal(t, newestFirst[:2], page.ids())
	require.True(t, page.HasMore)
	page = b.listPage(t, "?limit=2&starting_after="+ids[3])
	require.Equal(t, newestFirst[2:4], page.ids())
	require.True(t, page.HasMore)
	page = b.listPage(t, "?limit=2&starting_after="+ids[1])
	require.Equal(t, newestFirst[4:], page.ids())
	require.False(t, page.HasMore)
	page = b.listPage(t, "?limit=2&ending_before="+ids[1])
	require.Equal(t, newestFirst[1:3], page.ids(), "the two just newer than the cursor")
	require.True(t, page.HasMore)

	// Filtered by created, in unix seconds.
	start := ids[0]
	first, err := b.retrieve(t, start)
	require.NoError(t, err)
	params = &stripe.PaymentIntentListParams{CreatedRange: &stripe.RangeQueryParams{
		GreaterThanOrEqual: first.Created + 1, LesserThanOrEqual: first.Created + 3,
	}}
	filtered, err := b.list(t, params)
	require.NoError(t, err)
	require.Equal(t, newestFirst[1:4], filtered)

	// An unknown cursor is refused.
	_, err = b.list(t, &stripe.PaymentIntentListParams{ListParams: stripe.ListParams{StartingAfter: stripe.String("pi_nothing")}})
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
}

// listPage is one raw page of GET /v1/payment_intents.
type listPage struct {
	Object  string `json:"object"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
	Data    []struct {
		ID string `json:"id"`
	} `json:"data"`
}

func (p listPage) ids() []string {
	ids := []string{}
	for _, item := range p.Data {
		ids = append(ids, item.ID)
	}
	return ids
}

// listPage fetches one raw page of the list.
func (b *stripeBundle) listPage(t *testing.T, query string) listPage {
	t.Helper()

	resp := b.do(t, http.MethodGet, "/v1/payment_intents"+query, http.Header{"Authorization": {"Bearer " + testSecretKey}}, "")
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	var page listPage
	require.NoError(t, json.Unmarshal(resp.body, &page))
	require.Equal(t, "list", page.Object)
	require.Equal(t, "/v1/payment_intents", page.URL)
	return page
}

func TestStripeSearchPagesAndQueries(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{Dedupe: ptr(false)})
	var ids []string
	for range 3 {
		ids = append(ids, b.visaIntent(t, "cf_same").ID)
	}
	_, err := b.create(t, "cf_declined", intentParams("ch_cf_same", fakepsp.PaymentMethodDeclined))
	requireStripeError(t, err, http.StatusPaymentRequired, stripe.ErrorTypeCard, stripe.ErrorCodeCardDeclined)
	b.visaIntent(t, "cf_other")

	// stripe-go follows next_page.
	found, err := b.search(t, "ch_cf_same", 2)
	require.NoError(t, err)
	require.Len(t, found, 4)
	require.Subset(t, found, ids)

	resp := b.do(t, http.MethodGet, `/v1/payment_intents/search?limit=2&query=`+
		strings.ReplaceAll(`metadata['chargeflow_charge']:'ch_cf_same'`, "'", "%27"), http.Header{"Authorization": {"Bearer " + testSecretKey}}, "")
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
	var page struct {
		Object   string            `json:"object"`
		Data     []json.RawMessage `json:"data"`
		HasMore  bool              `json:"has_more"`
		NextPage *string           `json:"next_page"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &page))
	require.Equal(t, "search_result", page.Object)
	require.Len(t, page.Data, 2)
	require.True(t, page.HasMore)
	require.NotNil(t, page.NextPage)

	// Clauses joined by AND, double quotes too.
	params := &stripe.PaymentIntentSearchParams{}
	params.Query = `metadata["chargeflow_charge"]:"ch_cf_same" AND status:'requires_payment_method'`
	var matched []string
	for intent, err := range b.client.V1PaymentIntents.Search(t.Context(), params) {
		require.NoError(t, err)
		matched = append(matched, intent.ID)
	}
	require.Len(t, matched, 1)

	// What the fake does not understand is refused, not ignored.
	params = &stripe.PaymentIntentSearchParams{}
	params.Query = `amount>1000`
	for _, err := range b.client.V1PaymentIntents.Search(t.Context(), params) {
		stripeErr := requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, "")
		require.Equal(t, "query", stripeErr.Param)
	}
}

func TestStripeValidationSavesNothing(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{})
	without := func(name string) func(f map[string][]string) {
		return func(f map[string][]string) { delete(f, name) }
	}
	set := func(name, value string) func(f map[string][]string) {
		return func(f map[string][]string) { f[name] = []string{value} }
	}
	tests := []struct {
		name   string
		change func(map[string][]string)
		status int
		param  string
		code   string
	}{
		{"amount missing", without("amount"), 400, "amount", "parameter_missing"},
		{"amount zero", set("amount", "0"), 400, "amount", "parameter_invalid_integer"},
		{"amount fraction", set("amount", "10.5"), 400, "amount", "parameter_invalid_integer"},
		{"currency missing", without("currency"), 400, "currency", "parameter_missing"},
		{"currency invalid", set("currency", "dollars"), 400, "currency", ""},
		{"payment method missing", without("payment_method"), 400, "payment_method", "parameter_missing"},
		{"payment method unknown", set("payment_method", "pm_card_canary_4242"), 400, "payment_method", "resource_missing"},
		{"not confirmed", without("confirm"), 400, "confirm", ""},
		{"capture method outside its enum", set("capture_method", "later"), 400, "capture_method", ""},
		{"allow_redirects without enabled", func(f map[string][]string) {
			delete(f, "automatic_payment_methods[enabled]")
			f["automatic_payment_methods[allow_redirects]"] = []string{"never"}
		}, 400, "automatic_payment_methods[enabled]", "parameter_missing"},
		{"allow_redirects outside its enum", set("automatic_payment_methods[allow_redirects]", "sometimes"), 400, "automatic_payment_methods[allow_redirects]", ""},
		{"reference missing", without("metadata[chargeflow_charge]"), 400, "metadata[chargeflow_charge]", "parameter_missing"},
		{"unknown parameter", set("customer", "cus_1"), 400, "customer", "parameter_unknown"},
		{"metadata key too long", set("metadata["+strings.Repeat("k", 41)+"]", "v"), 400, "metadata[" + strings.Repeat("k", 41) + "]", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			key := fmt.Sprintf("cf_invalid_%d", i)
			form := validForm()
			tt.change(form)
			resp := b.postIntent(t, key, form)
			require.Equal(t, tt.status, resp.status, "body: %s", resp.body)
			var body struct {
				Error struct {
					Type  string `json:"type"`
					Code  string `json:"code"`
					Param string `json:"param"`
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(resp.body, &body))
			require.Equal(t, "invalid_request_error", body.Error.Type)
			require.Equal(t, tt.code, body.Error.Code)
			require.Equal(t, tt.param, body.Error.Param)
			require.NotContains(t, string(resp.body), "4242", "the payment method is not echoed")

			// Nothing was saved for the key: the valid request executes.
			resp = b.postIntent(t, key, validForm())
			require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
			require.Empty(t, resp.header.Get("Idempotent-Replayed"))
		})
	}

	t.Run("JSON body", func(t *testing.T) {
		t.Parallel()

		resp := b.do(t, http.MethodPost, "/v1/payment_intents", http.Header{
			"Authorization": {"Bearer " + testSecretKey}, "Content-Type": {"application/json"}, "Idempotency-Key": {"cf_json"},
		}, `{"amount":1000}`)
		require.Equal(t, http.StatusBadRequest, resp.status)
	})

	t.Run("no idempotency key", func(t *testing.T) {
		t.Parallel()

		resp := b.do(t, http.MethodPost, "/v1/payment_intents", http.Header{
			"Authorization": {"Bearer " + testSecretKey}, "Content-Type": {"application/x-www-form-urlencoded"},
		}, validForm().Encode())
		require.Equal(t, http.StatusBadRequest, resp.status)
	})
}

func TestStripeAuthentication(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{})
	for _, key := range []string{"", "sk_live_123", "pk_test_123", "sk_test_"} {
		client := b.stripeClient(key, b.http)
		_, err := createWith(t, client, "cf_auth", intentParams("ch_auth", fakepsp.PaymentMethodVisa))
		requireStripeError(t, err, http.StatusUnauthorized, stripe.ErrorTypeInvalidRequest, "")
		_, err = client.V1PaymentIntents.Retrieve(t.Context(), "pi_1", nil)
		requireStripeError(t, err, http.StatusUnauthorized, stripe.ErrorTypeInvalidRequest, "")
	}
	require.Empty(t, b.ledger(t, true))

	// Basic authentication with the key as the user works too, as at
	// Stripe.
	resp := b.do(t, http.MethodGet, "/v1/payment_intents", http.Header{"Authorization": {"Basic c2tfdGVzdF8xMjM6"}}, "") // sk_test_123:
	require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
}

func TestStripeRoutes(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{})
	auth := http.Header{"Authorization": {"Bearer " + testSecretKey}}

	// The fake protocol is not served beside Stripe's.
	resp := b.do(t, http.MethodPost, "/v1/charges", auth, `{}`)
	require.Equal(t, http.StatusNotFound, resp.status)
	require.Contains(t, string(resp.body), "invalid_request_error")
	resp = b.do(t, http.MethodPost, "/v1/payment_intents/pi_1/capture", auth, "")
	require.Equal(t, http.StatusNotFound, resp.status)
	resp = b.do(t, http.MethodPost, "/v1/refunds/re_1/cancel", auth, "")
	require.Equal(t, http.StatusNotFound, resp.status)
	resp = b.do(t, http.MethodGet, "/v1/refunds/by-key/rk_1", auth, "")
	require.Equal(t, http.StatusNotFound, resp.status, "the fake protocol's lookup is not Stripe's")
	require.Contains(t, string(resp.body), "Unrecognized request URL")

	// The admin endpoints are the same under both protocols.
	require.Empty(t, b.ledger(t, true))
	state, err := fakepsp.FetchFaults(t.Context(), b.url)
	require.NoError(t, err)
	require.True(t, state.Dedupe)

	// And the Stripe protocol is not served beside the fake one.
	fake := setup(t, fakepsp.Config{})
	resp = fake.do(t, http.MethodGet, "/v1/payment_intents", auth, "")
	require.Equal(t, http.StatusNotFound, resp.status)
	require.Equal(t, "route_not_found", resp.errorCode(t))
	resp = fake.do(t, http.MethodGet, "/v1/refunds", auth, "")
	require.Equal(t, http.StatusNotFound, resp.status)
	require.Equal(t, "route_not_found", resp.errorCode(t))
}

func TestStripeRestartKeepsIntentsAndKeys(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	first := setupStripe(t, fakepsp.Config{LedgerPath: path})
	params := intentParams("ch_kept", fakepsp.PaymentMethodVisa)
	params.Description = stripe.String("kept")
	intent, err := first.create(t, "cf_kept", params)
	require.NoError(t, err)
	require.NoError(t, first.provider.Close())

	second := setupStripe(t, fakepsp.Config{LedgerPath: path})
	found, err := second.retrieve(t, intent.ID)
	require.NoError(t, err)
	require.JSONEq(t, string(intent.LastResponse.RawJSON), string(found.LastResponse.RawJSON))
	require.Equal(t, []string{intent.ID}, second.searchIDs(t, "ch_kept"))

	params = intentParams("ch_kept", fakepsp.PaymentMethodVisa)
	params.Description = stripe.String("kept")
	again, err := second.create(t, "cf_kept", params)
	require.NoError(t, err)
	require.Equal(t, intent.ID, again.ID)
	require.True(t, replayed(again.LastResponse))
}
