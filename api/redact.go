package api

import (
	"context"
	"log/slog"
	"strings"
)

// cardNumberMark replaces a card number cut out of a log line or a problem.
const cardNumberMark = "[card number]"

// redactCardNumbers returns s with every card number in it (a run that
// ContainsPAN would find) replaced by cardNumberMark.
//
// It is the last line of defence, not the first: handlers echo no request
// values and log none, and bodies with card numbers are refused. But parts
// of a request do reach problems and logs — a member name in a field path,
// a query parameter's name, a JSON syntax error's path in a body that
// failed to parse before the card check could run — and this makes sure
// none of them carries a card number, wherever it came from
// (docs/api.md, "Card numbers").
func redactCardNumbers(s string) string {
	start, end, found := nextPAN(s, 0)
	if !found {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for found {
		b.WriteString(s[last:start])
		b.WriteString(cardNumberMark)
		last = end
		start, end, found = nextPAN(s, end)
	}
	b.WriteString(s[last:])
	return b.String()
}

// redactingHandler is the slog.Handler every log line of the API passes
// through: it cuts card numbers out of the message, every attribute key
// and every attribute value (strings, numbers, errors and anything else
// as it prints), so no code path of the API can log one, today's or a
// future one's.
type redactingHandler struct{ next slog.Handler }

// redactLogs wraps a logger so that nothing it writes can hold a card
// number.
func redactLogs(l *slog.Logger) *slog.Logger {
	if _, ok := l.Handler().(redactingHandler); ok {
		return l
	}
	return slog.New(redactingHandler{l.Handler()})
}

func (h redactingHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h redactingHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, redactCardNumbers(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h redactingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	redacted := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		redacted[i] = redactAttr(a)
	}
	return redactingHandler{h.next.WithAttrs(redacted)}
}

func (h redactingHandler) WithGroup(name string) slog.Handler {
	return redactingHandler{h.next.WithGroup(redactCardNumbers(name))}
}

// redactAttr is a with card numbers cut out of its key and value. A value
// that holds one becomes a string, its card numbers replaced.
func redactAttr(a slog.Attr) slog.Attr {
	a.Key = redactCardNumbers(a.Key)
	a.Value = a.Value.Resolve()
	if a.Value.Kind() == slog.KindGroup {
		group := a.Value.Group()
		redacted := make([]slog.Attr, len(group))
		for i, g := range group {
			redacted[i] = redactAttr(g)
		}
		a.Value = slog.GroupValue(redacted...)
		return a
	}
	// String prints every other kind as the handler would (errors through
	// Error, numbers in decimal), so a number or an error is checked too.
	if s := a.Value.String(); ContainsPAN(s) {
		a.Value = slog.StringValue(redactCardNumbers(s))
	}
	return a
}
