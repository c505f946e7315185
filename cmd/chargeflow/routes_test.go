package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/admin"
	"github.com/chargeflow/chargeflow/internal/dbtest"
)

// routingState is what the account and route commands may change: the
// accounts, the routes and the admin audit. Equal before and after is the
// proof that a refusal wrote nothing.
type routingState struct {
	Accounts, Routes string
	Audit            int
}

func readRoutingState(t *testing.T, dbURL string) routingState {
	t.Helper()
	pool := dbtest.NewPool(t, dbURL, 1)
	defer pool.Close()
	var s routingState
	err := pool.QueryRow(context.Background(), `SELECT
		(SELECT coalesce(string_agg(name || ':' || coalesce(disabled_at::text, '-'), ',' ORDER BY name), '') FROM provider_accounts),
		(SELECT coalesce(string_agg(tenant_id || ':' || position || ':' || account, ',' ORDER BY tenant_id, position), '') FROM tenant_routes),
		(SELECT count(*) FROM admin_audit)`).Scan(&s.Accounts, &s.Routes, &s.Audit)
	require.NoError(t, err)
	return s
}

// An administrator adds provider accounts, routes a tenant through them,
// disables one and clears the route, from the CLI: each change one admin
// audit record under the actor; each refusal its exit code, a message that
// says why, and nothing written. An account names the variables its
// secrets are in: the secrets, here in the environment as canaries, and a
// secret typed where a variable's name belongs, are in no output and no
// record.
func TestAccountsAndRoutes(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	const keyCanary, hmacCanary, typedSecret = "sk_live_canary_4f1d9", "hmac_canary_77b0e", "sk_test_123"
	envOf := map[string]string{"DATABASE_URL": dbURL, "USER": "alice",
		"ADYEN_EU_KEY": keyCanary, "ADYEN_EU_HMAC": hmacCanary, "CHARGEFLOW_CREDENTIAL_ENV": typedSecret}
	var said strings.Builder // everything any command printed
	runCLI := func(args ...string) (string, error) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, func(k string) string { return envOf[k] }, &stdout, &stderr)
		said.WriteString(stdout.String() + stderr.String())
		if err != nil {
			said.WriteString(err.Error())
		}
		return stdout.String(), err
	}
	cli := func(args ...string) map[string]any {
		t.Helper()
		out, err := runCLI(append(args, "--output", "json")...)
		require.NoError(t, err, "chargeflow %s", strings.Join(args, " "))
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &v), "chargeflow %s: %s", strings.Join(args, " "), out)
		return v
	}
	refused := func(want int, says string, args ...string) {
		t.Helper()
		before := readRoutingState(t, dbURL)
		_, err := runCLI(args...)
		require.Equal(t, want, exitCode(err), "chargeflow %s: %v", strings.Join(args, " "), err)
		require.ErrorContains(t, err, says, "chargeflow %s", strings.Join(args, " "))
		require.Equal(t, before, readRoutingState(t, dbURL), "chargeflow %s wrote nothing", strings.Join(args, " "))
	}

	tenantID := cli("tenant", "create", "--name", "acme")["tenant_id"].(string)
	unknownTenant := "tn_" + strings.Repeat("0", 26)
	adyen := []string{"account", "add", "--name", "eu-adyen", "--kind", "adyen", "--endpoint", "https://checkout-test.adyen.com/v71",
		"--credential-env", "ADYEN_EU_KEY", "--webhook-secret-env", "ADYEN_EU_HMAC", "--merchant-account", "ShopEU"}
	with := func(args []string, flag, value string) []string {
		out := append([]string(nil), args...)
		for i := range out {
			if out[i] == flag {
				out[i+1] = value
				return out
			}
		}
		return append(out, flag, value)
	}

	// Refused before the database is touched: what Account.Check refuses.
	refused(exitRefused, "the name of the processes' own provider", with(adyen, "--name", "stripe")...)
	refused(exitRefused, "never the secret itself", with(adyen, "--credential-env", typedSecret)...)
	refused(exitRefused, "never the secret itself", with(adyen, "--webhook-secret-env", "whsec_"+hmacCanary)...)
	refused(exitRefused, "needs its merchant account", with(adyen, "--merchant-account", "")...)
	refused(exitRefused, "no user or password", with(adyen, "--endpoint", "https://ws:"+keyCanary+"@checkout-test.adyen.com/v71")...)
	refused(exitRefused, `kind "paypal"`, with(adyen, "--kind", "paypal")...)
	refused(exitUsage, "--name, --kind and --endpoint are required", "account", "add", "--name", "eu-adyen", "--kind", "adyen")
	// The credential flag is never read from the environment
	// (CHARGEFLOW_CREDENTIAL_ENV holds a secret here).
	refused(exitRefused, "a stripe account needs the name of the environment variable holding its API key",
		"account", "add", "--name", "us", "--kind", "stripe", "--endpoint", "https://api.stripe.com")

	added := cli(adyen...)
	require.Equal(t, map[string]any{"name": "eu-adyen", "kind": "adyen", "endpoint": "https://checkout-test.adyen.com/v71",
		"credential_env": "ADYEN_EU_KEY", "webhook_secret_env": "ADYEN_EU_HMAC", "merchant_account": "ShopEU", "enabled": true},
		pick(added, "name", "kind", "endpoint", "credential_env", "webhook_secret_env", "merchant_account", "enabled"))
	table, err := runCLI("account", "add", "--name", "backup", "--kind", "fake", "--endpoint", "http://127.0.0.1:9091", "--output", "table")
	require.NoError(t, err)
	require.Contains(t, table, "ACCOUNT              backup (fake)")
	require.Contains(t, table, "chargeflow route set TENANT_ID backup")
	refused(exitRefused, "a provider account with that name exists", adyen...)

	list := cli("account", "list")["data"].([]any)
	require.Len(t, list, 2)
	require.Equal(t, "backup", list[0].(map[string]any)["name"], "by name")
	require.Equal(t, "ADYEN_EU_KEY", list[1].(map[string]any)["credential_env"])
	require.Nil(t, list[1].(map[string]any)["disabled_at"])
	table, err = runCLI("account", "list", "--output", "table")
	require.NoError(t, err)
	require.Contains(t, table, "$ADYEN_EU_KEY")
	require.Contains(t, table, "ShopEU")

	// Routes: parsed strictly before the database is opened, each
	// refusal naming the entry.
	refused(exitUsage, `entry "eu-adyen:eur": currency "eur"`, "route", "set", tenantID, "eu-adyen:eur")
	refused(exitUsage, `entry "backup::500-100": the largest amount`, "route", "set", tenantID, "eu-adyen", "backup::500-100")
	refused(exitUsage, `entry "backup:100-"`, "route", "set", tenantID, "backup:100-")
	refused(exitUsage, `at most two colons`, "route", "set", tenantID, "backup:EUR:1-2:x")
	refused(exitUsage, `account "backup" is in the route twice`, "route", "set", tenantID, "backup", "backup:EUR")
	refused(exitUsage, "chargeflow route clear TENANT_ID", "route", "set", tenantID)
	refused(exitUsage, "missing TENANT_ID", "route", "set")
	refused(exitNotFound, `no such provider account: "nowhere"`, "route", "set", tenantID, "eu-adyen:EUR", "nowhere")
	refused(exitNotFound, "no such tenant", "route", "set", unknownTenant, "backup")
	refused(exitNotFound, "no such tenant", "route", "clear", unknownTenant)
	refused(exitNotFound, "no such tenant", "route", "show", unknownTenant)
	refused(exitNotFound, "no such provider account", "account", "disable", "nowhere")

	require.Equal(t, map[string]any{"tenant_id": tenantID, "entries": []any{}}, cli("route", "show", tenantID), "no route yet")
	table, err = runCLI("route", "show", tenantID, "--output", "table")
	require.NoError(t, err)
	require.Contains(t, table, "has no route: its charges go to the processes' own provider")

	set := cli("route", "set", tenantID, "eu-adyen:EUR,GBP", "backup::-100000")
	wantEntries := []any{
		map[string]any{"account": "eu-adyen", "currencies": []any{"EUR", "GBP"}},
		map[string]any{"account": "backup", "max_amount": 100000.0},
	}
	require.Equal(t, map[string]any{"tenant_id": tenantID, "entries": wantEntries}, set)
	require.Equal(t, set, cli("route", "show", tenantID))

	disabled := cli("account", "disable", "backup")
	require.Equal(t, false, disabled["enabled"])
	require.NotNil(t, disabled["disabled_at"])
	require.Equal(t, set, cli("route", "show", tenantID), "a disabled account stays in the route")
	table, err = runCLI("route", "show", tenantID, "--output", "table")
	require.NoError(t, err)
	require.Contains(t, table, "1  eu-adyen:EUR,GBP  EUR or GBP, any amount")
	require.Contains(t, table, "2  backup::-100000   any currency, up to 100000 in minor units (account disabled: passed over)")
	require.NotNil(t, cli("account", "list")["data"].([]any)[0].(map[string]any)["disabled_at"])

	require.Equal(t, map[string]any{"tenant_id": tenantID, "entries": []any{}}, cli("route", "clear", tenantID))
	require.Equal(t, map[string]any{"tenant_id": tenantID, "entries": []any{}}, cli("route", "show", tenantID))
	require.Empty(t, readRoutingState(t, dbURL).Routes)

	// Each change once, newest first, signed; no refusal recorded; no
	// secret anywhere.
	entries := cli("audit")["data"].([]any)
	var records []string
	for _, e := range entries {
		entry := e.(map[string]any)
		require.Equal(t, "cli:alice", entry["actor"])
		records = append(records, entry["action"].(string)+" "+entry["subject"].(string)+": "+entry["detail"].(string))
	}
	require.Equal(t, []string{
		admin.RouteSet + " " + tenantID + ": the processes' own provider",
		admin.AccountDisabled + " backup: no new charges",
		admin.RouteSet + " " + tenantID + ": eu-adyen:EUR,GBP then backup::-100000",
		admin.AccountAdded + " backup: kind fake, endpoint http://127.0.0.1:9091",
		admin.AccountAdded + " eu-adyen: kind adyen, endpoint https://checkout-test.adyen.com/v71, key from $ADYEN_EU_KEY, " +
			"webhook secret from $ADYEN_EU_HMAC, merchant account ShopEU",
		admin.TenantCreated + " " + tenantID + ": name acme",
	}, records)
	for _, secret := range []string{keyCanary, hmacCanary, typedSecret} {
		require.NotContains(t, said.String(), secret, "the commands' output")
	}
	require.Contains(t, said.String(), "reads its API key from $ADYEN_EU_KEY", "the reminder of the variables, on stderr beside JSON")
}
