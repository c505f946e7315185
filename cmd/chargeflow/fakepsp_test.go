//go:build lab

package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
)

// The fake provider's command serves either protocol, with the flags it
// always had.
func TestFakePSPProtocolFlag(t *testing.T) {
	t.Parallel()

	t.Run("stripe", func(t *testing.T) {
		t.Parallel()

		p := start(t, nil, "fakepsp", "--addr", "127.0.0.1:0", "--protocol", "stripe", "--no-dedupe",
			"--ledger", filepath.Join(t.TempDir(), "ledger.jsonl"))
		url := p.listenAddr()

		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/v1/payment_intents", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer sk_test_cmd")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
		require.JSONEq(t, `{"object":"list","data":[],"has_more":false,"url":"/v1/payment_intents"}`, string(body))

		state, err := fakepsp.FetchFaults(t.Context(), url)
		require.NoError(t, err)
		require.False(t, state.Dedupe, "--no-dedupe applies to the Stripe protocol too")
	})

	t.Run("adyen", func(t *testing.T) {
		t.Parallel()

		p := start(t, nil, "fakepsp", "--addr", "127.0.0.1:0", "--protocol", "adyen",
			"--ledger", filepath.Join(t.TempDir(), "ledger.jsonl"))
		url := p.listenAddr()

		status, body := postAdyenPayment(t, url, "cf_cmd")
		require.Equal(t, http.StatusOK, status, "body: %s", body)
		require.Contains(t, body, `"resultCode":"Authorised"`)

		// A checker reading the ledger finds it by our reference.
		ledger, err := fakepsp.FetchLedger(t.Context(), url, false)
		require.NoError(t, err)
		require.Len(t, ledger, 1)
		require.Equal(t, "ch_cf_cmd", ledger[0].Reference)
		require.Equal(t, "tn_cmd", ledger[0].TenantTag)
	})

	t.Run("unknown", func(t *testing.T) {
		t.Parallel()

		err := run(context.Background(), []string{"fakepsp", "--protocol", "paypal", "--ledger", filepath.Join(t.TempDir(), "ledger.jsonl")},
			func(string) string { return "" }, io.Discard, io.Discard)
		require.ErrorContains(t, err, `--protocol is "paypal", want "fake", "stripe" or "adyen"`)
	})
}

// `chargeflow fakepsp --hold-window` is how long an authorization is held:
// its ledger entry expires that long after it was made, and a capture
// inside the window is one.
func TestFakePSPHoldWindowFlag(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		args []string
		want time.Duration
	}{{nil, 7 * 24 * time.Hour}, {[]string{"--hold-window", "90m"}, 90 * time.Minute}} {
		p := start(t, nil, append([]string{"fakepsp", "--addr", "127.0.0.1:0", "--ledger", filepath.Join(t.TempDir(), "ledger.jsonl")}, tc.args...)...)
		url := p.listenAddr()
		client := psp.NewClient(psp.Config{BaseURL: url})

		held, err := client.Charge(t.Context(), psp.ChargeRequest{Key: "pk_1", Amount: 100, Currency: "EUR", PaymentMethod: fakepsp.PaymentMethodVisa,
			Reference: "ch_1", CaptureLater: true})
		require.NoError(t, err)
		require.Equal(t, psp.StatusRequiresCapture, held.Status)
		ledger, err := fakepsp.FetchLedger(t.Context(), url, true)
		require.NoError(t, err)
		require.Len(t, ledger, 1)
		require.Equal(t, tc.want, ledger[0].HoldExpiresAt.Sub(ledger[0].CreatedAt), "args %v", tc.args)

		captured, err := client.Capture(t.Context(), psp.OperationRequest{Key: "cpk_1", Charge: held.ID, Amount: 60, Currency: "EUR", Reference: "cp_1", ChargeReference: "ch_1"})
		require.NoError(t, err)
		require.Equal(t, int64(60), captured.AmountCaptured)
	}

	err := run(context.Background(), []string{"fakepsp", "--hold-window", "0s", "--ledger", filepath.Join(t.TempDir(), "ledger.jsonl")},
		func(string) string { return "" }, io.Discard, io.Discard)
	require.ErrorContains(t, err, "--hold-window")
}

