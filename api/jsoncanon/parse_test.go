package jsoncanon

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseRejects(t *testing.T) {
	t.Parallel()

	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	deepPath := strings.Repeat("[0]", MaxDepth)
	wide := `{` + numberedMembers(smallObject+4) + `,"m7":true}`

	tests := []struct {
		name   string
		input  string
		reason error
		path   string
		offset int64
	}{
		{"Empty", ``, ErrSyntax, "", 0},
		{"OnlyWhitespace", " \n\t\r", ErrSyntax, "", 4},
		{"ByteOrderMark", "\xef\xbb\xbf{}", ErrSyntax, "", 0},
		{"TrailingValue", `{} {}`, ErrSyntax, "", 3},
		{"TrailingNumber", `1 2`, ErrSyntax, "", 2},
		{"TrailingGarbage", `[1]x`, ErrSyntax, "", 3},
		{"TrailingComma", `[1,]`, ErrSyntax, "[1]", 3},
		{"TrailingCommaObject", `{"a":1,}`, ErrSyntax, "", 7},
		{"LeadingComma", `[,1]`, ErrSyntax, "[0]", 1},
		{"MissingComma", `[1 2]`, ErrSyntax, "", 3},
		{"MissingColon", `{"a" 1}`, ErrSyntax, "a", 5},
		{"MissingValue", `{"a":}`, ErrSyntax, "a", 5},
		{"Unclosed", `{"a":[1,2`, ErrSyntax, "a", 9},
		{"SingleQuotes", `{'a':1}`, ErrSyntax, "", 1},
		{"UnquotedName", `{a:1}`, ErrSyntax, "", 1},
		{"NumberName", `{1:1}`, ErrSyntax, "", 1},
		{"LineComment", "// c\n{}", ErrSyntax, "", 0},
		{"BlockComment", "{/* c */}", ErrSyntax, "", 1},
		{"FormFeedWhitespace", "\f{}", ErrSyntax, "", 0},
		{"VerticalTabWhitespace", "[1,\v2]", ErrSyntax, "[1]", 3},
		{"NoBreakSpace", "\u00a0{}", ErrSyntax, "", 0},
		{"NaN", `NaN`, ErrSyntax, "", 0},
		{"Infinity", `[Infinity]`, ErrSyntax, "[0]", 1},
		{"NegativeInfinity", `-Infinity`, ErrSyntax, "", 1},
		{"Undefined", `{"a":undefined}`, ErrSyntax, "a", 5},
		{"LeadingZero", `01`, ErrSyntax, "", 1},
		{"NegativeLeadingZero", `-01`, ErrSyntax, "", 2},
		{"DoubleZero", `{"amount":00}`, ErrSyntax, "amount", 11},
		{"LeadingPlus", `+1`, ErrSyntax, "", 0},
		{"PlusInArray", `[1,+1]`, ErrSyntax, "[1]", 3},
		{"LeadingPoint", `.5`, ErrSyntax, "", 0},
		{"TrailingPoint", `1.`, ErrSyntax, "", 2},
		{"PointExponent", `1.e5`, ErrSyntax, "", 2},
		{"EmptyExponent", `1e`, ErrSyntax, "", 2},
		{"SignOnlyExponent", `1e+`, ErrSyntax, "", 3},
		{"MinusOnly", `-`, ErrSyntax, "", 1},
		{"DoubleMinus", `--1`, ErrSyntax, "", 1},
		{"Hex", `0x10`, ErrSyntax, "", 1},
		{"Underscore", `1_000`, ErrSyntax, "", 1},
		{"TruncatedTrue", `tru`, ErrSyntax, "", 3},
		{"CapitalTrue", `True`, ErrSyntax, "", 0},
		{"LongerNull", `nulll`, ErrSyntax, "", 4},
		{"ControlInString", "\"a\x01\"", ErrSyntax, "", 2},
		{"TabInString", "{\"d\":\"a\tb\"}", ErrSyntax, "d", 7},
		{"NewlineInName", "{\"a\nb\":1}", ErrSyntax, "", 3},
		{"NulInString", "\"\x00\"", ErrSyntax, "", 1},
		{"ControlAfterEscape", "\"\\n\x1f\"", ErrSyntax, "", 3},
		{"UnknownEscape", `"\a"`, ErrSyntax, "", 2},
		{"HexEscape", `"\x41"`, ErrSyntax, "", 2},
		{"SingleQuoteEscape", `"\'"`, ErrSyntax, "", 2},
		{"CapitalUEscape", `"\U0041"`, ErrSyntax, "", 2},
		{"ShortUEscape", `"\u12"`, ErrSyntax, "", 5},
		{"BadHexInUEscape", `"\u12G4"`, ErrSyntax, "", 5},
		{"BackslashAtEnd", `"\`, ErrSyntax, "", 2},
		{"UnterminatedString", `"abc`, ErrSyntax, "", 4},
		{"UnterminatedEscapedString", `{"a":"b\n`, ErrSyntax, "a", 9},

		{"Duplicate", `{"a":1,"a":2}`, ErrDuplicateMember, "a", 7},
		{"DuplicateAfterUnescaping", `{"a":1,"\u0061":2}`, ErrDuplicateMember, "a", 7},
		{"DuplicateEscapedBoth", `{"\/":1,"\u002F":2}`, ErrDuplicateMember, `["/"]`, 8},
		{"DuplicateSurrogatePair", `{"😀":1,"\ud83d\ude00":2}`, ErrDuplicateMember, `["\U0001f600"]`, 10},
		{"DuplicateNested", `{"metadata":{"order":"A","order":"B"}}`, ErrDuplicateMember, "metadata.order", 25},
		{"DuplicateInArray", `[{"k":1},{"k":1,"k":1}]`, ErrDuplicateMember, "[1].k", 16},
		{"DuplicateEmptyName", `{"":1,"":2}`, ErrDuplicateMember, `[""]`, 6},
		{"DuplicateInLargeObject", wide, ErrDuplicateMember, "m7", int64(len(wide) - len(`"m7":true}`))},
		{"DuplicateSameValue", `{"amount":1000,"amount":1000}`, ErrDuplicateMember, "amount", 15},

		{"InvalidUTF8InString", "\"\xff\"", ErrInvalidUTF8, "", 1},
		{"InvalidUTF8InName", "{\"a\xff\":1}", ErrInvalidUTF8, "", 3},
		{"InvalidUTF8Nested", "{\"a\":[\"ok\",\"\xc3\"]}", ErrInvalidUTF8, "a[1]", 12},
		{"InvalidUTF8AfterEscape", "\"\\n\xff\"", ErrInvalidUTF8, "", 3},
		{"InvalidUTF8OutsideString", "[1,\xff]", ErrInvalidUTF8, "[1]", 3},
		{"InvalidUTF8Trailing", "{} \xfe", ErrInvalidUTF8, "", 3},
		{"InvalidUTF8AtStart", "\x80", ErrInvalidUTF8, "", 0},
		{"OverlongSlash", "\"\xc0\xaf\"", ErrInvalidUTF8, "", 1},
		{"OverlongNul", "\"\xe0\x80\x80\"", ErrInvalidUTF8, "", 1},
		{"EncodedSurrogate", "\"\xed\xa0\x80\"", ErrInvalidUTF8, "", 1},
		{"TruncatedSequence", "\"\xe2\x82\"", ErrInvalidUTF8, "", 1},
		{"BeyondUnicode", "\"\xf4\x90\x80\x80\"", ErrInvalidUTF8, "", 1},
		{"Latin1", "\"caf\xe9\"", ErrInvalidUTF8, "", 4},

		{"LoneHighSurrogate", `"\ud800"`, ErrLoneSurrogate, "", 1},
		{"LoneLowSurrogate", `"\udc00"`, ErrLoneSurrogate, "", 1},
		{"HighSurrogateThenText", `{"n":"a\uD83Dx"}`, ErrLoneSurrogate, "n", 7},
		{"HighSurrogateThenEscape", `"\ud83d\n"`, ErrLoneSurrogate, "", 1},
		{"HighSurrogateThenBMP", `"\ud83d\u0041"`, ErrLoneSurrogate, "", 1},
		{"TwoHighSurrogates", `"\ud83d\ud83d"`, ErrLoneSurrogate, "", 1},
		{"ReversedPair", `"\ude00\ud83d"`, ErrLoneSurrogate, "", 1},
		{"LoneSurrogateInName", `{"\udfff":1}`, ErrLoneSurrogate, "", 2},

		{"TooDeepArrays", deep, ErrTooDeep, deepPath, MaxDepth},
		{"TooDeepObjects", strings.Repeat(`{"a":`, MaxDepth+1), ErrTooDeep, strings.Repeat(".a", MaxDepth)[1:], 5 * MaxDepth},
		{"TooDeepHostile", strings.Repeat("[", 1<<20), ErrTooDeep, deepPath, MaxDepth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			v, err := Parse([]byte(tt.input))
			require.ErrorIs(t, err, tt.reason)
			require.Equal(t, Value{}, v)
			var syntaxErr *SyntaxError
			require.ErrorAs(t, err, &syntaxErr)
			require.Equal(t, tt.path, syntaxErr.Path)
			require.Equal(t, tt.offset, syntaxErr.Offset)

			out, err := Canonical([]byte(tt.input))
			require.ErrorIs(t, err, tt.reason)
			require.Nil(t, out)
		})
	}
}

