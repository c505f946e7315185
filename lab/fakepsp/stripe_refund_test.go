package fakepsp_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp"
	pspstripe "github.com/chargeflow/chargeflow/psp/stripe"
)

// refundOf are the parameters of a refund of the PaymentIntent intentID for
// our refund reference; amount 0 leaves it out (Stripe then refunds what is
// left).
func refundOf(intentID, reference string, amount int64) *stripe.RefundCreateParams {
	params := &stripe.RefundCreateParams{PaymentIntent: stripe.String(intentID)}
	if amount > 0 {
		params.Amount = stripe.Int64(amount)
	}
	params.AddMetadata(fakepsp.MetadataRefund, reference)
	return params
}

// createRefund creates a refund with an idempotency key. params are
// consumed: stripe-go writes into them.
func (b *stripeBundle) createRefund(t *testing.T, key string, params *stripe.RefundCreateParams) (*stripe.Refund, error) {
	t.Helper()

	params.SetIdempotencyKey(key)
	return b.client.V1Refunds.Create(t.Context(), params)
}

// listRefunds returns the ids of the refunds a list with params finds,
// following every page.
func (b *stripeBundle) listRefunds(t *testing.T, params *stripe.RefundListParams) ([]string, error) {
	t.Helper()

	ids := []string{}
	for refund, err := range b.client.V1Refunds.List(t.Context(), params) {
		if err != nil {
			return ids, err
		}
		ids = append(ids, refund.ID)
	}
	return ids, nil
}

// refundsOf lists the refunds of one PaymentIntent and requires no error.
func (b *stripeBundle) refundsOf(t *testing.T, intentID string) []string {
	t.Helper()

	ids, err := b.listRefunds(t, &stripe.RefundListParams{PaymentIntent: stripe.String(intentID)})
	require.NoError(t, err)
	return ids
}

// postStripeRefund sends a raw, form-encoded refund create.
func (b *stripeBundle) postStripeRefund(t *testing.T, key string, form url.Values) response {
	t.Helper()

	return b.do(t, http.MethodPost, "/v1/refunds", http.Header{
		"Authorization":   {"Bearer " + testSecretKey},
		"Content-Type":    {"application/x-www-form-urlencoded"},
		"Idempotency-Key": {key},
	}, form.Encode())
}

