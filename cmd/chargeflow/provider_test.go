package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"chargeflow/internal/app"
)

// The provider's flags default from the environment; the Stripe key is
// read from it but never printed by -h.
func TestBindProvider(t *testing.T) {
	t.Parallel()

	parse := func(environ map[string]string, args ...string) (app.Options, string) {
		var o app.Options
		var help bytes.Buffer
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(&help)
		bindProvider(fs, env{getenv: func(k string) string { return environ[k] }}, &o)
		require.NoError(t, fs.Parse(args))
		fs.PrintDefaults()
		return o, help.String()
	}

	o, _ := parse(nil)
	require.Equal(t, app.ProviderFake, o.ProviderKind)
	require.Empty(t, o.Provider.BaseURL, "each adapter has its own default URL")

	stripeEnv := map[string]string{"PSP_KIND": "stripe", "PSP_URL": "http://127.0.0.1:12111", "STRIPE_API_KEY": "sk_test_canary"}
	o, help := parse(stripeEnv)
	require.Equal(t, app.ProviderStripe, o.ProviderKind)
	require.Equal(t, "http://127.0.0.1:12111", o.Provider.BaseURL)
	require.Equal(t, "sk_test_canary", o.StripeAPIKey)
	require.NotContains(t, help, "sk_test_canary", "-h never prints the key")

	o, _ = parse(stripeEnv, "--psp", "fake", "--stripe-api-key", "sk_test_flag")
	require.Equal(t, app.ProviderFake, o.ProviderKind, "a flag overrides the environment")
	require.Equal(t, "sk_test_flag", o.StripeAPIKey)
}

// `chargeflow all` runs the bundled fake, which speaks chargeflow's
// protocol: it refuses the Stripe adapter rather than talk Stripe to it.
func TestAllRefusesStripe(t *testing.T) {
	t.Parallel()

	err := run(context.Background(), []string{"all", "--psp", "stripe"}, func(string) string { return "" }, io.Discard, io.Discard)
	require.ErrorContains(t, err, "--psp stripe")
}
