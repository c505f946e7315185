package route_test

import (
	"context"
	"fmt"
	"strings"
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
		"endpoint with a user":   func(a *route.Account) { a.Endpoint = "https://key:sk_live_abc123@checkout-test.adyen.com/v71" },
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
	require.Equal(t, "EUR or GBP, 100 to 5000 in minor units", e.Describe())
	require.Equal(t, "any currency, up to 900 in minor units", route.Entry{Account: "a", MaxAmount: 900}.Describe())
	require.Equal(t, "USD, JPY or EUR, from 5 in minor units", route.Entry{Account: "a", Currencies: []string{"USD", "JPY", "EUR"}, MinAmount: 5}.Describe())
	require.Equal(t, "every charge", route.Entry{Account: "a"}.Describe())

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

// ParseEntry takes what Entry.String prints, and nothing else; each
// refusal quotes the entry and says what is wrong.
func TestParseEntry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want route.Entry
	}{
		{"backup", route.Entry{Account: "backup"}},
		{"eu-adyen:EUR,GBP", route.Entry{Account: "eu-adyen", Currencies: []string{"EUR", "GBP"}}},
		{"us-stripe::-100000", route.Entry{Account: "us-stripe", MaxAmount: 100_000}},
		{"big:USD:100000-", route.Entry{Account: "big", Currencies: []string{"USD"}, MinAmount: 100_000}},
		{"a_1:JPY:1-1", route.Entry{Account: "a_1", Currencies: []string{"JPY"}, MinAmount: 1, MaxAmount: 1}},
		{"a::100-5000", route.Entry{Account: "a", MinAmount: 100, MaxAmount: 5000}},
	} {
		got, err := route.ParseEntry(tc.in)
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got, tc.in)
		require.Equal(t, tc.in, got.String(), "String prints what ParseEntry took")
	}
	for _, tc := range []struct{ in, says string }{
		{"", "not an account's name"},
		{"EU", `"EU" is not an account's name`},
		{":EUR", `"" is not an account's name`},
		{"eu:", "nothing after the colon"},
		{"eu::", `amounts ""`},
		{"eu:EUR:", `amounts ""`},
		{"eu:eur", `currency "eur" is not three upper-case letters`},
		{"eu:EUR,", `currency "" is not`},
		{"eu:EUR,,GBP", `currency "" is not`},
		{"eu:EURO", `currency "EURO"`},
		{"eu:EUR,EUR", "currency EUR is there twice"},
		{"eu:100-5000", "amounts alone are eu::100-5000"},
		{"eu::5000-100", "the largest amount, 100, is below the smallest, 5000"},
		{"eu::-", `amounts "-"`},
		{"eu::100", `amounts "100"`},
		{"eu::+1-", `amounts "+1-"`},
		{"eu::1e3-", `amounts "1e3-"`},
		{"eu::-1-5", `amounts "-1-5"`},
		{"eu::0-5", "amounts start at 1"},
		{"eu::-99999999999999999999", "is too large"},
		{"eu:EUR:1-2:x", "at most two colons"},
	} {
		_, err := route.ParseEntry(tc.in)
		require.ErrorIs(t, err, route.ErrInvalid, "%q", tc.in)
		require.ErrorContains(t, err, fmt.Sprintf("entry %q: ", tc.in), "the message quotes the entry")
		require.ErrorContains(t, err, tc.says, "%q", tc.in)
	}
}

// ParseEntries reads a route written on one line or several, and checks
// the entries together.
func TestParseEntries(t *testing.T) {
	t.Parallel()
	got, err := route.ParseEntries("eu-adyen:EUR,GBP\r\n  us-stripe::-100000\tbackup\n")
	require.NoError(t, err)
	require.Equal(t, []route.Entry{
		{Account: "eu-adyen", Currencies: []string{"EUR", "GBP"}},
		{Account: "us-stripe", MaxAmount: 100_000},
		{Account: "backup"},
	}, got)
	got, err = route.ParseEntries(" \n ")
	require.NoError(t, err)
	require.Empty(t, got, "nothing is an empty route; the callers say what that means")

	for in, says := range map[string]string{
		"eu backup eu":           `account "eu" is in the route twice`,
		"eu us:usd":              `entry "us:usd": currency "usd"`,
		strings.Repeat("a ", 17): "at most 16 accounts",
		"eu,us":                  `entry "eu,us"`,
		"eu:EUR; us":             `entry "eu:EUR;"`,
	} {
		_, err := route.ParseEntries(in)
		require.ErrorIs(t, err, route.ErrInvalid, "%q", in)
		require.ErrorContains(t, err, says, "%q", in)
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
	require.ErrorIs(t, route.SetRoute(ctx, pool, "tn_00000000000000000000000000", []route.Entry{{Account: "eu"}}), route.ErrNoTenant)
	require.ErrorIs(t, route.SetRoute(ctx, pool, "tn_00000000000000000000000000", nil), route.ErrNoTenant,
		"emptying the route of no tenant is refused too, not done")
	_, err = route.Route(ctx, pool, "tn_00000000000000000000000000")
	require.ErrorIs(t, err, route.ErrNoTenant)
	none, err := route.Route(ctx, pool, tenant)
	require.NoError(t, err)
	require.Empty(t, none)

	require.NoError(t, route.SetRoute(ctx, pool, tenant, []route.Entry{
		{Account: "eu", Currencies: []string{"EUR"}},
		{Account: "us", MaxAmount: 10_000},
		{Account: "backup"},
	}))
	entries, err := route.Route(ctx, pool, tenant)
	require.NoError(t, err)
	require.Equal(t, []route.Entry{{Account: "eu", Currencies: []string{"EUR"}}, {Account: "us", MaxAmount: 10_000}, {Account: "backup"}}, entries)
	table, err := route.Load(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, entries, table.Route(tenant))

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
