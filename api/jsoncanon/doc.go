// Package jsoncanon parses request bodies strictly and writes their RFC 8785
// (JSON Canonicalization Scheme) form, the input to the idempotency
// fingerprint of every POST.
//
// A fingerprint must change whenever the request means something different
// and must not change when only the encoding does: member order and
// insignificant whitespace are erased, numbers are written in one shortest
// form, and strings in one escaping.
//
// encoding/json is not strict enough to feed a fingerprint. It accepts
// duplicate member names and keeps the last one, so {"amount":1,"amount":900}
// could be fingerprinted by one reader and charged by another with a
// different amount. It replaces invalid UTF-8 and lone surrogates with U+FFFD,
// so two different byte sequences decode to the same string and two different
// requests would share a fingerprint. This package therefore refuses, rather
// than repairs, everything RFC 8259 leaves ambiguous: duplicate members
// (compared after unescaping), invalid UTF-8 anywhere in the body, lone
// surrogates in \u escapes, trailing data, a byte order mark, and nesting
// deeper than [MaxDepth].
//
// [Parse] returns a [Value] tree with object members in source order and
// numbers as written, so callers can validate fields exactly (an amount of
// "1e3" is visible as such). [AppendCanonical] writes a Value's canonical form
// and [Canonical] does both in one call.
//
// Every failure is a *[SyntaxError] carrying the path of the offending
// value and, for input, its byte offset, and wrapping one of the sentinel errors ([ErrSyntax],
// [ErrDuplicateMember], [ErrInvalidUTF8], [ErrLoneSurrogate], [ErrTooDeep],
// [ErrNumberRange]). Its message never contains values from the body, which
// may hold card data.
package jsoncanon
