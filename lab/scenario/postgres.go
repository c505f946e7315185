package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// privateCluster is a PostgreSQL the runner owns, so a scenario can crash
// it: started by scripts/ensure-postgres on a free port under a folder of
// the run, stopped and removed at the end.
type privateCluster struct {
	script string
	root   string
	port   int
}

// startPrivateCluster starts a new cluster with the project's script.
func startPrivateCluster(ctx context.Context, script, root string) (*privateCluster, error) {
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("this scenario restarts its own PostgreSQL with %s, which is missing (run from the repository, or pass --pg-script): %w", script, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	c := &privateCluster{script: script, root: root, port: port}
	return c, c.start(ctx)
}

// URL is the cluster's server URL (database postgres).
func (c *privateCluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

func (c *privateCluster) run(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, c.script, args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+c.URL(), "CHARGEFLOW_DATA="+c.root)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", c.script, strings.Join(args, " "), err, out)
	}
	return nil
}

// start starts the cluster (after a crash, PostgreSQL recovers from its WAL).
func (c *privateCluster) start(ctx context.Context) error { return c.run(ctx) }

// crash shuts the cluster down in immediate mode — SIGQUIT to the
// postmaster, what `pg_ctl -m immediate` does: no checkpoint, every session
// cut — and waits until the port no longer answers.
func (c *privateCluster) crash() error {
	pidFile := filepath.Join(c.root, fmt.Sprintf("postgres-%d", c.port), "postmaster.pid")
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return fmt.Errorf("read %s: %w", pidFile, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(data), "\n", 2)[0]))
	if err != nil {
		return fmt.Errorf("parse %s: %w", pidFile, err)
	}
	if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
		return fmt.Errorf("signal the postmaster: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.port), 200*time.Millisecond)
		if err != nil {
			return nil
		}
		conn.Close()
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("postgres still answers 30 s after an immediate shutdown")
}

// stop stops the cluster; the caller removes its folder.
func (c *privateCluster) stop(ctx context.Context) error { return c.run(ctx, "stop") }
