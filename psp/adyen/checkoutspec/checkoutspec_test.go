package checkoutspec

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLoadsThePinnedDescription(t *testing.T) {
	t.Parallel()
	spec, err := Load()
	require.NoError(t, err)
	require.Equal(t, "71", spec.Doc.Info.Version)
	_, err = os.Stat(filepath.Join(filepath.Dir(Path()), "LICENSE"))
	require.NoError(t, err, "the description travels with its licence")
}

func TestMissingOrChangedDescriptionIsNamed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := load(filepath.Join(dir, File))
	require.ErrorContains(t, err, "is missing at")
	require.ErrorContains(t, err, Upstream)

	changed := filepath.Join(dir, "changed.json")
	require.NoError(t, os.WriteFile(changed, []byte(`{"openapi":"3.1.0"}`), 0o600))
	_, err = load(changed)
	require.ErrorContains(t, err, "is not the pinned description")
}

func TestValidates(t *testing.T) {
	t.Parallel()
	spec, err := Load()
	require.NoError(t, err)
	json := http.Header{"Content-Type": {"application/json"}}
	payment := `{"amount":{"currency":"EUR","value":1000},"merchantAccount":"M","paymentMethod":{"type":"scheme","storedPaymentMethodId":"pm_1"},"reference":"ch_1","returnUrl":"https://example.com/r"}`

	require.NoError(t, spec.ValidateRequest(Exchange{Method: "POST", Path: "/v71/payments", Header: json, Body: []byte(payment)}))
	for name, body := range map[string]string{
		"returnUrl missing": `{"amount":{"currency":"EUR","value":1000},"merchantAccount":"M","paymentMethod":{"type":"scheme","storedPaymentMethodId":"pm_1"},"reference":"ch_1"}`,
		"unknown property":  `{"amount":{"currency":"EUR","value":1000},"merchantAccount":"M","paymentMethod":{"type":"scheme","storedPaymentMethodId":"pm_1"},"reference":"ch_1","returnUrl":"https://example.com/r","bogus":1}`,
		"amount a string":   `{"amount":{"currency":"EUR","value":"1000"},"merchantAccount":"M","paymentMethod":{"type":"scheme","storedPaymentMethodId":"pm_1"},"reference":"ch_1","returnUrl":"https://example.com/r"}`,
	} {
		require.Error(t, spec.ValidateRequest(Exchange{Method: "POST", Path: "/v71/payments", Header: json, Body: []byte(body)}), name)
	}
	require.ErrorContains(t, spec.ValidateRequest(Exchange{Method: "POST", Path: "/v71/charges", Header: json, Body: []byte(payment)}), "not in adyen's checkout v71 description")

	answer := Exchange{Method: "POST", Path: "/v71/payments", Header: json, Body: []byte(payment), Status: 200, ResponseHeader: json,
		ResponseBody: []byte(`{"pspReference":"PSP1","resultCode":"Authorised","merchantReference":"ch_1","amount":{"currency":"EUR","value":1000}}`)}
	require.NoError(t, spec.ValidateResponse(answer))
	answer.ResponseBody = []byte(`{"pspReference":"PSP1","resultCode":"Charged"}`)
	require.Error(t, spec.ValidateResponse(answer), "a result code the description does not list")
	answer.ResponseBody = []byte(`{"pspReference":"PSP1","resultCode":"Authorised","status":"ok"}`)
	require.Error(t, spec.ValidateResponse(answer), "a property the description does not have")
}
