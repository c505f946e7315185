package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/internal/dbtest"
)

func TestCreateCharge(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsOnceInOneTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		resp := b.Post(t, b.TenantA, "order-A-1-attempt-0001", apitest.ValidBody)
		require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		require.Empty(t, resp.Header.Get("Idempotent-Replayed"))

		var charge map[string]any
		require.NoError(t, json.Unmarshal(resp.Body, &charge))
		id := charge["id"].(string)
		require.Equal(t, "/v1/charges/"+id, resp.Header.Get("Location"))
		require.Equal(t, "pending", charge["status"])
		require.EqualValues(t, 1000, charge["amount"])
		require.Equal(t, "USD", charge["currency"])
		require.Equal(t, "pm_card_visa", charge["payment_method"])
		require.Equal(t, "Order A-1", charge["description"])
		require.Equal(t, map[string]any{"order": "A-1"}, charge["metadata"])
		require.Nil(t, charge["provider_charge_id"])
		require.Nil(t, charge["failure_code"])
		require.EqualValues(t, 0, charge["attempts"])

		require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Events: 1, Jobs: 1}, b.Stored(t))
		require.Equal(t, 1, b.JobsFor(t, id))

		// The stored charge reads back as the same object.
		got := b.Get(t, b.TenantA, "/v1/charges/"+id)
		require.Equal(t, http.StatusOK, got.Status)
		require.JSONEq(t, string(resp.Body), string(got.Body))

		events := b.Get(t, b.TenantA, "/v1/charges/"+id+"/events")
		require.Equal(t, http.StatusOK, events.Status)
		var trail struct {
			Data []map[string]any `json:"data"`
		}
		require.NoError(t, json.Unmarshal(events.Body, &trail))
		require.Len(t, trail.Data, 1)
		require.Nil(t, trail.Data[0]["from"])
		require.Equal(t, "pending", trail.Data[0]["to"])
		require.Equal(t, "api", trail.Data[0]["actor"])
	})

	t.Run("ReplaysByteForByte", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		first := b.Post(t, b.TenantA, "order-A-1-attempt-0001", apitest.ValidBody)
		require.Equal(t, http.StatusCreated, first.Status)
		again := b.Post(t, b.TenantA, "order-A-1-attempt-0001", apitest.ValidBody)
		require.Equal(t, http.StatusCreated, again.Status)
		require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
		require.Equal(t, first.Body, again.Body)
		require.Equal(t, first.Header.Get("Location"), again.Header.Get("Location"))
		require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Events: 1, Jobs: 1}, b.Stored(t))
	})

	// Equivalent JSON replays: member order, whitespace, escapes, and the
	// structured-field form of the key do not change the request.
	t.Run("EquivalentRequestsReplay", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		first := b.Post(t, b.TenantA, "equivalent-key-00001", apitest.ValidBody)
		require.Equal(t, http.StatusCreated, first.Status)
		for _, body := range []string{
			`{"metadata":{"order":"A-1"},"description":"Order A-1","payment_method":"pm_card_visa","currency":"USD","amount":1000}`,
			"{\n  \"amount\" : 1000 ,\t\"currency\":\"USD\",\r\n \"payment_method\":\"pm_card_visa\",\"description\":\"Order A-1\",\"metadata\":{\"order\":\"A-1\"}}  ",
			`{"amount":1000,"currency":"\u0055SD","payment_method":"pm_card_visa","description":"Order\u0020A-1","metadata":{"order":"A-1"}}`,
		} {
			resp := b.Post(t, b.TenantA, "equivalent-key-00001", body)
			require.Equal(t, http.StatusCreated, resp.Status, "body %s: %s", body, resp.Body)
			require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
			require.Equal(t, first.Body, resp.Body)
		}
		resp := b.Post(t, b.TenantA, `"equivalent-key-00001"`, apitest.ValidBody)
		require.Equal(t, http.StatusCreated, resp.Status)
		require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"), "the sf-string form names the same key")
		require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Events: 1, Jobs: 1}, b.Stored(t))
	})

	t.Run("ChangedValueIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		first := b.Post(t, b.TenantA, "changed-value-key-01", apitest.ValidBody)
		require.Equal(t, http.StatusCreated, first.Status)
		for _, body := range []string{
			`{"amount": 1001, "currency": "USD", "payment_method": "pm_card_visa", "description": "Order A-1", "metadata": {"order": "A-1"}}`,
			`{"amount": 1000, "currency": "EUR", "payment_method": "pm_card_visa", "description": "Order A-1", "metadata": {"order": "A-1"}}`,
			`{"amount": 1000, "currency": "USD", "payment_method": "pm_card_mastercard", "description": "Order A-1", "metadata": {"order": "A-1"}}`,
			`{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "Order A-2", "metadata": {"order": "A-1"}}`,
			`{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "Order A-1", "metadata": {"order": "A-2"}}`,
			`{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "Order A-1", "metadata": {"order": "A-1", "x": "y"}}`,
			`{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "Order A-1"}`,
			`{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": null, "metadata": {"order": "A-1"}}`,
		} {
			resp := b.Post(t, b.TenantA, "changed-value-key-01", body)
			apitest.RequireProblem(t, resp, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
		}
		require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Events: 1, Jobs: 1}, b.Stored(t))
	})

	t.Run("KeysAreScopedByTenant", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		a := b.Post(t, b.TenantA, "shared-key-000000001", apitest.ValidBody)
		require.Equal(t, http.StatusCreated, a.Status)
		other := b.Post(t, b.TenantB, "shared-key-000000001", apitest.ValidBody)
		require.Equal(t, http.StatusCreated, other.Status)
		require.Empty(t, other.Header.Get("Idempotent-Replayed"), "another tenant's key is a new request")
		require.NotEqual(t, a.Header.Get("Location"), other.Header.Get("Location"))

		// Replays stay within their tenant.
		againA := b.Post(t, b.TenantA, "shared-key-000000001", apitest.ValidBody)
		againB := b.Post(t, b.TenantB, "shared-key-000000001", apitest.ValidBody)
		require.Equal(t, a.Body, againA.Body)
		require.Equal(t, other.Body, againB.Body)
		require.Equal(t, stored{Charges: 2, IdempotencyKeys: 2, Events: 2, Jobs: 2}, b.Stored(t))

		// A changed body from tenant B does not disturb tenant A's record.
		changed := b.Post(t, b.TenantB, "shared-key-000000001", strings.Replace(apitest.ValidBody, "1000", "5", 1))
		apitest.RequireProblem(t, changed, http.StatusUnprocessableEntity, api.CodeIdempotencyKeyReused)
	})

	// 200 concurrent POSTs with one key and one body: exactly one charge and
	// one job; every answer is the 201 body (first or replayed) or a 409.
	t.Run("ConcurrentDuplicates", func(t *testing.T) {
		t.Parallel()
		b := setup(t)

		const n = 200
		var wg sync.WaitGroup
		responses := make([]response, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				responses[i] = b.Post(t, b.TenantA, "storm-key-0000000001", apitest.ValidBody)
			})
		}
		close(start)
		wg.Wait()

		var created []byte
		var fresh, replayed, conflicts int
		for _, resp := range responses {
			switch resp.Status {
			case http.StatusCreated:
				if created == nil {
					created = resp.Body
				}
				require.Equal(t, created, resp.Body, "every 201 carries the same bytes")
				if resp.Header.Get("Idempotent-Replayed") == "true" {
					replayed++
				} else {
					fresh++
				}
			case http.StatusConflict:
				apitest.RequireProblem(t, resp, http.StatusConflict, api.CodeRequestInProgress)
				require.Equal(t, "1", resp.Header.Get("Retry-After"))
				conflicts++
			default:
				t.Fatalf("unexpected status %d: %s", resp.Status, resp.Body)
			}
		}
		require.Equal(t, 1, fresh, "exactly one request created the charge")
		require.Equal(t, n, fresh+replayed+conflicts)
		require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Events: 1, Jobs: 1}, b.Stored(t))
		t.Logf("%d created, %d replayed, %d conflicts", fresh, replayed, conflicts)
	})
}

