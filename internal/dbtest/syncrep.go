package dbtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Standby is a private PostgreSQL server of one test whose commits can be
// made to wait for a synchronous standby that never answers, as those of a
// primary cut off from its standby do. It is started by the repository's
// scripts/ensure-postgres in a folder of the test's, on a port of its own,
// and stopped when the test ends.
type Standby struct {
	t    testing.TB
	port int
	url  string // the server's database postgres
}

// SyncStandbyServer starts a Standby; its commits do not wait until Vanish.
func SyncStandbyServer(t testing.TB) *Standby {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "ensure-postgres")
	// The server runs as the system user postgres, which must reach the
	// folder: not under a test's own temporary folder (mode 0700).
	dir, err := os.MkdirTemp("", "chargeflow-syncrep-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	port := freeLoopbackPort(t)
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	env := append(os.Environ(), "DATABASE_URL="+url, "CHARGEFLOW_DATA="+dir)
	cmd := exec.Command(script)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	t.Cleanup(func() {
		stop := exec.Command(script, "stop")
		stop.Env = env
		if out, err := stop.CombinedOutput(); err != nil {
			t.Errorf("stop the private server: %v\n%s", err, out)
		}
		_ = os.RemoveAll(dir)
	})
	require.NoError(t, err, "start a private server: %s", out)
	return &Standby{t: t, port: port, url: url}
}

// URL is the URL of the server's database name.
func (s *Standby) URL(name string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, name)
}

// Vanish names a synchronous standby that does not exist: from now on every
// commit that wrote anything waits for it, invisible to other sessions,
// until its wait is cancelled or Return.
func (s *Standby) Vanish() { s.setStandby("ghost") }

// Return forgets the standby: commits no longer wait, and those waiting end.
func (s *Standby) Return() { s.setStandby("") }

func (s *Standby) setStandby(name string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url)
	require.NoError(s.t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, fmt.Sprintf(`ALTER SYSTEM SET synchronous_standby_names = '%s'`, name))
	require.NoError(s.t, err)
	_, err = conn.Exec(ctx, `SELECT pg_reload_conf()`)
	require.NoError(s.t, err)
	// The reload reaches each backend at its next command; a new session
	// sees it once the postmaster has read the file.
	require.Eventually(s.t, func() bool {
		c, err := pgx.Connect(ctx, s.url)
		if err != nil {
			return false
		}
		defer c.Close(ctx)
		var got string
		return c.QueryRow(ctx, `SHOW synchronous_standby_names`).Scan(&got) == nil && got == name
	}, 20*time.Second, 20*time.Millisecond)
}

// CancelWaitsUntil cancels, as pg_cancel_backend does (a statement_timeout
// would do the same), every wait for the standby of a session named
// applicationName, again and again until done is closed, and returns how
// many it cancelled: none is a failure of the test, since then nothing it
// checks waited.
func (s *Standby) CancelWaitsUntil(applicationName string, done <-chan struct{}) int {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url)
	require.NoError(s.t, err)
	defer conn.Close(ctx)
	total := 0
	for {
		var n int
		require.NoError(s.t, conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity
			WHERE wait_event = 'SyncRep' AND application_name = $1`, applicationName).Scan(&n))
		total += n
		select {
		case <-done:
			require.NotZero(s.t, total, "no session of %s waited for the standby", applicationName)
			return total
		case <-ctx.Done():
			s.t.Fatalf("still waiting after %d cancelled waits of %s", total, applicationName)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// freeLoopbackPort is a port free on 127.0.0.1 now, drawn below Linux's
// range of ephemeral ports so that no outgoing connection takes it first.
func freeLoopbackPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := 20000 + rand.IntN(12000)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			ln.Close()
			return port
		}
	}
	t.Fatal("found no free port")
	return 0
}