// numberedMembers returns n members "m0":0, "m1":1, ... without braces.
func numberedMembers(n int) string {
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`"m` + strconv.Itoa(i) + `":` + strconv.Itoa(i))
	}
	return sb.String()
}

func TestParseAccepts(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		input string
	}{
		{"MaxDepthArrays", strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)},
		{"MaxDepthObjects", strings.Repeat(`{"a":`, MaxDepth-1) + `{}` + strings.Repeat(`}`, MaxDepth-1)},
		{"SurroundingWhitespace", " \t\r\n{ } \t\r\n"},
		{"ScalarRoot", `"x"`},
		{"NegativeZero", `-0`},
		{"ExponentForms", `[1E5,1e+5,1e-5,0.5e0,-0.0E-0]`},
		{"HugeNumberLiteral", `1e400`},
		{"AllEscapes", `"\"\\\/\b\f\n\r\t\u0000\u001F\uFFFF\uD83D\uDE00"`},
		{"DEL", "\"\x7f\""},
		{"NoncharacterAndReplacementChar", "\"\uFFFE\uFFFD\""},
		{"CaseSensitiveNames", `{"a":1,"A":2}`},
		{"SameNameDifferentObjects", `{"a":{"a":{"a":1}},"b":{"a":2}}`},
		{"ManyMembers", `{` + numberedMembers(1000) + `}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			_, err := Parse([]byte(tt.input))
			require.NoError(t, err)
		})
	}
}

func TestParseValue(t *testing.T) {
	t.Parallel()

	data := []byte(`{"amount": 1000, "fee":1.50, "rate": 1e3, "neg": -0,
		"description": "Order \"A-1\" \u20ac", "ok": true, "no": false, "none": null,
		"items": [{"sku":"a"}, [], {}], "metadata": {"order": "A-1"}}`)
	v, err := Parse(data)
	require.NoError(t, err)

	// Writing over the input must not change the Value.
	for i := range data {
		data[i] = 'x'
	}

	require.Equal(t, Object, v.Kind)
	names := make([]string, 0, len(v.Members))
	for _, m := range v.Members {
		names = append(names, m.Name)
	}
	require.Equal(t, []string{"amount", "fee", "rate", "neg", "description", "ok", "no", "none", "items", "metadata"}, names)

	member := func(name string) Value {
		t.Helper()
		m, ok := v.Member(name)
		require.True(t, ok, name)
		return m
	}
	require.Equal(t, Value{Kind: Number, Number: "1000"}, member("amount"))
	require.Equal(t, Value{Kind: Number, Number: "1.50"}, member("fee"))
	require.Equal(t, Value{Kind: Number, Number: "1e3"}, member("rate"))
	require.Equal(t, Value{Kind: Number, Number: "-0"}, member("neg"))
	require.Equal(t, Value{Kind: String, String: `Order "A-1" €`}, member("description"))
	require.Equal(t, Value{Kind: Bool, Bool: true}, member("ok"))
	require.Equal(t, Value{Kind: Bool}, member("no"))
	require.Equal(t, Value{}, member("none"))
	require.Equal(t, Value{Kind: Array, Elems: []Value{
		{Kind: Object, Members: []Member{{Name: "sku", Value: Value{Kind: String, String: "a"}}}},
		{Kind: Array},
		{Kind: Object},
	}}, member("items"))
	order, ok := member("metadata").Member("order")
	require.True(t, ok)
	require.Equal(t, "A-1", order.String)

	_, ok = v.Member("missing")
	require.False(t, ok)
	_, ok = Value{Kind: String, String: "amount"}.Member("amount")
	require.False(t, ok)
}

func TestKindString(t *testing.T) {
	t.Parallel()

	require.Equal(t, "null", Null.String())
	require.Equal(t, "bool", Bool.String())
	require.Equal(t, "number", Number.String())
	require.Equal(t, "string", String.String())
	require.Equal(t, "array", Array.String())
	require.Equal(t, "object", Object.String())
	require.Equal(t, "Kind(9)", Kind(9).String())
}

func TestSyntaxError(t *testing.T) {
	t.Parallel()

	t.Run("MessageNeverQuotesTheBody", func(t *testing.T) {
		t.Parallel()

		const card = "4242424242424242"
		for _, body := range []string{
			`{"card":"` + card + "\x01\"}",
			`{"card":` + card + `x}`,
			`{"card":"` + card + `\q"}`,
			`{"card":"` + card + "\xff\"}",
			`{"card":"` + card + `\ud800"}`,
			`{"card":"` + card + `"}` + card,
			`{"card":` + card + `e999}`,
			`[` + card + `,` + card,
		} {
			_, err := Canonical([]byte(body))
			require.Error(t, err, body)
			require.NotContains(t, err.Error(), "4242", body)
		}
	})

	t.Run("Message", func(t *testing.T) {
		t.Parallel()

		_, err := Parse([]byte(`{"metadata":{"order":"A","order":"B"}}`))
		require.EqualError(t, err, "jsoncanon: duplicate member name at metadata.order (offset 25)")

		_, err = Parse([]byte(`[1,2`))
		require.EqualError(t, err, "jsoncanon: invalid JSON: unexpected end of input, expected ',' or ']' after an element (offset 4)")

		_, err = Canonical([]byte(`{"amount":1e400}`))
		require.EqualError(t, err, "jsoncanon: number out of range at amount")
	})

	t.Run("PathQuotesUnusualNames", func(t *testing.T) {
		t.Parallel()

		long := strings.Repeat("é", 40) // 80 bytes
		tests := []struct {
			input string
			path  string
		}{
			{`{"a.b":{"c":1,"c":2}}`, `["a.b"].c`},
			{`{"x":{"":[0,{"q":1,"q":1}]}}`, `x[""][1].q`},
			{`{"line\nbreak":{"c":1,"c":2}}`, `["line\nbreak"].c`},
			{`{"` + long + `":{"c":1,"c":2}}`, `["` + strings.Repeat(`\u00e9`, 32) + `..."].c`},
			{`{"` + strings.Repeat("a", maxPathName) + `":[{"c":1,"c":2}]}`, strings.Repeat("a", maxPathName) + `[0].c`},
			{`{"` + strings.Repeat("a", maxPathName+1) + `":[{"c":1,"c":2}]}`, `["` + strings.Repeat("a", maxPathName) + `..."][0].c`},
		}
		for _, tt := range tests {
			_, err := Parse([]byte(tt.input))
			var syntaxErr *SyntaxError
			require.ErrorAs(t, err, &syntaxErr)
			require.Equal(t, tt.path, syntaxErr.Path)
		}
	})

	t.Run("SentinelsAreDistinct", func(t *testing.T) {
		t.Parallel()

		_, err := Parse([]byte(`{"a":1,"a":2}`))
		require.ErrorIs(t, err, ErrDuplicateMember)
		require.False(t, errors.Is(err, ErrSyntax))
	})
}