func TestCreateChargeRejections(t *testing.T) {
	t.Parallel()
	b := setup(t)

	const key = "rejection-key-000001"
	auth := "Bearer " + b.TenantA.Key
	json := "application/json"
	tests := []struct {
		name    string
		body    string
		headers []string // replaces the default headers when set
		status  int
		code    api.Code
		field   string
	}{
		{name: "NoAPIKey", body: apitest.ValidBody, headers: []string{"Idempotency-Key", key}, status: 401, code: api.CodeUnauthorized},
		{name: "WrongAPIKey", body: apitest.ValidBody, headers: []string{"Authorization", "Bearer " + b.TenantA.Key[:len(b.TenantA.Key)-4] + "aaaa", "Idempotency-Key", key}, status: 401, code: api.CodeUnauthorized},
		{name: "MalformedAPIKey", body: apitest.ValidBody, headers: []string{"Authorization", "Bearer cfk_nope", "Idempotency-Key", key}, status: 401, code: api.CodeUnauthorized},
		{name: "BasicAuth", body: apitest.ValidBody, headers: []string{"Authorization", "Basic " + b.TenantA.Key, "Idempotency-Key", key}, status: 401, code: api.CodeUnauthorized},
		{name: "TwoAuthorizationHeaders", body: apitest.ValidBody, headers: []string{"Authorization", auth, "Authorization", auth, "Idempotency-Key", key}, status: 401, code: api.CodeUnauthorized},
		{name: "KeyMissing", body: apitest.ValidBody, headers: []string{"Authorization", auth}, status: 400, code: api.CodeIdempotencyKeyMissing},
		{name: "KeyTooShort", body: apitest.ValidBody, headers: []string{"Authorization", auth, "Idempotency-Key", "fifteen-chars-x"}, status: 400, code: api.CodeIdempotencyKeyInvalid},
		{name: "KeyTooLong", body: apitest.ValidBody, headers: []string{"Authorization", auth, "Idempotency-Key", strings.Repeat("k", 256)}, status: 400, code: api.CodeIdempotencyKeyInvalid},
		{name: "KeyNotASCII", body: apitest.ValidBody, headers: []string{"Authorization", auth, "Idempotency-Key", "order-\xc3\xa9-0000000001"}, status: 400, code: api.CodeIdempotencyKeyInvalid},
		{name: "KeyRepeated", body: apitest.ValidBody, headers: []string{"Authorization", auth, "Idempotency-Key", key, "Idempotency-Key", key}, status: 400, code: api.CodeIdempotencyKeyInvalid},
		{name: "KeyBadStructuredField", body: apitest.ValidBody, headers: []string{"Authorization", auth, "Idempotency-Key", `"unterminated-key-0001`}, status: 400, code: api.CodeIdempotencyKeyInvalid},
		{name: "NotJSON", body: `amount=1000`, status: 400, code: api.CodeInvalidJSON},
		{name: "Empty", body: ``, status: 400, code: api.CodeInvalidJSON},
		{name: "NotAnObject", body: `[1000]`, status: 400, code: api.CodeInvalidJSON},
		{name: "TrailingData", body: apitest.ValidBody + `{}`, status: 400, code: api.CodeInvalidJSON},
		{name: "DuplicateMember", body: `{"amount": 1000, "amount": 1, "currency": "USD", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeDuplicateMember, field: "amount"},
		{name: "DuplicateMemberEscaped", body: `{"amount": 1000, "\u0061mount": 1, "currency": "USD", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeDuplicateMember, field: "amount"},
		{name: "InvalidUTF8", body: "{\"amount\": 1000, \"currency\": \"USD\", \"payment_method\": \"pm_card_visa\", \"description\": \"caf\xe9\"}", status: 400, code: api.CodeInvalidUTF8},
		{name: "LoneSurrogate", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "\ud800"}`, status: 400, code: api.CodeInvalidUTF8, field: "description"},
		// Characters Postgres cannot store are refused while parsing, naming
		// the field, not discovered by the insert as a 500.
		{name: "NULInDescription", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "a\u0000b"}`, status: 400, code: api.CodeInvalidField, field: "description"},
		{name: "NULInMetadataValue", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "metadata": {"k": "\u0000"}}`, status: 400, code: api.CodeInvalidField, field: "metadata.k"},
		{name: "NULInMetadataKey", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "metadata": {"k\u0000": "v"}}`, status: 400, code: api.CodeInvalidField, field: "metadata"},
		{name: "NULInPaymentMethod", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_\u0000"}`, status: 400, code: api.CodeInvalidField, field: "payment_method"},
		{name: "LoneLowSurrogate", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "metadata": {"k": "\udc00x"}}`, status: 400, code: api.CodeInvalidUTF8, field: "metadata.k"},
		{name: "SurrogateAsUTF8", body: "{\"amount\": 1000, \"currency\": \"USD\", \"payment_method\": \"pm_card_visa\", \"description\": \"\xed\xa0\x80\"}", status: 400, code: api.CodeInvalidUTF8},
		{name: "UnknownField", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "customer": "c_1"}`, status: 400, code: api.CodeUnknownField, field: "customer"},
		{name: "AmountMissing", body: `{"currency": "USD", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeMissingField, field: "amount"},
		{name: "CurrencyMissing", body: `{"amount": 1000, "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeMissingField, field: "currency"},
		{name: "PaymentMethodMissing", body: `{"amount": 1000, "currency": "USD"}`, status: 400, code: api.CodeMissingField, field: "payment_method"},
		{name: "AmountFloat", body: `{"amount": 10.5, "currency": "USD", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeInvalidField, field: "amount"},
		{name: "AmountFloatIntegral", body: `{"amount": 1000.0, "currency": "USD", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeInvalidField, field: "amount"},
		{name: "AmountString", body: `{"amount": "1000", "currency": "USD", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeInvalidField, field: "amount"},
		{name: "AmountExponent", body: `{"amount": 1e3, "currency": "USD", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeInvalidField, field: "amount"},
		{name: "AmountZero", body: `{"amount": 0, "currency": "USD", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeInvalidField, field: "amount"},
		{name: "AmountNegative", body: `{"amount": -5, "currency": "USD", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeInvalidField, field: "amount"},
		{name: "AmountOverMax", body: `{"amount": 100000000, "currency": "USD", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeInvalidField, field: "amount"},
		{name: "AmountOverInt64", body: `{"amount": 99999999999999999999999, "currency": "USD", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeInvalidField, field: "amount"},
		{name: "AmountNull", body: `{"amount": null, "currency": "USD", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeInvalidField, field: "amount"},
		{name: "CurrencyLowercase", body: `{"amount": 1000, "currency": "usd", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeInvalidField, field: "currency"},
		{name: "CurrencyUnknown", body: `{"amount": 1000, "currency": "ABC", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeInvalidField, field: "currency"},
		{name: "CurrencyMetal", body: `{"amount": 1000, "currency": "XAU", "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeInvalidField, field: "currency"},
		{name: "CurrencyNumber", body: `{"amount": 1000, "currency": 840, "payment_method": "pm_card_visa"}`, status: 400, code: api.CodeInvalidField, field: "currency"},
		{name: "PaymentMethodEmpty", body: `{"amount": 1000, "currency": "USD", "payment_method": ""}`, status: 400, code: api.CodeInvalidField, field: "payment_method"},
		{name: "PaymentMethodSpaces", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm card"}`, status: 400, code: api.CodeInvalidField, field: "payment_method"},
		{name: "CardNumberAsPaymentMethod", body: `{"amount": 1000, "currency": "USD", "payment_method": "4242424242424242"}`, status: 400, code: api.CodeCardNumberDetected, field: "payment_method"},
		{name: "CardNumberInDescription", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "card 4111 1111 1111 1111 thanks"}`, status: 400, code: api.CodeCardNumberDetected, field: "description"},
		{name: "CardNumberDashedInMetadata", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "metadata": {"note": "5555-5555-5555-4444"}}`, status: 400, code: api.CodeCardNumberDetected, field: "metadata.note"},
		{name: "CardNumberInUnknownField", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "card": {"number": "378282246310005"}}`, status: 400, code: api.CodeCardNumberDetected, field: "card.number"},
		{name: "CardNumberAsNumber", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "pan": 4000056655665556}`, status: 400, code: api.CodeCardNumberDetected, field: "pan"},
		{name: "DescriptionNotString", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": 5}`, status: 400, code: api.CodeInvalidField, field: "description"},
		{name: "DescriptionTooLong", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "` + strings.Repeat("é", 1001) + `"}`, status: 400, code: api.CodeInvalidField, field: "description"},
		{name: "MetadataNotObject", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "metadata": ["a"]}`, status: 400, code: api.CodeInvalidField, field: "metadata"},
		{name: "MetadataNumberValue", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "metadata": {"n": 5}}`, status: 400, code: api.CodeInvalidField, field: "metadata.n"},
		{name: "MetadataTooManyKeys", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "metadata": {` + manyKeys(51) + `}}`, status: 400, code: api.CodeInvalidField, field: "metadata"},
		{name: "MetadataValueTooLong", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "metadata": {"k": "` + strings.Repeat("v", 501) + `"}}`, status: 400, code: api.CodeInvalidField, field: "metadata.k"},
		{name: "TooDeep", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "x": ` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, status: 400, code: api.CodeInvalidJSON},
		{name: "BodyTooLarge", body: `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "` + strings.Repeat("x", 70<<10) + `"}`, status: 413, code: api.CodeBodyTooLarge},
		{name: "FormEncoded", body: `amount=1000`, headers: []string{"Authorization", auth, "Idempotency-Key", key, "Content-Type", "application/x-www-form-urlencoded"}, status: 415, code: api.CodeUnsupportedMediaType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: every row must leave the shared database empty,
			// checked after each one.
			headers := tt.headers
			if headers == nil {
				headers = []string{"Authorization", auth, "Idempotency-Key", key, "Content-Type", json}
			}
			resp := b.Request(t, http.MethodPost, "/v1/charges", tt.body, headers...)
			p := apitest.RequireProblem(t, resp, tt.status, tt.code)
			if tt.field != "" {
				require.Equal(t, tt.field, p["field"])
			}
			if tt.status == http.StatusUnauthorized {
				require.NotEmpty(t, resp.Header.Get("WWW-Authenticate"))
			}
			require.NotContains(t, string(resp.Body), "4242424242424242", "problems never echo card numbers")
			require.Equal(t, stored{}, b.Stored(t), "a rejected request stores nothing")
		})
	}

	// No refusal logged a card number, whichever check refused it.
	apitest.RequireNoCardNumbers(t, "the logs", []byte(b.Logs.String()))

	// The same key then works: nothing about the rejections was remembered.
	resp := b.Post(t, b.TenantA, key, apitest.ValidBody)
	require.Equal(t, http.StatusCreated, resp.Status)
	require.Empty(t, resp.Header.Get("Idempotent-Replayed"))
}

func manyKeys(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf(`"k%d": "v"`, i))
	}
	return strings.Join(parts, ",")
}

// The rate limit refuses without storing, and a refused key is not
// remembered: once the bucket refills the same key creates the charge.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	b := setup(t, func(o *setupOpts) {
		o.API = func(c *api.Config) {
			c.RateLimit, c.RateBurst = 1, 1
			c.Now = func() time.Time { return time.Unix(0, now.Load()) }
		}
	})

	first := b.Post(t, b.TenantA, "rate-limit-key-00001", apitest.ValidBody)
	require.Equal(t, http.StatusCreated, first.Status)

	limited := b.Post(t, b.TenantA, "rate-limit-key-00002", apitest.ValidBody)
	apitest.RequireProblem(t, limited, http.StatusTooManyRequests, api.CodeRateLimited)
	require.Equal(t, "1", limited.Header.Get("Retry-After"))
	require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Events: 1, Jobs: 1}, b.Stored(t))

	// Another tenant has its own bucket.
	other := b.Post(t, b.TenantB, "rate-limit-key-00002", apitest.ValidBody)
	require.Equal(t, http.StatusCreated, other.Status)

	now.Add(int64(time.Second))
	retried := b.Post(t, b.TenantA, "rate-limit-key-00002", apitest.ValidBody)
	require.Equal(t, http.StatusCreated, retried.Status, "a 429 is never replayed")
	require.Empty(t, retried.Header.Get("Idempotent-Replayed"))
	require.Equal(t, stored{Charges: 3, IdempotencyKeys: 3, Events: 3, Jobs: 3}, b.Stored(t))
}

