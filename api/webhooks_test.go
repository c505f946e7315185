package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"chargeflow/api"
	"chargeflow/intent"
	"chargeflow/webhook"
)

func (b *testBundle) endpoints(t *testing.T, tt testTenant, method, path, body string) response {
	t.Helper()
	return b.request(t, method, "/v1/webhook_endpoints"+path, body, "Authorization", "Bearer "+tt.Key, "Content-Type", "application/json")
}

func TestWebhookEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.config = func(cfg *api.Config) { cfg.WebhooksAllowPrivate = true } })

	created := b.endpoints(t, b.tenantA, http.MethodPost, "", `{"url": "http://127.0.0.1:9/hooks", "events": ["charge.succeeded", "refund.failed"]}`)
	require.Equal(t, http.StatusCreated, created.status, "body: %s", created.body)
	endpoint := decode(t, created)
	require.Regexp(t, `^whsec_`, endpoint["secret"], "the secret is shown once, at creation")
	require.Equal(t, "enabled", endpoint["status"])
	id := endpoint["id"].(string)

	list := decode(t, b.endpoints(t, b.tenantA, http.MethodGet, "", ""))["data"].([]any)
	require.Len(t, list, 1)
	require.NotContains(t, list[0], "secret", "and never again")
	require.Empty(t, decode(t, b.endpoints(t, b.tenantB, http.MethodGet, "", ""))["data"], "another tenant's endpoints are not listed")

	// A settling move decides a delivery to each subscribed endpoint; the
	// event's log shows it.
	charge := b.succeededCharge(t, b.tenantA, 1000)
	events := decode(t, b.get(t, b.tenantA, "/v1/events"))["data"].([]any)
	require.Len(t, events, 1)
	eventID := events[0].(map[string]any)["id"].(string)
	log := decode(t, b.get(t, b.tenantA, "/v1/events/"+eventID+"/deliveries"))["data"].([]any)
	require.Len(t, log, 1)
	require.Equal(t, map[string]any{"endpoint": id, "state": "pending", "attempts": []any{}}, log[0])
	require.Equal(t, 1, b.jobsOfKind(t, "webhook.deliver"))
	requireProblem(t, b.get(t, b.tenantB, "/v1/events/"+eventID+"/deliveries"), http.StatusNotFound, api.CodeNotFound)
	_ = charge

	requireProblem(t, b.endpoints(t, b.tenantB, http.MethodDelete, "/"+id, ""), http.StatusNotFound, api.CodeNotFound)
	deleted := b.endpoints(t, b.tenantA, http.MethodDelete, "/"+id, "")
	require.Equal(t, http.StatusOK, deleted.status)
	require.Empty(t, decode(t, b.endpoints(t, b.tenantA, http.MethodGet, "", ""))["data"])
	requireProblem(t, b.endpoints(t, b.tenantA, http.MethodDelete, "/"+id, ""), http.StatusNotFound, api.CodeNotFound)
	declined := b.newCharge(t, b.tenantA, "hooks-declined-key-01")
	b.settle(t, b.tenantA, declined, intent.StatePending, intent.StateFailed)
	require.Equal(t, 1, b.jobsOfKind(t, "webhook.deliver"), "a deleted endpoint is decided nothing")
}

// Refusals store nothing; without --webhooks-allow-private a URL on a
// private or local address is one of them.
func TestWebhookEndpointRejections(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name, body string
		code       api.Code
		field      string
	}{
		{"loopback", `{"url": "http://127.0.0.1:9/hooks", "events": ["*"]}`, api.CodeInvalidField, "url"},
		{"cloud metadata", `{"url": "http://169.254.169.254/latest/meta-data/", "events": ["*"]}`, api.CodeInvalidField, "url"},
		{"private", `{"url": "https://10.0.0.8/hooks", "events": ["*"]}`, api.CodeInvalidField, "url"},
		{"not http", `{"url": "file:///etc/passwd", "events": ["*"]}`, api.CodeInvalidField, "url"},
		{"credentials", `{"url": "https://a:b@93.184.215.14/hooks", "events": ["*"]}`, api.CodeInvalidField, "url"},
		{"no events", `{"url": "https://93.184.215.14/hooks", "events": []}`, api.CodeInvalidField, "events"},
		{"unknown event", `{"url": "https://93.184.215.14/hooks", "events": ["charge.pending"]}`, api.CodeInvalidField, "events"},
		{"missing url", `{"events": ["*"]}`, api.CodeMissingField, "url"},
		{"unknown field", `{"url": "https://93.184.215.14/hooks", "events": ["*"], "secret": "mine"}`, api.CodeUnknownField, "secret"},
		{"card number", `{"url": "https://93.184.215.14/4242424242424242", "events": ["*"]}`, api.CodeCardNumberDetected, "url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := requireProblem(t, b.endpoints(t, b.tenantA, http.MethodPost, "", tc.body), http.StatusBadRequest, tc.code)
			require.Equal(t, tc.field, p["field"])
			var stored int
			require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_endpoints`).Scan(&stored))
			require.Zero(t, stored, "nothing stored")
			require.NotContains(t, p["detail"], "4242424242424242")
		})
	}
}

// jobsOfKind counts River jobs of a kind.
func (b *testBundle) jobsOfKind(t *testing.T, kind string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE kind = $1`, kind).Scan(&n))
	return n
}

