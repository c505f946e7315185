package jsoncanon

import (
	"fmt"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of arrays and objects that Parse and
// AppendCanonical accept. Request bodies are shallow; the limit bounds the
// recursion of both and the work a hostile body can cause.
const MaxDepth = 64

// smallObject is the member count up to which duplicate names are found by
// comparing with every earlier member; larger objects use a map so that a
// body with many members stays linear.
const smallObject = 16

// Parse reads exactly one JSON value (RFC 8259) strictly: optional
// whitespace (space, tab, newline, carriage return) around it and nothing
// else. It refuses duplicate member names, invalid UTF-8, lone surrogates and
// nesting deeper than MaxDepth. Numbers are checked against the JSON grammar
// but not converted, so a number too large for a double is accepted here and
// refused by AppendCanonical.
//
// Every error is a *SyntaxError.
func Parse(data []byte) (Value, error) {
	// One copy of the input backs every string of the result: names and
	// strings without escapes, and number literals, are substrings of it.
	p := parser{src: string(data)}
	p.skipSpace()
	var v Value
	f := p.parseValue(&v)
	if f == nil {
		p.skipSpace()
		if p.pos < len(p.src) {
			f = p.unexpected("end of input after the value")
		}
	}
	if f != nil {
		return Value{}, f.syntaxError()
	}
	return v, nil
}

// parser is a recursive-descent parser over one input. Recursion is bounded
// by MaxDepth.
type parser struct {
	src   string
	pos   int
	depth int

	// scratch is where strings with escapes are decoded.
	scratch []byte

	// members and elems hold the children of every container of the
	// document.
	members arena[Member]
	elems   arena[Value]
}

func (p *parser) fail(offset int, reason error) *failure {
	return &failure{offset: int64(offset), reason: reason}
}

func (p *parser) failSyntax(offset int, format string, args ...any) *failure {
	return p.fail(offset, fmt.Errorf("%w: "+format, append([]any{ErrSyntax}, args...)...))
}

// unexpected reports the byte at p.pos, which is not what the grammar
// allows there. A byte that does not start valid UTF-8 is reported as
// invalid UTF-8 rather than as a syntax error, so that such bodies are
// refused for the same reason wherever the bad byte is.
func (p *parser) unexpected(expected string) *failure {
	if p.pos >= len(p.src) {
		return p.failSyntax(p.pos, "unexpected end of input, expected %s", expected)
	}
	if c := p.src[p.pos]; c >= utf8.RuneSelf {
		if r, size := utf8.DecodeRuneInString(p.src[p.pos:]); r == utf8.RuneError && size == 1 {
			return p.fail(p.pos, ErrInvalidUTF8)
		}
	}
	return p.failSyntax(p.pos, "unexpected character, expected %s", expected)
}

func (p *parser) skipSpace() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// consume skips c if it is the next byte.
func (p *parser) consume(c byte) bool {
	if p.pos < len(p.src) && p.src[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

// parseValue parses one value into v, which must be the zero Value. Values
// are parsed in place, into their final slot, rather than returned: a Value
// is large and copying it at every level costs more than the parsing.
func (p *parser) parseValue(v *Value) *failure {
	if p.pos >= len(p.src) {
		return p.unexpected("a value")
	}
	var f *failure
	switch c := p.src[p.pos]; {
	case c == '{':
		v.Kind = Object
		v.Members, f = p.parseObject()
	case c == '[':
		v.Kind = Array
		v.Elems, f = p.parseArray()
	case c == '"':
		v.Kind = String
		v.String, f = p.parseString()
	case c == '-' || '0' <= c && c <= '9':
		v.Kind = Number
		v.Number, f = p.parseNumber()
	case c == 't':
		v.Kind, v.Bool = Bool, true
		f = p.parseLiteral("true")
	case c == 'f':
		v.Kind = Bool
		f = p.parseLiteral("false")
	case c == 'n':
		f = p.parseLiteral("null")
	default:
		f = p.unexpected("a value")
	}
	return f
}

func (p *parser) parseLiteral(literal string) *failure {
	for i := 0; i < len(literal); i++ {
		if !p.consume(literal[i]) {
			return p.unexpected("a literal")
		}
	}
	return nil
}

func (p *parser) parseObject() ([]Member, *failure) {
	if p.depth == MaxDepth {
		return nil, p.fail(p.pos, ErrTooDeep)
	}
	p.depth++
	p.pos++ // '{'
	// Members are collected in a buffer on this frame's stack and copied
	// into the arena once the object is closed, when their number is known.
	var buf [8]Member
	members := buf[:0]
	var seen map[string]struct{} // only for objects larger than smallObject
	p.skipSpace()
	if !p.consume('}') {
		for {
			if p.pos >= len(p.src) || p.src[p.pos] != '"' {
				return nil, p.unexpected("a member name")
			}
			nameOffset := p.pos
			name, f := p.parseString()
			if f != nil {
				return nil, f
			}
			if isDuplicate(members, &seen, name) {
				return nil, p.fail(nameOffset, ErrDuplicateMember).inMember(name)
			}
			p.skipSpace()
			if !p.consume(':') {
				return nil, p.unexpected("':' after a member name").inMember(name)
			}
			p.skipSpace()
			members = append(members, Member{Name: name})
			if f := p.parseValue(&members[len(members)-1].Value); f != nil {
				return nil, f.inMember(name)
			}
			p.skipSpace()
			if p.consume(',') {
				p.skipSpace()
				continue
			}
			if p.consume('}') {
				break
			}
			return nil, p.unexpected("',' or '}' after a member")
		}
	}
	p.depth--
	return p.members.copy(members), nil
}

// isDuplicate reports whether name is already among earlier, the members
// of the object parsed so far, and records it in *seen once the object is
// large enough to need a map.
func isDuplicate(earlier []Member, seen *map[string]struct{}, name string) bool {
	if len(earlier) < smallObject {
		for i := range earlier {
			if earlier[i].Name == name {
				return true
			}
		}
		return false
	}
	if *seen == nil {
		*seen = make(map[string]struct{}, 2*len(earlier))
		for i := range earlier {
			(*seen)[earlier[i].Name] = struct{}{}
		}
	}
	if _, ok := (*seen)[name]; ok {
		return true
	}
	(*seen)[name] = struct{}{}
	return false
}

func (p *parser) parseArray() ([]Value, *failure) {
	if p.depth == MaxDepth {
		return nil, p.fail(p.pos, ErrTooDeep)
	}
	p.depth++
	p.pos++ // '['
	// Elements are collected on the stack as in parseObject.
	var buf [8]Value
	elems := buf[:0]
	p.skipSpace()
	if !p.consume(']') {
		for {
			elems = append(elems, Value{})
			if f := p.parseValue(&elems[len(elems)-1]); f != nil {
				return nil, f.inElem(len(elems) - 1)
			}
			p.skipSpace()
			if p.consume(',') {
				p.skipSpace()
				continue
			}
			if p.consume(']') {
				break
			}
			return nil, p.unexpected("',' or ']' after an element")
		}
	}
	p.depth--
	return p.elems.copy(elems), nil
}

// arena hands out the slices of a document's containers from shared chunks,
// so that a document with many small containers makes few allocations: the
// typical request body, two objects with eight members between them, makes
// one.
type arena[T any] struct {
	chunk     []T
	chunkSize int
}

const (
	firstChunk = 8
	maxChunk   = 1024
)

// copy returns a copy of s, nil if s is empty. The copy's capacity is its
// length, so appending to it never writes into a neighbour.
func (a *arena[T]) copy(s []T) []T {
	if len(s) == 0 {
		return nil
	}
	if len(s) > cap(a.chunk)-len(a.chunk) {
		a.chunkSize = min(max(2*a.chunkSize, firstChunk), maxChunk)
		a.chunk = make([]T, 0, max(len(s), a.chunkSize))
	}
	start := len(a.chunk)
	a.chunk = append(a.chunk, s...)
	return a.chunk[start:len(a.chunk):len(a.chunk)]
}

// parseNumber reads a number per the RFC 8259 grammar and returns its
// literal:
//
//	number = [ "-" ] ( "0" / digit1-9 *DIGIT ) [ "." 1*DIGIT ] [ ( "e" / "E" ) [ "-" / "+" ] 1*DIGIT ]
func (p *parser) parseNumber() (string, *failure) {
	start := p.pos
	p.consume('-')
	switch {
	case p.consume('0'):
		if p.pos < len(p.src) && isDigit(p.src[p.pos]) {
			return "", p.failSyntax(p.pos, "leading zero in number")
		}
	case p.pos < len(p.src) && isDigit(p.src[p.pos]):
		p.skipDigits()
	default:
		return "", p.unexpected("a digit")
	}
	if p.consume('.') {
		if p.pos >= len(p.src) || !isDigit(p.src[p.pos]) {
			return "", p.unexpected("a digit after '.'")
		}
		p.skipDigits()
	}
	if p.consume('e') || p.consume('E') {
		if !p.consume('+') {
			p.consume('-')
		}
		if p.pos >= len(p.src) || !isDigit(p.src[p.pos]) {
			return "", p.unexpected("a digit in the exponent")
		}
		p.skipDigits()
	}
	return p.src[start:p.pos], nil
}

func (p *parser) skipDigits() {
	for p.pos < len(p.src) && isDigit(p.src[p.pos]) {
		p.pos++
	}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// parseString reads a string starting at its opening quote and returns it
// unescaped. A string without escapes is returned as a substring of the
// input, without copying.
func (p *parser) parseString() (string, *failure) {
	p.pos++ // '"'
	start := p.pos
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == '"':
			p.pos++
			return p.src[start : p.pos-1], nil
		case c == '\\':
			return p.parseEscapedString(start)
		case c < ' ':
			return "", p.failSyntax(p.pos, "control character in string")
		case c < utf8.RuneSelf:
			p.pos++
		default:
			if f := p.skipRune(); f != nil {
				return "", f
			}
		}
	}
	return "", p.unexpected("'\"' closing the string")
}

// skipRune skips the multi-byte UTF-8 sequence at p.pos, refusing invalid
// ones (including encoded surrogates and overlong forms).
func (p *parser) skipRune() *failure {
	r, size := utf8.DecodeRuneInString(p.src[p.pos:])
	if r == utf8.RuneError && size == 1 {
		return p.fail(p.pos, ErrInvalidUTF8)
	}
	p.pos += size
	return nil
}

// parseEscapedString continues parseString from the first backslash,
// decoding into p.scratch.
func (p *parser) parseEscapedString(start int) (string, *failure) {
	buf := append(p.scratch[:0], p.src[start:p.pos]...)
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == '"':
			p.pos++
			p.scratch = buf[:0] // reuse the grown buffer for the next string
			return string(buf), nil
		case c == '\\':
			var f *failure
			if buf, f = p.appendEscape(buf); f != nil {
				return "", f
			}
		case c < ' ':
			return "", p.failSyntax(p.pos, "control character in string")
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			p.pos++
		default:
			runeStart := p.pos
			if f := p.skipRune(); f != nil {
				return "", f
			}
			buf = append(buf, p.src[runeStart:p.pos]...)
		}
	}
	return "", p.unexpected("'\"' closing the string")
}