// With the database refusing connections the API answers 503 +
// Retry-After, stores nothing, and the retry runs again once it is back.
func TestDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	admin := dbtest.Admin(t)
	dbName := dbtest.DatabaseName(t, b.DBURL)

	// Warm the authentication cache so the failure is the accept path's own.
	require.Equal(t, http.StatusOK, b.Get(t, b.TenantA, "/v1/charges").Status)

	_, err := admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %q WITH ALLOW_CONNECTIONS false`, dbName))
	require.NoError(t, err)
	restore := func() {
		_, err := admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %q WITH ALLOW_CONNECTIONS true`, dbName))
		require.NoError(t, err)
	}
	t.Cleanup(restore)
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, dbName)
	require.NoError(t, err)

	resp := b.Post(t, b.TenantA, "db-down-key-00000001", apitest.ValidBody)
	p := apitest.RequireProblem(t, resp, http.StatusServiceUnavailable, api.CodeDatabaseUnavailable)
	require.Contains(t, p["detail"], "nothing was stored", "no connection could be made, so nothing was sent")
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	ready := b.Request(t, http.MethodGet, "/readyz", "")
	apitest.RequireProblem(t, ready, http.StatusServiceUnavailable, api.CodeNotReady)

	restore()
	require.Equal(t, stored{}, b.Stored(t))
	retried := b.Post(t, b.TenantA, "db-down-key-00000001", apitest.ValidBody)
	require.Equal(t, http.StatusCreated, retried.Status, "body: %s", retried.Body)
	require.Empty(t, retried.Header.Get("Idempotent-Replayed"))
	require.Equal(t, stored{Charges: 1, IdempotencyKeys: 1, Events: 1, Jobs: 1}, b.Stored(t))
}

