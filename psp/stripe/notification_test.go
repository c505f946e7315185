package stripe_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	stripego "github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
	pspstripe "github.com/chargeflow/chargeflow/psp/stripe"
)

const webhookSecret = "whsec_test_stripe_endpoint"

// stripeEvent is a Stripe event of type typ around object, in the API
// version stripe-go expects unless version says otherwise.
func stripeEvent(typ, object string, version ...string) string {
	apiVersion := stripego.APIVersion
	if len(version) > 0 {
		apiVersion = version[0]
	}
	return `{"id":"evt_1","object":"event","api_version":"` + apiVersion + `","created":1740830399,` +
		`"data":{"object":` + object + `},"livemode":false,"pending_webhooks":1,` +
		`"request":{"id":null,"idempotency_key":"pk_1"},"type":"` + typ + `"}`
}

// stripeSigned is the Stripe-Signature of body at at, made by stripe-go's
// own test helper.
func stripeSigned(secret string, at time.Time, body string) http.Header {
	payload := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: secret, Timestamp: at})
	header := http.Header{}
	header.Set(pspstripe.SignatureHeader, payload.Header)
	return header
}

// The parser of Stripe's events, one row a rule: the types acted on and
// the object's status deciding, as in an answer; the types and states that
// are nothing to do; every refusal.
func TestParseStripeNotification(t *testing.T) {
	t.Parallel()

	now := time.Unix(1740830400, 0)
	created := time.Unix(1740830399, 0)
	const (
		succeeded = `{"id":"pi_1","object":"payment_intent","amount":1000,"currency":"eur","status":"succeeded",` +
			`"metadata":{"chargeflow_charge":"ch_1"},"latest_charge":"ch_x1"}`
		declined = `{"id":"pi_2","object":"payment_intent","amount":1000,"currency":"eur","status":"requires_payment_method",` +
			`"metadata":{"chargeflow_charge":"ch_2"},"last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds"}}`
		processing = `{"id":"pi_3","object":"payment_intent","amount":1000,"currency":"eur","status":"processing","metadata":{"chargeflow_charge":"ch_3"}}`
		canceled   = `{"id":"pi_4","object":"payment_intent","amount":1000,"currency":"eur","status":"canceled","metadata":{"chargeflow_charge":"ch_4"}}`
		notOurs    = `{"id":"pi_5","object":"payment_intent","amount":1000,"currency":"eur","status":"succeeded","metadata":{}}`
		refunded   = `{"id":"re_1","object":"refund","amount":400,"currency":"eur","status":"succeeded","payment_intent":"pi_1",` +
			`"charge":"ch_x1","metadata":{"chargeflow_refund":"rf_1"}}`
		pending      = `{"id":"re_2","object":"refund","amount":400,"currency":"eur","status":"pending","payment_intent":"pi_1","metadata":{"chargeflow_refund":"rf_2"}}`
		refundFailed = `{"id":"re_3","object":"refund","amount":400,"currency":"eur","status":"failed","failure_reason":"expired_or_canceled_card",` +
			`"payment_intent":"pi_1","metadata":{"chargeflow_refund":"rf_3"}}`
		charge = `{"id":"ch_x1","object":"charge","amount":1000,"amount_refunded":400,"currency":"eur","payment_intent":"pi_1"}`
	)
	base := psp.Notification{EventID: "evt_1", Created: created, ProviderKey: "pk_1"}
	with := func(typ string, edit func(*psp.Notification)) psp.Notification {
		n := base
		n.EventType = typ
		edit(&n)
		return n
	}
	valid := func(body string) http.Header { return stripeSigned(webhookSecret, now.Add(-time.Second), body) }

	for _, tc := range []struct {
		name      string
		header    http.Header
		body      string
		tolerance time.Duration
		want      psp.Notification
		kind      error
		reason    string
	}{
		{name: "payment_intent.succeeded", header: valid(stripeEvent("payment_intent.succeeded", succeeded)), body: stripeEvent("payment_intent.succeeded", succeeded),
			want: with("payment_intent.succeeded", func(n *psp.Notification) {
				n.Kind, n.Reference, n.ProviderID = psp.NotificationCharge, "ch_1", "pi_1"
				n.Charge = psp.Charge{ID: "pi_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "EUR", Reference: "ch_1"}
			})},
		{name: "payment_intent.payment_failed: the last payment error's decline code", header: valid(stripeEvent("payment_intent.payment_failed", declined)),
			body: stripeEvent("payment_intent.payment_failed", declined),
			want: with("payment_intent.payment_failed", func(n *psp.Notification) {
				n.Kind, n.Reference, n.ProviderID = psp.NotificationCharge, "ch_2", "pi_2"
				n.Charge = psp.Charge{ID: "pi_2", Status: psp.StatusFailed, Amount: 1000, Currency: "EUR", Reference: "ch_2", DeclineCode: "insufficient_funds"}
			})},
		{name: "payment_intent.canceled is a decline, as in an answer", header: valid(stripeEvent("payment_intent.canceled", canceled)),
			body: stripeEvent("payment_intent.canceled", canceled),
			want: with("payment_intent.canceled", func(n *psp.Notification) {
				n.Kind, n.Reference, n.ProviderID = psp.NotificationCharge, "ch_4", "pi_4"
				n.Charge = psp.Charge{ID: "pi_4", Status: psp.StatusFailed, Amount: 1000, Currency: "EUR", Reference: "ch_4", DeclineCode: "canceled"}
			})},
		{name: "payment_intent.processing is not final: nothing to do, but it names the intent", header: valid(stripeEvent("payment_intent.processing", processing)),
			body: stripeEvent("payment_intent.processing", processing),
			want: with("payment_intent.processing", func(n *psp.Notification) {
				n.Kind, n.Reason, n.Reference, n.ProviderID = psp.NotificationIgnored, "intent_processing", "ch_3", "pi_3"
			})},
		{name: "a PaymentIntent without our reference is nothing to do", header: valid(stripeEvent("payment_intent.succeeded", notOurs)),
			body: stripeEvent("payment_intent.succeeded", notOurs),
			want: with("payment_intent.succeeded", func(n *psp.Notification) {
				n.Kind, n.Reason, n.ProviderID = psp.NotificationIgnored, "no_reference", "pi_5"
			})},
		{name: "refund.created", header: valid(stripeEvent("refund.created", refunded)), body: stripeEvent("refund.created", refunded),
			want: with("refund.created", func(n *psp.Notification) {
				n.Kind, n.Reference, n.ProviderID = psp.NotificationRefund, "rf_1", "re_1"
				n.Refund = psp.Refund{ID: "re_1", Status: psp.StatusSucceeded, Charge: "pi_1", Amount: 400, Currency: "EUR", Reference: "rf_1"}
			})},
		{name: "refund.created pending is not final", header: valid(stripeEvent("refund.created", pending)), body: stripeEvent("refund.created", pending),
			want: with("refund.created", func(n *psp.Notification) {
				n.Kind, n.Reason, n.Reference, n.ProviderID = psp.NotificationIgnored, "refund_pending", "rf_2", "re_2"
			})},
		{name: "refund.failed is a failed refund with Stripe's reason", header: valid(stripeEvent("refund.failed", refundFailed)), body: stripeEvent("refund.failed", refundFailed),
			want: with("refund.failed", func(n *psp.Notification) {
				n.Kind, n.Reference, n.ProviderID = psp.NotificationRefund, "rf_3", "re_3"
				n.Refund = psp.Refund{ID: "re_3", Status: psp.StatusFailed, Charge: "pi_1", Amount: 400, Currency: "EUR", Reference: "rf_3", FailureCode: "expired_or_canceled_card"}
			})},
		{name: "charge.refunded carries the Charge, no refund of ours: nothing to do", header: valid(stripeEvent("charge.refunded", charge)),
			body: stripeEvent("charge.refunded", charge),
			want: with("charge.refunded", func(n *psp.Notification) { n.Kind, n.Reason = psp.NotificationIgnored, "unhandled_type" })},
		{name: "another version of stripe-go's release train", header: valid(stripeEvent("payment_intent.succeeded", succeeded, "2025-07-30.basil")),
			body: stripeEvent("payment_intent.succeeded", succeeded, "2025-07-30.basil"),
			want: with("payment_intent.succeeded", func(n *psp.Notification) {
				n.Kind, n.Reference, n.ProviderID = psp.NotificationCharge, "ch_1", "pi_1"
				n.Charge = psp.Charge{ID: "pi_1", Status: psp.StatusSucceeded, Amount: 1000, Currency: "EUR", Reference: "ch_1"}
			})},

		{name: "another release train", header: valid(stripeEvent("payment_intent.succeeded", succeeded, "2024-06-20.acacia")),
			body: stripeEvent("payment_intent.succeeded", succeeded, "2024-06-20.acacia"), kind: psp.ErrNotificationMalformed, reason: "api_version_mismatch"},
		{name: "expired", header: stripeSigned(webhookSecret, now.Add(-6*time.Minute), stripeEvent("payment_intent.succeeded", succeeded)),
			body: stripeEvent("payment_intent.succeeded", succeeded), kind: psp.ErrNotificationExpired, reason: "timestamp_too_old"},
		{name: "expired under a tolerance of ten seconds", header: stripeSigned(webhookSecret, now.Add(-time.Minute), stripeEvent("payment_intent.succeeded", succeeded)),
			body: stripeEvent("payment_intent.succeeded", succeeded), tolerance: 10 * time.Second, kind: psp.ErrNotificationExpired, reason: "timestamp_too_old"},
		{name: "signed ahead", header: stripeSigned(webhookSecret, now.Add(time.Hour), stripeEvent("payment_intent.succeeded", succeeded)),
			body: stripeEvent("payment_intent.succeeded", succeeded), kind: psp.ErrNotificationExpired, reason: "timestamp_in_future"},
		{name: "wrong secret", header: stripeSigned("whsec_other", now, stripeEvent("payment_intent.succeeded", succeeded)),
			body: stripeEvent("payment_intent.succeeded", succeeded), kind: psp.ErrNotificationForged, reason: "signature_mismatch"},
		{name: "altered body", header: valid(stripeEvent("payment_intent.succeeded", succeeded)),
			body: strings.Replace(stripeEvent("payment_intent.succeeded", succeeded), `"amount":1000`, `"amount":100000`, 1), kind: psp.ErrNotificationForged, reason: "signature_mismatch"},
		{name: "unsigned", header: http.Header{}, body: stripeEvent("payment_intent.succeeded", succeeded), kind: psp.ErrNotificationForged, reason: "signature_missing"},
		{name: "no v1", header: http.Header{"Stripe-Signature": {fmt.Sprintf("t=%d", now.Unix())}}, body: stripeEvent("payment_intent.succeeded", succeeded),
			kind: psp.ErrNotificationForged, reason: "signature_mismatch"},
		{name: "an unreadable header", header: http.Header{"Stripe-Signature": {"t=soon,v1=00"}}, body: stripeEvent("payment_intent.succeeded", succeeded),
			kind: psp.ErrNotificationMalformed, reason: "signature_header_invalid"},
		{name: "two headers", header: http.Header{"Stripe-Signature": {"t=1,v1=00", "t=1,v1=00"}}, body: stripeEvent("payment_intent.succeeded", succeeded),
			kind: psp.ErrNotificationMalformed, reason: "signature_header_invalid"},
		{name: "a signed body that is not JSON", header: valid("{"), body: "{", kind: psp.ErrNotificationMalformed, reason: "body_invalid"},
		{name: "no event id", header: valid(strings.Replace(stripeEvent("payment_intent.succeeded", succeeded), `"id":"evt_1",`, "", 1)),
			body: strings.Replace(stripeEvent("payment_intent.succeeded", succeeded), `"id":"evt_1",`, "", 1), kind: psp.ErrNotificationMalformed, reason: "field_missing"},
		{name: "no object", header: valid(stripeEvent("payment_intent.succeeded", "null")), body: stripeEvent("payment_intent.succeeded", "null"),
			kind: psp.ErrNotificationMalformed, reason: "field_missing"},
		{name: "an object without a status", header: valid(stripeEvent("payment_intent.succeeded", strings.Replace(succeeded, `"status":"succeeded",`, "", 1))),
			body: stripeEvent("payment_intent.succeeded", strings.Replace(succeeded, `"status":"succeeded",`, "", 1)), kind: psp.ErrNotificationMalformed, reason: "field_missing"},
		{name: "a PaymentIntent's event carrying a refund", header: valid(stripeEvent("payment_intent.succeeded", refunded)),
			body: stripeEvent("payment_intent.succeeded", refunded), kind: psp.ErrNotificationMalformed, reason: "type_mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			n, err := pspstripe.ParseNotification(webhookSecret, tc.header, []byte(tc.body), now, tc.tolerance)
			if tc.kind == nil {
				require.NoError(t, err)
				require.Equal(t, now.Add(-time.Second), n.SignedAt)
				n.SignedAt = time.Time{}
				require.Equal(t, tc.want, n)
				return
			}
			require.ErrorIs(t, err, tc.kind)
			var refusal *psp.NotificationError
			require.ErrorAs(t, err, &refusal)
			require.Equal(t, tc.reason, refusal.Reason, "error: %v", err)
			require.NotContains(t, err.Error(), webhookSecret)
			require.Equal(t, psp.Notification{}, n)
		})
	}

	_, err := pspstripe.ParseNotification("", valid(stripeEvent("payment_intent.succeeded", succeeded)), []byte(stripeEvent("payment_intent.succeeded", succeeded)), now, 0)
	require.ErrorIs(t, err, psp.ErrNoNotificationSecret)
}

