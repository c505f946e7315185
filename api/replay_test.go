package api_test

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/lockedbuf"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/submit"
)

// otherServer is a second API process on b's database, configured
// differently: one side of a rolling deploy. The bundle it returns shares
// b's database, tenants and counts, and talks to the new server.
func (b *testBundle) otherServer(t *testing.T, configure func(*api.Config), server ...func(*app.ServerConfig)) *testBundle {
	t.Helper()
	bundle := *b.Bundle
	other := testBundle{Bundle: &bundle, psp: b.psp}
	other.Logs = &lockedbuf.Buffer{}
	cfg := app.ServerConfig{
		DB:       b.Pool,
		Jobs:     apitest.NewQueue(t, b.Pool, submit.Config{}),
		Provider: psp.NewClient(psp.Config{BaseURL: b.psp.URL}),
		Logger:   slog.New(slog.NewJSONHandler(other.Logs, nil)),
	}
	apitest.EditAPI(&cfg, configure)
	for _, edit := range server {
		edit(&cfg)
	}
	other.URL = b.Serve(t, cfg)
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

	first := b.Post(t, b.TenantA, key, body)
	require.Equal(t, http.StatusCreated, first.Status, "body: %s", first.Body)
	accepted := stored{Charges: 1, IdempotencyKeys: 1, Events: 1, Jobs: 1}
	require.Equal(t, accepted, b.Stored(t))

	stricter := b.otherServer(t, func(c *api.Config) { c.MaxAmount = 1000 })

	again := stricter.Post(t, b.TenantA, key, body)
	require.Equal(t, http.StatusCreated, again.Status, "body: %s", again.Body)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first.Body, again.Body, "the stored answer, byte for byte")
	require.Equal(t, first.Header.Get("Location"), again.Header.Get("Location"))

	// A new key is validated against today's rules.
	fresh := stricter.Post(t, b.TenantA, "rolling-deploy-key-0002", body)
	p := apitest.RequireProblem(t, fresh, http.StatusBadRequest, api.CodeInvalidField)
	require.Equal(t, "amount", p["field"])

	// The same key with a different request is the key's misuse, whatever
	// else is wrong with it.
	changed := stricter.Post(t, b.TenantA, key, `{"amount": 6000, "currency": "USD", "payment_method": "pm_card_visa"}`)
	apitest.RequireProblem(t, changed, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)

	// Syntax and card numbers are judged before the key is looked up.
	apitest.RequireProblem(t, stricter.Post(t, b.TenantA, key, `{"amount": 5000,`), http.StatusBadRequest, api.CodeInvalidJSON)
	withCard := `{"amount": 5000, "currency": "USD", "payment_method": "pm_card_visa", "description": "4111111111111111"}`
	apitest.RequireProblem(t, stricter.Post(t, b.TenantA, key, withCard), http.StatusBadRequest, api.CodeCardNumberDetected)

	require.Equal(t, accepted, b.Stored(t), "nothing but the first request stored anything")
}

// A retry is answered from the records this process keeps in memory
// (accept.Config.ReplayCache) without reading the database — shown here by
// deleting the row under it, which nothing but retention does, after its
// expiry. Past the record's expiry the copy is not used, and a process
// that keeps none reads the database every time.
func TestReplayFromMemory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	cachedMetrics, uncachedMetrics := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	cached := b.otherServer(t, func(c *api.Config) {
		c.Now = now
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(cachedMetrics))
	})
	uncached := b.otherServer(t, func(c *api.Config) {
		c.Now = now
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(uncachedMetrics))
	}, func(c *app.ServerConfig) { c.Accept.ReplayCache = -1 })
	body := `{"amount": 5000, "currency": "USD", "payment_method": "pm_card_visa"}`
	forget := func(key string) {
		t.Helper()
		hash := sha256.Sum256([]byte(key))
		tag, err := b.Pool.Exec(context.Background(), `DELETE FROM idempotency_keys WHERE key_hash = $1`, hash[:])
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())
	}

	first := cached.Post(t, b.TenantA, "memory-key-00000001", body)
	require.Equal(t, http.StatusCreated, first.Status, "body: %s", first.Body)
	forget("memory-key-00000001")
	again := cached.Post(t, b.TenantA, "memory-key-00000001", body)
	require.Equal(t, http.StatusCreated, again.Status)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"), "answered from memory")
	require.Equal(t, first.Body, again.Body)
	misuse := cached.Post(t, b.TenantA, "memory-key-00000001", `{"amount": 6000, "currency": "USD", "payment_method": "pm_card_visa"}`)
	apitest.RequireProblem(t, misuse, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	require.Equal(t, stored{Charges: 1, IdempotencyKeys: 0, Events: 1, Jobs: 1}, b.Stored(t))
	require.Equal(t, map[string]int64{"memory": 1, "database": 0}, replaysBySource(t, cachedMetrics),
		"the replay is counted as answered from memory; the 422 is no replay")

	// Past the record's expiry, the key is the database's to judge: here a
	// new request.
	clock.Add(int64(25 * time.Hour))
	expired := cached.Post(t, b.TenantA, "memory-key-00000001", body)
	require.Equal(t, http.StatusCreated, expired.Status, "body: %s", expired.Body)
	require.Empty(t, expired.Header.Get("Idempotent-Replayed"))
	require.NotEqual(t, first.Body, expired.Body)

	// Without the cache, a retry reads the record, and the same deletion
	// makes the retry a new request.
	second := uncached.Post(t, b.TenantA, "memory-key-00000002", body)
	require.Equal(t, http.StatusCreated, second.Status)
	retry := uncached.Post(t, b.TenantA, "memory-key-00000002", body)
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, map[string]int64{"memory": 0, "database": 1}, replaysBySource(t, uncachedMetrics))
	forget("memory-key-00000002")
	fresh := uncached.Post(t, b.TenantA, "memory-key-00000002", body)
	require.Equal(t, http.StatusCreated, fresh.Status)
	require.Empty(t, fresh.Header.Get("Idempotent-Replayed"))
	require.Equal(t, 4, b.Stored(t).Charges)
}

// replaysBySource is the replays counter's value by its source attribute.
func replaysBySource(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != api.MetricReplays {
				continue
			}
			sum, ok := m.Data.(metricdata.Sum[int64])
			require.True(t, ok, "%s is an int64 sum", m.Name)
			got := map[string]int64{}
			for _, p := range sum.DataPoints {
				source, _ := p.Attributes.Value("source")
				got[source.AsString()] += p.Value
			}
			return got
		}
	}
	require.Failf(t, "no metric", "%s was not recorded", api.MetricReplays)
	return nil
}