func TestReadCharges(t *testing.T) {
	t.Parallel()

	t.Run("AnotherTenantsChargeIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		created := b.Post(t, b.TenantA, "read-key-0000000001", apitest.ValidBody)
		require.Equal(t, http.StatusCreated, created.Status)
		location := created.Header.Get("Location")

		apitest.RequireProblem(t, b.Get(t, b.TenantB, location), http.StatusNotFound, api.CodeNotFound)
		apitest.RequireProblem(t, b.Get(t, b.TenantB, location+"/events"), http.StatusNotFound, api.CodeNotFound)
		apitest.RequireProblem(t, b.Get(t, b.TenantA, "/v1/charges/ch_nope"), http.StatusNotFound, api.CodeNotFound)
		apitest.RequireProblem(t, b.Get(t, b.TenantA, "/v1/charges/ch_00000000000000000000000000/events"), http.StatusNotFound, api.CodeNotFound)
		apitest.RequireProblem(t, b.Request(t, http.MethodGet, location, ""), http.StatusUnauthorized, api.CodeUnauthorized)

		var page struct {
			Data []map[string]any `json:"data"`
		}
		list := b.Get(t, b.TenantB, "/v1/charges")
		require.NoError(t, json.Unmarshal(list.Body, &page))
		require.Empty(t, page.Data)
	})

	t.Run("ListPagesNewestFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var ids []string
		for i := range 5 {
			resp := b.Post(t, b.TenantA, fmt.Sprintf("list-key-%011d", i), apitest.ValidBody)
			require.Equal(t, http.StatusCreated, resp.Status)
			ids = append([]string{strings.TrimPrefix(resp.Header.Get("Location"), "/v1/charges/")}, ids...)
			time.Sleep(2 * time.Millisecond) // ids order by millisecond
		}
		type page struct {
			Data    []struct{ ID, Status string } `json:"data"`
			HasMore bool                          `json:"has_more"`
		}
		read := func(query string) page {
			resp := b.Get(t, b.TenantA, "/v1/charges"+query)
			require.Equal(t, http.StatusOK, resp.Status, "body: %s", resp.Body)
			var p page
			require.NoError(t, json.Unmarshal(resp.Body, &p))
			return p
		}
		first := read("?limit=2")
		require.True(t, first.HasMore)
		require.Equal(t, ids[0], first.Data[0].ID)
		require.Equal(t, ids[1], first.Data[1].ID)
		second := read("?limit=3&starting_after=" + first.Data[1].ID)
		require.False(t, second.HasMore)
		require.Len(t, second.Data, 3)
		require.Equal(t, ids[4], second.Data[2].ID)
		require.Len(t, read("?status=pending").Data, 5)
		require.Empty(t, read("?status=succeeded").Data)

		for _, query := range []string{"?status=done", "?limit=0", "?limit=101", "?limit=x", "?starting_after=nope", "?colour=red", "?limit=1&limit=2"} {
			apitest.RequireProblem(t, b.Get(t, b.TenantA, "/v1/charges"+query), http.StatusBadRequest, api.CodeInvalidParameter)
		}

		// Several bad parameters: the problem always names the same one
		// (the first by name), not whichever a map visits first.
		for range 20 {
			p := apitest.RequireProblem(t, b.Get(t, b.TenantA, "/v1/charges?status=done&limit=0&starting_after=nope"),
				http.StatusBadRequest, api.CodeInvalidParameter)
			require.Equal(t, "limit", p["field"])
		}
		p := apitest.RequireProblem(t, b.Get(t, b.TenantA, "/v1/charges?status=done"), http.StatusBadRequest, api.CodeInvalidParameter)
		require.Contains(t, p["detail"], "pending, submitting, unknown, requires_capture, succeeded, canceled, failed, needs_review")
	})
}

