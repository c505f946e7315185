package jsoncanon

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/gowebpki/jcs"
	"github.com/stretchr/testify/require"
)

func TestCanonical(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		input string
		want  string
	}{
		{"Charge",
			`{ "amount": 1000, "currency": "USD", "payment_method": "pm_card_visa",
			   "description": "Order A-1", "metadata": { "order": "A-1", "customer": "c_42" } }`,
			`{"amount":1000,"currency":"USD","description":"Order A-1","metadata":{"customer":"c_42","order":"A-1"},"payment_method":"pm_card_visa"}`},
		// RFC 8785 §3.2.2.
		{"RFC8785Example",
			`{
			  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
			  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
			  "literals": [null, true, false]
			}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`},
		// RFC 8785 §3.2.3: members sorted by UTF-16 code units.
		{"RFC8785Sorting",
			`{
			  "\u20ac": "Euro Sign",
			  "\r": "Carriage Return",
			  "\ufb33": "Hebrew Letter Dalet With Dagesh",
			  "1": "One",
			  "\ud83d\ude00": "Emoji: Grinning Face",
			  "\u0080": "Control",
			  "\u00f6": "Latin Small Letter O With Diaeresis"
			}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\"," +
				"\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}"},
		{"Structures",
			`{"1": {"f": {"f": "hi","F": 5} ,"\n": 56.0}, "10": { }, "": "empty", "a": { }, "111": [ {"e": "yes","E": "no" } ], "A": { }}`,
			`{"":"empty","1":{"\n":56,"f":{"F":5,"f":"hi"}},"10":{},"111":[{"E":"no","e":"yes"}],"A":{},"a":{}}`},
		{"Arrays", "[\n  56,\n  {\n    \"d\": true,\n    \"10\": null,\n    \"1\": [ ]\n  }\n]",
			`[56,{"1":[],"10":null,"d":true}]`},
		{"NoLocaleOrNormalization", `{"sin":"","pêche":"","péché":"","peach":"","A\u030a":"Å"}`,
			`{"Å":"Å","peach":"","péché":"","pêche":"","sin":""}`},
		{"StringEscaping", `"\u0000\u0001\b\t\n\u000b\f\r\u000e\u001f \"\\\/\u007f\u0080\u2028\u2029\uffff"`,
			"\"\\u0000\\u0001\\b\\t\\n\\u000b\\f\\r\\u000e\\u001f \\\"\\\\/\x7f\u0080\u2028\u2029\uffff\""},
		{"EscapedNamesSorted", `{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
		{"ScalarRoots", ` "x" `, `"x"`},
		{"True", "\ttrue\n", `true`},
		{"Null", `null`, `null`},
		{"EmptyContainers", `[ { } , [ ] , "" ]`, `[{},[],""]`},
		{"NegativeZero", `[-0, -0.0, -0e5, 0.0, 0e-5, 1e-400, -1e-400]`, `[0,0,0,0,0,0,0]`},
		{"Integers", `[1000, -1000, 999999999999999, 1000000000000000, 9007199254740993, 100000000000000000000, 1e21]`,
			`[1000,-1000,999999999999999,1000000000000000,9007199254740992,100000000000000000000,1e+21]`},
		{"NumberForms", `[1.50, 1e3, 1E+3, 10e-1, 0.1e1, 12.5e-1, 0.000001, 1e-7, 123e-9, 1.5e300, -2.5e-300]`,
			`[1.5,1000,1000,1,1,1.25,0.000001,1e-7,1.23e-7,1.5e+300,-2.5e-300]`},
		{"NumberExtremes", `[5e-324, 2.4703282292062328e-324, 1.7976931348623157e308, 4.9406564584124654e-324]`,
			`[5e-324,5e-324,1.7976931348623157e+308,5e-324]`},
		{"LongMantissa", `0.` + strings.Repeat("3", 500), `0.3333333333333333`},
		{"LongInteger", `1` + strings.Repeat("0", 400) + `e-400`, `1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := Canonical([]byte(tt.input))
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))

			again, err := Canonical(got)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(again))

			oracle, err := jcs.Transform([]byte(tt.input))
			require.NoError(t, err)
			require.Equal(t, string(oracle), string(got))
		})
	}
}

// TestNumbersRFC8785 checks the IEEE 754 to text table of RFC 8785
// Appendix B, both on the double directly and through a literal.
func TestNumbersRFC8785(t *testing.T) {
	t.Parallel()

	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range tests {
		f := math.Float64frombits(tt.bits)
		require.Equal(t, tt.want, string(appendES(nil, f)), "%016x", tt.bits)

		literal := strconv.FormatFloat(f, 'g', -1, 64)
		got, err := Canonical([]byte(literal))
		require.NoError(t, err, literal)
		require.Equal(t, tt.want, string(got), literal)
	}

	// The literals RFC 8785 and its errata discuss.
	literals := []struct{ input, want string }{
		{"1e21", "1e+21"},
		{"1e20", "100000000000000000000"},
		{"0.000001", "0.000001"},
		{"1e-7", "1e-7"},
		{"9007199254740993", "9007199254740992"},
		{"-0", "0"},
		{"1e23", "1e+23"},
		{"4.50", "4.5"},
		{"2e-3", "0.002"},
		{"333333333.33333329", "333333333.3333333"},
	}
	for _, tt := range literals {
		got, err := Canonical([]byte(tt.input))
		require.NoError(t, err, tt.input)
		require.Equal(t, tt.want, string(got), tt.input)
	}

	// NaN and the infinities cannot be written in JSON; a literal beyond the
	// largest double is refused rather than turned into one of them.
	for _, literal := range []string{"1e400", "-1e400", "1.7976931348623159e308", "1" + strings.Repeat("0", 309)} {
		_, err := Canonical([]byte(literal))
		require.ErrorIs(t, err, ErrNumberRange, literal)
	}
}

// TestAppendESMatchesOracle compares the number formatting with jcs's on
// random doubles of every magnitude and checks that the text reads back as
// the same double.
func TestAppendESMatchesOracle(t *testing.T) {
	t.Parallel()

	rng := rand.New(rand.NewPCG(8785, 1))
	check := func(f float64) {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return
		}
		got := string(appendES(nil, f))
		want, err := jcs.NumberToJSON(f)
		require.NoError(t, err)
		require.Equal(t, want, got, "%016x", math.Float64bits(f))

		back, err := strconv.ParseFloat(got, 64)
		require.NoError(t, err)
		require.Equal(t, f == 0, back == 0)
		if f != 0 {
			require.Equal(t, f, back)
		}
	}
	for range 100_000 {
		check(math.Float64frombits(rng.Uint64()))
	}
	for e := -330; e <= 310; e++ {
		for _, m := range []float64{1, 1.5, 9.999999999999999, 123456789} {
			check(m * math.Pow(10, float64(e)))
			check(-m * math.Pow(10, float64(e)))
		}
	}
	for i := range int64(1 << 12) {
		check(float64(i))
		check(float64(1<<53 - i))
	}
}

func TestCanonicalInvariance(t *testing.T) {
	t.Parallel()

	same := []string{
		`{"amount":1000,"currency":"USD","metadata":{"order":"A-1","customer":"c_42"}}`,
		`{"currency":"USD","metadata":{"customer":"c_42","order":"A-1"},"amount":1000}`,
		"{\n  \"metadata\" : {\n    \"customer\" : \"c_42\",\n    \"order\" : \"A-1\"\n  },\n  \"amount\" : 1000,\n  \"currency\" : \"USD\"\n}\n",
		"\r\n\t{ \"amount\"\t:\t1000 , \"currency\":\"USD\" ,\"metadata\":{ \"order\":\"A-1\",\"customer\":\"c_42\" } }\t",
		`{"\u0061mount":1000,"currency":"\u0055SD","metadata":{"order":"A\u002d1","customer":"c_\u0034\u0032"}}`,
		`{"amount":1000,"currency":"USD","metadata":{"order":"A-1","customer":"c_42"}}`,
		`{"amount":1000.0,"currency":"USD","metadata":{"order":"A-1","customer":"c_42"}}`,
		`{"amount":1e3,"currency":"USD","metadata":{"order":"A-1","customer":"c_42"}}`,
	}
	want, err := Canonical([]byte(same[0]))
	require.NoError(t, err)
	for _, body := range same {
		got, err := Canonical([]byte(body))
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), body)
	}

	different := []string{
		`{"amount":1001,"currency":"USD","metadata":{"order":"A-1","customer":"c_42"}}`,
		`{"amount":"1000","currency":"USD","metadata":{"order":"A-1","customer":"c_42"}}`,
		`{"amount":1000,"currency":"usd","metadata":{"order":"A-1","customer":"c_42"}}`,
		`{"amount":1000,"currency":"USD","metadata":{"order":"A-1","customer":"c_42 "}}`,
		`{"amount":1000,"currency":"USD","metadata":{"order":"A-1"}}`,
		`{"amount":1000,"currency":"USD","metadata":{"order":"A-1","customer":"c_42","x":null}}`,
		`{"amount":1000,"currency":"USD","metadata":[{"order":"A-1","customer":"c_42"}]}`,
		`{"amount":1000,"currency":"USD","metadata":{"order":"A-1","Customer":"c_42"}}`,
	}
	seen := map[string]string{string(want): same[0]}
	for _, body := range different {
		got, err := Canonical([]byte(body))
		require.NoError(t, err)
		previous, ok := seen[string(got)]
		require.False(t, ok, "%s and %s share a canonical form", body, previous)
		seen[string(got)] = body
	}
}

func TestAppendCanonical(t *testing.T) {
	t.Parallel()

	t.Run("HandBuiltValue", func(t *testing.T) {
		t.Parallel()

		v := Value{Kind: Object, Members: []Member{
			{Name: "z", Value: Value{Kind: Array, Elems: []Value{{Kind: Number, Number: "-0"}, {Kind: Bool, Bool: true}, {}}}},
			{Name: "a", Value: Value{Kind: String, String: "line\nbreak"}},
		}}
		got, err := AppendCanonical([]byte("prefix:"), v)
		require.NoError(t, err)
		require.Equal(t, `prefix:{"a":"line\nbreak","z":[0,true,null]}`, string(got))

		// The caller's member order is left alone.
		require.Equal(t, "z", v.Members[0].Name)
	})

	t.Run("Rejects", func(t *testing.T) {
		t.Parallel()

		cyclic := make([]Value, 1)
		cyclic[0] = Value{Kind: Array, Elems: cyclic}

		deep := Value{}
		for range MaxDepth + 1 {
			deep = Value{Kind: Object, Members: []Member{{Name: "a", Value: deep}}}
		}

		num := func(literal string) Value { return Value{Kind: Number, Number: literal} }
		tests := []struct {
			name   string
			value  Value
			reason error
			path   string
		}{
			{"EmptyNumber", num(""), ErrSyntax, ""},
			{"PlusNumber", num("+1"), ErrSyntax, ""},
			{"HexNumber", num("0x10"), ErrSyntax, ""},
			{"NaN", num("NaN"), ErrSyntax, ""},
			{"Inf", num("Inf"), ErrSyntax, ""},
			{"LeadingZero", num("01"), ErrSyntax, ""},
			{"Underscore", num("1_0"), ErrSyntax, ""},
			{"SpaceInNumber", num(" 1"), ErrSyntax, ""},
			{"TrailingPoint", num("1."), ErrSyntax, ""},
			{"OutOfRange", Value{Kind: Array, Elems: []Value{num("1"), num("-1e309")}}, ErrNumberRange, "[1]"},
			{"InvalidUTF8String", Value{Kind: Object, Members: []Member{{Name: "d", Value: Value{Kind: String, String: "\xff"}}}}, ErrInvalidUTF8, "d"},
			{"InvalidUTF8Name", Value{Kind: Object, Members: []Member{{Name: "\xffa"}}}, ErrInvalidUTF8, `["\xffa"]`},
			{"EncodedSurrogateString", Value{Kind: String, String: "\xed\xb0\x80"}, ErrInvalidUTF8, ""},
			{"Duplicate", Value{Kind: Object, Members: []Member{{Name: "b"}, {Name: "a"}, {Name: "b"}}}, ErrDuplicateMember, "b"},
			{"UnknownKind", Value{Kind: Array, Elems: []Value{{Kind: 42}}}, ErrSyntax, "[0]"},
			{"Cyclic", cyclic[0], ErrTooDeep, strings.Repeat("[0]", MaxDepth)},
			{"TooDeep", deep, ErrTooDeep, strings.Repeat(".a", MaxDepth)[1:]},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()

				dst := []byte("prefix")
				got, err := AppendCanonical(dst, tt.value)
				require.ErrorIs(t, err, tt.reason)
				require.Equal(t, "prefix", string(got))
				var syntaxErr *SyntaxError
				require.ErrorAs(t, err, &syntaxErr)
				require.Equal(t, tt.path, syntaxErr.Path)
				require.Equal(t, int64(-1), syntaxErr.Offset)
			})
		}
	})
}

// TestCompareUTF16 checks the byte-level comparison against sorting the
// UTF-16 encodings, on strings made of the runes where the orders of
// UTF-8, code points and UTF-16 meet or part.
func TestCompareUTF16(t *testing.T) {
	t.Parallel()

	reference := func(a, b string) int {
		return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
	}
	runes := []rune{0, 'A', 'a', 0x7f, 0x80, 0x7ff, 0x800, 0xd7ff, 0xe000, 0xefff, 0xf000, 0xfb33, 0xffff,
		0x10000, 0x1f600, 0x10ffff}
	rng := rand.New(rand.NewPCG(16, 8785))
	strs := []string{""}
	for range 2000 {
		rs := make([]rune, rng.IntN(4))
		for i := range rs {
			rs[i] = runes[rng.IntN(len(runes))]
		}
		strs = append(strs, string(rs))
	}
	for _, a := range strs {
		for _, b := range strs[:200] {
			require.Equal(t, reference(a, b), compareUTF16(a, b), "%q vs %q", a, b)
		}
	}
}

// BenchmarkCanonical measures the fingerprint input of a typical charge.
func BenchmarkCanonical(b *testing.B) {
	body := []byte(`{"amount":1000,"currency":"USD","payment_method":"pm_card_visa","description":"Order A-1","metadata":{"order":"A-1","customer":"c_42"}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Canonical(body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse measures parsing alone, as the handler does to validate
// the fields of a charge.
func BenchmarkParse(b *testing.B) {
	body := []byte(`{"amount":1000,"currency":"USD","payment_method":"pm_card_visa","description":"Order A-1","metadata":{"order":"A-1","customer":"c_42"}}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Parse(body); err != nil {
			b.Fatal(err)
		}
	}
}