// appendEscape decodes the escape sequence at p.pos into buf.
func (p *parser) appendEscape(buf []byte) ([]byte, *failure) {
	escapeOffset := p.pos
	p.pos++ // '\\'
	if p.pos >= len(p.src) {
		return buf, p.unexpected("an escape sequence")
	}
	c := p.src[p.pos]
	p.pos++
	switch c {
	case '"', '\\', '/':
		return append(buf, c), nil
	case 'b':
		return append(buf, '\b'), nil
	case 'f':
		return append(buf, '\f'), nil
	case 'n':
		return append(buf, '\n'), nil
	case 'r':
		return append(buf, '\r'), nil
	case 't':
		return append(buf, '\t'), nil
	case 'u':
		// Decoded below.
	default:
		p.pos--
		return buf, p.unexpected("a valid escape character")
	}
	r, f := p.parseHex4()
	if f != nil {
		return buf, f
	}
	switch {
	case 0xDC00 <= r && r <= 0xDFFF:
		return buf, p.fail(escapeOffset, ErrLoneSurrogate)
	case 0xD800 <= r && r <= 0xDBFF:
		if !p.consume('\\') || !p.consume('u') {
			return buf, p.fail(escapeOffset, ErrLoneSurrogate)
		}
		low, f := p.parseHex4()
		if f != nil {
			return buf, f
		}
		if low < 0xDC00 || low > 0xDFFF {
			return buf, p.fail(escapeOffset, ErrLoneSurrogate)
		}
		r = 0x10000 + (r-0xD800)<<10 + (low - 0xDC00)
	}
	return utf8.AppendRune(buf, r), nil
}

// parseHex4 reads the four hexadecimal digits of a \u escape.
func (p *parser) parseHex4() (rune, *failure) {
	var r rune
	for range 4 {
		if p.pos >= len(p.src) {
			return 0, p.unexpected("a hexadecimal digit")
		}
		c := p.src[p.pos]
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, p.unexpected("a hexadecimal digit")
		}
		p.pos++
	}
	return r, nil
}
