package api

import (
	"math"
	"testing"

	"github.com/bojanz/currency"
	"github.com/stretchr/testify/require"
)

// No tender currency has more decimals than maxDigits, so the largest
// valid MaxAmount scales to every currency without overflowing.
func TestMaxDigitsCoversTender(t *testing.T) {
	t.Parallel()
	largest := int64(math.MaxInt64 / 10)
	require.True(t, validMaxAmount(largest))
	require.False(t, validMaxAmount(largest+1))
	require.False(t, validMaxAmount(99), "less than one major unit")
	for _, code := range currency.GetCurrencyCodes() {
		if !tenderCurrency(code) {
			continue
		}
		digits, _ := currency.GetDigits(code)
		require.LessOrEqual(t, int(digits), maxDigits, code)
		require.Positive(t, maxAmountFor(code, largest), code)
		require.Positive(t, maxAmountFor(code, 100), "%s: even the smallest cap allows a charge", code)
	}
}
