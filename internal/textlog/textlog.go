// Package textlog is the log format for a person at a terminal: one short
// line per record, the time of day, the level, the role that logged it and
// what happened, then its attributes as key=value.
//
//	14:02:11.204 INFO  api        listening addr=127.0.0.1:8080
//	14:02:12.913 WARN  worker     provider outcome unknown charge_id=ch_01m8… err="timeout after 10s"
//
// Machines read JSON instead (slog.JSONHandler); the command picks one with
// --log-format. The attributes are the same in both, so nothing a log
// must never hold can appear in one and not the other.
package textlog

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// RoleKey is the attribute printed as the line's third column rather than
// as key=value.
const RoleKey = "role"

// Handler writes records as text lines. It is safe for concurrent use.
type Handler struct {
	w     io.Writer
	mu    *sync.Mutex
	level slog.Leveler
	// role is the RoleKey attribute given to WithAttrs, if any.
	role string
	// attrs are the attributes given to WithAttrs, rendered, each with a
	// leading space.
	attrs string
	// group prefixes the keys of attributes added under WithGroup.
	group string
}

// New returns a handler writing to w, dropping records below level (nil
// is slog.LevelInfo).
func New(w io.Writer, level slog.Leveler) *Handler {
	if level == nil {
		level = slog.LevelInfo
	}
	return &Handler{w: w, mu: &sync.Mutex{}, level: level}
}

// Enabled reports whether a record at l is written.
func (h *Handler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

// WithAttrs returns a handler that adds attrs to every record.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	var b strings.Builder
	b.WriteString(c.attrs)
	for _, a := range attrs {
		if a.Key == RoleKey && c.group == "" {
			c.role = a.Value.Resolve().String()
			continue
		}
		appendAttr(&b, c.group, a)
	}
	c.attrs = b.String()
	return &c
}

// WithGroup returns a handler whose later attributes' keys are prefixed
// with name and a dot.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group += name + "."
	return &c
}

// Handle writes one line.
func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	b.WriteString(t.Format("15:04:05.000"))
	b.WriteByte(' ')
	level := r.Level.String()
	b.WriteString(level)
	b.WriteString(strings.Repeat(" ", max(1, 6-len(level))))
	role := h.role
	var attrs strings.Builder
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == RoleKey && h.group == "" {
			role = a.Value.Resolve().String()
			return true
		}
		appendAttr(&attrs, h.group, a)
		return true
	})
	if role != "" {
		b.WriteString(role)
		b.WriteString(strings.Repeat(" ", max(1, 11-len(role))))
	}
	b.WriteString(oneLine(r.Message))
	b.WriteString(h.attrs)
	b.WriteString(attrs.String())
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

// appendAttr writes " key=value" for a (groups flattened into dotted
// keys); an empty attribute writes nothing.
func appendAttr(b *strings.Builder, group string, a slog.Attr) {
	v := a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if v.Kind() == slog.KindGroup {
		prefix := group
		if a.Key != "" {
			prefix += a.Key + "."
		}
		for _, ga := range v.Group() {
			appendAttr(b, prefix, ga)
		}
		return
	}
	b.WriteByte(' ')
	b.WriteString(group)
	b.WriteString(a.Key)
	b.WriteByte('=')
	b.WriteString(quote(valueString(v)))
}

func valueString(v slog.Value) string {
	switch v.Kind() {
	case slog.KindTime:
		return v.Time().Format(time.RFC3339Nano)
	case slog.KindDuration:
		return v.Duration().String()
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return err.Error()
		}
		return fmt.Sprint(v.Any())
	}
	return v.String()
}

// quote leaves a value that reads unambiguously as it is, and quotes one
// that is empty or holds a space, a quote, an equals sign or a character
// that is not printable.
func quote(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if r == ' ' || r == '"' || r == '=' || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// oneLine keeps a message on its line: a message never holds a newline of
// its own making, but one from an error's text might.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(s)
}
