package jsoncanon

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
	"github.com/stretchr/testify/require"
)

// FuzzCanonical checks the properties the fingerprint relies on, using
// encoding/json and github.com/gowebpki/jcs as independent references.
func FuzzCanonical(f *testing.F) {
	for _, seed := range []string{
		`{"amount":1000,"currency":"USD","payment_method":"pm_card_visa","description":"Order A-1","metadata":{"order":"A-1","customer":"c_42"}}`,
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
		`[1e21,1e-6,1e-7,5e-324,1.7976931348623157e308,9007199254740993,-0,0.1,100]`,
		` [ { } , [ ] , "" , true , false , null ] `,
		`"\u0000\u001f\b\f\n\r\t\u2028\u2029/\u007f"`,
		`{"a":{"b":{"c":[[[{"d":[]}]]]}}}`,
		`{"a":1,"a":2}`,
		`{"a":1,"\u0061":2}`,
		"\"\xff\"",
		"{\"a\":\"\xed\xa0\x80\"}",
		`"\ud800"`,
		`"\udc00\ud800"`,
		`1e400`,
		`[01]`,
		`{"a":1,}`,
		"\xef\xbb\xbf{}",
		`{} {}`,
		strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
		`{` + numberedMembers(20) + `,"m3":0}`,
	} {
		f.Add([]byte(seed))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		v, parseErr := Parse(data)
		canonical, err := Canonical(data)
		oracle, oracleErr := jcs.Transform(data)

		if parseErr != nil {
			var syntaxErr *SyntaxError
			require.ErrorAs(t, parseErr, &syntaxErr)
			require.True(t, isSentinel(parseErr), "%v", parseErr)
			require.NotErrorIs(t, parseErr, ErrNumberRange, "Parse leaves ranges to AppendCanonical")
			require.Error(t, err)
			require.Equal(t, parseErr.Error(), err.Error())

			// jcs is strict in the same ways except that it allows deeper
			// nesting, so whatever it accepts Parse may refuse only for depth.
			if oracleErr == nil {
				require.ErrorIs(t, parseErr, ErrTooDeep, "jcs accepted %q", data)
			}
			return
		}

		// Strictness: what Parse accepts is valid UTF-8, valid JSON to
		// encoding/json and free of duplicate member names.
		require.True(t, utf8.Valid(data))
		require.True(t, json.Valid(data))
		require.False(t, hasDuplicateNames(t, data))

		if errors.Is(err, ErrNumberRange) {
			// No canonical form exists, and jcs agrees; see the oracle below.
			require.Error(t, oracleErr)
			return
		}
		require.NoError(t, err)
		require.True(t, utf8.Valid(canonical))

		// The Value and the bytes agree.
		fromValue, err := AppendCanonical(nil, v)
		require.NoError(t, err)
		require.Equal(t, canonical, fromValue)

		// Idempotence.
		again, err := Canonical(canonical)
		require.NoError(t, err)
		require.Equal(t, canonical, again)

		// The canonical form means what the input meant.
		var want, got any
		require.NoError(t, json.Unmarshal(data, &want))
		require.NoError(t, json.Unmarshal(canonical, &got))
		require.True(t, reflect.DeepEqual(want, got), "%q → %q", data, canonical)

		// Member order, whitespace and escaping do not matter.
		reordered := appendReordered(t, nil, v)
		fromReordered, err := Canonical(reordered)
		require.NoError(t, err, "%q", reordered)
		require.Equal(t, canonical, fromReordered, "%q", reordered)

		// The oracle agrees byte for byte. The comparison is skipped in one
		// case only, above: a number beyond the range of a double, which has
		// no canonical form, so jcs errors as Canonical does. Everything else
		// jcs refuses, Parse refuses too (jcs is stricter nowhere and more
		// lenient only in nesting depth), so jcs must succeed here. Requiring
		// that, instead of skipping whenever jcs errors, is what catches an
		// input this package wrongly accepts but that encoding/json repairs
		// into the same value, such as a lone low surrogate.
		require.NoError(t, oracleErr, "jcs refused %q", data)
		require.Equal(t, string(oracle), string(canonical), "%q", data)
	})
}

// isSentinel reports whether err wraps one of the package's sentinels.
func isSentinel(err error) bool {
	for _, sentinel := range []error{ErrSyntax, ErrDuplicateMember, ErrInvalidUTF8, ErrLoneSurrogate, ErrTooDeep, ErrNumberRange} {
		if errors.Is(err, sentinel) {
			return true
		}
	}
	return false
}

// hasDuplicateNames reports whether encoding/json's token stream of data,
// which must be valid JSON, has an object with a repeated member name. It is
// an independent check of Parse's duplicate detection.
func hasDuplicateNames(t *testing.T, data []byte) bool {
	t.Helper()

	type frame struct {
		object     bool
		expectName bool
		names      map[string]bool
	}
	var stack []*frame
	valueDone := func() {
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].expectName = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		delim, isDelim := tok.(json.Delim)
		switch {
		case isDelim && (delim == '}' || delim == ']'):
			stack = stack[:len(stack)-1]
			valueDone()
		case len(stack) > 0 && stack[len(stack)-1].expectName:
			top := stack[len(stack)-1]
			name, ok := tok.(string)
			require.True(t, ok)
			if top.names[name] {
				return true
			}
			top.names[name] = true
			top.expectName = false
		case isDelim:
			stack = append(stack, &frame{object: delim == '{', expectName: delim == '{', names: map[string]bool{}})
		default:
			valueDone()
		}
	}
}

// appendReordered writes v as JSON text that differs from the input in
// everything canonicalization erases: members in reverse order, whitespace
// between all tokens, and strings escaped by encoding/json's rules (which
// escape <, >, &, U+2028 and U+2029). Numbers are kept as written.
func appendReordered(t *testing.T, dst []byte, v Value) []byte {
	t.Helper()

	quote := func(dst []byte, s string) []byte {
		quoted, err := json.Marshal(s)
		require.NoError(t, err)
		return append(dst, quoted...)
	}
	switch v.Kind {
	case Null:
		return append(dst, "null"...)
	case Bool:
		if v.Bool {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case Number:
		return append(dst, v.Number...)
	case String:
		return quote(dst, v.String)
	case Array:
		dst = append(dst, "[ "...)
		for i, elem := range v.Elems {
			if i > 0 {
				dst = append(dst, " ,\n"...)
			}
			dst = appendReordered(t, dst, elem)
		}
		return append(dst, " ]"...)
	case Object:
		dst = append(dst, "{\t"...)
		for i := len(v.Members) - 1; i >= 0; i-- {
			if i < len(v.Members)-1 {
				dst = append(dst, "\r\n,"...)
			}
			dst = quote(dst, v.Members[i].Name)
			dst = append(dst, " : "...)
			dst = appendReordered(t, dst, v.Members[i].Value)
		}
		return append(dst, "\t}"...)
	}
	require.FailNow(t, "unknown kind", "%v", v.Kind)
	return nil
}
