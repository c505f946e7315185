package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/client"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/lab/fakepsp"
	"github.com/chargeflow/chargeflow/lab/fakepsp/fakepsptest"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/tenant"
)

// The shop authorizes an order sent with ship_later, takes the money when
// it ships, or releases it when it is canceled: against a real chargeflow
// (its API and worker on a fresh database, the fake provider), with the
// shop's routes as a person calls them. Asking to ship again is the same
// capture, replayed; shipping a canceled order is refused and stores
// nothing; an order charged at once cannot be shipped or canceled.
func TestShipAndCancelOrders(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	provider := fakepsptest.Start(t, fakepsp.Config{})
	o := app.Options{
		DatabaseURL: dbtest.URL(t),
		Provider:    psp.Config{BaseURL: provider.URL, Timeout: 2 * time.Second},
		APIPool:     app.Pool{MaxConns: 4},
		Worker:      app.Worker{Concurrency: 2},
	}
	api, err := app.NewAPI(ctx, o)
	require.NoError(t, err)
	t.Cleanup(api.Close)
	chargeflow := httptest.NewServer(api.Server.Handler())
	t.Cleanup(chargeflow.Close)
	workerPool, err := app.WorkerPool(ctx, o)
	require.NoError(t, err)
	t.Cleanup(workerPool.Close)
	worker, err := app.NewWorker(workerPool, o)
	require.NoError(t, err)
	require.NoError(t, worker.Start(ctx))
	t.Cleanup(func() { require.NoError(t, app.StopRiver(context.Background(), worker)) })
	_, key, err := tenant.Create(ctx, api.Pool, "shop")
	require.NoError(t, err)
	c, err := client.New(chargeflow.URL, key)
	require.NoError(t, err)
	shop := httptest.NewServer(newShop(c, "", slog.New(slog.DiscardHandler)).routes())
	t.Cleanup(shop.Close)

	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(shop.URL+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var answer map[string]any
		require.NoError(t, json.Unmarshal(raw, &answer), string(raw))
		return resp.StatusCode, answer
	}
	// chargeOf waits until the order's charge reads status.
	chargeOf := func(order, status string) map[string]any {
		t.Helper()
		var charge map[string]any
		require.Eventually(t, func() bool {
			resp, err := http.Get(shop.URL + "/orders/" + order)
			require.NoError(t, err)
			defer resp.Body.Close()
			var answer struct{ Charge map[string]any }
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
			charge = answer.Charge
			return charge["status"] == status
		}, 30*time.Second, 50*time.Millisecond, "order %s never read %s: %v", order, status, charge)
		return charge
	}
	operations := func() int {
		var n int
		require.NoError(t, api.Pool.QueryRow(ctx, `SELECT count(*) FROM charges WHERE kind IN ('capture', 'cancel')`).Scan(&n))
		return n
	}
	const order = `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "ship_later": true}`

	status, _ := post("/orders", order)
	require.Equal(t, http.StatusCreated, status)
	chargeOf("order-1", "requires_capture")
	status, shipped := post("/orders/order-1/ship", "")
	require.Equal(t, http.StatusCreated, status, shipped)
	status, again := post("/orders/order-1/ship", "")
	require.Equal(t, http.StatusCreated, status, again)
	require.Equal(t, shipped["ship"].(map[string]any)["id"], again["ship"].(map[string]any)["id"], "shipping again is the same capture")
	charge := chargeOf("order-1", "succeeded")
	require.EqualValues(t, 1000, charge["amount_captured"])

	status, _ = post("/orders", order)
	require.Equal(t, http.StatusCreated, status)
	chargeOf("order-2", "requires_capture")
	status, canceled := post("/orders/order-2/cancel", "")
	require.Equal(t, http.StatusCreated, status, canceled)
	chargeOf("order-2", "canceled")
	before := operations()
	status, refused := post("/orders/order-2/ship", "")
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, string(client.CodeChargeNotCapturable), refused["code"])
	require.Equal(t, before, operations(), "a refused shipment stores nothing")

	status, _ = post("/orders", `{"amount": 500, "currency": "USD", "payment_method": "pm_card_visa"}`)
	require.Equal(t, http.StatusCreated, status)
	chargeOf("order-3", "succeeded")
	status, refused = post("/orders/order-3/ship", "")
	require.Equal(t, http.StatusConflict, status, refused)
	require.Empty(t, refused["code"], "refused by the shop, never sent")
	require.Equal(t, before, operations())
}
