package jsoncanon

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// The sentinel errors below are the reasons a SyntaxError can carry; test
// for them with errors.Is.
var (
	// ErrSyntax means the input is not RFC 8259 JSON: a stray or missing
	// character, an invalid literal, escape or number, trailing data, or
	// (from AppendCanonical) a hand-built Value that is not valid JSON.
	ErrSyntax = errors.New("invalid JSON")
	// ErrDuplicateMember means an object has two members with the same name
	// after unescaping.
	ErrDuplicateMember = errors.New("duplicate member name")
	// ErrInvalidUTF8 means the input, or a string of a hand-built Value, is
	// not valid UTF-8.
	ErrInvalidUTF8 = errors.New("invalid UTF-8")
	// ErrLoneSurrogate means a \u escape names a UTF-16 surrogate that is
	// not half of a high/low pair.
	ErrLoneSurrogate = errors.New("lone UTF-16 surrogate")
	// ErrTooDeep means arrays and objects are nested deeper than MaxDepth.
	ErrTooDeep = errors.New("nesting too deep")
	// ErrNumberRange means a number's magnitude is too large for an IEEE 754
	// double, so it has no canonical form. Parse accepts such numbers;
	// AppendCanonical and Canonical refuse them.
	ErrNumberRange = errors.New("number out of range")
)

// SyntaxError describes why a body or Value was refused and where.
//
// Its message names the position but never quotes the input, because bodies
// may hold card data and errors end up in logs and problem responses.
type SyntaxError struct {
	// Offset is the byte offset in the input at which the problem was found,
	// or -1 when the error comes from AppendCanonical, which works on a Value
	// and has no input.
	Offset int64
	// Path locates the offending value from the root, such as
	// "metadata.order" or "items[2]"; it is empty for the root itself. Member
	// names that are not plain identifiers are written quoted in brackets,
	// as in `metadata["a.b"]`, escaped to ASCII and truncated.
	Path string
	// Reason is one of the sentinel errors, possibly wrapped with a short
	// description of what was expected.
	Reason error
}

// Error describes the problem and its position without quoting the input.
func (e *SyntaxError) Error() string {
	msg := "jsoncanon: " + e.Reason.Error()
	if e.Path != "" {
		msg += " at " + e.Path
	}
	if e.Offset >= 0 {
		msg += " (offset " + strconv.FormatInt(e.Offset, 10) + ")"
	}
	return msg
}

// Unwrap returns the reason so that errors.Is matches the sentinels.
func (e *SyntaxError) Unwrap() error { return e.Reason }

// failure is a SyntaxError under construction. Parsing and canonicalization
// fail deep inside nested values; each enclosing level adds its path segment
// while the failure travels up, so the successful path never pays for
// tracking where it is.
type failure struct {
	offset   int64
	reason   error
	segments []pathSegment // innermost first
}

// pathSegment is one step of a Path: a member name or an array index.
type pathSegment struct {
	name    string
	index   int
	isIndex bool
}

func (f *failure) inMember(name string) *failure {
	f.segments = append(f.segments, pathSegment{name: name})
	return f
}

func (f *failure) inElem(index int) *failure {
	f.segments = append(f.segments, pathSegment{index: index, isIndex: true})
	return f
}

// maxPathName bounds how much of a member name a Path repeats, so that a
// hostile body cannot put an arbitrarily long name into a log line.
const maxPathName = 64

// syntaxError renders the finished failure.
func (f *failure) syntaxError() *SyntaxError {
	var path []byte
	for i := len(f.segments) - 1; i >= 0; i-- {
		seg := f.segments[i]
		switch {
		case seg.isIndex:
			path = append(path, '[')
			path = strconv.AppendInt(path, int64(seg.index), 10)
			path = append(path, ']')
		case isPlainName(seg.name):
			if len(path) > 0 {
				path = append(path, '.')
			}
			path = append(path, seg.name...)
		default:
			name, truncated := seg.name, false
			if len(name) > maxPathName {
				cut := maxPathName
				for cut > 0 && !utf8.RuneStart(name[cut]) {
					cut--
				}
				name, truncated = name[:cut], true
			}
			path = append(path, '[')
			path = strconv.AppendQuoteToASCII(path, name)
			if truncated {
				path = append(path[:len(path)-1], `..."`...)
			}
			path = append(path, ']')
		}
	}
	return &SyntaxError{Offset: f.offset, Path: string(path), Reason: f.reason}
}

// isPlainName reports whether a member name can appear in a Path without
// quoting: a short, non-empty run of ASCII letters, digits, '_' and '-'.
func isPlainName(name string) bool {
	if name == "" || len(name) > maxPathName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