// An endpoint disabled after a delivery failed every attempt is an event,
// written in the transaction that disables it (a rolled-back disabling
// writes none): listed by GET /v1/events and ?type=, its data the endpoint
// exactly as GET /v1/webhook_endpoints shows it (no secret), and delivered
// to the tenant's other endpoints subscribed to it — never to the disabled
// one, nor to one not subscribed.
func TestEndpointDisabledEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.config = func(cfg *api.Config) { cfg.WebhooksAllowPrivate = true } })
	create := func(events string) map[string]any {
		created := b.endpoints(t, b.tenantA, http.MethodPost, "", `{"url": "http://127.0.0.1:9/hooks", "events": `+events+`}`)
		require.Equal(t, http.StatusCreated, created.status, "body: %s", created.body)
		return decode(t, created)
	}
	failing, told, notTold := create(`["*"]`), create(`["webhook_endpoint.disabled"]`), create(`["charge.succeeded"]`)
	b.succeededCharge(t, b.tenantA, 1000)
	chargeEvent := decode(t, b.get(t, b.tenantA, "/v1/events"))["data"].([]any)[0].(map[string]any)["id"].(string)
	final := webhook.Outcome{Attempt: webhook.MaxAttempts, Status: 500, Final: true}
	args := webhook.DeliverArgs{TenantID: b.tenantA.ID, EventID: chargeEvent, EndpointID: failing["id"].(string)}

	// Rolled back, the disabling leaves no event.
	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	require.NoError(t, webhook.Record(t.Context(), tx, args, final))
	require.NoError(t, tx.Rollback(t.Context()))
	require.Empty(t, decode(t, b.get(t, b.tenantA, "/v1/events?type=webhook_endpoint.disabled"))["data"])

	require.NoError(t, webhook.Record(t.Context(), b.pool, args, final))
	listed := b.get(t, b.tenantA, "/v1/events?type=webhook_endpoint.disabled")
	require.NotContains(t, string(listed.body), failing["secret"].(string), "an event never carries a secret")
	events := decode(t, listed)["data"].([]any)
	require.Len(t, events, 1)
	event := events[0].(map[string]any)
	require.Equal(t, "webhook_endpoint.disabled", event["type"])
	var shown map[string]any
	for _, e := range decode(t, b.endpoints(t, b.tenantA, http.MethodGet, "", ""))["data"].([]any) {
		if e.(map[string]any)["id"] == failing["id"] {
			shown = e.(map[string]any)
		}
	}
	require.Equal(t, "disabled", shown["status"])
	require.Equal(t, shown, event["data"], "the event's object is the endpoint as GET /v1/webhook_endpoints shows it")
	require.Equal(t, event["id"], decode(t, b.get(t, b.tenantA, "/v1/events"))["data"].([]any)[0].(map[string]any)["id"], "newest first")
	require.Equal(t, event, decode(t, b.get(t, b.tenantA, "/v1/events/"+event["id"].(string))))
	requireProblem(t, b.get(t, b.tenantB, "/v1/events/"+event["id"].(string)), http.StatusNotFound, api.CodeNotFound)
	require.Empty(t, decode(t, b.get(t, b.tenantB, "/v1/events?type=webhook_endpoint.disabled"))["data"])

	log := decode(t, b.get(t, b.tenantA, "/v1/events/"+event["id"].(string)+"/deliveries"))["data"].([]any)
	require.Equal(t, []any{map[string]any{"endpoint": told["id"], "state": "pending", "attempts": []any{}}}, log,
		"delivered to the subscribed endpoint only: not the disabled one, not one subscribed to charges")
	_ = notTold

	// A second final failure of the endpoint, now disabled, writes no
	// second event.
	require.NoError(t, webhook.Record(t.Context(), b.pool, args, final))
	require.Len(t, decode(t, b.get(t, b.tenantA, "/v1/events?type=webhook_endpoint.disabled"))["data"], 1)
}