// postAdyenPayment sends the payment chargeflow's Adyen adapter sends for
// the reference "ch_" + key to the fake at url, and returns the answer.
func postAdyenPayment(t *testing.T, url, key string) (int, string) {
	t.Helper()

	payment := `{"amount":{"currency":"EUR","value":1000},"merchantAccount":"ChargeflowECOM","reference":"ch_` + key + `",` +
		`"paymentMethod":{"type":"scheme","storedPaymentMethodId":"pm_card_visa"},"shopperReference":"tn_cmd",` +
		`"shopperInteraction":"ContAuth","recurringProcessingModel":"UnscheduledCardOnFile",` +
		`"returnUrl":"https://chargeflow.example/return","metadata":{"chargeflow_tenant":"tn_cmd"}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v71/payments", strings.NewReader(payment))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", "AQE_cmd")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode, string(body)
}

// `chargeflow fakepsp --webhook-url` notifies what it applied, signed with
// PSP_WEBHOOK_SECRET (or --webhook-secret), and never logs the secret; a
// URL without a secret is refused.
func TestFakePSPWebhookFlags(t *testing.T) {
	t.Parallel()

	const secret = "whsec_cmd_fakepsp_secret"

	t.Run("sends", func(t *testing.T) {
		t.Parallel()

		receiver := fakepsptest.StartReceiver(t, nil)
		p := start(t, []string{"PSP_WEBHOOK_SECRET=" + secret}, "fakepsp", "--addr", "127.0.0.1:0", "--log-level", "debug",
			"--webhook-url", receiver.URL, "--ledger", filepath.Join(t.TempDir(), "ledger.jsonl"))
		client := psp.NewClient(psp.Config{BaseURL: p.listenAddr()})
		charge, err := client.Charge(t.Context(), psp.ChargeRequest{Key: "pk_1", Amount: 100, Currency: "EUR", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_1"})
		require.NoError(t, err)

		d := receiver.Next(t, 30*time.Second)
		n, err := psp.ParseNotification(secret, d.Header, d.Body, time.Now(), 0)
		require.NoError(t, err)
		require.Equal(t, charge, n.Charge)
		p.waitLog("notification sent")
		require.NotContains(t, p.stderr.String(), secret)
	})

	t.Run("the flag wins over the environment", func(t *testing.T) {
		t.Parallel()

		receiver := fakepsptest.StartReceiver(t, nil)
		p := start(t, []string{"PSP_WEBHOOK_SECRET=whsec_env"}, "fakepsp", "--addr", "127.0.0.1:0",
			"--webhook-url", receiver.URL, "--webhook-secret", secret, "--ledger", filepath.Join(t.TempDir(), "ledger.jsonl"))
		client := psp.NewClient(psp.Config{BaseURL: p.listenAddr()})
		_, err := client.Charge(t.Context(), psp.ChargeRequest{Key: "pk_1", Amount: 100, Currency: "EUR", PaymentMethod: fakepsp.PaymentMethodVisa, Reference: "ch_1"})
		require.NoError(t, err)

		d := receiver.Next(t, 30*time.Second)
		_, err = psp.ParseNotification(secret, d.Header, d.Body, time.Now(), 0)
		require.NoError(t, err)
	})

	t.Run("adyen signs with its HMAC key", func(t *testing.T) {
		t.Parallel()

		const key = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"
		receiver := fakepsptest.StartReceiver(t, nil)
		p := start(t, []string{"PSP_WEBHOOK_SECRET=" + key}, "fakepsp", "--addr", "127.0.0.1:0", "--protocol", "adyen",
			"--log-level", "debug", "--webhook-url", receiver.URL, "--ledger", filepath.Join(t.TempDir(), "ledger.jsonl"))
		status, body := postAdyenPayment(t, p.listenAddr(), "cf_notified")
		require.Equal(t, http.StatusOK, status, "body: %s", body)

		var webhook struct {
			NotificationItems []struct {
				NotificationRequestItem struct {
					AdditionalData map[string]string `json:"additionalData"`
					Amount         struct {
						Currency string
						Value    int64
					} `json:"amount"`
					EventCode           string `json:"eventCode"`
					MerchantAccountCode string `json:"merchantAccountCode"`
					MerchantReference   string `json:"merchantReference"`
					PSPReference        string `json:"pspReference"`
					Success             string `json:"success"`
				} `json:"NotificationRequestItem"`
			} `json:"notificationItems"`
		}
		d := receiver.Next(t, 30*time.Second)
		require.NoError(t, json.Unmarshal(d.Body, &webhook))
		require.Len(t, webhook.NotificationItems, 1)
		item := webhook.NotificationItems[0].NotificationRequestItem
		require.Equal(t, "AUTHORISATION", item.EventCode)
		require.Equal(t, "ch_cf_notified", item.MerchantReference)

		// Adyen's HMAC: the hex-decoded key over the item's fields.
		secret, err := hex.DecodeString(key)
		require.NoError(t, err)
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(strings.Join([]string{item.PSPReference, "", item.MerchantAccountCode, item.MerchantReference,
			strconv.FormatInt(item.Amount.Value, 10), item.Amount.Currency, item.EventCode, item.Success}, ":")))
		require.Equal(t, base64.StdEncoding.EncodeToString(mac.Sum(nil)), item.AdditionalData["hmacSignature"])
		p.waitLog("notification sent")
		require.NotContains(t, p.stderr.String(), key)
	})

	t.Run("adyen refuses a secret that is not hex", func(t *testing.T) {
		t.Parallel()

		err := run(context.Background(), []string{"fakepsp", "--protocol", "adyen", "--webhook-url", "http://127.0.0.1:1/hook",
			"--ledger", filepath.Join(t.TempDir(), "ledger.jsonl")},
			func(name string) string { return map[string]string{"PSP_WEBHOOK_SECRET": secret}[name] }, io.Discard, io.Discard)
		require.ErrorContains(t, err, "not hex")
		require.NotContains(t, err.Error(), secret)
	})

	t.Run("a URL without a secret", func(t *testing.T) {
		t.Parallel()

		err := run(context.Background(), []string{"fakepsp", "--webhook-url", "http://127.0.0.1:1/hook", "--ledger", filepath.Join(t.TempDir(), "ledger.jsonl")},
			func(string) string { return "" }, io.Discard, io.Discard)
		require.ErrorContains(t, err, "--webhook-url needs a secret")
	})
}
