// Package childproc holds what the scenario runner and the benchmark share
// when they run chargeflow as child processes: a fresh database per run, the
// address a child logs when it listens, and the wait for the API's /readyz.
package childproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// FreshDatabase creates an empty database on the server serverURL names and
// returns its URL and a function that drops it.
func FreshDatabase(ctx context.Context, serverURL, name string) (string, func(context.Context) error, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("parse database url: %w", err)
	}
	admin := *u
	admin.Path = "/postgres"
	conn, err := pgx.Connect(ctx, admin.String())
	if err != nil {
		return "", nil, fmt.Errorf("connect to %s: %w", admin.Host, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	db := *u
	db.Path = "/" + name
	drop := func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, admin.String())
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		return err
	}
	return db.String(), drop, nil
}

// ListeningAddr reads a child's JSON log from offset on and returns the
// address of its first "listening" line, if it has written one yet.
func ListeningAddr(path string, offset int64) (string, bool) {
	var addr string
	found := scanLog(path, offset, func(msg string, line []byte) bool {
		var l struct {
			Addr string `json:"addr"`
		}
		if msg == "listening" && json.Unmarshal(line, &l) == nil && l.Addr != "" {
			addr = l.Addr
			return true
		}
		return false
	})
	return addr, found
}

// Logged reports whether a child's JSON log has a line with message msg
// from offset on ("worker started", "reconciler started").
func Logged(path string, offset int64, msg string) bool {
	return scanLog(path, offset, func(m string, _ []byte) bool { return m == msg })
}

// scanLog reads a JSON log from offset on until match takes a line.
func scanLog(path string, offset int64, match func(msg string, line []byte) bool) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return false
	}
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for scanner.Scan() {
		var line struct {
			Msg string `json:"msg"`
		}
		if json.Unmarshal(scanner.Bytes(), &line) == nil && match(line.Msg, scanner.Bytes()) {
			return true
		}
	}
	return false
}

// WaitReady waits, for a minute at most, until the API at apiURL answers
// /readyz with 200.
func WaitReady(ctx context.Context, apiURL string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get(apiURL + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return errors.New("the API never became ready")
}
