package fakepsp_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// testSecretKey is the key the Stripe tests authenticate with: any test
// secret key will do.
const testSecretKey = "sk_test_fakepsp"

// stripeBundle is a provider speaking the Stripe protocol and stripe-go,
// the library chargeflow's Stripe adapter uses, pointed at it.
type stripeBundle struct {
	*testBundle
	client *stripe.Client
}

// setupStripe starts a provider for cfg speaking the Stripe protocol.
func setupStripe(t *testing.T, cfg fakepsp.Config) *stripeBundle {
	t.Helper()

	cfg.Protocol = fakepsp.ProtocolStripe
	b := setup(t, cfg)
	return &stripeBundle{testBundle: b, client: b.stripeClient(testSecretKey, b.http)}
}

// stripeClient returns a stripe-go client for the bundle's server that
// authenticates with key and calls through httpClient. Its own network
// retries are off: each call is one request, so a test sees exactly what
// the provider answered.
func (b *testBundle) stripeClient(key string, httpClient *http.Client) *stripe.Client {
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(b.url),
		HTTPClient:        httpClient,
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		EnableTelemetry:   stripe.Bool(false),
	})
	return stripe.NewClient(key, stripe.WithBackends(&stripe.Backends{API: backend, Connect: backend, Uploads: backend, MeterEvents: backend}))
}

// clientWithTimeout returns a stripe-go client that gives up after timeout.
func (b *stripeBundle) clientWithTimeout(timeout time.Duration) *stripe.Client {
	return b.stripeClient(testSecretKey, &http.Client{Timeout: timeout})
}

// intentParams are the parameters of a confirmed PaymentIntent for our
// charge reference, paid with paymentMethod.
func intentParams(reference, paymentMethod string) *stripe.PaymentIntentCreateParams {
	params := &stripe.PaymentIntentCreateParams{
		Amount:        stripe.Int64(1000),
		Currency:      stripe.String("usd"),
		PaymentMethod: stripe.String(paymentMethod),
		Confirm:       stripe.Bool(true),
	}
	params.AddMetadata(fakepsp.MetadataCharge, reference)
	return params
}

// create creates and confirms a PaymentIntent with an idempotency key.
// params are consumed: stripe-go writes into them.
func (b *stripeBundle) create(t *testing.T, key string, params *stripe.PaymentIntentCreateParams) (*stripe.PaymentIntent, error) {
	t.Helper()

	return createWith(t, b.client, key, params)
}

// createWith creates and confirms a PaymentIntent through client.
func createWith(t *testing.T, client *stripe.Client, key string, params *stripe.PaymentIntentCreateParams) (*stripe.PaymentIntent, error) {
	t.Helper()

	params.SetIdempotencyKey(key)
	return client.V1PaymentIntents.Create(t.Context(), params)
}

// visaIntent creates a PaymentIntent that succeeds, for the reference
// "ch_" + key, and requires that it did.
func (b *stripeBundle) visaIntent(t *testing.T, key string) *stripe.PaymentIntent {
	t.Helper()

	intent, err := b.create(t, key, intentParams("ch_"+key, fakepsp.PaymentMethodVisa))
	require.NoError(t, err)
	require.Equal(t, stripe.PaymentIntentStatusSucceeded, intent.Status)
	return intent
}

// search returns the ids of the PaymentIntents a search by our charge
// reference finds, following every page.
func (b *stripeBundle) search(t *testing.T, reference string, limit int64) ([]string, error) {
	t.Helper()

	params := &stripe.PaymentIntentSearchParams{}
	params.Query = fmt.Sprintf("metadata['%s']:'%s'", fakepsp.MetadataCharge, reference)
	params.Limit = stripe.Int64(limit)
	var ids []string
	for intent, err := range b.client.V1PaymentIntents.Search(t.Context(), params) {
		if err != nil {
			return ids, err
		}
		ids = append(ids, intent.ID)
	}
	return ids, nil
}

// searchIDs is search that requires no error.
func (b *stripeBundle) searchIDs(t *testing.T, reference string) []string {
	t.Helper()

	ids, err := b.search(t, reference, 10)
	require.NoError(t, err)
	return ids
}

// list returns the ids of the PaymentIntents a list with params finds,
// following every page.
func (b *stripeBundle) list(t *testing.T, params *stripe.PaymentIntentListParams) ([]string, error) {
	t.Helper()

	var ids []string
	for intent, err := range b.client.V1PaymentIntents.List(t.Context(), params) {
		if err != nil {
			return ids, err
		}
		ids = append(ids, intent.ID)
	}
	return ids, nil
}

// listIDs lists every PaymentIntent and requires no error.
func (b *stripeBundle) listIDs(t *testing.T) []string {
	t.Helper()

	ids, err := b.list(t, &stripe.PaymentIntentListParams{})
	require.NoError(t, err)
	return ids
}

// retrieve retrieves a PaymentIntent by id.
func (b *stripeBundle) retrieve(t *testing.T, id string) (*stripe.PaymentIntent, error) {
	t.Helper()

	return b.client.V1PaymentIntents.Retrieve(t.Context(), id, nil)
}

// requireStripeError checks that err is the *stripe.Error stripe-go makes of
// an answer with status, type and code.
func requireStripeError(t *testing.T, err error, status int, errorType stripe.ErrorType, code stripe.ErrorCode) *stripe.Error {
	t.Helper()

	var stripeErr *stripe.Error
	require.ErrorAs(t, err, &stripeErr, "error: %v", err)
	require.Equal(t, status, stripeErr.HTTPStatusCode, "error: %v", err)
	require.Equal(t, errorType, stripeErr.Type, "error: %v", err)
	require.Equal(t, code, stripeErr.Code, "error: %v", err)
	require.NotEmpty(t, stripeErr.Msg)
	require.NotEmpty(t, stripeErr.RequestID, "every answer carries a Request-Id")
	return stripeErr
}

// replayed reports whether an answer carried Idempotent-Replayed: true.
func replayed(response *stripe.APIResponse) bool {
	return response.Header.Get("Idempotent-Replayed") == "true"
}

// postIntent sends a raw, form-encoded PaymentIntent create.
func (b *stripeBundle) postIntent(t *testing.T, key string, form url.Values) response {
	t.Helper()

	return b.do(t, http.MethodPost, "/v1/payment_intents", http.Header{
		"Authorization":   {"Bearer " + testSecretKey},
		"Content-Type":    {"application/x-www-form-urlencoded"},
		"Idempotency-Key": {key},
	}, form.Encode())
}

// validForm is a raw create that succeeds.
func validForm() url.Values {
	return url.Values{
		"amount":                             {"1000"},
		"currency":                           {"usd"},
		"payment_method":                     {fakepsp.PaymentMethodVisa},
		"confirm":                            {"true"},
		"metadata[chargeflow_charge]":        {"ch_raw"},
		"metadata[chargeflow_tenant]":        {"tenant-raw"},
		"automatic_payment_methods[enabled]": {"true"},
		"automatic_payment_methods[allow_redirects]": {"never"},
	}
}
