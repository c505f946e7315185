package logx_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/logx"
)

func TestQuieter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		level slog.Level
		want  []string
	}{
		{slog.LevelInfo, []string{`level=WARN msg=warned lib=river`, `level=ERROR msg=failed lib=river`}},
		{slog.LevelDebug, []string{`level=DEBUG msg=routine lib=river`, `level=DEBUG msg=detail lib=river`, `level=WARN msg=warned lib=river`, `level=ERROR msg=failed lib=river`}},
	} {
		var buf bytes.Buffer
		h := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})
		log := slog.New(logx.Quieter(h)).With("lib", "river")
		log.Info("routine")
		log.Debug("detail")
		log.Warn("warned")
		log.Error("failed")
		require.Equal(t, tc.want, strings.Split(strings.TrimSpace(buf.String()), "\n"), "at %s", tc.level)
	}
}