func TestHealth(t *testing.T) {
	t.Parallel()
	b := setup(t)

	require.Equal(t, http.StatusOK, b.Request(t, http.MethodGet, "/healthz", "").Status)
	require.Equal(t, http.StatusOK, b.Request(t, http.MethodGet, "/readyz", "").Status)
	apitest.RequireProblem(t, b.Request(t, http.MethodGet, "/nope", ""), http.StatusNotFound, api.CodeNotFound)
	apitest.RequireProblem(t, b.Request(t, http.MethodDelete, "/healthz", ""), http.StatusMethodNotAllowed, api.CodeMethodNotAllowed)

	notReady := setup(t, func(o *setupOpts) {
		o.API = func(c *api.Config) {
			c.Ready = func(context.Context) error { return fmt.Errorf("migration 0002 is not applied") }
		}
	})
	apitest.RequireProblem(t, notReady.Request(t, http.MethodGet, "/readyz", ""), http.StatusServiceUnavailable, api.CodeNotReady)
}

// Logs carry ids and outcomes, never the secrets and personal data that pass
// through a request.
func TestLogsKeepSecretsOut(t *testing.T) {
	t.Parallel()
	b := setup(t)

	const (
		idempotencyKey = "canary-idem-key-7f3a9c"
		description    = "canary-description-51d2"
		metadataKey    = "canary-meta-key-e81b"
		metadataValue  = "canary-meta-value-0c4d"
		paymentMethod  = "pm_canary_payment_method_9a7e"
		card           = "4111111111111111"
	)
	body := fmt.Sprintf(`{"amount": 1000, "currency": "USD", "payment_method": %q, "description": %q, "metadata": {%q: %q}}`,
		paymentMethod, description, metadataKey, metadataValue)
	require.Equal(t, http.StatusCreated, b.Post(t, b.TenantA, idempotencyKey, body).Status)
	require.Equal(t, http.StatusCreated, b.Post(t, b.TenantA, idempotencyKey, body).Status)
	apitest.RequireProblem(t, b.Post(t, b.TenantA, idempotencyKey, strings.Replace(body, "1000", "7", 1)), 422, api.CodeIdempotencyKeyReused)
	bad := fmt.Sprintf(`{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "metadata": {%q: 5}}`, metadataKey)
	apitest.RequireProblem(t, b.Post(t, b.TenantA, "canary-idem-key-2-0000", bad), 400, api.CodeInvalidField)
	cardBody := fmt.Sprintf(`{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": %q}`, card)
	apitest.RequireProblem(t, b.Post(t, b.TenantA, "canary-idem-key-3-0000", cardBody), 400, api.CodeCardNumberDetected)
	apitest.RequireProblem(t, b.Request(t, http.MethodGet, "/v1/charges", "", "Authorization", "Bearer "+b.TenantA.Key+"x"), 401, api.CodeUnauthorized)

	logs := b.Logs.String()
	require.Contains(t, logs, `"route":"/v1/charges"`, "the requests were logged")
	for _, secret := range []string{b.TenantA.Key, idempotencyKey, "canary-idem-key-2", description, metadataKey, metadataValue, paymentMethod, card} {
		require.NotContains(t, logs, secret)
	}
}
