package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// On a terminal the tools print tables a person reads: money in the
// currency's major unit, times to the second, a row per charge; piped, the
// API's own JSON.
func TestTables(t *testing.T) {
	t.Parallel()
	charge := `{"id":"ch_1","status":"succeeded","amount":1050,"currency":"USD","payment_method":"pm_card_visa","description":null,` +
		`"metadata":{"order":"A-1"},"provider_charge_id":"py_1","amount_refunded":400,"attempts":1,"created_at":"2026-12-02T10:00:00.123Z"}`
	for _, tc := range []struct {
		name string
		kind resourceKind
		body string
		want []string
	}{
		{"Charge", kindCharge, charge, []string{"ID               ch_1", "AMOUNT           10.50 USD", "REFUNDED         4.00 USD", "PROVIDER CHARGE  py_1", "METADATA order   A-1"}},
		{"Yen", kindCharge, `{"id":"ch_2","status":"pending","amount":500,"currency":"JPY","amount_refunded":0}`, []string{"AMOUNT    500 JPY"}},
		{"List", kindChargeList, `{"data":[` + charge + `],"has_more":true}`, []string{"ID    STATUS     AMOUNT     REFUNDED  CREATED", "ch_1  succeeded  10.50 USD  4.00 USD", "more: --starting-after ch_1"}},
		{"HeldCharge", kindCharge, `{"id":"ch_3","status":"succeeded","amount":1000,"currency":"USD","amount_refunded":0,"capture":false,"amount_captured":600}`,
			[]string{"STATUS    succeeded", "CAPTURE   later", "CAPTURED  6.00 USD"}},
		{"Capture", kindOperation, `{"id":"cp_1","object":"capture","charge":"ch_3","amount":600,"currency":"USD","status":"pending",` +
			`"failure_code":null,"attempts":0,"created_at":"2026-12-02T10:00:00Z","updated_at":"2026-12-02T10:00:00Z","review_reason":null}`,
			[]string{"ID        cp_1", "KIND      capture", "STATUS    pending", "AMOUNT    6.00 USD", "CHARGE    ch_3"}},
		{"Empty", kindChargeList, `{"data":[],"has_more":false}`, []string{"(none)"}},
		{"AuditTrail", kindAuditTrail, `{"data":[{"id":1,"from":null,"to":"pending","actor":"api","reason":"accepted","attempt":0,"created_at":"2026-12-02T10:00:00Z"},` +
			`{"id":2,"from":null,"to":"unknown","actor":"operator:ada","reason":"operator_reconcile","attempt":1,"action":"reconcile_requested","created_at":"2026-12-02T10:00:01Z"}]}`,
			[]string{"· → pending", "reconcile_requested (unknown)", "operator:ada"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			require.NoError(t, printResource(env{stdout: &out, stdoutTerminal: true}, outputFlag{"auto"}, tc.kind, []byte(tc.body)))
			for _, w := range tc.want {
				require.Contains(t, out.String(), w, "\n%s", out.String())
			}
			require.NotContains(t, out.String(), "{", "a table, not JSON")
		})
	}
	var atOnce bytes.Buffer
	require.NoError(t, printResource(env{stdout: &atOnce, stdoutTerminal: true}, outputFlag{"auto"}, kindCharge,
		[]byte(`{"id":"ch_4","status":"succeeded","amount":1000,"currency":"USD","capture":true,"amount_captured":1000}`)))
	require.NotContains(t, atOnce.String(), "CAPTURE", "a charge captured at once says nothing of capture:\n%s", atOnce.String())
	var piped bytes.Buffer
	require.NoError(t, printResource(env{stdout: &piped}, outputFlag{"auto"}, kindCharge, []byte(charge)))
	require.True(t, strings.HasPrefix(piped.String(), "{\n  \"id\": \"ch_1\""), "piped, the API's JSON: %s", piped.String())
}
