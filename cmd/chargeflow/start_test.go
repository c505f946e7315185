package main

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A start against a database that accepts connections and never answers
// ends within seconds with an error that names the database, rather than a
// process that hangs before it serves. The deadline below is only the
// failure condition: the start gives up after migrations.ConnectTimeout.
func TestStartAgainstSilentDatabase(t *testing.T) {
	t.Parallel()
	addr := silentServer(t)
	url := "postgres://postgres@" + addr + "/x"
	for _, args := range [][]string{
		{"api", "--addr", "127.0.0.1:0", "--database-url", url},
		{"migrate", "--database-url", url},
	} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			var stderr bytes.Buffer
			err := run(ctx, args, func(string) string { return "" }, &bytes.Buffer{}, &stderr)
			require.NoError(t, ctx.Err(), "the start hung until the test's deadline")
			require.Error(t, err)
			require.ErrorContains(t, err, "database")
		})
	}
}

// silentServer listens on loopback, accepts every connection and never
// writes a byte, like a database that hangs, until the test ends.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// countingServer listens on loopback, counts the connections it is
// offered and closes each at once, like a database that refuses to talk.
func countingServer(t *testing.T) (addr string, connections *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	connections = &atomic.Int64{}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			connections.Add(1)
			_ = conn.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().String(), connections
}
