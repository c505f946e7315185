// Package ids makes chargeflow's identifiers: a short prefix that says what
// the id names ("ch" a charge, "tn" a tenant, "key" an API key), an
// underscore, and 26 characters of lowercase Crockford base32 holding 48 bits
// of milliseconds and 80 random bits (the ULID layout). Ids sort by creation
// time to the millisecond, which keeps newest-first listings and their
// cursors on the primary key (docs/architecture.md, "Ids").
//
// It imports nothing of chargeflow's, so every package may use it.
package ids

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// crockford is the lowercase Crockford base32 alphabet: no i, l, o, u.
const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// New returns prefix + "_" + 26 characters made from now and 80 random bits.
func New(prefix string, now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails (Go 1.24+).
	out := make([]byte, len(prefix)+1+26)
	n := copy(out, prefix)
	out[n] = '_'
	n++
	// 128 bits into 26 base32 digits: the first digit carries 3 bits.
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	for i := 25; i >= 0; i-- {
		out[n+i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out)
}

// Floor returns prefix + "_" + the ten digits of t's millisecond, without
// the sixteen random ones: every id New(prefix, …) makes in an earlier
// millisecond sorts before it, and every id of t's millisecond or later
// after it. So `id < Floor(prefix, t)` selects the ids made before t's
// millisecond and `id > Floor(prefix, t)` those made from it on, on the
// primary key, without reading a timestamp. It is a bound, not an id.
func Floor(prefix string, t time.Time) string {
	return FloorOf(New(prefix, t))
}

// FloorOf is Floor of the millisecond id was made in: id without its random
// digits.
func FloorOf(id string) string {
	return id[:max(len(id)-16, 0)]
}

// Valid reports whether s looks like an id New(prefix, …) made. Handlers use
// it to answer 404 or 400 without a query.
func Valid(prefix, s string) bool {
	if len(s) != len(prefix)+1+26 || s[:len(prefix)] != prefix || s[len(prefix)] != '_' {
		return false
	}
	for i := len(prefix) + 1; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') || c == 'i' || c == 'l' || c == 'o' || c == 'u' {
			return false
		}
	}
	return s[len(prefix)+1] <= '7' // the first digit holds 3 bits
}
