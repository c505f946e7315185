package jsoncanon

import (
	"cmp"
	"slices"
	"unicode/utf8"
)

// Canonical returns the RFC 8785 canonical form of data: Parse followed by
// AppendCanonical. Every error is a *SyntaxError.
func Canonical(data []byte) ([]byte, error) {
	v, err := Parse(data)
	if err != nil {
		return nil, err
	}
	// Canonical output is rarely longer than its input: whitespace goes and
	// escapes shrink, and only numbers such as 1e20 grow.
	return AppendCanonical(make([]byte, 0, len(data)), v)
}

// AppendCanonical appends the RFC 8785 canonical form of v to dst: object
// members sorted by name as UTF-16 code units, no whitespace, strings with
// the minimal escaping of RFC 8785 and numbers as ECMAScript writes the
// double they denote.
//
// v need not come from Parse, so it is checked as it is written: a number
// literal that is not JSON, a string that is not UTF-8, duplicate member
// names, an unknown Kind or nesting deeper than MaxDepth is a *SyntaxError
// with Offset -1, as is a number too large for a double (ErrNumberRange). On
// error dst is returned unchanged.
func AppendCanonical(dst []byte, v Value) ([]byte, error) {
	out, f := appendValue(dst, &v, 0)
	if f != nil {
		return dst, f.syntaxError()
	}
	return out, nil
}

// invalid reports a problem in a Value, which has no input offset.
func invalid(reason error) *failure {
	return &failure{offset: -1, reason: reason}
}

func appendValue(dst []byte, v *Value, depth int) ([]byte, *failure) {
	switch v.Kind {
	case Null:
		return append(dst, "null"...), nil
	case Bool:
		if v.Bool {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case Number:
		return appendNumber(dst, v.Number)
	case String:
		return appendString(dst, v.String)
	case Array:
		if depth == MaxDepth {
			return dst, invalid(ErrTooDeep)
		}
		dst = append(dst, '[')
		for i := range v.Elems {
			if i > 0 {
				dst = append(dst, ',')
			}
			var f *failure
			if dst, f = appendValue(dst, &v.Elems[i], depth+1); f != nil {
				return dst, f.inElem(i)
			}
		}
		return append(dst, ']'), nil
	case Object:
		if depth == MaxDepth {
			return dst, invalid(ErrTooDeep)
		}
		return appendObject(dst, v.Members, depth)
	}
	return dst, invalid(ErrSyntax)
}

func appendObject(dst []byte, members []Member, depth int) ([]byte, *failure) {
	// Sort indexes rather than the members themselves: v belongs to the
	// caller and keeps its source order. Typical objects fit the array on
	// the stack. Names are checked for UTF-8 as they are written; an
	// invalid one may sort wrongly first, but then nothing is returned.
	var orderBuf [16]int
	order := orderBuf[:0]
	if len(members) > len(orderBuf) {
		order = make([]int, 0, len(members))
	}
	for i := range members {
		order = append(order, i)
	}
	slices.SortFunc(order, func(a, b int) int {
		return compareUTF16(members[a].Name, members[b].Name)
	})

	dst = append(dst, '{')
	for i, m := range order {
		name := members[m].Name
		if i > 0 {
			if name == members[order[i-1]].Name {
				return dst, invalid(ErrDuplicateMember).inMember(name)
			}
			dst = append(dst, ',')
		}
		var f *failure
		if dst, f = appendString(dst, name); f != nil {
			return dst, f.inMember(name)
		}
		dst = append(dst, ':')
		if dst, f = appendValue(dst, &members[m].Value, depth+1); f != nil {
			return dst, f.inMember(name)
		}
	}
	return append(dst, '}'), nil
}

// compareUTF16 compares two valid UTF-8 strings as their UTF-16 encodings
// would compare code unit by code unit, the member order of RFC 8785,
// without converting them.
//
// Byte order of UTF-8 is code point order, and so is UTF-16 order except in
// one place: a supplementary character (U+10000 and up) is written in UTF-16
// with a surrogate, D800 to DFFF, and so sorts before U+E000 to U+FFFF,
// where in code point order it sorts after them. In UTF-8 those are exactly
// the characters with lead bytes F0 to F4 and EE to EF. At the first byte
// where a and b differ, either both are in the same rune (same lead byte,
// same length, so byte order is right) or both are lead bytes, and only the
// mix of those two groups needs turning around.
func compareUTF16(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return cmp.Compare(len(a), len(b))
	}
	x, y := a[i], b[i]
	if x >= 0xEE && y >= 0xEE && (x >= 0xF0) != (y >= 0xF0) {
		if x >= 0xF0 {
			return -1
		}
		return 1
	}
	return cmp.Compare(x, y)
}

// appendString appends s quoted as RFC 8785 requires (which is what
// ECMAScript's JSON.stringify does): '"' and '\\' and the control characters
// escaped, \b \t \n \f \r in their short forms and the other controls as
// \u00xx in lower case; everything else, including '/', DEL, U+2028 and
// U+2029, as itself. It refuses s if it is not valid UTF-8, which can only
// happen in a hand-built Value.
func appendString(dst []byte, s string) ([]byte, *failure) {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return dst, invalid(ErrInvalidUTF8)
			}
			i += size - 1
			continue
		}
		if c >= ' ' && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), nil
}
