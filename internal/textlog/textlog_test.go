package textlog_test

import (
	"bytes"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/textlog"
)

func TestLine(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(textlog.New(&buf, slog.LevelInfo)).With("role", "worker", "pid", 7)
	log.Debug("not written")
	log.Warn("provider outcome unknown", "charge_id", "ch_1", "err", errors.New("timeout after 10s"),
		"took", 1500*time.Millisecond, slog.Group("job", "attempt", 2), "empty", "")
	log.With(slog.Group("g", "a", 1)).WithGroup("req").Info("line\nbreak", "path", `/v1/"x"`, "role", "api")

	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 2, buf.String())
	time := `\d\d:\d\d:\d\d\.\d{3} `
	require.Regexp(t, regexp.MustCompile(`^`+time+`WARN  worker     provider outcome unknown pid=7 charge_id=ch_1 err="timeout after 10s" took=1.5s job.attempt=2 empty=""$`), lines[0])
	require.Regexp(t, regexp.MustCompile(`^`+time+`INFO  worker     line\\nbreak pid=7 g.a=1 req.path="/v1/\\"x\\"" req.role=api$`), lines[1],
		"a role inside a group is an attribute; a message keeps to its line")
}

func TestLevel(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var level slog.LevelVar
	level.Set(slog.LevelError)
	log := slog.New(textlog.New(&buf, &level))
	log.Warn("dropped")
	level.Set(slog.LevelDebug)
	log.Debug("kept")
	require.NotContains(t, buf.String(), "dropped")
	require.Contains(t, buf.String(), "DEBUG kept")
}
