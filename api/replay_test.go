package api_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"chargeflow/api"
	"chargeflow/internal/lockedbuf"
	"chargeflow/psp"
	"chargeflow/submit"
)

// otherServer is a second API process on b's database, configured
// differently: one side of a rolling deploy. The bundle it returns shares
// b's database, tenants and counts, and talks to the new server.
func (b *testBundle) otherServer(t *testing.T, configure func(*api.Config)) *testBundle {
	t.Helper()
	other := *b
	other.logs = &lockedbuf.Buffer{}
	cfg := api.Config{
		DB:             b.pool,
		Jobs:           newQueue(t, b.pool, submit.Config{}),
		ProviderClient: psp.NewClient(psp.Config{BaseURL: b.psp.URL}),
		Logger:         slog.New(slog.NewJSONHandler(other.logs, nil)),
	}
	configure(&cfg)
	server, err := api.New(cfg)
	require.NoError(t, err)
	httpServer := httptest.NewServer(server.Handler())
	t.Cleanup(httpServer.Close)
	other.url = httpServer.URL
	return &other
}

// A retry of an accepted request gets its stored answer whatever changed
// since: here a process with a lower --max-amount, as during a rolling
// deploy, replays a charge it would refuse today. The record is read
// before the body is validated as a charge; only the JSON syntax and the
// card check come first, because the fingerprint needs the one and a card
// number must never be looked up or stored.
func TestReplayBeforeValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "rolling-deploy-key-0001"
	body := `{"amount": 5000, "currency": "USD", "payment_method": "pm_card_visa", "description": "Order R-1"}`

	first := b.post(t, b.tenantA, key, body)
	require.Equal(t, http.StatusCreated, first.status, "body: %s", first.body)
	accepted := stored{Charges: 1, IdempotencyKeys: 1, Events: 1, Jobs: 1}
	require.Equal(t, accepted, b.stored(t))

	stricter := b.otherServer(t, func(c *api.Config) { c.MaxAmount = 1000 })

	again := stricter.post(t, b.tenantA, key, body)
	require.Equal(t, http.StatusCreated, again.status, "body: %s", again.body)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.body, again.body, "the stored answer, byte for byte")
	require.Equal(t, first.header.Get("Location"), again.header.Get("Location"))

	// A new key is validated against today's rules.
	fresh := stricter.post(t, b.tenantA, "rolling-deploy-key-0002", body)
	p := requireProblem(t, fresh, http.StatusBadRequest, api.CodeInvalidField)
	require.Equal(t, "amount", p["field"])

	// The same key with a different request is the key's misuse, whatever
	// else is wrong with it.
	changed := stricter.post(t, b.tenantA, key, `{"amount": 6000, "currency": "USD", "payment_method": "pm_card_visa"}`)
	requireProblem(t, changed, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)

	// Syntax and card numbers are judged before the key is looked up.
	requireProblem(t, stricter.post(t, b.tenantA, key, `{"amount": 5000,`), http.StatusBadRequest, api.CodeInvalidJSON)
	withCard := `{"amount": 5000, "currency": "USD", "payment_method": "pm_card_visa", "description": "4111111111111111"}`
	requireProblem(t, stricter.post(t, b.tenantA, key, withCard), http.StatusBadRequest, api.CodeCardNumberDetected)

	require.Equal(t, accepted, b.stored(t), "nothing but the first request stored anything")
}
