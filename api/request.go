package api

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/bojanz/currency"
	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/api/jsoncanon"
	"github.com/chargeflow/chargeflow/internal/text"
)

// idempotencyKey reads the Idempotency-Key header: exactly one, 16–255
// printable ASCII characters without a comma, either bare or as a
// structured-field string ("…", RFC 8941) as the IETF draft allows. Both
// forms name the same key. It is the one place every idempotent route reads
// its key.
//
// A comma is refused in either form because a proxy may join two header
// lines into one, separated by ", " (RFC 9110, 5.3): "a, b" could be one key
// or two, and taking it as one would let two different keys, sent twice,
// name one request. The header lines themselves, when they arrive apart,
// are refused the same way.
// A key that is a card number is refused, so it is never looked up or
// stored. A key that merely contains one is not: it is never logged or
// echoed, and refusing those would refuse about one random hex key in 600
// (docs/api.md, "Card numbers").
func idempotencyKey(h http.Header) (string, error) {
	values := h.Values("Idempotency-Key")
	if len(values) == 0 {
		return "", NewProblem(CodeIdempotencyKeyMissing, "a POST needs an Idempotency-Key header")
	}
	if len(values) > 1 {
		return "", NewProblem(CodeIdempotencyKeyInvalid, "send exactly one Idempotency-Key header")
	}
	key := strings.TrimSpace(values[0])
	if strings.Contains(key, ",") {
		return "", NewProblem(CodeIdempotencyKeyInvalid, "the Idempotency-Key must not contain a comma: "+
			"a proxy joins repeated headers with commas, so a key with one could be two keys; send exactly one key")
	}
	if strings.HasPrefix(key, `"`) {
		unquoted, ok := unquoteSFString(key)
		if !ok {
			return "", NewProblem(CodeIdempotencyKeyInvalid, "the quoted Idempotency-Key is not a valid structured-field string")
		}
		key = unquoted
	}
	if isPAN(key) {
		// Only the key's sha256 is stored, but an unkeyed hash of a card
		// number is still one (the numbers are few enough to try them all).
		return "", FieldProblem(CodeCardNumberDetected, "Idempotency-Key",
			"the Idempotency-Key is a card number; use a random key such as a UUID")
	}
	if len(key) < 16 || len(key) > 255 {
		return "", NewProblem(CodeIdempotencyKeyInvalid, "the Idempotency-Key must be 16 to 255 characters long")
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", NewProblem(CodeIdempotencyKeyInvalid, "the Idempotency-Key must be printable ASCII")
		}
	}
	return key, nil
}

// unquoteSFString decodes an RFC 8941 sf-string: DQUOTE *chr DQUOTE, where
// only \" and \\ are escapes.
func unquoteSFString(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i == len(s)-1 || (s[i] != '"' && s[i] != '\\') {
				return "", false
			}
			b.WriteByte(s[i])
		case c == '"' || c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// ReadBody reads a JSON body of at most limit bytes. The body must say it
// is JSON: exactly one Content-Type, application/json or a +json type, in
// UTF-8 if it names a charset. A body that does not say what it is is not
// guessed at.
func ReadBody(c echo.Context, limit int64) ([]byte, error) {
	r := c.Request()
	if err := jsonContentType(r.Header.Values("Content-Type")); err != nil {
		return nil, err
	}
	return ReadLimited(c, limit)
}

// ReadLimited reads a body of at most limit bytes, of any media type.
func ReadLimited(c echo.Context, limit int64) ([]byte, error) {
	r := c.Request()
	if r.ContentLength > limit {
		return nil, NewProblem(CodeBodyTooLarge, fmt.Sprintf("the body may be at most %d bytes", limit))
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, limit))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, NewProblem(CodeBodyTooLarge, fmt.Sprintf("the body may be at most %d bytes", limit))
	}
	if err != nil {
		// The client hung up or stalled mid-body (net/http's read timeout):
		// its fault, not the database's, which the error's kind (EOF, a
		// network timeout) would otherwise suggest to ProblemFor.
		p := NewProblem(CodeIncompleteBody, "the body ended before its Content-Length, or arrived too slowly; nothing was stored")
		p.Cause = err
		return nil, p
	}
	return body, nil
}

