package route_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/route"
)

func TestAccountCheck(t *testing.T) {
	t.Parallel()
	good := route.Account{Name: "eu-adyen", Kind: route.KindAdyen, Endpoint: "https://checkout-test.adyen.com/v71",
		CredentialEnv: "ADYEN_EU_KEY", WebhookSecretEnv: "ADYEN_EU_HMAC", MerchantAccount: "ShopEU"}
	require.NoError(t, good.Check())
	require.NoError(t, route.Account{Name: "backup", Kind: route.KindFake, Endpoint: "http://127.0.0.1:9091"}.Check(), "a fake needs no credential")

	for name, change := range map[string]func(*route.Account){
		"name upper case":        func(a *route.Account) { a.Name = "EU" },
		"name too long":          func(a *route.Account) { a.Name = "a234567890123456789012345678901234567890x" },
		"reserved name":          func(a *route.Account) { a.Name = "stripe" },
		"unknown kind":           func(a *route.Account) { a.Kind = "paypal" },
		"endpoint not http":      func(a *route.Account) { a.Endpoint = "ftp://example.com" },
		"endpoint with a space":  func(a *route.Account) { a.Endpoint = "https://example.com/a b" },
		"a secret, not its name": func(a *route.Account) { a.CredentialEnv = "sk_live_abc123" },
		"no credential":          func(a *route.Account) { a.CredentialEnv = "" },
		"secret env lower case":  func(a *route.Account) { a.WebhookSecretEnv = "hmac" },
		"adyen without merchant": func(a *route.Account) { a.MerchantAccount = "" },
		"merchant with a quote":  func(a *route.Account) { a.MerchantAccount = `Shop"EU` },
	} {
		a := good
		change(&a)
		require.ErrorIs(t, a.Check(), route.ErrInvalid, name)
	}
}

func TestEntries(t *testing.T) {
	t.Parallel()
	e := route.Entry{Account: "a", Currencies: []string{"EUR", "GBP"}, MinAmount: 100, MaxAmount: 5000}
	require.True(t, e.Takes("EUR", 100))
	require.True(t, e.Takes("GBP", 5000))
	require.False(t, e.Takes("USD", 1000), "another currency")
	require.False(t, e.Takes("EUR", 99), "below the smallest")
	require.False(t, e.Takes("EUR", 5001), "above the largest")
	require.True(t, route.Entry{Account: "a"}.Takes("JPY", 1), "no rule takes anything")
	require.Equal(t, "a:EUR,GBP:100-5000", e.String())
	require.Equal(t, "a::-900", route.Entry{Account: "a", MaxAmount: 900}.String())
	require.Equal(t, "a", route.Entry{Account: "a"}.String())

	require.NoError(t, route.CheckEntries([]route.Entry{{Account: "a"}, e, {Account: "b"}}[1:]))
	for name, entries := range map[string][]route.Entry{
		"twice":            {{Account: "a"}, {Account: "a"}},
		"bad currency":     {{Account: "a", Currencies: []string{"eur"}}},
		"max below min":    {{Account: "a", MinAmount: 10, MaxAmount: 5}},
		"negative":         {{Account: "a", MinAmount: -1}},
		"not an account":   {{Account: "A B"}},
		"seventeen things": make([]route.Entry, 17),
	} {
		require.ErrorIs(t, route.CheckEntries(entries), route.ErrInvalid, name)
	}
}

func TestStoreAndTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenant := dbtest.Tenant(t, pool, "routed")
	plain := dbtest.Tenant(t, pool, "not routed")

	for _, a := range []route.Account{
		{Name: "eu", Kind: route.KindFake, Endpoint: "http://127.0.0.1:9101"},
		{Name: "us", Kind: route.KindStripe, Endpoint: "http://127.0.0.1:9102", CredentialEnv: "US_STRIPE_KEY"},
		{Name: "backup", Kind: route.KindFake, Endpoint: "http://127.0.0.1:9103"},
	} {
		_, err := route.AddAccount(ctx, pool, a)
		require.NoError(t, err)
	}
	_, err := route.AddAccount(ctx, pool, route.Account{Name: "eu", Kind: route.KindFake, Endpoint: "http://127.0.0.1:1"})
	require.ErrorIs(t, err, route.ErrAccountExists)
	require.ErrorIs(t, route.SetRoute(ctx, pool, tenant, []route.Entry{{Account: "nowhere"}}), route.ErrNoAccount)
	require.ErrorIs(t, route.SetRoute(ctx, pool, "tn_00000000000000000000000000", []route.Entry{{Account: "eu"}}), route.ErrInvalid)

	require.NoError(t, route.SetRoute(ctx, pool, tenant, []route.Entry{
		{Account: "eu", Currencies: []string{"EUR"}},
		{Account: "us", MaxAmount: 10_000},
		{Account: "backup"},
	}))
	table, err := route.Load(ctx, pool)
	require.NoError(t, err)

	pick := func(tenantID, currency string, amount int64) string {
		name, err := table.Pick(tenantID, currency, amount, "fakepsp")
		require.NoError(t, err)
		return name
	}
	require.Equal(t, "eu", pick(tenant, "EUR", 500))
	require.Equal(t, "us", pick(tenant, "USD", 500))
	require.Equal(t, "backup", pick(tenant, "USD", 50_000))
	require.Equal(t, "fakepsp", pick(plain, "EUR", 500), "a tenant without a route keeps the processes' own provider")

	usable := func(string) bool { return true }
	next, ok := table.Next(tenant, "EUR", 500, "eu", usable)
	require.True(t, ok)
	require.Equal(t, "us", next)
	next, ok = table.Next(tenant, "EUR", 500, "eu", func(name string) bool { return name != "us" })
	require.True(t, ok)
	require.Equal(t, "backup", next, "a failing next account is passed over")
	_, ok = table.Next(tenant, "EUR", 500, "backup", usable)
	require.False(t, ok, "nothing after the last")
	_, ok = table.Next(plain, "EUR", 500, "fakepsp", usable)
	require.False(t, ok, "no route, nowhere to move")

	disabled, err := route.DisableAccount(ctx, pool, "eu")
	require.NoError(t, err)
	require.False(t, disabled.Enabled())
	_, err = route.DisableAccount(ctx, pool, "nowhere")
	require.ErrorIs(t, err, route.ErrNoAccount)
	table, err = route.Load(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, "us", pick(tenant, "EUR", 500), "a disabled account takes no new charge")
	next, ok = table.Next(tenant, "EUR", 500, "eu", usable)
	require.True(t, ok, "a charge at a disabled account may still move on")
	require.Equal(t, "us", next)

	require.NoError(t, route.SetRoute(ctx, pool, tenant, []route.Entry{{Account: "eu"}}))
	table, err = route.Load(ctx, pool)
	require.NoError(t, err)
	_, err = table.Pick(tenant, "EUR", 500, "fakepsp")
	require.ErrorIs(t, err, route.ErrNoRoute, "a route whose accounts are all disabled takes nothing")

	require.NoError(t, route.SetRoute(ctx, pool, tenant, nil))
	table, err = route.Load(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, "fakepsp", pick(tenant, "EUR", 500), "an emptied route is no route")
	require.Empty(t, table.Route(tenant))
}

func TestCacheReadsAgainAfterItsTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	long, short := route.NewCache(pool, time.Hour), route.NewCache(pool, time.Millisecond)
	table, err := long.Table(ctx)
	require.NoError(t, err)
	require.Empty(t, table.Accounts())
	_, err = short.Table(ctx)
	require.NoError(t, err)

	_, err = route.AddAccount(ctx, pool, route.Account{Name: "late", Kind: route.KindFake, Endpoint: "http://127.0.0.1:9104"})
	require.NoError(t, err)
	again, err := long.Table(ctx)
	require.NoError(t, err)
	require.Same(t, table, again, "within the TTL the table is the one read")
	require.Eventually(t, func() bool {
		table, err := short.Table(ctx)
		require.NoError(t, err)
		_, ok := table.Account("late")
		return ok
	}, 5*time.Second, 5*time.Millisecond, "past it, read again")
}
