//go:build lab

package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
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

	t.Run("unknown", func(t *testing.T) {
		t.Parallel()

		err := run(context.Background(), []string{"fakepsp", "--protocol", "paypal", "--ledger", filepath.Join(t.TempDir(), "ledger.jsonl")},
			func(string) string { return "" }, io.Discard, io.Discard)
		require.ErrorContains(t, err, `--protocol is "paypal"`)
	})
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

	t.Run("a URL without a secret", func(t *testing.T) {
		t.Parallel()

		err := run(context.Background(), []string{"fakepsp", "--webhook-url", "http://127.0.0.1:1/hook", "--ledger", filepath.Join(t.TempDir(), "ledger.jsonl")},
			func(string) string { return "" }, io.Discard, io.Discard)
		require.ErrorContains(t, err, "--webhook-url needs a secret")
	})
}
