package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/apitest"
)

// A card number never comes back in a problem or reaches a log line,
// wherever it is in the request and whichever check refuses it: a member
// name in a body that fails to parse before the card check can run, a
// query parameter's name, a path segment, a header. Each refusal stores
// nothing.
func TestCardNumbersNeverLeak(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth := "Bearer " + b.TenantA.Key
	const key = "card-leak-key-000001"
	post := func(body string, headers ...string) func(t *testing.T) response {
		return func(t *testing.T) response {
			return b.Request(t, http.MethodPost, "/v1/charges", body, withDefaults(headers,
				"Authorization", auth, "Content-Type", "application/json", "Idempotency-Key", key)...)
		}
	}
	get := func(path string, headers ...string) func(t *testing.T) response {
		return func(t *testing.T) response {
			return b.Request(t, http.MethodGet, path, "", append([]string{"Authorization", auth}, headers...)...)
		}
	}
	deep := strings.Repeat("[", 70) + strings.Repeat("]", 70)
	tests := []struct {
		name   string
		send   func(t *testing.T) response
		status int
		code   api.Code
	}{
		// Bodies that fail to parse: the syntax error's path would name
		// the member.
		{"DuplicateMemberName", post(`{"4111111111111111": 1, "4111111111111111": 2}`), 400, api.CodeCardNumberDetected},
		{"DuplicateEscapedName", post(`{"amount": 1, "6011000990139424": 1, "\u0036011000990139424": 2}`), 400, api.CodeCardNumberDetected},
		{"InvalidJSONUnderCardName", post(`{"amount": 1000, "5555 5555 5555 4444": {"x": tru}}`), 400, api.CodeCardNumberDetected},
		{"InvalidUTF8UnderCardName", post("{\"6011000990139424\": \"caf\xe9\"}"), 400, api.CodeCardNumberDetected},
		{"LoneSurrogateUnderCardName", post(`{"metadata": {"4222222222222": "\ud800"}}`), 400, api.CodeCardNumberDetected},
		{"TooDeepUnderCardName", post(`{"3782-822463-10005": ` + deep + `}`), 400, api.CodeCardNumberDetected},
		{"HugeNumberUnderCardName", post(`{"4111111111111111": 1e400}`), 400, api.CodeCardNumberDetected},
		{"TrailingCardAfterBody", post(apitest.ValidBody + ` 4111111111111111`), 400, api.CodeCardNumberDetected},
		// Bodies that parse: the card check names where, never what.
		{"CardMemberName", post(`{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "metadata": {"4111111111111111": "x"}}`), 400, api.CodeCardNumberDetected},
		{"CardInDescription", post(`{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "5555 5555 5555 4444"}`), 400, api.CodeCardNumberDetected},
		{"CardAsAmount", post(`{"amount": 6011000990139424, "currency": "USD", "payment_method": "pm_card_visa"}`), 400, api.CodeCardNumberDetected},
		{"CardInUnknownMember", post(`{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "note": "3782-822463-10005"}`), 400, api.CodeCardNumberDetected},
		// Headers.
		{"CardAsIdempotencyKey", post(apitest.ValidBody, "Idempotency-Key", "4111111111111111"), 400, api.CodeCardNumberDetected},
		{"GroupedCardAsIdempotencyKey", post(apitest.ValidBody, "Idempotency-Key", "5555-5555-5555-4444"), 400, api.CodeCardNumberDetected},
		{"CardInQuotedIdempotencyKey", post(apitest.ValidBody, "Idempotency-Key", `"6011000990139424"`), 400, api.CodeCardNumberDetected},
		{"CardAsAPIKey", func(t *testing.T) response {
			return b.Request(t, http.MethodPost, "/v1/charges", apitest.ValidBody, "Authorization", "Bearer 4111111111111111", "Idempotency-Key", key)
		}, 401, api.CodeUnauthorized},
		{"CardInContentType", post(apitest.ValidBody, "Content-Type", "application/x-4111111111111111"), 415, api.CodeUnsupportedMediaType},
		{"CardInOtherHeaders", post(`{"amount": "bad"}`, "X-Request-Id", "4111111111111111", "User-Agent", "5555 5555 5555 4444",
			"Traceparent", "00-4111111111111111-6011000990139424-01"), 400, api.CodeInvalidField},
		// Query parameters: names are echoed only when they cannot hold one.
		{"CardAsQueryName", get("/v1/charges?4111111111111111=1"), 400, api.CodeInvalidParameter},
		{"CardAsRepeatedQueryName", get("/v1/charges?5555-5555-5555-4444=1&5555-5555-5555-4444=2"), 400, api.CodeInvalidParameter},
		{"CardAsStatus", get("/v1/charges?status=4111111111111111"), 400, api.CodeInvalidParameter},
		{"CardAsLimit", get("/v1/charges?limit=4111111111111111"), 400, api.CodeInvalidParameter},
		{"CardAsCursor", get("/v1/charges?starting_after=6011000990139424"), 400, api.CodeInvalidParameter},
		// The method is any token the client likes.
		{"CardAsMethod", func(t *testing.T) response {
			return b.Request(t, "4111111111111111", "/v1/charges", "", "Authorization", auth)
		}, 405, api.CodeMethodNotAllowed},
		// Path segments.
		{"CardAsChargeID", get("/v1/charges/4111111111111111"), 404, api.CodeNotFound},
		{"CardAsChargeIDOfEvents", get("/v1/charges/5555-5555-5555-4444/events"), 404, api.CodeNotFound},
		{"CardInUnknownV1Path", get("/v1/4111111111111111"), 404, api.CodeNotFound},
		{"CardInUnknownPath", get("/4111111111111111/3782-822463-10005"), 404, api.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: each row must leave the shared database empty.
			resp := tt.send(t)
			apitest.RequireProblem(t, resp, tt.status, tt.code)
			apitest.RequireNoCardNumbers(t, "the response", resp.Body)
			require.Equal(t, stored{}, b.Stored(t), "a refused request stores nothing")
		})
	}

	logs := b.Logs.String()
	require.Contains(t, logs, `"problem":"card_number_detected"`, "the requests were logged")
	apitest.RequireNoCardNumbers(t, "the logs", []byte(logs))
	require.NotContains(t, logs, b.TenantA.Key)
}

// withDefaults is headers (name/value pairs) plus each default pair whose
// name headers does not set.
func withDefaults(headers []string, defaults ...string) []string {
	set := map[string]bool{}
	for i := 0; i+1 < len(headers); i += 2 {
		set[http.CanonicalHeaderKey(headers[i])] = true
	}
	out := slices.Clone(headers)
	for i := 0; i+1 < len(defaults); i += 2 {
		if !set[http.CanonicalHeaderKey(defaults[i])] {
			out = append(out, defaults[i], defaults[i+1])
		}
	}
	return out
}

// A key that contains a card number among other characters is accepted
// (refusing those would refuse random keys: one UUID in about 450 has a
// Luhn-valid run of digits across its dashes), and, like every key, it is
// never logged or echoed.
func TestIdempotencyKeyContainingCardNumber(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, key := range []string{
		"41111111-1111-4008-a000-00000000000b", // a v4 UUID whose first 16 digits pass Luhn
		"order-4111111111111111",
	} {
		resp := b.Post(t, b.TenantA, key, apitest.ValidBody)
		require.Equal(t, http.StatusCreated, resp.Status, "%s: %s", key, resp.Body)
		apitest.RequireNoCardNumbers(t, "the answer", resp.Body)
		require.NotContains(t, b.Logs.String(), key)
	}
	apitest.RequireNoCardNumbers(t, "the logs", []byte(b.Logs.String()))
}
