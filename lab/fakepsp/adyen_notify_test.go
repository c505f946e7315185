package fakepsp_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
)

// adyenHMACKey is the notifications' HMAC key, in hex as Adyen gives it.
const adyenHMACKey = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"

// adyenNotifying starts a provider of the Adyen protocol that notifies
// url, retrying fast, with schedule's faults.
func adyenNotifying(t *testing.T, url string, schedule fakepsp.Schedule, edit ...func(*fakepsp.Config)) *adyenBundle {
	t.Helper()

	cfg := fakepsp.Config{Faults: schedule, Notifications: fakepsp.Notifications{
		URL: url, Secret: adyenHMACKey, Backoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, RetryFor: 5 * time.Second,
	}}
	for _, e := range edit {
		e(&cfg)
	}
	return setupAdyen(t, cfg)
}

// notificationItem is Adyen's NotificationRequestItem, as a receiver
// reads it.
type notificationItem struct {
	AdditionalData      map[string]string `json:"additionalData"`
	Amount              amountObject      `json:"amount"`
	EventCode           string            `json:"eventCode"`
	EventDate           string            `json:"eventDate"`
	MerchantAccountCode string            `json:"merchantAccountCode"`
	MerchantReference   string            `json:"merchantReference"`
	OriginalReference   string            `json:"originalReference"`
	PSPReference        string            `json:"pspReference"`
	Reason              string            `json:"reason"`
	Success             string            `json:"success"`
}

// adyenItem reads the one item of an Adyen notification, strictly.
func adyenItem(t *testing.T, d fakepsptest.Delivery) notificationItem {
	t.Helper()

	var webhook struct {
		Live              string `json:"live"`
		NotificationItems []struct {
			NotificationRequestItem notificationItem `json:"NotificationRequestItem"`
		} `json:"notificationItems"`
	}
	decoder := json.NewDecoder(strings.NewReader(string(d.Body)))
	decoder.DisallowUnknownFields()
	require.NoError(t, decoder.Decode(&webhook), "body: %s", d.Body)
	require.Equal(t, "false", webhook.Live)
	require.Len(t, webhook.NotificationItems, 1)
	require.Equal(t, "application/json", d.Header.Get("Content-Type"))
	return webhook.NotificationItems[0].NotificationRequestItem
}

// signatureValid checks an item's hmacSignature as Adyen documents it,
// computed here on its own: HMAC-SHA256 with the hex-decoded key over
// pspReference:originalReference:merchantAccountCode:merchantReference:
// value:currency:eventCode:success, base64.
func signatureValid(t *testing.T, keyHex string, item notificationItem) bool {
	t.Helper()

	key, err := hex.DecodeString(keyHex)
	require.NoError(t, err)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(strings.Join([]string{item.PSPReference, item.OriginalReference, item.MerchantAccountCode,
		item.MerchantReference, strconv.FormatInt(item.Amount.Value, 10), item.Amount.Currency, item.EventCode, item.Success}, ":")))
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(want), []byte(item.AdditionalData["hmacSignature"]))
}

// verifiedItem is adyenItem whose signature must verify.
func verifiedItem(t *testing.T, d fakepsptest.Delivery) notificationItem {
	t.Helper()

	item := adyenItem(t, d)
	require.True(t, signatureValid(t, adyenHMACKey, item), "body: %s", d.Body)
	return item
}

// An AUTHORISATION of every payment and a REFUND of every refund decided,
// each signed, the outcome in success and reason; a replay notifies
// nothing.
func TestAdyenNotifications(t *testing.T) {
	t.Parallel()

	clock := newTestClock()
	logger, logs := debugLogger()
	receiver := fakepsptest.StartReceiver(t, nil)
	b := adyenNotifying(t, receiver.URL, fakepsp.Schedule{}, func(c *fakepsp.Config) { c.Now, c.Logger = clock.Now, logger })

	paid := b.authorise(t, "cf_paid")
	d := receiver.Next(t, wait)
	require.Empty(t, d.Header.Get(fakepsp.StripeSignatureHeader), "the signature is in the item")
	require.Equal(t, notificationItem{
		AdditionalData: verifiedItem(t, d).AdditionalData,
		Amount:         amountObject{Currency: "EUR", Value: 1000}, EventCode: "AUTHORISATION",
		EventDate: clock.Now().Format(time.RFC3339), MerchantAccountCode: merchantAccount,
		MerchantReference: "ch_cf_paid", PSPReference: paid.PSPReference, Success: "true",
	}, adyenItem(t, d))
	_, err := time.Parse(time.RFC3339, adyenItem(t, d).EventDate)
	require.NoError(t, err)

	b.authorise(t, "cf_paid") // a replay applies nothing
	refused := b.pay(t, "cf_refused", payment("ch_refused", fakepsp.PaymentMethodInsufficientFunds))
	item := verifiedItem(t, receiver.Next(t, wait))
	require.Equal(t, []string{"AUTHORISATION", refused.PSPReference, "ch_refused", "false", "Not enough balance"},
		[]string{item.EventCode, item.PSPReference, item.MerchantReference, item.Success, item.Reason})

	refund := b.refundPayment(t, "rk_1", paid.PSPReference, 300)
	item = verifiedItem(t, receiver.Next(t, wait))
	require.Equal(t, notificationItem{
		AdditionalData: item.AdditionalData,
		Amount:         amountObject{Currency: "EUR", Value: 300}, EventCode: "REFUND",
		EventDate: clock.Now().Format(time.RFC3339), MerchantAccountCode: merchantAccount,
		MerchantReference: "re_rk_1", OriginalReference: paid.PSPReference, PSPReference: refund.PSPReference, Success: "true",
	}, item)

	// Refused refunds move no money, and the REFUND says why.
	beyond := b.refundPayment(t, "rk_2", paid.PSPReference, 701)
	item = verifiedItem(t, receiver.Next(t, wait))
	require.Equal(t, []string{"REFUND", beyond.PSPReference, paid.PSPReference, "re_rk_2", "701", "false", "Refund amount exceeds what is left of the payment"},
		[]string{item.EventCode, item.PSPReference, item.OriginalReference, item.MerchantReference, strconv.FormatInt(item.Amount.Value, 10), item.Success, item.Reason})
	ofRefused := b.refundPayment(t, "rk_3", refused.PSPReference, 100)
	item = verifiedItem(t, receiver.Next(t, wait))
	require.Equal(t, []string{"REFUND", ofRefused.PSPReference, refused.PSPReference, "false", "Payment was not authorised"},
		[]string{item.EventCode, item.PSPReference, item.OriginalReference, item.Success, item.Reason})

	b.refundPayment(t, "rk_1", paid.PSPReference, 300) // a replay
	receiver.Quiet(t, 200*time.Millisecond)
	require.Equal(t, fakepsp.NotificationStats{Enabled: true, Made: 5, Sent: 5, Attempts: 5}, b.settled(t))
	require.NotContains(t, logs.String(), adyenHMACKey)
	require.NotContains(t, logs.String(), item.AdditionalData["hmacSignature"])
}

