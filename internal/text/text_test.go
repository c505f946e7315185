package text_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/chargeflow/chargeflow/internal/text"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		s    string
		max  int
		want error
	}{
		{"empty", "", 10, nil},
		{"ascii", "order A-1", 10, nil},
		{"at the limit in characters, over it in bytes", strings.Repeat("é", 10), 10, nil},
		{"four-byte characters count once", strings.Repeat("\U0001F600", 10), 10, nil},
		{"control characters other than NUL are stored", "a\tb\x01\x1f\x7f", 10, nil},
		{"noncharacters are stored", "\uFFFE\uFFFF", 10, nil},
		{"no limit", strings.Repeat("x", 100_000), 0, nil},
		{"one character over", strings.Repeat("é", 11), 10, text.ErrTooLong},
		{"NUL", "a\x00b", 10, text.ErrNUL},
		{"NUL alone", "\x00", 0, text.ErrNUL},
		{"NUL is refused before length", strings.Repeat("x", 20) + "\x00", 10, text.ErrNUL},
		{"a Latin-1 byte", "caf\xe9", 10, text.ErrInvalidUTF8},
		{"a surrogate encoded as UTF-8", "\xed\xa0\x80", 10, text.ErrInvalidUTF8},
		{"an overlong NUL", "\xc0\x80", 10, text.ErrInvalidUTF8},
		{"a truncated sequence", "\xe2\x82", 10, text.ErrInvalidUTF8},
		{"beyond U+10FFFF", "\xf4\x90\x80\x80", 10, text.ErrInvalidUTF8},
		{"invalid UTF-8 is refused before NUL", "\x00\xff", 10, text.ErrInvalidUTF8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := text.Check(tc.s, tc.max)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Check(%q, %d) = %v, want nil", tc.s, tc.max, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Check(%q, %d) = %v, want %v", tc.s, tc.max, err, tc.want)
			}
		})
	}
}
