package fakepsp_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/psp/stripe/stripemocktest"
)

// stripeMockKey is a key stripe-mock accepts (sk_test_ and one more part).
const stripeMockKey = "sk_test_chargeflow"

// TestStripeProtocolAsStrictAsStripeMock sends the Stripe adapter's request
// shapes, and variants of them that Stripe's OpenAPI description does not
// allow, to stripe-mock and to the fake speaking Stripe: what the mock
// accepts the fake accepts, and what the mock refuses with 400 the fake
// refuses with 400 too, so a request the fake lets through is one Stripe's
// description allows; the captures and cancels name intents still held,
// so the fake refuses a variant for its form, not for the intent's state. (The fake is stricter where it models less: it only
// refunds PaymentIntents, and knows only its own test payment methods.)
func TestStripeProtocolAsStrictAsStripeMock(t *testing.T) {
	t.Parallel()

	mockURL := stripemocktest.Start(t)
	b := setupStripe(t, fakepsp.Config{})
	intent := b.visaIntent(t, "cf_mock_intent")
	refund, err := b.createRefund(t, "cf_mock_refund", refundOf(intent.ID, "re_mock", 100))
	require.NoError(t, err)

	ids := stripemocktest.IDs{Intent: intent.ID, Refund: refund.ID, PaymentMethod: fakepsp.PaymentMethodVisa,
		ToCapture: b.manualIntent(t, "cf_mock_to_capture").ID, ToCancel: b.manualIntent(t, "cf_mock_to_cancel").ID,
		Held: b.manualIntent(t, "cf_mock_held").ID}
	for i, r := range stripemocktest.Requests(ids) {
		key := fmt.Sprintf("cf_variant_%d", i)
		want := http.StatusBadRequest
		if r.Valid {
			want = http.StatusOK
		}
		require.Equal(t, want, stripemocktest.Send(t, http.DefaultClient, mockURL, stripeMockKey, key, r), "stripe-mock, %s", r.Name)
		assert.Equal(t, want, stripemocktest.Send(t, b.http, b.url, testSecretKey, key, r), "the fake, %s", r.Name)
	}
}