// stripeErrorOf decodes the error object of a raw Stripe answer.
func stripeErrorOf(t *testing.T, resp response) (errorType, code, param, message string) {
	t.Helper()

	var body struct {
		Error struct {
			Type    string `json:"type"`
			Code    string `json:"code"`
			Param   string `json:"param"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(resp.body, &body), "body: %s", resp.body)
	return body.Error.Type, body.Error.Code, body.Error.Param, body.Error.Message
}

func TestStripeRefundCreateRetrieveAndList(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	b := setupStripe(t, fakepsp.Config{Now: clock.Now})
	intent := b.visaIntent(t, "cf_1")
	other := b.visaIntent(t, "cf_2")
	clock.Advance(time.Second)

	params := refundOf(intent.ID, "re_1", 300)
	params.Reason = stripe.String(string(stripe.RefundReasonRequestedByCustomer))
	params.AddMetadata(fakepsp.MetadataTenant, "tenant-a")
	first, err := b.createRefund(t, "cf_re_1", params)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(first.ID, "re_"), first.ID)
	require.Equal(t, "refund", first.Object)
	require.Equal(t, int64(300), first.Amount)
	require.Equal(t, stripe.Currency("usd"), first.Currency)
	require.Equal(t, intent.LatestCharge.ID, first.Charge.ID, "the refund names the intent's latest charge")
	require.Equal(t, intent.ID, first.PaymentIntent.ID)
	require.Equal(t, stripe.RefundStatusSucceeded, first.Status)
	require.Equal(t, stripe.RefundReasonRequestedByCustomer, first.Reason)
	require.Equal(t, map[string]string{fakepsp.MetadataRefund: "re_1", fakepsp.MetadataTenant: "tenant-a"}, first.Metadata)
	require.Equal(t, clock.Now().Unix(), first.Created)
	require.Nil(t, first.BalanceTransaction)
	require.False(t, replayed(first.LastResponse))
	var raw map[string]any
	require.NoError(t, json.Unmarshal(first.LastResponse.RawJSON, &raw))
	require.Contains(t, raw, "balance_transaction")
	require.Nil(t, raw["balance_transaction"], "balance_transaction is null, as Stripe's may be")

	// Without an amount Stripe refunds what is left.
	clock.Advance(time.Second)
	second, err := b.createRefund(t, "cf_re_2", refundOf(intent.ID, "re_2", 0))
	require.NoError(t, err)
	require.Equal(t, int64(700), second.Amount)
	require.Empty(t, second.Reason)
	third, err := b.createRefund(t, "cf_re_3", refundOf(other.ID, "re_3", 1000))
	require.NoError(t, err)

	// A retrieve shows what the create answered.
	found, err := b.client.V1Refunds.Retrieve(t.Context(), first.ID, nil)
	require.NoError(t, err)
	require.JSONEq(t, string(first.LastResponse.RawJSON), string(found.LastResponse.RawJSON))

	// The list of one PaymentIntent's refunds, newest first, page by page
	// (stripe-go follows has_more with starting_after), and of every refund.
	require.Equal(t, []string{second.ID, first.ID}, b.refundsOf(t, intent.ID))
	paged := &stripe.RefundListParams{PaymentIntent: stripe.String(intent.ID)}
	paged.Limit = stripe.Int64(1)
	ids, err := b.listRefunds(t, paged)
	require.NoError(t, err)
	require.Equal(t, []string{second.ID, first.ID}, ids)
	ids, err = b.listRefunds(t, &stripe.RefundListParams{})
	require.NoError(t, err)
	require.Equal(t, []string{third.ID, second.ID, first.ID}, ids)
	before := &stripe.RefundListParams{PaymentIntent: stripe.String(intent.ID)}
	before.EndingBefore = stripe.String(first.ID)
	ids, err = b.listRefunds(t, before)
	require.NoError(t, err)
	require.Equal(t, []string{second.ID}, ids)
	createdRange := &stripe.RefundListParams{CreatedRange: &stripe.RangeQueryParams{LesserThan: clock.Now().Unix()}}
	ids, err = b.listRefunds(t, createdRange)
	require.NoError(t, err)
	require.Equal(t, []string{first.ID}, ids)

	// Cursors must be refunds of the list.
	stranger := &stripe.RefundListParams{PaymentIntent: stripe.String(intent.ID)}
	stranger.StartingAfter = stripe.String(third.ID)
	_, err = b.listRefunds(t, stranger)
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
	unknown := &stripe.RefundListParams{}
	unknown.StartingAfter = stripe.String(intent.ID)
	_, err = b.listRefunds(t, unknown)
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
	_, err = b.listRefunds(t, &stripe.RefundListParams{PaymentIntent: stripe.String("pi_nothing")})
	stripeErr := requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
	require.Equal(t, "payment_intent", stripeErr.Param)

	// The PaymentIntent is what it was: Stripe's PaymentIntent has no
	// amount_refunded (its Charge does), and stays succeeded.
	refunded, err := b.retrieve(t, intent.ID)
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, refunded.Status)
	require.JSONEq(t, string(intent.LastResponse.RawJSON), string(refunded.LastResponse.RawJSON))

	// The ledger files the refunds under their charge, with our reference
	// and the tenant tag from the metadata.
	ledger := b.ledger(t, false)
	require.Len(t, ledger, 2)
	require.Equal(t, []fakepsp.RefundEntry{
		{ID: first.ID, IdempotencyKey: "cf_re_1", Reference: "re_1", Charge: intent.ID, Amount: 300, Currency: "USD",
			Status: psp.StatusSucceeded, Reason: "requested_by_customer", TenantTag: "tenant-a", CreatedAt: clock.Now().Add(-time.Second)},
		{ID: second.ID, IdempotencyKey: "cf_re_2", Reference: "re_2", Charge: intent.ID, Amount: 700, Currency: "USD",
			Status: psp.StatusSucceeded, CreatedAt: clock.Now()},
	}, ledger[0].Refunds)
}

// Stripe's errors for a refund it will not make, checked against Stripe's
// published API and what its answers are seen to be (docs/provider.md): all
// are 400 invalid_request_error; a charge with nothing left has the code
// charge_already_refunded, an amount beyond what is left has none and names
// the amount, a PaymentIntent whose charge did not succeed has none. Each
// comes from executing the refund against the charge, so it is saved for
// the key and replayed.
func TestStripeRefundErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		prepare func(t *testing.T, b *stripeBundle) string // the PaymentIntent refunded
		amount  int64
		code    stripe.ErrorCode
		param   string
		message string
	}{
		{"more than the charge", func(t *testing.T, b *stripeBundle) string {
			return b.visaIntent(t, "cf_1").ID
		}, 1001, "", "amount", "Refund amount (1001 usd) is greater than unrefunded amount on charge (1000 usd)."},
		{"more than is left", func(t *testing.T, b *stripeBundle) string {
			intent := b.visaIntent(t, "cf_1")
			_, err := b.createRefund(t, "cf_first", refundOf(intent.ID, "re_first", 600))
			require.NoError(t, err)
			return intent.ID
		}, 401, "", "amount", "Refund amount (401 usd) is greater than unrefunded amount on charge (400 usd)."},
		{"nothing left", func(t *testing.T, b *stripeBundle) string {
			intent := b.visaIntent(t, "cf_1")
			_, err := b.createRefund(t, "cf_first", refundOf(intent.ID, "re_first", 0))
			require.NoError(t, err)
			return intent.ID
		}, 1, stripe.ErrorCodeChargeAlreadyRefunded, "", "has already been refunded."},
		{"what is left, when nothing is", func(t *testing.T, b *stripeBundle) string {
			intent := b.visaIntent(t, "cf_1")
			_, err := b.createRefund(t, "cf_first", refundOf(intent.ID, "re_first", 1000))
			require.NoError(t, err)
			return intent.ID
		}, 0, stripe.ErrorCodeChargeAlreadyRefunded, "", "has already been refunded."},
		{"a declined PaymentIntent", func(t *testing.T, b *stripeBundle) string {
			_, err := b.create(t, "cf_1", intentParams("ch_1", fakepsp.PaymentMethodDeclined))
			var stripeErr *stripe.Error
			require.ErrorAs(t, err, &stripeErr)
			return stripeErr.PaymentIntent.ID
		}, 100, "", "", "does not have a successful charge to refund."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupStripe(t, fakepsp.Config{})
			intentID := tt.prepare(t, b)
			before := b.ledger(t, true)

			_, err := b.createRefund(t, "cf_refused", refundOf(intentID, "re_refused", tt.amount))
			stripeErr := requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, tt.code)
			require.Equal(t, tt.param, stripeErr.Param)
			require.Contains(t, stripeErr.Msg, tt.message)
			require.False(t, replayed(stripeErr.LastResponse))
			require.Equal(t, before, b.ledger(t, true), "nothing was applied")

			_, err = b.createRefund(t, "cf_refused", refundOf(intentID, "re_refused", tt.amount))
			again := requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, tt.code)
			require.True(t, replayed(again.LastResponse), "the answer is saved for the key")
			require.Equal(t, string(stripeErr.LastResponse.RawJSON), string(again.LastResponse.RawJSON))

			_, err = b.createRefund(t, "cf_refused", refundOf(intentID, "re_other", tt.amount))
			requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeIdempotency, "")
			require.Equal(t, before, b.ledger(t, true), "still nothing applied")
		})
	}
}

func TestStripeRefundValidationSavesNothing(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{})
	intent := b.visaIntent(t, "cf_1")
	valid := func() url.Values {
		return url.Values{"payment_intent": {intent.ID}, "amount": {"10"}, "metadata[chargeflow_refund]": {"re_raw"}}
	}
	tests := []struct {
		name   string
		change func(url.Values)
		param  string
		code   string
	}{
		{"payment_intent missing", func(f url.Values) { f.Del("payment_intent") }, "payment_intent", "parameter_missing"},
		{"an unknown PaymentIntent", func(f url.Values) { f.Set("payment_intent", "pi_nothing") }, "payment_intent", "resource_missing"},
		{"a refund's id as the PaymentIntent", func(f url.Values) { f.Set("payment_intent", "re_nothing") }, "payment_intent", "resource_missing"},
		{"amount zero", func(f url.Values) { f.Set("amount", "0") }, "amount", "parameter_invalid_integer"},
		{"amount fraction", func(f url.Values) { f.Set("amount", "1.5") }, "amount", "parameter_invalid_integer"},
		{"an unknown reason", func(f url.Values) { f.Set("reason", "changed_mind") }, "reason", ""},
		{"reference missing", func(f url.Values) { f.Del("metadata[chargeflow_refund]") }, "metadata[chargeflow_refund]", "parameter_missing"},
		{"a charge, not modeled", func(f url.Values) { f.Set("charge", "ch_1") }, "charge", "parameter_unknown"},
		{"reverse_transfer, not modeled", func(f url.Values) { f.Set("reverse_transfer", "true") }, "reverse_transfer", "parameter_unknown"},
		{"expand, not modeled", func(f url.Values) { f.Set("expand[0]", "charge") }, "expand[0]", "parameter_unknown"},
		{"a metadata key too long", func(f url.Values) { f.Set("metadata["+strings.Repeat("k", 41)+"]", "v") }, "metadata[" + strings.Repeat("k", 41) + "]", ""},
	}
	before := b.ledger(t, true)
	t.Cleanup(func() {
		// Each valid retry below refunded 10.
		refunds := b.provider.Refunds()
		require.Len(t, refunds, len(tests))
		require.Equal(t, before[0].ID, refunds[0].Charge)
	})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			key := fmt.Sprintf("cf_invalid_%d", i)
			form := valid()
			tt.change(form)
			resp := b.postStripeRefund(t, key, form)
			require.Equal(t, http.StatusBadRequest, resp.status, "body: %s", resp.body)
			errorType, code, param, _ := stripeErrorOf(t, resp)
			require.Equal(t, "invalid_request_error", errorType)
			require.Equal(t, tt.code, code)
			require.Equal(t, tt.param, param)

			// Nothing was saved for the key: the valid request executes.
			form = valid()
			form.Set("metadata[chargeflow_refund]", "re_"+key)
			resp = b.postStripeRefund(t, key, form)
			require.Equal(t, http.StatusOK, resp.status, "body: %s", resp.body)
			require.Empty(t, resp.header.Get("Idempotent-Replayed"))
		})
	}

	t.Run("JSON body", func(t *testing.T) {
		t.Parallel()

		resp := b.do(t, http.MethodPost, "/v1/refunds", http.Header{
			"Authorization": {"Bearer " + testSecretKey}, "Content-Type": {"application/json"}, "Idempotency-Key": {"cf_json"},
		}, `{"payment_intent":"`+intent.ID+`"}`)
		require.Equal(t, http.StatusBadRequest, resp.status)
	})

	t.Run("no idempotency key", func(t *testing.T) {
		t.Parallel()

		resp := b.do(t, http.MethodPost, "/v1/refunds", http.Header{
			"Authorization": {"Bearer " + testSecretKey}, "Content-Type": {"application/x-www-form-urlencoded"},
		}, valid().Encode())
		require.Equal(t, http.StatusBadRequest, resp.status)
	})

	t.Run("no secret key", func(t *testing.T) {
		t.Parallel()

		_, err := b.stripeClient("sk_live_1", b.http).V1Refunds.Create(t.Context(), refundOf(intent.ID, "re_live", 10))
		requireStripeError(t, err, http.StatusUnauthorized, stripe.ErrorTypeInvalidRequest, "")
	})
}

func TestStripeRefundIdempotency(t *testing.T) {
	t.Parallel()

	t.Run("a known key is replayed", func(t *testing.T) {
		t.Parallel()

		b := setupStripe(t, fakepsp.Config{})
		intent := b.visaIntent(t, "cf_1")
		first, err := b.createRefund(t, "cf_re", refundOf(intent.ID, "re_1", 100))
		require.NoError(t, err)
		second, err := b.createRefund(t, "cf_re", refundOf(intent.ID, "re_1", 100))
		require.NoError(t, err)
		require.True(t, replayed(second.LastResponse))
		require.Equal(t, string(first.LastResponse.RawJSON), string(second.LastResponse.RawJSON))
		require.Len(t, b.provider.Refunds(), 1)
	})

	t.Run("a key reused with other parameters, or on the other endpoint", func(t *testing.T) {
		t.Parallel()

		b := setupStripe(t, fakepsp.Config{})
		intent := b.visaIntent(t, "cf_1")
		_, err := b.createRefund(t, "cf_re", refundOf(intent.ID, "re_1", 100))
		require.NoError(t, err)
		before := b.ledger(t, true)

		_, err = b.createRefund(t, "cf_re", refundOf(intent.ID, "re_1", 101))
		requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeIdempotency, "")
		var idempotencyErr *stripe.IdempotencyError
		require.ErrorAs(t, err, &idempotencyErr)
		_, err = b.createRefund(t, "cf_1", refundOf(intent.ID, "re_1", 100))
		requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeIdempotency, "")
		_, err = b.create(t, "cf_re", intentParams("ch_cf_re", fakepsp.PaymentMethodVisa))
		requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeIdempotency, "")
		require.Equal(t, before, b.ledger(t, true))
	})

	t.Run("a key in flight", func(t *testing.T) {
		t.Parallel()

		// The first refund takes 3 s to execute, holding its key
		// meanwhile; the second is sent once the first is executing.
		b := setupStripe(t, fakepsp.Config{})
		intent := b.visaIntent(t, "cf_1")
		require.NoError(t, b.provider.SetFaults(faults(always(fakepsp.OnRefund, fakepsp.FaultLatency, 3000))))
		succeeded, refused := sendWhileExecuting(t, b.testBundle, func() (*stripe.Refund, error) {
			return b.createRefund(t, "cf_busy", refundOf(intent.ID, "re_busy", 100))
		})
		require.NotNil(t, succeeded, "one request executed")
		stripeErr := requireStripeError(t, refused, http.StatusConflict, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeIdempotencyKeyInUse)
		require.Equal(t, "true", stripeErr.LastResponse.Header.Get("Stripe-Should-Retry"))
		require.Equal(t, []string{succeeded.ID}, b.refundsOf(t, intent.ID))
	})
}

// Every fault of a charge acts on a Stripe refund as it does on a
// PaymentIntent create, under Stripe's key rules.
func TestStripeRefundFaults(t *testing.T) {
	t.Parallel()

	// start serves a PaymentIntent of 1000 to refund, made before the rule
	// is set.
	start := func(t *testing.T, cfg fakepsp.Config, rule fakepsp.Rule) (*stripeBundle, *stripe.PaymentIntent) {
		t.Helper()

		b := setupStripe(t, cfg)
		intent := b.visaIntent(t, "cf_1")
		require.NoError(t, b.provider.SetFaults(faults(rule)))
		return b, intent
	}

	t.Run("error_before_apply: saved, replayed, nothing applied, also after a restart", func(t *testing.T) {
		t.Parallel()

		b, intent := start(t, fakepsp.Config{}, always(fakepsp.OnRefund, fakepsp.FaultErrorBeforeApply, 0))
		_, err := b.createRefund(t, "cf_err", refundOf(intent.ID, "re_err", 100))
		first := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		_, err = b.createRefund(t, "cf_err", refundOf(intent.ID, "re_err", 100))
		again := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
		require.True(t, replayed(again.LastResponse))
		require.Equal(t, string(first.LastResponse.RawJSON), string(again.LastResponse.RawJSON))
		require.Empty(t, b.refundsOf(t, intent.ID))

		require.NoError(t, b.provider.Close())
		restarted := setupStripe(t, fakepsp.Config{LedgerPath: b.ledgerPath})
		_, err = restarted.createRefund(t, "cf_err", refundOf(intent.ID, "re_err", 100))
		after := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
		require.True(t, replayed(after.LastResponse))
		require.Empty(t, restarted.refundsOf(t, intent.ID))
	})

	t.Run("error_after_apply: applied, the 500 saved and replayed", func(t *testing.T) {
		t.Parallel()

		b, intent := start(t, fakepsp.Config{}, always(fakepsp.OnRefund, fakepsp.FaultErrorAfterApply, 0))
		_, err := b.createRefund(t, "cf_err", refundOf(intent.ID, "re_err", 100))
		first := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		_, err = b.createRefund(t, "cf_err", refundOf(intent.ID, "re_err", 100))
		again := requireStripeError(t, err, http.StatusInternalServerError, stripe.ErrorTypeAPI, "")
		require.True(t, replayed(again.LastResponse))
		require.Equal(t, string(first.LastResponse.RawJSON), string(again.LastResponse.RawJSON))

		ids := b.refundsOf(t, intent.ID)
		require.Len(t, ids, 1, "money went back, and the list shows it")
		refund, err := b.client.V1Refunds.Retrieve(t.Context(), ids[0], nil)
		require.NoError(t, err)
		require.Equal(t, "re_err", refund.Metadata[fakepsp.MetadataRefund])
	})

	t.Run("not_processed: 429, nothing saved", func(t *testing.T) {
		t.Parallel()

		b, intent := start(t, fakepsp.Config{}, always(fakepsp.OnRefund, fakepsp.FaultNotProcessed, 0))
		_, err := b.createRefund(t, "cf_429", refundOf(intent.ID, "re_1", 100))
		requireStripeError(t, err, http.StatusTooManyRequests, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeRateLimit)
		require.Empty(t, b.refundsOf(t, intent.ID))
		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		refund, err := b.createRefund(t, "cf_429", refundOf(intent.ID, "re_1", 100))
		require.NoError(t, err)
		require.False(t, replayed(refund.LastResponse))
	})

	t.Run("drop_before_apply: no answer, nothing saved", func(t *testing.T) {
		t.Parallel()

		b, intent := start(t, fakepsp.Config{}, always(fakepsp.OnRefund, fakepsp.FaultDropBeforeApply, 0))
		_, err := b.createRefund(t, "cf_drop", refundOf(intent.ID, "re_1", 100))
		require.Error(t, err)
		var stripeErr *stripe.Error
		require.False(t, errors.As(err, &stripeErr), "no answer at all: %v", err)
		require.Empty(t, b.refundsOf(t, intent.ID))
		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		refund, err := b.createRefund(t, "cf_drop", refundOf(intent.ID, "re_1", 100))
		require.NoError(t, err)
		require.False(t, replayed(refund.LastResponse))
	})

	for _, fault := range []string{fakepsp.FaultApplyThenReset, fakepsp.FaultApplyThenTimeout} {
		t.Run(fault+": applied, the answer lost", func(t *testing.T) {
			t.Parallel()

			b, intent := start(t, fakepsp.Config{}, always(fakepsp.OnRefund, fault, 200))
			params := refundOf(intent.ID, "re_lost", 100)
			params.SetIdempotencyKey("cf_lost")
			_, err := b.clientWithTimeout(50*time.Millisecond).V1Refunds.Create(t.Context(), params)
			require.Error(t, err)
			var stripeErr *stripe.Error
			require.False(t, errors.As(err, &stripeErr), "no answer at all: %v", err)

			eventually(t, func() bool { return len(b.provider.Refunds()) == 1 }, "applied")
			require.Len(t, b.refundsOf(t, intent.ID), 1)
			require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
			refund, err := b.createRefund(t, "cf_lost", refundOf(intent.ID, "re_lost", 100))
			require.NoError(t, err)
			require.True(t, replayed(refund.LastResponse))
		})
	}

	t.Run("delayed_apply: the key locked until the refund lands", func(t *testing.T) {
		t.Parallel()

		b, intent := start(t, fakepsp.Config{}, always(fakepsp.OnRefund, fakepsp.FaultDelayedApply, 3000))
		params := refundOf(intent.ID, "re_late", 100)
		params.SetIdempotencyKey("cf_late")
		_, err := b.clientWithTimeout(50*time.Millisecond).V1Refunds.Create(t.Context(), params)
		require.Error(t, err)

		require.NoError(t, b.provider.SetFaults(fakepsp.Schedule{}))
		_, err = b.createRefund(t, "cf_late", refundOf(intent.ID, "re_late", 100))
		requireStripeError(t, err, http.StatusConflict, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeIdempotencyKeyInUse)
		require.Empty(t, b.refundsOf(t, intent.ID), "not applied yet")

		eventually(t, func() bool { return len(b.provider.Refunds()) == 1 }, "the delayed refund lands")
		refund, err := b.createRefund(t, "cf_late", refundOf(intent.ID, "re_late", 100))
		require.NoError(t, err)
		require.True(t, replayed(refund.LastResponse))
		require.Equal(t, []string{refund.ID}, b.refundsOf(t, intent.ID))
	})

	t.Run("key_expiry: a pruned key refunds again", func(t *testing.T) {
		t.Parallel()

		clock := newTestClock()
		b, intent := start(t, fakepsp.Config{Now: clock.Now}, always(fakepsp.OnRefund, fakepsp.FaultKeyExpiry, 1000))
		first, err := b.createRefund(t, "cf_expiring", refundOf(intent.ID, "re_1", 100))
		require.NoError(t, err)
		clock.Advance(999 * time.Millisecond)
		again, err := b.createRefund(t, "cf_expiring", refundOf(intent.ID, "re_1", 100))
		require.NoError(t, err)
		require.Equal(t, first.ID, again.ID, "within the window the key replays")

		clock.Advance(time.Millisecond)
		second, err := b.createRefund(t, "cf_expiring", refundOf(intent.ID, "re_1", 100))
		require.NoError(t, err)
		require.NotEqual(t, first.ID, second.ID)
		require.Equal(t, []string{second.ID, first.ID}, b.refundsOf(t, intent.ID), "the refunds themselves are not forgotten")
	})
}

// Stripe's refund retrieve and list are strongly consistent: lookup_lag
// never acts on them (the rule is skipped without a draw), while latency
// and unavailable do, with a rule's key_prefix matched against our refund
// id for a retrieve and our charge id for a PaymentIntent's refunds.
func TestStripeRefundReads(t *testing.T) {
	t.Parallel()

	t.Run("never lagged", func(t *testing.T) {
		t.Parallel()

		clock := newTestClock()
		b := setupStripe(t, fakepsp.Config{Now: clock.Now, Faults: faults(always(fakepsp.OnLookup, fakepsp.FaultLookupLag, 60_000))})
		intent := b.visaIntent(t, "cf_1")
		refund, err := b.createRefund(t, "cf_re", refundOf(intent.ID, "re_1", 100))
		require.NoError(t, err)

		require.Equal(t, []string{refund.ID}, b.refundsOf(t, intent.ID))
		ids, err := b.listRefunds(t, &stripe.RefundListParams{})
		require.NoError(t, err)
		require.Equal(t, []string{refund.ID}, ids)
		_, err = b.client.V1Refunds.Retrieve(t.Context(), refund.ID, nil)
		require.NoError(t, err)
		require.Empty(t, b.provider.Faults().Fired, "lookup_lag drew on none of the three reads")
	})

	t.Run("unavailable, matched by reference", func(t *testing.T) {
		t.Parallel()

		b := setupStripe(t, fakepsp.Config{})
		broken := b.visaIntent(t, "cf_broken")
		fine := b.visaIntent(t, "cf_fine")
		brokenRefund, err := b.createRefund(t, "cf_re_1", refundOf(broken.ID, "re_broken", 100))
		require.NoError(t, err)
		fineRefund, err := b.createRefund(t, "cf_re_2", refundOf(fine.ID, "re_fine", 100))
		require.NoError(t, err)
		require.NoError(t, b.provider.SetFaults(faults(
			fakepsp.Rule{On: fakepsp.OnLookup, Fault: fakepsp.FaultUnavailable, P: 1, KeyPrefix: "re_broken"},
			fakepsp.Rule{On: fakepsp.OnLookup, Fault: fakepsp.FaultUnavailable, P: 1, KeyPrefix: "ch_cf_broken"},
		)))

		_, err = b.client.V1Refunds.Retrieve(t.Context(), brokenRefund.ID, nil)
		stripeErr := requireStripeError(t, err, http.StatusServiceUnavailable, stripe.ErrorTypeAPI, "")
		require.Equal(t, "true", stripeErr.LastResponse.Header.Get("Stripe-Should-Retry"))
		_, err = b.listRefunds(t, &stripe.RefundListParams{PaymentIntent: stripe.String(broken.ID)})
		requireStripeError(t, err, http.StatusServiceUnavailable, stripe.ErrorTypeAPI, "")

		_, err = b.client.V1Refunds.Retrieve(t.Context(), fineRefund.ID, nil)
		require.NoError(t, err)
		require.Equal(t, []string{fineRefund.ID}, b.refundsOf(t, fine.ID))
		ids, err := b.listRefunds(t, &stripe.RefundListParams{})
		require.NoError(t, err, "a list of every refund concerns no single charge")
		require.Len(t, ids, 2)
		require.Equal(t, 2, b.provider.Faults().Fired[fakepsp.FaultUnavailable])
	})

	t.Run("latency", func(t *testing.T) {
		t.Parallel()

		b := setupStripe(t, fakepsp.Config{})
		intent := b.visaIntent(t, "cf_1")
		refund, err := b.createRefund(t, "cf_re", refundOf(intent.ID, "re_1", 100))
		require.NoError(t, err)
		require.NoError(t, b.provider.SetFaults(faults(always(fakepsp.OnLookup, fakepsp.FaultLatency, 150))))
		started := time.Now()
		_, err = b.client.V1Refunds.Retrieve(t.Context(), refund.ID, nil)
		require.NoError(t, err)
		require.Equal(t, []string{refund.ID}, b.refundsOf(t, intent.ID))
		require.GreaterOrEqual(t, time.Since(started), 300*time.Millisecond)
	})

	t.Run("unknown ids", func(t *testing.T) {
		t.Parallel()

		b := setupStripe(t, fakepsp.Config{})
		intent := b.visaIntent(t, "cf_1")
		refund, err := b.createRefund(t, "cf_re", refundOf(intent.ID, "re_1", 100))
		require.NoError(t, err)

		for _, id := range []string{"re_nothing", intent.ID} {
			_, err = b.client.V1Refunds.Retrieve(t.Context(), id, nil)
			stripeErr := requireStripeError(t, err, http.StatusNotFound, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
			require.Equal(t, "id", stripeErr.Param)
		}
		_, err = b.retrieve(t, refund.ID)
		requireStripeError(t, err, http.StatusNotFound, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
		_, err = b.list(t, &stripe.PaymentIntentListParams{ListParams: stripe.ListParams{StartingAfter: stripe.String(refund.ID)}})
		requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing)
		require.Equal(t, []string{intent.ID}, b.listIDs(t), "a refund is not a PaymentIntent")
	})
}

// Refunds racing against one PaymentIntent are decided one at a time under
// the provider's lock, through stripe-go as through the fake protocol.
func TestStripeRefundsRacingNeverExceedTheCharge(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{})
	params := intentParams("ch_20", fakepsp.PaymentMethodVisa)
	params.Amount = stripe.Int64(20)
	intent, err := b.create(t, "cf_20", params)
	require.NoError(t, err)

	const refunds = 50
	outcomes := make(chan string, refunds)
	var wg sync.WaitGroup
	for i := range refunds {
		wg.Go(func() {
			_, err := b.createRefund(t, fmt.Sprintf("cf_re_%02d", i), refundOf(intent.ID, fmt.Sprintf("re_%02d", i), 1))
			var stripeErr *stripe.Error
			switch {
			case err == nil:
				outcomes <- "refunded"
			case errors.As(err, &stripeErr):
				outcomes <- fmt.Sprintf("%d %s %s", stripeErr.HTTPStatusCode, stripeErr.Code, stripeErr.Param)
			default:
				outcomes <- err.Error()
			}
		})
	}
	wg.Wait()
	close(outcomes)

	counts := make(map[string]int)
	for outcome := range outcomes {
		counts[outcome]++
	}
	// One unit is more than what is left only once nothing is: every
	// refusal is Stripe's charge_already_refunded.
	require.Equal(t, map[string]int{"refunded": 20, "400 charge_already_refunded ": 30}, counts)
	require.Len(t, b.refundsOf(t, intent.ID), 20)
}

func TestStripeRestartKeepsRefunds(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "ledger.jsonl")
	first := setupStripe(t, fakepsp.Config{LedgerPath: path})
	intent := first.visaIntent(t, "cf_1")
	params := refundOf(intent.ID, "re_1", 400)
	params.Reason = stripe.String("duplicate")
	refund, err := first.createRefund(t, "cf_re", params)
	require.NoError(t, err)
	require.NoError(t, first.provider.Close())

	second := setupStripe(t, fakepsp.Config{LedgerPath: path})
	found, err := second.client.V1Refunds.Retrieve(t.Context(), refund.ID, nil)
	require.NoError(t, err)
	require.JSONEq(t, string(refund.LastResponse.RawJSON), string(found.LastResponse.RawJSON))
	require.Equal(t, []string{refund.ID}, second.refundsOf(t, intent.ID))

	params = refundOf(intent.ID, "re_1", 400)
	params.Reason = stripe.String("duplicate")
	again, err := second.createRefund(t, "cf_re", params)
	require.NoError(t, err)
	require.True(t, replayed(again.LastResponse))
	require.Equal(t, refund.ID, again.ID)

	// What is left is read back: 600.
	_, err = second.createRefund(t, "cf_re_2", refundOf(intent.ID, "re_2", 601))
	requireStripeError(t, err, http.StatusBadRequest, stripe.ErrorTypeInvalidRequest, "")
	rest, err := second.createRefund(t, "cf_re_3", refundOf(intent.ID, "re_3", 0))
	require.NoError(t, err)
	require.Equal(t, int64(600), rest.Amount)
}

// A refund under one protocol is shown by the other after a restart, as a
// charge is: the ledger is the same.
func TestRefundsReadBackUnderTheOtherProtocol(t *testing.T) {
	t.Parallel()

	fake := setup(t, fakepsp.Config{})
	charge := fake.charge(t, visa("pk_1"))
	refund := fake.refund(t, "rk_1", charge.ID, 100)
	require.NoError(t, fake.provider.Close())

	stripeSide := setupStripe(t, fakepsp.Config{LedgerPath: fake.ledgerPath})
	found, err := stripeSide.client.V1Refunds.Retrieve(t.Context(), refund.ID, nil)
	require.NoError(t, err)
	require.Equal(t, map[string]string{fakepsp.MetadataRefund: "re_rk_1"}, found.Metadata)
	require.Equal(t, charge.ID, found.PaymentIntent.ID)
	require.Equal(t, int64(100), found.Amount)
}

// Logs name keys, references, ids and faults: never a payment method, a
// description or metadata, of a PaymentIntent or of a refund.
func TestStripeLogsNeverContainPaymentMethodsDescriptionsOrMetadata(t *testing.T) {
	t.Parallel()

	logger, logs := debugLogger()
	b := setupStripe(t, fakepsp.Config{Logger: logger, Faults: faults(
		fakepsp.Rule{On: fakepsp.OnRefund, Fault: fakepsp.FaultErrorAfterApply, P: 1, KeyPrefix: "cf_re_err"},
		fakepsp.Rule{On: fakepsp.OnRefund, Fault: fakepsp.FaultNotProcessed, P: 1, KeyPrefix: "cf_re_busy"},
		fakepsp.Rule{On: fakepsp.OnCharge, Fault: fakepsp.FaultErrorAfterApply, P: 1, KeyPrefix: "cf_err"},
		fakepsp.Rule{On: fakepsp.OnLookup, Fault: fakepsp.FaultLatency, P: 1, MS: 1},
	)})

	for _, key := range []string{"cf_ok", "cf_err"} {
		params := intentParams("ch_"+key, fakepsp.PaymentMethodVisa)
		params.Description = stripe.String("canary-description")
		params.AddMetadata("note", "canary-intent-metadata")
		_, _ = b.create(t, key, params)
	}
	intent := b.provider.Ledger(false)[0]
	for _, key := range []string{"cf_re_ok", "cf_re_err", "cf_re_busy", "cf_re_refused"} {
		amount := int64(10)
		if key == "cf_re_refused" {
			amount = 5000
		}
		params := refundOf(intent.ID, "re_"+key, amount)
		params.AddMetadata("note", "canary-refund-metadata")
		_, _ = b.createRefund(t, key, params)
	}
	_, _ = b.listRefunds(t, &stripe.RefundListParams{PaymentIntent: stripe.String(intent.ID)})
	require.NoError(t, b.provider.Close())

	output := logs.String()
	for _, event := range []string{"fault fired", "charge applied", "refund applied", "refund refused"} {
		require.Contains(t, output, event, "the test exercised the logging paths")
	}
	for _, secret := range []string{"pm_card", "canary"} {
		require.NotContains(t, output, secret)
	}
}

// The Stripe adapter, built to docs/refunds.md, against the fake's Stripe
// protocol: a refund, its lookups by id and by reference, and Stripe's
// charge_already_refunded as a failed refund. The other two refusals the
// fake words without a code (docs/refunds.md, "The fake protocol"),
// which the adapter reads otherwise; whichever way either side settles it,
// a refusal must never read as a refund, nor move money.
func TestRefundThroughTheStripeAdapter(t *testing.T) {
	t.Parallel()

	b := setupStripe(t, fakepsp.Config{})
	intent := b.visaIntent(t, "cf_1")
	adapter := pspstripe.New(pspstripe.Config{BaseURL: b.url, APIKey: testSecretKey})
	req := psp.RefundRequest{Key: "rk_1", Charge: intent.ID, Amount: 600, Currency: "USD", Reference: "re_1", Reason: "duplicate", Tag: "tenant-a"}

	refund, err := adapter.Refund(t.Context(), req)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(refund.ID, "re_"), refund.ID)
	require.Equal(t, psp.Refund{ID: refund.ID, Status: psp.StatusSucceeded, Charge: intent.ID, Amount: 600, Currency: "USD", Reference: "re_1"}, refund)

	byID, err := adapter.FindRefund(t.Context(), psp.LookupRequest{Key: "rk_1", Charge: intent.ID, Reference: "re_1", ProviderID: refund.ID})
	require.NoError(t, err)
	require.Equal(t, refund, byID)
	byReference, err := adapter.FindRefund(t.Context(), psp.LookupRequest{Key: "rk_1", Charge: intent.ID, Reference: "re_1"})
	require.NoError(t, err)
	require.Equal(t, refund, byReference)
	_, err = adapter.FindRefund(t.Context(), psp.LookupRequest{Key: "rk_none", Charge: intent.ID, Reference: "re_none"})
	require.ErrorIs(t, err, psp.ErrNotFound)

	before := b.ledger(t, true)
	_, err = b.create(t, "cf_declined", intentParams("ch_declined", fakepsp.PaymentMethodDeclined))
	var declineErr *stripe.Error
	require.ErrorAs(t, err, &declineErr)
	// The two refusals recorded from Stripe without a code say nothing the
	// adapter may read as a verdict on the charge (a request Stripe refused
	// for its form has the same shape): the first answer is not applied,
	// its replay unknown, and neither is a refund.
	refusals := map[string]psp.RefundRequest{
		"more than is left":                     {Key: "rk_2", Charge: intent.ID, Amount: 401, Currency: "USD", Reference: "re_2"},
		"an intent without a successful charge": {Key: "rk_3", Charge: declineErr.PaymentIntent.ID, Amount: 1, Currency: "USD", Reference: "re_3"},
	}
	for name, refused := range refusals {
		got, err := adapter.Refund(t.Context(), refused)
		require.Zero(t, got, name)
		requirePSPError(t, err, psp.ErrNotApplied, "invalid_request")
		got, err = adapter.Refund(t.Context(), refused)
		require.Zero(t, got, name)
		requirePSPError(t, err, psp.ErrUnknownOutcome, "replayed_error")
	}

	_, err = adapter.Refund(t.Context(), psp.RefundRequest{Key: "rk_4", Charge: intent.ID, Amount: 400, Currency: "USD", Reference: "re_4"})
	require.NoError(t, err)
	nothingLeft := psp.RefundRequest{Key: "rk_5", Charge: intent.ID, Amount: 1, Currency: "USD", Reference: "re_5"}
	failed, err := adapter.Refund(t.Context(), nothingLeft)
	require.NoError(t, err)
	require.Equal(t, nothingLeft.Refused(string(stripe.ErrorCodeChargeAlreadyRefunded)), failed)

	after := b.ledger(t, true)
	require.Len(t, after[0].Refunds, 2, "the two refunds, nothing for a refusal")
	require.Equal(t, before[0].ID, after[0].ID)
}