// The fake speaking Stripe's API notifies what the adapter did: each event
// verifies with stripe-go's own webhook.ConstructEvent (signature, default
// tolerance and API version) and reads, through ParseNotification, as the
// adapter's answer; a forgery fails both.
func TestStripeEventsFromTheFake(t *testing.T) {
	t.Parallel()

	receiver := fakepsptest.StartReceiver(t, nil)
	provider := fakepsptest.Start(t, fakepsp.Config{
		Protocol: fakepsp.ProtocolStripe,
		Notifications: fakepsp.Notifications{URL: receiver.URL, Secret: webhookSecret,
			Backoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, RetryFor: 5 * time.Second},
		Faults: fakepsp.Schedule{Seed: 1, Rules: []fakepsp.Rule{{On: fakepsp.OnNotification, Fault: fakepsp.FaultForge, P: 1, KeyPrefix: "forged-"}}},
	})
	adapter := newAdapter(provider.URL)
	const wait = 10 * time.Second

	// next is the next event, verified twice: by stripe-go as any Stripe
	// integration would, and by ParseNotification.
	next := func(t *testing.T) (stripego.Event, psp.Notification) {
		t.Helper()
		d := receiver.Next(t, wait)
		event, err := webhook.ConstructEvent(d.Body, d.Header.Get(pspstripe.SignatureHeader), webhookSecret)
		require.NoError(t, err, "body: %s", d.Body)
		require.Equal(t, stripego.APIVersion, event.APIVersion)
		require.Equal(t, "event", event.Object)
		n, err := pspstripe.ParseNotification(webhookSecret, d.Header, d.Body, time.Now(), 0)
		require.NoError(t, err)
		require.Equal(t, event.ID, n.EventID)
		return event, n
	}

	charge, err := adapter.Charge(t.Context(), psp.ChargeRequest{Key: "pk_1", Amount: 1200, Currency: "EUR", PaymentMethod: "pm_card_visa", Reference: "ch_1"})
	require.NoError(t, err)
	event, n := next(t)
	require.Equal(t, stripego.EventTypePaymentIntentSucceeded, event.Type)
	require.Equal(t, "pk_1", event.Request.IdempotencyKey)
	require.Equal(t, psp.NotificationCharge, n.Kind)
	require.Equal(t, charge, n.Charge, "the event reads as the answer did")
	require.Equal(t, "pk_1", n.ProviderKey)

	declined, err := adapter.Charge(t.Context(), psp.ChargeRequest{Key: "pk_2", Amount: 1200, Currency: "EUR", PaymentMethod: "pm_card_chargeDeclinedExpiredCard", Reference: "ch_2"})
	require.NoError(t, err)
	event, n = next(t)
	require.Equal(t, stripego.EventTypePaymentIntentPaymentFailed, event.Type)
	require.Equal(t, declined, n.Charge)
	require.Equal(t, "expired_card", n.Charge.DeclineCode)

	refund, err := adapter.Refund(t.Context(), psp.RefundRequest{Key: "rk_1", Charge: charge.ID, Amount: 200, Currency: "EUR", Reference: "re_1"})
	require.NoError(t, err)
	event, n = next(t)
	require.Equal(t, stripego.EventTypeRefundCreated, event.Type)
	require.Equal(t, psp.NotificationRefund, n.Kind)
	require.Equal(t, refund, n.Refund)
	require.Equal(t, "re_1", n.Reference)

	// A charge to capture later: authorized, captured; another canceled.
	// A capture's or cancel's event names its own request's key.
	later := psp.ChargeRequest{Key: "pk_3", Amount: 1200, Currency: "EUR", PaymentMethod: "pm_card_visa", Reference: "ch_3", CaptureLater: true}
	held, err := adapter.Charge(t.Context(), later)
	require.NoError(t, err)
	event, n = next(t)
	require.Equal(t, stripego.EventTypePaymentIntentAmountCapturableUpdated, event.Type)
	require.Equal(t, psp.NotificationCharge, n.Kind)
	require.Equal(t, held, n.Charge)
	captured, err := adapter.Capture(t.Context(), psp.OperationRequest{Key: "cpk_3", Charge: held.ID, Amount: 700, Currency: "EUR", Reference: "cp_3", ChargeReference: "ch_3"})
	require.NoError(t, err)
	event, n = next(t)
	require.Equal(t, stripego.EventTypePaymentIntentSucceeded, event.Type)
	require.Equal(t, captured, n.Charge)
	require.Equal(t, int64(700), n.Charge.AmountCaptured)
	require.Equal(t, "cpk_3", n.ProviderKey)
	require.Equal(t, "ch_3", n.Reference)
	later.Key, later.Reference = "pk_4", "ch_4"
	held, err = adapter.Charge(t.Context(), later)
	require.NoError(t, err)
	next(t)
	canceled, err := adapter.Cancel(t.Context(), psp.OperationRequest{Key: "cxk_4", Charge: held.ID, Amount: 1200, Currency: "EUR", Reference: "cx_4", ChargeReference: "ch_4"})
	require.NoError(t, err)
	event, n = next(t)
	require.Equal(t, stripego.EventTypePaymentIntentCanceled, event.Type)
	require.Equal(t, canceled, n.Charge)
	require.Equal(t, psp.StatusCanceled, n.Charge.Status)

	for _, key := range []string{"forged-1", "forged-2"} {
		_, err := adapter.Charge(t.Context(), psp.ChargeRequest{Key: key, Amount: 1200, Currency: "EUR", PaymentMethod: "pm_card_visa", Reference: "ch_" + key})
		require.NoError(t, err)
		d := receiver.Next(t, wait)
		_, err = webhook.ConstructEvent(d.Body, d.Header.Get(pspstripe.SignatureHeader), webhookSecret)
		require.ErrorIs(t, err, webhook.ErrNoValidSignature, "stripe-go refuses the forgery")
		_, err = pspstripe.ParseNotification(webhookSecret, d.Header, d.Body, time.Now(), 0)
		require.ErrorIs(t, err, psp.ErrNotificationForged)
	}

	stats, err := fakepsp.FetchNotifications(t.Context(), provider.URL)
	require.NoError(t, err)
	require.Equal(t, 9, stats.Made)
	require.Equal(t, 2, stats.Forged)
}