// TestParseLargeInputs parses bodies far larger than any request, shaped to
// hit the quadratic or recursive corners a naive parser has: many members
// (duplicate detection), long runs of escapes, long numbers, and width at
// the greatest depth. Each takes milliseconds when linear.
func TestParseLargeInputs(t *testing.T) {
	t.Parallel()

	const n = 100_000
	manyMembers := `{` + numberedMembers(n) + `}`
	tests := []struct {
		name   string
		input  string
		reason error
	}{
		{"ManyMembers", manyMembers, nil},
		{"ManyMembersDuplicateLast", manyMembers[:len(manyMembers)-1] + `,"m0":0}`, ErrDuplicateMember},
		{"ManySmallObjects", `[` + strings.Repeat(`{"a":1,"b":[2]},`, n) + `{}]`, nil},
		{"ManyEscapes", `"` + strings.Repeat(`\u00e9\n`, n) + `"`, nil},
		{"LongNumber", `-1.` + strings.Repeat("9", n) + `e-5`, nil},
		{"WideAtMaxDepth", strings.Repeat("[", MaxDepth) + strings.Repeat("0,", n) + "0" + strings.Repeat("]", MaxDepth), nil},
		{"DeepAndUnclosed", strings.Repeat(`{"a":[`, n), ErrTooDeep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			_, err := Canonical([]byte(tt.input))
			if tt.reason == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.reason)
			}
		})
	}
}
