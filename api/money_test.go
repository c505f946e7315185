package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/bojanz/currency"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/apitest"
)

// Only money a card can be charged in is accepted: every code of the
// currency table but its funds and units of account, and nothing outside
// it (metals, XDR, test codes, lower case). The table's size is pinned so
// that an upgrade that brings new codes is looked at for new funds.
func TestCurrencyRule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refused := []string{"BOV", "CHE", "CHW", "CLF", "COU", "MXV", "USN", "UYI", "UYW", "XAD"}

	codes := currency.GetCurrencyCodes()
	require.Len(t, codes, 165, "the currency table changed: look through the new codes for funds and units of account (api/money.go, notTender)")
	accepted := 0
	for i, code := range codes {
		resp := b.Post(t, b.TenantA, fmt.Sprintf("currency-rule-%06d", i),
			fmt.Sprintf(`{"amount": 1, "currency": %q, "payment_method": "pm_card_visa"}`, code))
		if slices.Contains(refused, code) {
			p := apitest.RequireProblem(t, resp, http.StatusBadRequest, api.CodeInvalidField)
			require.Equal(t, "currency", p["field"], code)
			continue
		}
		require.Equal(t, http.StatusCreated, resp.Status, "%s: %s", code, resp.Body)
		accepted++
	}
	for _, code := range []string{"XAU", "XAG", "XPT", "XPD", "XDR", "XSU", "XUA", "XBA", "XTS", "XXX", "usd", "Usd", "US", "USDX", "", "HRK", "SLL"} {
		resp := b.Post(t, b.TenantA, "currency-rule-other-"+fmt.Sprint(len(code))+code,
			fmt.Sprintf(`{"amount": 1, "currency": %q, "payment_method": "pm_card_visa"}`, code))
		p := apitest.RequireProblem(t, resp, http.StatusBadRequest, api.CodeInvalidField)
		require.Equal(t, "currency", p["field"], code)
	}
	require.Equal(t, stored{Charges: accepted, IdempotencyKeys: accepted, Events: accepted, Jobs: accepted}, b.Stored(t))
}

// The amount cap is one number of major units in every currency: the
// configured maximum counts minor units of a two-decimal currency and is
// scaled to each currency's own minor unit, so JPY (no decimals) and KWD
// (three) have the same cap in yen and dinars as USD has in dollars.
func TestAmountCapFollowsMinorUnits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	small := b.otherServer(t, func(c *api.Config) { c.MaxAmount = 5000 }) // 50.00

	n := 0
	post := func(b *testBundle, amount int64, code string) response {
		n++
		return b.Post(t, b.TenantA, fmt.Sprintf("amount-cap-key-%06d", n),
			fmt.Sprintf(`{"amount": %d, "currency": %q, "payment_method": "pm_card_visa"}`, amount, code))
	}
	tests := []struct {
		server      *testBundle
		currency    string
		max         int64
		description string
	}{
		{b, "JPY", 999_999, "999,999 yen"},
		{b, "KWD", 999_999_990, "999,999.990 dinars"},
		{b, "USD", 99_999_999, "999,999.99 dollars"},
		{b, "EUR", 99_999_999, "999,999.99 euros"},
		{small, "USD", 5000, "50.00 dollars"},
		{small, "JPY", 50, "50 yen"},
		{small, "KWD", 50_000, "50.000 dinars"},
	}
	created := 0
	for _, tt := range tests {
		resp := post(tt.server, tt.max, tt.currency)
		require.Equal(t, http.StatusCreated, resp.Status, "%s %d (%s): %s", tt.currency, tt.max, tt.description, resp.Body)
		created++
		over := post(tt.server, tt.max+1, tt.currency)
		p := apitest.RequireProblem(t, over, http.StatusBadRequest, api.CodeInvalidField)
		require.Equal(t, "amount", p["field"])
		require.Contains(t, p["detail"], fmt.Sprintf("at most %d for %s", tt.max, tt.currency))
	}
	require.Equal(t, stored{Charges: created, IdempotencyKeys: created, Events: created, Jobs: created}, b.Stored(t))
}
