// Package psptest is test support for provider adapters: servers that
// misbehave in the ways a provider's connection can and httptest cannot.
// It imports nothing of chargeflow's.
package psptest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// LosingServer is a hand-written HTTP/1.1 server. On its first connection
// it answers the first request and closes the connection after reading the
// second, without an answer: a provider that applied the request and lost
// the connection, or a keep-alive connection torn down just as a request
// arrived. Every later connection is answered normally. Every answer is
// 200 with Body as JSON.
type LosingServer struct {
	// Requests counts the requests read, Conns the connections accepted.
	Requests atomic.Int32
	Conns    atomic.Int32

	listener net.Listener
	body     []byte
	wg       sync.WaitGroup
}

// StartLosingServer starts a LosingServer on loopback answering body; it
// stops when the test ends.
func StartLosingServer(t testing.TB, body []byte) *LosingServer {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("psptest: listen: %v", err)
	}
	s := &LosingServer{listener: listener, body: body}
	s.wg.Go(func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			index := s.Conns.Add(1)
			s.wg.Go(func() { s.serve(conn, index == 1) })
		}
	})
	t.Cleanup(func() {
		_ = listener.Close()
		s.wg.Wait()
	})
	return s
}

// URL is the server's base URL.
func (s *LosingServer) URL() string { return "http://" + s.listener.Addr().String() }

func (s *LosingServer) serve(conn net.Conn, dropSecond bool) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	reader := bufio.NewReader(conn)
	for n := 1; ; n++ {
		req, err := http.ReadRequest(reader)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		s.Requests.Add(1)
		if dropSecond && n == 2 {
			return
		}
		_, _ = fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(s.body), s.body)
	}
}

// StartSilentServer starts, on loopback, a provider that reads the first
// request of its first connection and never answers, and returns its base
// URL and a channel that receives, once, how that connection ended for it
// (nil for a close, an error such as ECONNRESET for a reset): a test times
// a call out against it and checks that the call was aborted, not merely
// abandoned. It stops when the test ends.
func StartSilentServer(t testing.TB) (string, <-chan error) {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("psptest: listen: %v", err)
	}
	ended := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		conn, err := listener.Accept()
		if err != nil {
			ended <- err
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		r := bufio.NewReader(conn)
		if _, err := http.ReadRequest(r); err != nil {
			ended <- err
			return
		}
		_, err = io.Copy(io.Discard, r) // until the client's end goes
		ended <- err
	})
	t.Cleanup(func() {
		_ = listener.Close()
		wg.Wait()
	})
	return "http://" + listener.Addr().String(), ended
}

// ClosedURL returns the base URL of a loopback port that nothing listens
// on: a connection to it is refused before any byte is sent, the one
// failure an adapter may classify as not applied without an answer.
func ClosedURL(t testing.TB) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("psptest: listen: %v", err)
	}
	addr := listener.Addr().String()
	if err := listener.Close(); err != nil {
		t.Fatalf("psptest: close: %v", err)
	}
	return "http://" + addr
}