// jsonContentType checks the Content-Type values of a request with a body.
func jsonContentType(values []string) error {
	if len(values) != 1 {
		return NewProblem(CodeUnsupportedMediaType, "send exactly one Content-Type: application/json")
	}
	mediaType, params, err := mime.ParseMediaType(values[0])
	if err != nil || (mediaType != "application/json" && !strings.HasSuffix(mediaType, "+json")) {
		return NewProblem(CodeUnsupportedMediaType, "send Content-Type: application/json")
	}
	if charset, ok := params["charset"]; ok && !strings.EqualFold(charset, "utf-8") {
		return NewProblem(CodeUnsupportedMediaType, "JSON bodies are UTF-8: send Content-Type: application/json, with no charset or charset=utf-8")
	}
	return nil
}

// chargeRequest is a validated POST /v1/charges body.
type chargeRequest struct {
	Amount        int64
	Currency      string
	PaymentMethod string
	Description   *string
	Metadata      map[string]string
	// CaptureLater is "capture": false: authorize now, capture later.
	CaptureLater bool
}

const (
	maxDescription   = 1000
	maxMetadataKeys  = 50
	maxMetadataKey   = 40
	maxMetadataValue = 500
)

var paymentMethodPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,254}$`)

// cardNumberDetail is what a card_number_detected problem says.
const cardNumberDetail = "the body contains what looks like a card number; send a payment method token instead"

// parseJSONBody is the syntactic half of reading a request body: strict
// JSON, no card number anywhere, and the RFC 8785 canonical form that the
// fingerprint is taken of. It knows nothing of charges, so nothing a later
// version may change about them (limits, fields, the currency table) can
// make it refuse what an earlier one accepted; that is chargeFromJSON's, run
// only for a key that has no record (docs/api.md, "Accepting a charge").
//
// A body that fails to parse is looked through for a card number as it
// came, byte by byte: it has no members to look into, and a card number in
// it must be answered as one rather than with a syntax error's path, which
// could name a member that holds it.
func parseJSONBody(body []byte) (jsoncanon.Value, []byte, error) {
	v, err := jsoncanon.Parse(body)
	if err != nil {
		if ContainsPAN(string(body)) {
			return jsoncanon.Value{}, nil, NewProblem(CodeCardNumberDetected, cardNumberDetail)
		}
		return jsoncanon.Value{}, nil, JSONProblem(err)
	}
	if field, found := FindCardNumber(v, ""); found {
		return jsoncanon.Value{}, nil, FieldProblem(CodeCardNumberDetected, field, cardNumberDetail)
	}
	canonical, err := jsoncanon.AppendCanonical(nil, v)
	if err != nil {
		return jsoncanon.Value{}, nil, JSONProblem(err)
	}
	return v, canonical, nil
}

// chargeFromJSON is the semantic half: it validates a parsed body as a
// charge request and refuses, naming the field, unknown fields, missing
// ones, bad values, text Postgres cannot store (StoredText), currencies
// that are not tender and amounts over the currency's cap (maxAmount scaled
// to its minor units, maxAmountFor).
func chargeFromJSON(v jsoncanon.Value, maxAmount int64) (chargeRequest, error) {
	if v.Kind != jsoncanon.Object {
		return chargeRequest{}, NewProblem(CodeInvalidJSON, "the body must be a JSON object")
	}
	var req chargeRequest
	seen := map[string]bool{}
	for _, m := range v.Members {
		seen[m.Name] = true
		var err error
		switch m.Name {
		case "amount":
			req.Amount, err = parseAmount(m.Value)
		case "currency":
			req.Currency, err = parseCurrency(m.Value)
		case "payment_method":
			req.PaymentMethod, err = parsePaymentMethod(m.Value)
		case "description":
			req.Description, err = parseDescription(m.Value)
		case "metadata":
			req.Metadata, err = parseMetadata(m.Value)
		case "capture":
			if m.Value.Kind != jsoncanon.Bool {
				err = FieldProblem(CodeInvalidField, "capture", "capture must be true (capture at once, the default) or false (authorize now, capture later)")
			}
			req.CaptureLater = !m.Value.Bool
		default:
			err = FieldProblem(CodeUnknownField, SafeFieldName(m.Name), "this field is not part of a charge request")
		}
		if err != nil {
			return chargeRequest{}, err
		}
	}
	for _, name := range []string{"amount", "currency", "payment_method"} {
		if !seen[name] {
			return chargeRequest{}, FieldProblem(CodeMissingField, name, name+" is required")
		}
	}
	if limit := maxAmountFor(req.Currency, maxAmount); req.Amount > limit {
		digits, _ := currency.GetDigits(req.Currency)
		return chargeRequest{}, FieldProblem(CodeInvalidField, "amount",
			fmt.Sprintf("amount may be at most %d for %s, in its minor unit (%d decimals)", limit, req.Currency, digits))
	}
	return req, nil
}

// JSONProblem maps a strict-parser error to its problem, naming the path.
func JSONProblem(err error) error {
	var syntaxErr *jsoncanon.SyntaxError
	if !errors.As(err, &syntaxErr) {
		return fmt.Errorf("parse body: %w", err)
	}
	code := CodeInvalidJSON
	switch {
	case errors.Is(err, jsoncanon.ErrDuplicateMember):
		code = CodeDuplicateMember
	case errors.Is(err, jsoncanon.ErrInvalidUTF8), errors.Is(err, jsoncanon.ErrLoneSurrogate):
		code = CodeInvalidUTF8
	}
	return FieldProblem(code, syntaxErr.Path, syntaxErr.Error())
}

// parseAmount reads a positive JSON integer. One too large for an int64 is
// math.MaxInt64, which every currency's cap refuses.
func parseAmount(v jsoncanon.Value) (int64, error) {
	const field = "amount"
	if v.Kind != jsoncanon.Number {
		return 0, FieldProblem(CodeInvalidField, field, "amount must be a JSON integer in the currency's minor unit, not a "+v.Kind.String())
	}
	if strings.ContainsAny(v.Number, ".eE") {
		return 0, FieldProblem(CodeInvalidField, field, "amount must be an integer in minor units, without a fraction or exponent")
	}
	if strings.HasPrefix(v.Number, "-") || v.Number == "0" {
		return 0, FieldProblem(CodeInvalidField, field, "amount must be greater than 0")
	}
	n, err := strconv.ParseInt(v.Number, 10, 64)
	if err != nil {
		return math.MaxInt64, nil
	}
	return n, nil
}

func parseCurrency(v jsoncanon.Value) (string, error) {
	const field = "currency"
	if v.Kind != jsoncanon.String {
		return "", FieldProblem(CodeInvalidField, field, "currency must be a string such as \"USD\"")
	}
	if !tenderCurrency(v.String) {
		return "", FieldProblem(CodeInvalidField, field, "currency must be the ISO 4217 code of a currency in circulation, in upper case, such as \"USD\"; funds, metals and units of account are refused")
	}
	return v.String, nil
}

func parsePaymentMethod(v jsoncanon.Value) (string, error) {
	const field = "payment_method"
	if v.Kind != jsoncanon.String || !paymentMethodPattern.MatchString(v.String) {
		return "", FieldProblem(CodeInvalidField, field, "payment_method must be a payment method token such as \"pm_card_visa\" (letters, digits, _ . : -; at most 255)")
	}
	return v.String, nil
}

func parseDescription(v jsoncanon.Value) (*string, error) {
	switch {
	case v.Kind == jsoncanon.Null:
		return nil, nil
	case v.Kind != jsoncanon.String:
		return nil, FieldProblem(CodeInvalidField, "description", "description must be a string or null")
	}
	if err := StoredText("description", "description", v.String, maxDescription); err != nil {
		return nil, err
	}
	s := v.String
	return &s, nil
}

func parseMetadata(v jsoncanon.Value) (map[string]string, error) {
	const field = "metadata"
	switch {
	case v.Kind == jsoncanon.Null:
		return nil, nil
	case v.Kind != jsoncanon.Object:
		return nil, FieldProblem(CodeInvalidField, field, "metadata must be an object of strings, or null")
	case len(v.Members) > maxMetadataKeys:
		return nil, FieldProblem(CodeInvalidField, field, fmt.Sprintf("metadata may have at most %d keys", maxMetadataKeys))
	}
	metadata := make(map[string]string, len(v.Members))
	for _, m := range v.Members {
		name := SafeFieldName(m.Name)
		if m.Name == "" {
			return nil, FieldProblem(CodeInvalidField, field, fmt.Sprintf("metadata keys must be 1 to %d characters", maxMetadataKey))
		}
		if err := StoredText(field, "metadata keys", m.Name, maxMetadataKey); err != nil {
			return nil, err
		}
		if m.Value.Kind != jsoncanon.String {
			return nil, FieldProblem(CodeInvalidField, field+"."+name, "metadata values must be strings")
		}
		if err := StoredText(field+"."+name, "metadata values", m.Value.String, maxMetadataValue); err != nil {
			return nil, err
		}
		metadata[m.Name] = m.Value.String
	}
	return metadata, nil
}

// StoredText is the API's one check of a text that the database will
// store, for every route and form, merchant's or operator's: text.Check,
// answered as a problem that names field. Invalid UTF-8 is invalid_utf8
// (the strict JSON parser refuses it before this; a form's values reach
// here as they came); a NUL, or more than max characters, is
// invalid_field. what is how the detail names the text.
func StoredText(field, what, s string, max int) error {
	err := text.Check(s, max)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, text.ErrInvalidUTF8):
		return FieldProblem(CodeInvalidUTF8, field, what+" must be valid UTF-8")
	case errors.Is(err, text.ErrTooLong):
		return FieldProblem(CodeInvalidField, field, fmt.Sprintf("%s may be at most %d characters", what, max))
	}
	// A NUL would otherwise reach the statement and fail it as a 500 after
	// everything had been checked.
	return FieldProblem(CodeInvalidField, field, what+" must not contain U+0000 (NUL), which the database cannot store")
}

// SafeFieldName is a member name fit to echo back in a problem: short
// printable ASCII, or a placeholder.
func SafeFieldName(name string) string {
	if len(name) == 0 || len(name) > 64 {
		return "(member)"
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return "(member)"
		}
	}
	return name
}

// FindCardNumber looks through every member name, string and number for a
// primary account number: 13 to 19 digits, optionally grouped by single
// spaces or dashes, that pass the Luhn check. It returns where it found one.
// Cards must reach chargeflow as payment method tokens only; a PAN in a
// request (or in our database or logs) would put the system in PCI scope.
func FindCardNumber(v jsoncanon.Value, path string) (string, bool) {
	switch v.Kind {
	case jsoncanon.String:
		return path, ContainsPAN(v.String)
	case jsoncanon.Number:
		return path, ContainsPAN(v.Number)
	case jsoncanon.Array:
		for i, e := range v.Elems {
			if p, ok := FindCardNumber(e, path+"["+strconv.Itoa(i)+"]"); ok {
				return p, true
			}
		}
	case jsoncanon.Object:
		for _, m := range v.Members {
			child := m.Name
			if path != "" {
				child = path + "." + m.Name
			}
			if ContainsPAN(m.Name) {
				return pathOr(path, "(member name)"), true
			}
			if p, ok := FindCardNumber(m.Value, SafeFieldName(child)); ok {
				return p, true
			}
		}
	}
	return "", false
}

// pathOr is path, or fallback for the top level (whose path is empty).
func pathOr(path, fallback string) string {
	if path == "" {
		return fallback
	}
	return path
}

// ContainsPAN reports whether s holds a run of 13–19 digits (single spaces
// or dashes may separate groups) that passes the Luhn check. A run is taken
// whole: digits inside a longer run are not a card number on their own.
func ContainsPAN(s string) bool {
	_, _, found := nextPAN(s, 0)
	return found
}

// isPAN reports whether s, whole, is a card number as ContainsPAN finds
// one (digits, perhaps grouped by single spaces or dashes).
func isPAN(s string) bool {
	start, end, found := nextPAN(s, 0)
	return found && start == 0 && end == len(s)
}

// nextPAN finds the first card number in s at or after from, as ContainsPAN
// defines one, and returns where it starts and ends. redactCardNumbers uses
// it to cut card numbers out of what is logged or echoed.
func nextPAN(s string, from int) (start, end int, found bool) {
	isDigit := func(c byte) bool { return c >= '0' && c <= '9' }
	for i := from; i < len(s); {
		if !isDigit(s[i]) {
			i++
			continue
		}
		var digits [19]byte
		n, tooLong := 0, false
		j := i
	run:
		for j < len(s) {
			switch c := s[j]; {
			case isDigit(c):
				if n == len(digits) {
					tooLong = true
				} else {
					digits[n] = c - '0'
					n++
				}
			case (c == ' ' || c == '-') && j+1 < len(s) && isDigit(s[j+1]):
				// a single separator between digit groups (the byte
				// before it is a digit: runs start with one)
			default:
				break run
			}
			j++
		}
		if !tooLong && n >= 13 && luhn(digits[:n]) {
			return i, j, true
		}
		i = j
	}
	return 0, 0, false
}

// luhn reports whether the digits pass the Luhn (mod 10) check.
func luhn(digits []byte) bool {
	sum := 0
	double := false
	for i := len(digits) - 1; i >= 0; i-- {
		d := int(digits[i])
		if double {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return sum%10 == 0
}

// fingerprint identifies a request for its idempotency key:
// sha256(method "\n" route "\n" canonical body). Headers never take part.
func fingerprint(method, route string, canonical []byte) []byte {
	h := sha256.New()
	h.Write([]byte(method + "\n" + route + "\n"))
	h.Write(canonical)
	return h.Sum(nil)
}