// A receiver takes an Adyen notification by answering "[accepted]": a 2xx
// without it is a failed delivery, retried with the same body.
func TestAdyenNotificationNeedsAccepted(t *testing.T) {
	t.Parallel()

	var calls atomic.Int32
	bodies := make(chan []byte, 8)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		bodies <- body
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusOK) // no acknowledgement
			return
		}
		_, _ = io.WriteString(w, "[accepted]")
	}))
	t.Cleanup(receiver.Close)
	b := adyenNotifying(t, receiver.URL, fakepsp.Schedule{})
	b.authorise(t, "cf_1")

	require.Equal(t, fakepsp.NotificationStats{Enabled: true, Made: 1, Sent: 1, Attempts: 2}, b.settled(t))
	require.Equal(t, string(<-bodies), string(<-bodies), "the retry carries the same body")
}

// The notification faults act on Adyen's notifications: Adyen documents
// that they may come twice, late, or not at all.
func TestAdyenNotificationFaults(t *testing.T) {
	t.Parallel()

	t.Run("duplicate", func(t *testing.T) {
		t.Parallel()
		receiver := fakepsptest.StartReceiver(t, nil)
		b := adyenNotifying(t, receiver.URL, firing(fakepsp.OnNotification, fakepsp.FaultDuplicate, 0, ""))
		b.authorise(t, "cf_1")
		first, second := receiver.Next(t, wait), receiver.Next(t, wait)
		require.Equal(t, string(first.Body), string(second.Body))
		verifiedItem(t, second)
		require.Equal(t, fakepsp.NotificationStats{Enabled: true, Made: 1, Sent: 2, Attempts: 2, Duplicated: 1}, b.settled(t))
	})

	t.Run("delay", func(t *testing.T) {
		t.Parallel()
		receiver := fakepsptest.StartReceiver(t, nil)
		b := adyenNotifying(t, receiver.URL, firing(fakepsp.OnNotification, fakepsp.FaultDelay, 400, "slow-"))
		start := time.Now()
		b.authorise(t, "slow-1")
		b.authorise(t, "cf_2")
		require.Equal(t, "ch_cf_2", verifiedItem(t, receiver.Next(t, wait)).MerchantReference)
		require.Equal(t, "ch_slow-1", verifiedItem(t, receiver.Next(t, wait)).MerchantReference)
		require.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond)
	})

	t.Run("drop", func(t *testing.T) {
		t.Parallel()
		receiver := fakepsptest.StartReceiver(t, nil)
		b := adyenNotifying(t, receiver.URL, firing(fakepsp.OnNotification, fakepsp.FaultDrop, 0, "lost-"))
		b.authorise(t, "lost-1")
		b.authorise(t, "cf_2")
		require.Equal(t, "ch_cf_2", verifiedItem(t, receiver.Next(t, wait)).MerchantReference)
		receiver.Quiet(t, 300*time.Millisecond)
		require.Equal(t, fakepsp.NotificationStats{Enabled: true, Made: 2, Sent: 1, Attempts: 1, Dropped: 1}, b.settled(t))
	})

	t.Run("forge", func(t *testing.T) {
		t.Parallel()
		receiver := fakepsptest.StartReceiver(t, nil)
		b := adyenNotifying(t, receiver.URL, firing(fakepsp.OnNotification, fakepsp.FaultForge, 0, "forged-"))
		b.authorise(t, "forged-1")
		b.authorise(t, "forged-2")

		wrongKey, altered := adyenItem(t, receiver.Next(t, wait)), adyenItem(t, receiver.Next(t, wait))
		for _, item := range []notificationItem{wrongKey, altered} {
			require.False(t, signatureValid(t, adyenHMACKey, item), "a forgery fails verification: %+v", item)
		}
		require.Equal(t, int64(1000), wrongKey.Amount.Value, "the genuine item signed with a wrong key")
		require.Equal(t, int64(100_000), altered.Amount.Value, "an altered amount under the genuine signature")
		genuine := altered
		genuine.Amount.Value = 1000
		require.True(t, signatureValid(t, adyenHMACKey, genuine), "the altered one carries the genuine signature")
		receiver.Quiet(t, 300*time.Millisecond) // a forgery is never retried
		require.Equal(t, fakepsp.NotificationStats{Enabled: true, Made: 2, Forged: 2}, b.settled(t))
	})
}
