// Package logx holds what our logs need from slog beyond the standard
// library: a handler that quiets another library's routine lines.
package logx

import (
	"context"
	"log/slog"
)

// Quieter wraps h so that records at INFO and below are DEBUG ones: for a
// library that says at INFO what an operator need not read (River's start,
// stop, migration and producer-statistics lines), while its warnings and
// errors stay as they are. At --log-level debug they all show.
func Quieter(h slog.Handler) slog.Handler { return quieter{h} }

type quieter struct{ h slog.Handler }

func quiet(l slog.Level) slog.Level { return min(l, slog.LevelDebug) }

func (q quieter) level(l slog.Level) slog.Level {
	if l < slog.LevelWarn {
		return quiet(l)
	}
	return l
}

func (q quieter) Enabled(ctx context.Context, l slog.Level) bool {
	return q.h.Enabled(ctx, q.level(l))
}

func (q quieter) Handle(ctx context.Context, r slog.Record) error {
	r.Level = q.level(r.Level)
	return q.h.Handle(ctx, r)
}

func (q quieter) WithAttrs(attrs []slog.Attr) slog.Handler { return quieter{q.h.WithAttrs(attrs)} }

func (q quieter) WithGroup(name string) slog.Handler { return quieter{q.h.WithGroup(name)} }
