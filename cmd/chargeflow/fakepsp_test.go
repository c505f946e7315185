package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"chargeflow/fakepsp"
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
