package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/internal/lockedbuf"
)

// FuzzCreateCharge drives the real handler, over HTTP, against a real
// database, with a fuzzed body, idempotency key, Content-Type, credentials
// and a free header, and holds every answer to the promises of docs/api.md:
//
//   - no byte sequence is a 5xx;
//   - a refusal stores nothing (charges, idempotency records, events and
//     River jobs are counted before and after), a new charge stores one of
//     each, a replay nothing;
//   - every refusal is problem+json with a code;
//   - no answer and no log line holds a card number or an API key.
//
// `make test` runs it briefly (FUZZTIME_HTTP); its seeds run with every
// `go test`. One database serves the whole run.
func FuzzCreateCharge(f *testing.F) {
	logs := &lockedbuf.Buffer{}
	b := setup(f, func(o *setupOpts) {
		o.API = func(c *api.Config) {
			c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			// Fuzzed credentials fail often; the limit would turn the rest
			// of the run into 429s.
			c.AuthFailureLimit = 1 << 30
		}
	})

	const (
		jsonCT = "application/json"
		key    = "fuzz-seed-key-000001"
		tenant = 0 // tenant A's key
	)
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	withMember := func(member string) string {
		return `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", ` + member + `}`
	}
	for _, seed := range []struct {
		body, key, contentType string
		auth                   uint8
		header                 string
	}{
		{apitest.ValidBody, key, jsonCT, tenant, ""},
		{apitest.ValidBody, key, jsonCT, tenant, ""}, // a replay
		{withMember(`"description": "a\u0000b"`), "fuzz-seed-nul-0000001", jsonCT, tenant, ""},
		{withMember(`"metadata": {"k\u0000": "v"}`), "fuzz-seed-nul-0000002", jsonCT, tenant, ""},
		{withMember(`"metadata": {"k": "\u0000"}`), "fuzz-seed-nul-0000003", jsonCT, tenant, ""},
		{withMember(`"description": "\ud800"`), "fuzz-seed-surrogate-01", jsonCT, tenant, ""},
		{withMember(`"description": "\udc00\ud800"`), "fuzz-seed-surrogate-02", jsonCT, tenant, ""},
		{withMember("\"description\": \"\xed\xa0\x80\""), "fuzz-seed-surrogate-03", jsonCT, tenant, ""},
		{withMember("\"description\": \"caf\xe9\""), "fuzz-seed-utf8-0000001", jsonCT, tenant, ""},
		{`{"amount": 99999999999999999999999999999, "currency": "USD", "payment_method": "pm_card_visa"}`, "fuzz-seed-huge-0000001", jsonCT, tenant, ""},
		{`{"amount": 1e400, "currency": "USD", "payment_method": "pm_card_visa"}`, "fuzz-seed-huge-0000002", jsonCT, tenant, ""},
		{`{"amount": -0, "currency": "USD", "payment_method": "pm_card_visa"}`, "fuzz-seed-huge-0000003", jsonCT, tenant, ""},
		{`{"amount": 9223372036854775807, "currency": "KWD", "payment_method": "pm_card_visa"}`, "fuzz-seed-huge-0000004", jsonCT, tenant, ""},
		{`{"amount": 999999, "currency": "JPY", "payment_method": "pm_card_visa"}`, "fuzz-seed-jpy-00000001", jsonCT, tenant, ""},
		{`{"amount": 1000, "currency": "XAU", "payment_method": "pm_card_visa"}`, "fuzz-seed-metal-000001", jsonCT, tenant, ""},
		{`{"amount": 1000, "currency": "CLF", "payment_method": "pm_card_visa"}`, "fuzz-seed-fund-0000001", jsonCT, tenant, ""},
		{withMember(`"x": ` + deep(64)), "fuzz-seed-deep-0000001", jsonCT, tenant, ""},
		{withMember(`"x": ` + deep(65)), "fuzz-seed-deep-0000002", jsonCT, tenant, ""},
		{deep(10000), "fuzz-seed-deep-0000003", jsonCT, tenant, ""},
		{`{"4111111111111111": 1, "4111111111111111": 2}`, "fuzz-seed-card-0000001", jsonCT, tenant, ""},
		{`{"5555 5555 5555 4444": {"x": tru`, "fuzz-seed-card-0000002", jsonCT, tenant, ""},
		{withMember(`"metadata": {"3782-822463-10005": "x"}`), "fuzz-seed-card-0000003", jsonCT, tenant, ""},
		{withMember(`"description": "4111 1111 1111 1111"`), "fuzz-seed-card-0000004", jsonCT, tenant, ""},
		{apitest.ValidBody, "4111111111111111", jsonCT, tenant, ""},
		{apitest.ValidBody, key, jsonCT, 2, "4111111111111111"},
		{apitest.ValidBody, key, jsonCT, tenant, "6011000990139424"},
		{apitest.ValidBody, key, "", tenant, ""},
		{apitest.ValidBody, key, "text/plain; charset=4111111111111111", tenant, ""},
		{apitest.ValidBody, key, "application/json; charset=latin1", tenant, ""},
		{apitest.ValidBody, key, jsonCT, 1, ""},
		{apitest.ValidBody, "", jsonCT, tenant, ""},
		{apitest.ValidBody, `"quoted-key-\"0000001"`, jsonCT, tenant, ""},
		{"", "fuzz-seed-empty-000001", jsonCT, tenant, ""},
		{"\ufeff" + apitest.ValidBody, "fuzz-seed-bom-00000001", jsonCT, tenant, ""},
		{`{"amount": 1000, "\u0061mount": 1}`, "fuzz-seed-dup-00000001", jsonCT, tenant, ""},
		{withMember(`"metadata": {` + manyKeys(51) + `}`), "fuzz-seed-many-0000001", jsonCT, tenant, ""},
		{withMember(`"description": "` + strings.Repeat("\U0001F600", 1000) + `"`), "fuzz-seed-long-0000001", jsonCT, 3, ""},
		{withMember(`"capture": false`), "fuzz-seed-capture-0001", jsonCT, tenant, ""},
		{withMember(`"capture": true`), "fuzz-seed-capture-0002", jsonCT, tenant, ""},
		{withMember(`"capture": "false"`), "fuzz-seed-capture-0003", jsonCT, tenant, ""},
		{withMember(`"capture": false, "capture": true`), "fuzz-seed-capture-0004", jsonCT, tenant, ""},
	} {
		f.Add([]byte(seed.body), seed.key, seed.contentType, seed.auth, seed.header)
	}

	f.Fuzz(func(t *testing.T, body []byte, key, contentType string, auth uint8, header string) {
		// net/http refuses to send control bytes in a header value (and a
		// server never sees one over the wire: they end the header), so
		// the fuzzer's are dropped rather than the input.
		key, contentType, header = apitest.Sendable(key), apitest.Sendable(contentType), apitest.Sendable(header)
		req, err := http.NewRequest(http.MethodPost, b.URL+"/v1/charges", bytes.NewReader(body))
		require.NoError(t, err)
		switch auth % 4 {
		case 0:
			req.Header.Set("Authorization", "Bearer "+b.TenantA.Key)
		case 2:
			req.Header.Set("Authorization", "Bearer "+header)
		case 3:
			req.Header.Set("Authorization", "Bearer "+b.TenantB.Key)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if header != "" {
			req.Header.Set("X-Request-Id", header)
			req.Header.Set("Traceparent", header)
		}

		before := b.Stored(t)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, "the server hung up instead of answering")
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		after := b.Stored(t)

		require.Less(t, resp.StatusCode, 500, "a client's bytes made a server error: %s", answer)
		switch {
		case resp.StatusCode == http.StatusCreated && resp.Header.Get("Idempotent-Replayed") != "true":
			require.Equal(t, stored{Charges: before.Charges + 1, IdempotencyKeys: before.IdempotencyKeys + 1, Events: before.Events + 1, Jobs: before.Jobs + 1}, after,
				"a new charge stores one charge, record, event and job")
		default:
			require.Equal(t, before, after, "status %d stored something: %s", resp.StatusCode, answer)
		}
		if resp.StatusCode >= 400 {
			require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			var p struct{ Code string }
			require.NoError(t, json.Unmarshal(answer, &p))
			require.NotEmpty(t, p.Code)
		}
		apitest.RequireNoCardNumbers(t, "the answer", answer)

		logged := logs.Take()
		apitest.RequireNoCardNumbers(t, "the logs", logged)
		for _, secret := range []string{b.TenantA.Key, b.TenantB.Key} {
			require.NotContains(t, string(logged), secret)
		}
	})
}
