package apitest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
)

// Sendable is v without the bytes an HTTP client cannot put in a header
// value: control bytes other than tab, and DEL.
func Sendable(v string) string {
	return strings.Map(func(r rune) rune {
		if (r < 0x20 && r != '\t') || r == 0x7f {
			return -1
		}
		return r
	}, v)
}

// CanaryCards are the card numbers tests put in their inputs: Luhn-valid
// test numbers in the forms a client might write them.
var CanaryCards = []string{
	"4111111111111111",
	"5555 5555 5555 4444",
	"3782-822463-10005",
	"4222222222222",
	"6011000990139424",
}

// RequireNoCardNumbers fails if data — a JSON document, or JSON lines —
// holds a card number in any string or number, or any canary as written.
// JSON is decoded first, so that an escape (\u003c, \u2028) next to digits
// is not mistaken for one.
func RequireNoCardNumbers(t testing.TB, what string, data []byte) {
	t.Helper()
	for _, card := range CanaryCards {
		require.NotContains(t, string(data), card, "%s hold a canary card number", what)
		require.NotContains(t, string(data), strings.NewReplacer(" ", "", "-", "").Replace(card), "%s hold a canary card number", what)
	}
	scanner := bufio.NewScanner(bytes.NewReader(data))
	scanner.Buffer(nil, 1<<20)
	for scanner.Scan() {
		line := scanner.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			require.False(t, api.ContainsPAN(string(line)), "%s hold a card number: %s", what, line)
			continue
		}
		walkJSON(v, func(s string) {
			require.False(t, api.ContainsPAN(s), "%s hold a card number: %q in %s", what, s, line)
		})
	}
	require.NoError(t, scanner.Err())
}

// walkJSON calls visit with every member name, string and number of v.
func walkJSON(v any, visit func(string)) {
	switch v := v.(type) {
	case string:
		visit(v)
	case json.Number:
		visit(v.String())
	case []any:
		for _, e := range v {
			walkJSON(e, visit)
		}
	case map[string]any:
		for k, e := range v {
			visit(k)
			walkJSON(e, visit)
		}
	}
}
