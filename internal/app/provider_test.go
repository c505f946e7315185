package app_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/psp"
)

// ProviderClient is the one place the provider is built: the kind picks
// the adapter, and a Stripe adapter without its key or an unknown kind is
// refused before any role starts.
func TestProviderClientPicksTheAdapter(t *testing.T) {
	t.Parallel()

	o := app.Options{Provider: psp.Config{Timeout: 3 * time.Second}}
	fake, err := o.ProviderClient()
	require.NoError(t, err)
	require.Equal(t, "fakepsp", fake.Capabilities().Name, "the default is chargeflow's own protocol")

	o.ProviderKind, o.StripeAPIKey = app.ProviderStripe, "sk_test_1"
	stripe, err := o.ProviderClient()
	require.NoError(t, err)
	require.Equal(t, "stripe", stripe.Capabilities().Name)
	require.Equal(t, psp.LookupByReference, stripe.Capabilities().Lookup)
	require.Equal(t, 3*time.Second, stripe.Timeout(), "the one call timeout")

	o.StripeAPIKey = ""
	_, err = o.ProviderClient()
	require.ErrorContains(t, err, "STRIPE_API_KEY")

	o.ProviderKind = "paypal"
	_, err = o.ProviderClient()
	require.ErrorContains(t, err, `provider kind "paypal"`)
}
