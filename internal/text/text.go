// Package text is the one check of text that a caller writes and the
// database stores: a merchant's description and metadata, an operator's
// evidence and the fields of a resolution, a webhook endpoint's URL, a
// tenant's or an operator's name. Every such text goes through Check before
// it reaches a text or jsonb column, whoever sends it and by whatever form
// (JSON, the operator page's forms, the command line), so that a byte
// Postgres cannot store is refused as the caller's mistake rather than
// failing the statement as a server error after everything else was
// checked (docs/api.md, "Values").
package text

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

var (
	// ErrInvalidUTF8 means the text is not valid UTF-8, the only encoding
	// the database stores (surrogates encoded as UTF-8 included).
	ErrInvalidUTF8 = errors.New("not valid UTF-8")
	// ErrNUL means the text holds U+0000, which neither a text column nor
	// a jsonb string can store.
	ErrNUL = errors.New("contains U+0000 (NUL), which the database cannot store")
	// ErrTooLong means the text has more characters than its field allows.
	ErrTooLong = errors.New("too long")
)

// Check reports why s cannot be stored as a text of at most max characters
// (Unicode code points, as Postgres's length() counts them; max <= 0 sets
// no limit of the field's own): ErrInvalidUTF8, ErrNUL or ErrTooLong,
// checked in that order, or nil when it can be stored.
//
// These are everything a UTF-8 database refuses in a text value. Other
// control characters, noncharacters and unassigned code points are stored
// as they are; what a field admits beyond this is its own rule (a pattern,
// a list of values), checked by its caller.
func Check(s string, max int) error {
	if !utf8.ValidString(s) {
		return ErrInvalidUTF8
	}
	if strings.IndexByte(s, 0) >= 0 {
		return ErrNUL
	}
	if max > 0 && len(s) > max && utf8.RuneCountInString(s) > max {
		return fmt.Errorf("%w: more than %d characters", ErrTooLong, max)
	}
	return nil
}
