package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/client"
	"github.com/chargeflow/chargeflow/internal/app"
)

// A real delivery verifies: the worker settles a charge, the delivery
// worker posts its event to the merchant's endpoint signed with the
// endpoint's secret, and VerifyWebhook accepts it — and refuses the same
// delivery with its body changed by a byte, or checked with another secret.
func TestWebhookDeliveriesVerify(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := start(t, func(o *app.Options) { o.Webhooks.AllowPrivate = true })
	s.runWorker(t)

	type delivery struct {
		id                              string
		event                           client.Event
		verified, tampered, otherSecret error
		constructed                     *client.Event
		constructErr                    error
	}
	var mu sync.Mutex
	var secret string
	deliveries := make(chan delivery, 10)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "unreadable", http.StatusBadRequest)
			return
		}
		mu.Lock()
		key := secret
		mu.Unlock()
		d := delivery{
			id:          r.Header.Get("webhook-id"),
			verified:    client.VerifyWebhook(key, r.Header, body, 0),
			tampered:    client.VerifyWebhook(key, r.Header, append(body, ' '), 0),
			otherSecret: client.VerifyWebhook("whsec_"+strings.Repeat("A", 32), r.Header, body, 0),
		}
		_ = json.Unmarshal(body, &d.event)
		d.constructed, d.constructErr = client.ConstructEvent(key, r.Header, body, 0)
		deliveries <- d
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)

	mu.Lock()
	secret = s.createEndpoint(t, receiver.URL+"/webhooks/chargeflow")
	mu.Unlock()

	c, _ := s.newClient(t, s.url)
	charge, err := c.CreateCharge(ctx, visa(""))
	require.NoError(t, err)

	var d delivery
	select {
	case d = <-deliveries:
	case <-ctx.Done():
		t.Fatal("no delivery within a minute")
	}
	require.NoError(t, d.verified)
	require.ErrorIs(t, d.tampered, client.ErrWebhookSignature)
	require.ErrorIs(t, d.otherSecret, client.ErrWebhookSignature)
	require.Equal(t, "charge.succeeded", d.event.Type)
	require.Equal(t, d.event.ID, d.id, "webhook-id is the event's id")
	var settled client.Charge
	require.NoError(t, json.Unmarshal(d.event.Data, &settled))
	require.Equal(t, charge.ID, settled.ID)
	require.Equal(t, client.StatusSucceeded, settled.Status)

	require.NoError(t, d.constructErr, "ConstructEvent takes what VerifyWebhook takes")
	require.Equal(t, d.event, *d.constructed)
	fromEvent, err := d.constructed.Charge()
	require.NoError(t, err)
	require.Equal(t, settled, *fromEvent)
}

// createEndpoint registers a webhook endpoint for every event type, as a
// merchant does once (the client does not wrap it), and returns its secret.
func (s *system) createEndpoint(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+"/v1/webhook_endpoints",
		strings.NewReader(`{"url": "`+url+`", "events": ["*"]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "e2e-endpoint-"+url)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var endpoint struct {
		Secret string `json:"secret"`
	}
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&endpoint))
	require.True(t, strings.HasPrefix(endpoint.Secret, "whsec_"), "a signing secret")
	return endpoint.Secret
}
