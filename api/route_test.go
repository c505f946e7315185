package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/route"
)

// TestRouting: a charge goes to the first account of its tenant's route
// that takes it, a tenant without a route keeps the provider of its
// processes, and a route that takes nothing refuses the charge, storing
// nothing — but never the retry of a charge already accepted.
func TestRouting(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) {
		o.Server = func(sc *app.ServerConfig) { sc.Routes = route.NewCache(sc.DB, time.Millisecond) }
	})
	ctx := context.Background()
	for _, a := range []route.Account{
		{Name: "eu", Kind: route.KindFake, Endpoint: b.psp.URL},
		{Name: "big", Kind: route.KindFake, Endpoint: b.psp.URL},
	} {
		_, err := route.AddAccount(ctx, b.Pool, a)
		require.NoError(t, err)
	}
	require.NoError(t, route.SetRoute(ctx, b.Pool, b.TenantA.ID, []route.Entry{
		{Account: "eu", Currencies: []string{"EUR"}, MaxAmount: 5000},
		{Account: "big", MinAmount: 100_000},
	}))
	provider := func(resp response) string {
		require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
		c, err := intent.Get(ctx, b.Pool, b.TenantA.ID, apitest.Decode(t, resp)["id"].(string))
		require.NoError(t, err)
		return c.Provider
	}

	require.Equal(t, "eu", provider(b.Post(t, b.TenantA, "route-eur-small-0001",
		`{"amount": 1000, "currency": "EUR", "payment_method": "pm_card_visa"}`)))
	require.Equal(t, "big", provider(b.Post(t, b.TenantA, "route-usd-large-0001",
		`{"amount": 200000, "currency": "USD", "payment_method": "pm_card_visa"}`)))
	other := b.Post(t, b.TenantB, "route-unrouted-00001", apitest.ValidBody)
	require.Equal(t, http.StatusCreated, other.Status)
	c, err := intent.Get(ctx, b.Pool, b.TenantB.ID, apitest.Decode(t, other)["id"].(string))
	require.NoError(t, err)
	require.Equal(t, "fakepsp", c.Provider, "a tenant without a route is untouched")

	before, calls := b.Stored(t), b.ledger(t)
	refused := b.Post(t, b.TenantA, "route-usd-small-0001", `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa"}`)
	apitest.RequireProblem(t, refused, http.StatusUnprocessableEntity, api.CodeNoRoute)
	require.Equal(t, before, b.Stored(t), "no charge, record, audit entry or job")
	require.Equal(t, calls, b.ledger(t), "no provider call")

	// The tenant's route changes so that it would refuse an accepted
	// request: its retry is still answered from its record.
	require.NoError(t, route.SetRoute(ctx, b.Pool, b.TenantA.ID, []route.Entry{{Account: "big", MinAmount: 100_000}}))
	require.Eventually(t, func() bool {
		probe := b.Post(t, b.TenantA, "route-probe-00000001", `{"amount": 1000, "currency": "EUR", "payment_method": "pm_card_visa"}`)
		return probe.Status == http.StatusUnprocessableEntity
	}, 5*time.Second, 10*time.Millisecond, "the new route is read")
	replay := b.Post(t, b.TenantA, "route-eur-small-0001", `{"amount": 1000, "currency": "EUR", "payment_method": "pm_card_visa"}`)
	require.Equal(t, http.StatusCreated, replay.Status, "body: %s", replay.Body)
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
}
