package api_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/webhook"
)

func (b *testBundle) endpoints(t *testing.T, tt testTenant, method, path, body string) response {
	t.Helper()
	return b.Request(t, method, "/v1/webhook_endpoints"+path, body, "Authorization", "Bearer "+tt.Key, "Content-Type", "application/json")
}

// createEndpoint posts an endpoint under an idempotency key ("" sends
// none).
func (b *testBundle) createEndpoint(t *testing.T, tt testTenant, key, body string) response {
	t.Helper()
	h := []string{"Authorization", "Bearer " + tt.Key, "Content-Type", "application/json"}
	if key != "" {
		h = append(h, "Idempotency-Key", key)
	}
	return b.Request(t, http.MethodPost, "/v1/webhook_endpoints", body, h...)
}

// endpointRows counts what endpoint creation stores: endpoints, and the
// idempotency records that name one.
func (b *testBundle) endpointRows(t *testing.T) (endpoints, records int) {
	t.Helper()
	require.NoError(t, b.Pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM webhook_endpoints),
		(SELECT count(*) FROM idempotency_keys WHERE endpoint_id IS NOT NULL)`).Scan(&endpoints, &records))
	return endpoints, records
}

func TestWebhookEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.API = func(cfg *api.Config) { cfg.WebhooksAllowPrivate = true } })

	created := b.createEndpoint(t, b.TenantA, "hooks-create-key-0001", `{"url": "http://127.0.0.1:9/hooks", "events": ["charge.succeeded", "refund.failed"]}`)
	require.Equal(t, http.StatusCreated, created.Status, "body: %s", created.Body)
	endpoint := apitest.Decode(t, created)
	require.Regexp(t, `^whsec_`, endpoint["secret"], "the secret is shown once, at creation")
	require.Equal(t, "enabled", endpoint["status"])
	id := endpoint["id"].(string)

	page := apitest.Decode(t, b.endpoints(t, b.TenantA, http.MethodGet, "", ""))
	list := page["data"].([]any)
	require.Len(t, list, 1)
	require.Equal(t, false, page["has_more"])
	require.NotContains(t, list[0], "secret", "and never again")
	require.Empty(t, apitest.Decode(t, b.endpoints(t, b.TenantB, http.MethodGet, "", ""))["data"], "another tenant's endpoints are not listed")

	// A settling move decides a delivery to each subscribed endpoint; the
	// event's log shows it.
	b.succeededCharge(t, b.TenantA, 1000)
	events := apitest.Decode(t, b.Get(t, b.TenantA, "/v1/events"))["data"].([]any)
	require.Len(t, events, 1)
	eventID := events[0].(map[string]any)["id"].(string)
	log := apitest.Decode(t, b.Get(t, b.TenantA, "/v1/events/"+eventID+"/deliveries"))["data"].([]any)
	require.Len(t, log, 1)
	require.Equal(t, map[string]any{"endpoint": id, "state": "pending", "attempts": []any{}}, log[0])
	require.Equal(t, 1, b.jobsOfKind(t, "webhook.deliver"))
	apitest.RequireProblem(t, b.Get(t, b.TenantB, "/v1/events/"+eventID+"/deliveries"), http.StatusNotFound, api.CodeNotFound)

	apitest.RequireProblem(t, b.endpoints(t, b.TenantB, http.MethodDelete, "/"+id, ""), http.StatusNotFound, api.CodeNotFound)
	deleted := b.endpoints(t, b.TenantA, http.MethodDelete, "/"+id, "")
	require.Equal(t, http.StatusOK, deleted.Status)
	require.Empty(t, apitest.Decode(t, b.endpoints(t, b.TenantA, http.MethodGet, "", ""))["data"])
	apitest.RequireProblem(t, b.endpoints(t, b.TenantA, http.MethodDelete, "/"+id, ""), http.StatusNotFound, api.CodeNotFound)
	declined := b.NewCharge(t, b.TenantA, "hooks-declined-key-01")
	b.settle(t, b.TenantA, declined, intent.StatePending, intent.StateFailed)
	require.Equal(t, 1, b.jobsOfKind(t, "webhook.deliver"), "a deleted endpoint is decided nothing")
}

// lookups is the resolver of the rejection tests: names the test knows,
// and a resolver's own error, naming its address, for any other.
func lookups(_ context.Context, host string) ([]netip.Addr, error) {
	switch host {
	case "merchant.example":
		return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
	case "internal.example":
		return []netip.Addr{netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("10.0.0.5")}, nil
	case "rebound.example":
		return []netip.Addr{netip.MustParseAddr("64:ff9b::a9fe:a9fe")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, Server: "10.255.255.53:53", IsNotFound: true}
}

// Refusals store nothing — no endpoint, no idempotency record — and say
// why in fixed words: without --webhooks-allow-private, a URL whose address
// (or any address its host resolves to) is not a public internet address,
// or whose port is not 80, 443 or 8443, is one of them. A name that does
// not exist is refused in the words of one that resolves to a private
// address, and neither quotes the resolver.
func TestWebhookEndpointRejections(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.API = func(cfg *api.Config) { cfg.WebhookLookup = lookups } })
	const hostRefused = "the url's host does not resolve to public internet addresses only"
	const addressRefused = "the url's address is not a public internet address"
	for _, tc := range []struct {
		name, key, body string
		status          int
		code            api.Code
		field, detail   string
	}{
		{"loopback", "k", `{"url": "http://127.0.0.1/hooks", "events": ["*"]}`, 400, api.CodeInvalidField, "url", addressRefused},
		{"cloud metadata", "k", `{"url": "http://169.254.169.254/latest/meta-data/", "events": ["*"]}`, 400, api.CodeInvalidField, "url", addressRefused},
		{"private", "k", `{"url": "https://10.0.0.8/hooks", "events": ["*"]}`, 400, api.CodeInvalidField, "url", addressRefused},
		{"mapped private", "k", `{"url": "https://[::ffff:10.0.0.8]/hooks", "events": ["*"]}`, 400, api.CodeInvalidField, "url", addressRefused},
		{"NAT64 metadata", "k", `{"url": "https://[64:ff9b::a9fe:a9fe]/hooks", "events": ["*"]}`, 400, api.CodeInvalidField, "url", addressRefused},
		{"6to4 loopback", "k", `{"url": "https://[2002:7f00:1::1]/hooks", "events": ["*"]}`, 400, api.CodeInvalidField, "url", addressRefused},
		{"Teredo private", "k", `{"url": "https://[2001:0:5db8:8888:0:1f90:f5ff:fffe]/hooks", "events": ["*"]}`, 400, api.CodeInvalidField, "url", addressRefused},
		{"benchmarking", "k", `{"url": "https://198.18.0.1/hooks", "events": ["*"]}`, 400, api.CodeInvalidField, "url", addressRefused},
		{"resolves private", "k", `{"url": "https://internal.example/hooks", "events": ["*"]}`, 400, api.CodeInvalidField, "url", hostRefused},
		{"resolves NAT64 metadata", "k", `{"url": "https://rebound.example/hooks", "events": ["*"]}`, 400, api.CodeInvalidField, "url", hostRefused},
		{"no such name", "k", `{"url": "https://nowhere.example/hooks", "events": ["*"]}`, 400, api.CodeInvalidField, "url", hostRefused},
		{"numeric name", "k", `{"url": "http://2130706433/hooks", "events": ["*"]}`, 400, api.CodeInvalidField, "url", hostRefused},
		{"ssh port", "k", `{"url": "https://merchant.example:22/hooks", "events": ["*"]}`, 400, api.CodeInvalidField, "url",
			"the url's port is not one webhooks are delivered to: use 80, 443 and 8443"},
		{"not http", "k", `{"url": "file:///etc/passwd", "events": ["*"]}`, 400, api.CodeInvalidField, "url", "the url must be an absolute http or https URL"},
		{"credentials", "k", `{"url": "https://a:b@93.184.215.14/hooks", "events": ["*"]}`, 400, api.CodeInvalidField, "url", "the url must not carry credentials"},
		{"no events", "k", `{"url": "https://93.184.215.14/hooks", "events": []}`, 400, api.CodeInvalidField, "events", ""},
		{"unknown event", "k", `{"url": "https://93.184.215.14/hooks", "events": ["charge.pending"]}`, 400, api.CodeInvalidField, "events", ""},
		{"missing url", "k", `{"events": ["*"]}`, 400, api.CodeMissingField, "url", ""},
		{"unknown field", "k", `{"url": "https://93.184.215.14/hooks", "events": ["*"], "secret": "mine"}`, 400, api.CodeUnknownField, "secret", ""},
		{"card number", "k", `{"url": "https://93.184.215.14/4242424242424242", "events": ["*"]}`, 400, api.CodeCardNumberDetected, "url", ""},
		{"no key", "", `{"url": "https://93.184.215.14/hooks", "events": ["*"]}`, 400, api.CodeIdempotencyKeyMissing, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := ""
			if tc.key != "" {
				key = "reject-" + strings.ReplaceAll(tc.name, " ", "-") + "-0001"
			}
			p := apitest.RequireProblem(t, b.createEndpoint(t, b.TenantA, key, tc.body), tc.status, tc.code)
			if tc.field != "" {
				require.Equal(t, tc.field, p["field"])
			}
			if tc.detail != "" {
				require.Equal(t, tc.detail, p["detail"], "fixed wording")
			}
			for _, leak := range []string{"10.255", "10.0.0", "no such host", "lookup", "4242424242424242"} {
				require.NotContains(t, p["detail"], leak)
			}
			endpoints, records := b.endpointRows(t)
			require.Zero(t, endpoints, "no endpoint stored")
			require.Zero(t, records, "no idempotency record stored")
			require.Equal(t, stored{}, b.Stored(t), "nothing stored")
		})
	}
	require.NotContains(t, b.Logs.String(), "nowhere.example", "the merchant's name is not logged")
	require.Contains(t, b.Logs.String(), "lookup: no such host (server 10.255.255.53:53)", "the resolver's words are logged")
}

// Creating an endpoint follows the charges' idempotency contract: a retry
// with the key gets the first answer byte for byte, secret included, and
// creates nothing; another body with the key is 422; a key a charge used
// is 422 too (one key space); a request while the key's first is in
// flight is 409 + Retry-After, and stores nothing.
func TestWebhookEndpointIdempotency(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) {
		o.LockTimeout = "100ms"
		o.API = func(cfg *api.Config) { cfg.WebhookLookup = lookups }
	})
	const body = `{"url": "https://merchant.example/hooks", "events": ["*"]}`
	first := b.createEndpoint(t, b.TenantA, "endpoint-key-000000001", body)
	require.Equal(t, http.StatusCreated, first.Status, "body: %s", first.Body)
	retry := b.createEndpoint(t, b.TenantA, "endpoint-key-000000001", body)
	require.Equal(t, http.StatusCreated, retry.Status)
	require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first.Body, retry.Body, "the same endpoint and the same secret")
	// Answered from the database too, not only from this process's memory.
	other := b.Serve(t, b.Config)
	fromDB := apitest.Request(t, other, http.MethodPost, "/v1/webhook_endpoints", body, "Authorization", "Bearer "+b.TenantA.Key,
		"Content-Type", "application/json", "Idempotency-Key", "endpoint-key-000000001")
	require.Equal(t, http.StatusCreated, fromDB.Status)
	require.Equal(t, first.Body, fromDB.Body)
	endpoints, records := b.endpointRows(t)
	require.Equal(t, 1, endpoints)
	require.Equal(t, 1, records)

	apitest.RequireProblem(t, b.createEndpoint(t, b.TenantA, "endpoint-key-000000001", `{"url": "https://merchant.example/other", "events": ["*"]}`),
		http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	charged := b.Post(t, b.TenantA, "charge-then-endpoint-01", apitest.ValidBody)
	require.Equal(t, http.StatusCreated, charged.Status)
	apitest.RequireProblem(t, b.createEndpoint(t, b.TenantA, "charge-then-endpoint-01", body), http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	apitest.RequireProblem(t, b.Post(t, b.TenantA, "endpoint-key-000000001", apitest.ValidBody), http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	endpoints, records = b.endpointRows(t)
	require.Equal(t, 1, endpoints, "nothing more stored")
	require.Equal(t, 1, records)
	// Another tenant's key space is its own.
	require.Equal(t, http.StatusCreated, b.createEndpoint(t, b.TenantB, "endpoint-key-000000001", body).Status)

	// In flight: a request holding the key in an open transaction.
	tx, err := b.Pool.Begin(t.Context())
	require.NoError(t, err)
	held := webhook.NewEndpoint(b.TenantA.ID, "https://merchant.example/held", []string{"*"}, time.Now())
	keyHash := sha256.Sum256([]byte("endpoint-key-in-flight"))
	_, created, err := webhook.CreateEndpoint(t.Context(), tx, webhook.Creation{Endpoint: held, KeyHash: keyHash[:], Fingerprint: keyHash[:],
		StatusCode: http.StatusCreated, ResponseBody: []byte(`{}`), ExpiresAt: held.CreatedAt.Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, created)
	waiting := b.createEndpoint(t, b.TenantA, "endpoint-key-in-flight", body)
	apitest.RequireProblem(t, waiting, http.StatusConflict, api.CodeRequestInProgress)
	require.Equal(t, "1", waiting.Header.Get("Retry-After"))
	require.NoError(t, tx.Rollback(t.Context()))
	endpoints, records = b.endpointRows(t)
	require.Equal(t, 2, endpoints, "the 409 stored nothing")
	require.Equal(t, 2, records)
	after := b.createEndpoint(t, b.TenantA, "endpoint-key-in-flight", body)
	require.Equal(t, http.StatusCreated, after.Status, "the key is free once its holder rolled back")
	require.NotContains(t, b.Logs.String(), "whsec_", "a secret is never logged")
}

// A tenant has at most webhook.MaxEndpoints endpoints: the next is 409
// endpoint_limit_reached and stores nothing, also when many are created at
// once; a retry of one created before is still answered; a deleted
// endpoint makes room. Listing pages through them as charges page.
func TestWebhookEndpointLimitAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.API = func(cfg *api.Config) { cfg.WebhookLookup = lookups } })
	body := func(i int) string {
		return fmt.Sprintf(`{"url": "https://merchant.example/hooks/%d", "events": ["*"]}`, i)
	}
	for i := range webhook.MaxEndpoints - 4 {
		require.Equal(t, http.StatusCreated, b.createEndpoint(t, b.TenantA, fmt.Sprintf("limit-key-%010d", i), body(i)).Status)
	}
	// Eight at once for the last four places.
	var wg sync.WaitGroup
	answers := make([]response, 8)
	for i := range answers {
		wg.Go(func() { answers[i] = b.createEndpoint(t, b.TenantA, fmt.Sprintf("limit-race-%010d", i), body(100+i)) })
	}
	wg.Wait()
	statuses := map[int]int{}
	for _, a := range answers {
		statuses[a.Status]++
		if a.Status == http.StatusConflict {
			apitest.RequireProblem(t, a, http.StatusConflict, api.CodeEndpointLimitReached)
		}
	}
	require.Equal(t, map[int]int{http.StatusCreated: 4, http.StatusConflict: 4}, statuses)
	endpoints, records := b.endpointRows(t)
	require.Equal(t, webhook.MaxEndpoints, endpoints)
	require.Equal(t, webhook.MaxEndpoints, records)

	p := apitest.RequireProblem(t, b.createEndpoint(t, b.TenantA, "limit-key-over-the-top", body(99)), http.StatusConflict, api.CodeEndpointLimitReached)
	require.Equal(t, "an account may have at most 16 webhook endpoints; delete one to create another", p["detail"])
	endpoints, records = b.endpointRows(t)
	require.Equal(t, webhook.MaxEndpoints, endpoints, "nothing stored")
	require.Equal(t, webhook.MaxEndpoints, records)
	require.Equal(t, http.StatusCreated, b.createEndpoint(t, b.TenantA, "limit-key-0000000000", body(0)).Status, "a retry is still answered")
	require.Equal(t, http.StatusCreated, b.createEndpoint(t, b.TenantB, "limit-key-over-the-top", body(99)).Status, "the limit is per tenant")

	// Pages, newest first, 10 by default.
	var ids []string
	path := "?limit=5"
	for {
		page := apitest.Decode(t, b.endpoints(t, b.TenantA, http.MethodGet, path, ""))
		for _, e := range page["data"].([]any) {
			ids = append(ids, e.(map[string]any)["id"].(string))
		}
		if page["has_more"] != true {
			break
		}
		path = "?limit=5&starting_after=" + ids[len(ids)-1]
	}
	require.Len(t, ids, webhook.MaxEndpoints)
	require.True(t, slices.IsSortedFunc(ids, func(a, b string) int { return strings.Compare(b, a) }), "newest first")
	require.Len(t, apitest.Decode(t, b.endpoints(t, b.TenantA, http.MethodGet, "", ""))["data"], 10)
	for _, bad := range []string{"?limit=0", "?limit=101", "?limit=x", "?starting_after=ch_x", "?starting_after=" + ids[0] + "&starting_after=" + ids[1], "?status=enabled"} {
		apitest.RequireProblem(t, b.endpoints(t, b.TenantA, http.MethodGet, bad, ""), http.StatusBadRequest, api.CodeInvalidParameter)
	}

	deleted := b.endpoints(t, b.TenantA, http.MethodDelete, "/"+ids[3], "")
	require.Equal(t, http.StatusOK, deleted.Status)
	require.Equal(t, http.StatusCreated, b.createEndpoint(t, b.TenantA, "limit-key-after-delete", body(200)).Status, "a deleted endpoint makes room")
}

// jobsOfKind counts River jobs of a kind.
func (b *testBundle) jobsOfKind(t *testing.T, kind string) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE kind = $1`, kind).Scan(&n))
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
	b := setup(t, func(o *setupOpts) { o.API = func(cfg *api.Config) { cfg.WebhooksAllowPrivate = true } })
	n := 0
	create := func(events string) map[string]any {
		n++
		created := b.createEndpoint(t, b.TenantA, fmt.Sprintf("disabled-event-key-%d", n), `{"url": "http://127.0.0.1:9/hooks", "events": `+events+`}`)
		require.Equal(t, http.StatusCreated, created.Status, "body: %s", created.Body)
		return apitest.Decode(t, created)
	}
	failing, told, notTold := create(`["*"]`), create(`["webhook_endpoint.disabled"]`), create(`["charge.succeeded"]`)
	b.succeededCharge(t, b.TenantA, 1000)
	chargeEvent := apitest.Decode(t, b.Get(t, b.TenantA, "/v1/events"))["data"].([]any)[0].(map[string]any)["id"].(string)
	final := webhook.Outcome{Attempt: webhook.MaxAttempts, Status: 500, Final: true}
	args := webhook.DeliverArgs{TenantID: b.TenantA.ID, EventID: chargeEvent, EndpointID: failing["id"].(string)}

	// Rolled back, the disabling leaves no event.
	tx, err := b.Pool.Begin(t.Context())
	require.NoError(t, err)
	require.NoError(t, webhook.Record(t.Context(), tx, args, final))
	require.NoError(t, tx.Rollback(t.Context()))
	require.Empty(t, apitest.Decode(t, b.Get(t, b.TenantA, "/v1/events?type=webhook_endpoint.disabled"))["data"])

	require.NoError(t, webhook.Record(t.Context(), b.Pool, args, final))
	listed := b.Get(t, b.TenantA, "/v1/events?type=webhook_endpoint.disabled")
	require.NotContains(t, string(listed.Body), failing["secret"].(string), "an event never carries a secret")
	events := apitest.Decode(t, listed)["data"].([]any)
	require.Len(t, events, 1)
	event := events[0].(map[string]any)
	require.Equal(t, "webhook_endpoint.disabled", event["type"])
	var shown map[string]any
	for _, e := range apitest.Decode(t, b.endpoints(t, b.TenantA, http.MethodGet, "", ""))["data"].([]any) {
		if e.(map[string]any)["id"] == failing["id"] {
			shown = e.(map[string]any)
		}
	}
	require.Equal(t, "disabled", shown["status"])
	require.Equal(t, shown, event["data"], "the event's object is the endpoint as GET /v1/webhook_endpoints shows it")
	require.Equal(t, event["id"], apitest.Decode(t, b.Get(t, b.TenantA, "/v1/events"))["data"].([]any)[0].(map[string]any)["id"], "newest first")
	require.Equal(t, event, apitest.Decode(t, b.Get(t, b.TenantA, "/v1/events/"+event["id"].(string))))
	apitest.RequireProblem(t, b.Get(t, b.TenantB, "/v1/events/"+event["id"].(string)), http.StatusNotFound, api.CodeNotFound)
	require.Empty(t, apitest.Decode(t, b.Get(t, b.TenantB, "/v1/events?type=webhook_endpoint.disabled"))["data"])

	log := apitest.Decode(t, b.Get(t, b.TenantA, "/v1/events/"+event["id"].(string)+"/deliveries"))["data"].([]any)
	require.Equal(t, []any{map[string]any{"endpoint": told["id"], "state": "pending", "attempts": []any{}}}, log,
		"delivered to the subscribed endpoint only: not the disabled one, not one subscribed to charges")
	_ = notTold

	// A second final failure of the endpoint, now disabled, writes no
	// second event.
	require.NoError(t, webhook.Record(t.Context(), b.Pool, args, final))
	require.Len(t, apitest.Decode(t, b.Get(t, b.TenantA, "/v1/events?type=webhook_endpoint.disabled"))["data"], 1)
}
