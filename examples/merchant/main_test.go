package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chargeflow/chargeflow/client"
	"github.com/chargeflow/chargeflow/internal/lockedbuf"
)

// The receiver acts on a verified delivery once, and refuses one that does
// not verify.
func TestReceiveWebhook(t *testing.T) {
	t.Parallel()
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("the merchant's endpoint key"))
	var logs lockedbuf.Buffer
	c, err := client.New("http://127.0.0.1:1", "cfk_unused")
	if err != nil {
		t.Fatal(err)
	}
	handler := newShop(c, secret, slog.New(slog.NewJSONHandler(&logs, nil))).routes()

	const id = "evt_01jqzv7y9c8m4k2w6x0n3r5t7a"
	body := `{"id":"` + id + `","type":"charge.succeeded","created_at":"2026-01-01T00:00:00Z","data":{"id":"ch_x"}}`
	deliver := func(signingSecret string) int {
		timestamp := strconv.FormatInt(time.Now().Unix(), 10)
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(signingSecret, "whsec_"))
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id + "." + timestamp + "." + body))
		req := httptest.NewRequest(http.MethodPost, "/webhooks/chargeflow", strings.NewReader(body))
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", timestamp)
		req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, req)
		return w.Code
	}

	if got := deliver(secret); got != http.StatusNoContent {
		t.Fatalf("a signed delivery: %d", got)
	}
	if !strings.Contains(logs.String(), `"msg":"webhook","event":"`+id+`","type":"charge.succeeded"`) {
		t.Fatalf("the event is not logged: %s", logs.String())
	}
	if got := deliver(secret); got != http.StatusNoContent || !strings.Contains(logs.String(), "webhook already handled") {
		t.Fatalf("a second delivery: %d, logs %s", got, logs.String())
	}
	other := "whsec_" + base64.StdEncoding.EncodeToString([]byte("somebody else's key"))
	if got := deliver(other); got != http.StatusBadRequest {
		t.Fatalf("a delivery signed with another secret: %d", got)
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatal("the secret reached the logs")
	}
}

func TestRunNeedsAnAPIKey(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	err := run(context.Background(), nil, func(string) string { return "" }, &stderr)
	if err == nil || !strings.Contains(err.Error(), "CHARGEFLOW_API_KEY") {
		t.Fatalf("got %v", err)
	}
}
