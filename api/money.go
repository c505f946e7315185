package api

import (
	"math"

	"github.com/bojanz/currency"
)

// notTender lists the codes of github.com/bojanz/currency's table that name
// no money a card can be charged in: the ISO 4217 fund codes (IsFund in the
// ISO list, which the table keeps) and units of account. Precious metals,
// XDR, XTS and XXX are not in the table at all. docs/architecture.md
// ("Money") records the rule; a table upgrade that adds a new fund or unit
// must add it here (TestCurrencyRule lists what is refused).
var notTender = map[string]bool{
	"BOV": true, // Bolivian Mvdol (fund)
	"CHE": true, // WIR Euro (complementary currency)
	"CHW": true, // WIR Franc (complementary currency)
	"CLF": true, // Chilean Unidad de Fomento (unit of account)
	"COU": true, // Colombian Unidad de Valor Real (unit of account)
	"MXV": true, // Mexican Unidad de Inversion (unit of account)
	"USN": true, // US Dollar, next day (fund)
	"UYI": true, // Uruguay Peso en Unidades Indexadas (unit of account)
	"UYW": true, // Uruguayan Unidad Previsional (unit of account)
	"XAD": true, // Arab Accounting Dinar (unit of account)
}

// tenderCurrency reports whether code is an upper-case ISO 4217 code of a
// currency in circulation: in the table and not a fund or unit of account.
func tenderCurrency(code string) bool {
	if len(code) != 3 || notTender[code] {
		return false
	}
	for i := 0; i < len(code); i++ {
		if code[i] < 'A' || code[i] > 'Z' {
			return false
		}
	}
	_, ok := currency.GetDigits(code)
	return ok
}

// referenceDigits is the number of decimals Config.MaxAmount is counted in:
// minor units of a two-decimal currency such as USD or EUR.
const referenceDigits = 2

// maxDigits is the most decimals of any tender currency (BHD, IQD, JOD,
// KWD, LYD, OMR, TND have three); Config.MaxAmount must fit in an int64 when
// scaled up to them.
const maxDigits = 3

// MinMaxAmount and MaxMaxAmount bound Config.MaxAmount: at least one major
// unit (100), so that a currency without decimals keeps a cap of at least
// 1, and small enough to scale to maxDigits decimals in an int64.
const (
	MinMaxAmount = 100
	// Scaled to maxDigits decimals, one more than referenceDigits, an
	// amount grows tenfold.
	MaxMaxAmount = math.MaxInt64 / 10
)

// validMaxAmount reports whether n is a usable Config.MaxAmount.
func validMaxAmount(n int64) bool { return n >= MinMaxAmount && n <= MaxMaxAmount }

// maxAmountFor is the largest amount, in code's minor unit, that a charge in
// code may have: maxAmount names the same number of major units in every
// currency, counted in minor units of a two-decimal one, so the default
// 99,999,999 (999,999.99) is 999,999 for JPY (no decimals) and 999,999,990
// for KWD (three). Scaling down rounds down, so no currency's cap exceeds
// the configured one. An unknown code has no cap here: the currency rule
// refuses it.
func maxAmountFor(code string, maxAmount int64) int64 {
	digits, ok := currency.GetDigits(code)
	if !ok {
		return math.MaxInt64
	}
	limit := maxAmount
	for d := int(digits); d > referenceDigits; d-- {
		limit *= 10
	}
	for d := int(digits); d < referenceDigits; d++ {
		limit /= 10
	}
	return limit
}
