package jsoncanon

import (
	"errors"
	"math"
	"strconv"
)

// exactIntegerDigits is how many digits an integer literal may have and
// still be written as it stands: every integer below 10^15 is an exact
// double, and ECMAScript writes such integers in plain digits.
const exactIntegerDigits = 15

// appendNumber appends the canonical form of a number literal: the
// ECMAScript Number.prototype.toString of the double nearest to it.
func appendNumber(dst []byte, literal string) ([]byte, *failure) {
	integer, ok := scanNumber(literal)
	if !ok {
		return dst, invalid(ErrSyntax)
	}
	if integer {
		digits := len(literal)
		if literal[0] == '-' {
			digits--
		}
		if digits <= exactIntegerDigits {
			if literal == "-0" {
				return append(dst, '0'), nil
			}
			return append(dst, literal...), nil
		}
	}
	f, err := strconv.ParseFloat(literal, 64)
	if err != nil {
		// The grammar was checked, so the only possible error is that the
		// magnitude is beyond the largest double. Underflow is not an error:
		// such a literal denotes zero or a subnormal, as in ECMAScript.
		if errors.Is(err, strconv.ErrRange) {
			return dst, invalid(ErrNumberRange)
		}
		return dst, invalid(ErrSyntax)
	}
	return appendES(dst, f), nil
}

// scanNumber reports whether literal matches the RFC 8259 number grammar
// and, if so, whether it is an integer (no fraction and no exponent).
func scanNumber(literal string) (integer, ok bool) {
	i := 0
	digits := func() int {
		start := i
		for i < len(literal) && isDigit(literal[i]) {
			i++
		}
		return i - start
	}
	if i < len(literal) && literal[i] == '-' {
		i++
	}
	if i < len(literal) && literal[i] == '0' {
		i++
	} else if digits() == 0 {
		return false, false
	}
	integer = true
	if i < len(literal) && literal[i] == '.' {
		i++
		if digits() == 0 {
			return false, false
		}
		integer = false
	}
	if i < len(literal) && (literal[i] == 'e' || literal[i] == 'E') {
		i++
		if i < len(literal) && (literal[i] == '+' || literal[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false, false
		}
		integer = false
	}
	return integer, i == len(literal)
}

// appendES appends f as ECMAScript's Number.prototype.toString writes it
// (ECMA-262, Number::toString), which RFC 8785 adopts. f must be finite.
//
// strconv supplies the shortest digits that round-trip, d1 d2 ... dk, and
// the exponent n for which f = 0.d1...dk × 10^n; the layout is ECMAScript's:
//
//	k ≤ n ≤ 21     digits then n-k zeros             1e20 → 100000000000000000000
//	0 < n ≤ 21     digits with a point after n       1.5
//	-6 < n ≤ 0     "0." then -n zeros then digits    0.000001
//	otherwise      d1[.d2...dk]e±(n-1)               1e+21, 1e-7
//
// Negative zero is written as 0.
func appendES(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0')
	}
	if math.Signbit(f) {
		dst = append(dst, '-')
		f = -f
	}

	// "d.ddde±xx" or "de±xx"
	var buf [32]byte
	formatted := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	var digitsBuf [17]byte
	digits := digitsBuf[:0]
	i := 0
	for ; formatted[i] != 'e'; i++ {
		if formatted[i] != '.' {
			digits = append(digits, formatted[i])
		}
	}
	exp, negative := 0, formatted[i+1] == '-'
	for _, c := range formatted[i+2:] { // after 'e' and its sign
		exp = exp*10 + int(c-'0')
	}
	if negative {
		exp = -exp
	}
	k, n := len(digits), exp+1

	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}
