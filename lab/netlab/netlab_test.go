//go:build lab

package netlab

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// needNamespaces skips with the probe's reason, and only when namespaces
// truly cannot be made here.
func needNamespaces(t *testing.T) {
	t.Helper()
	if err := Probe(); err != nil {
		if errors.Is(err, ErrUnavailable) {
			t.Skipf("not run: %v", err)
		}
		t.Fatal(err)
	}
}

// echo serves, in h's namespace, a TCP echo on h's address.
func echo(t *testing.T, h *Host) netip.AddrPort {
	t.Helper()
	var ln net.Listener
	if err := h.Do(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(h.Addr.String(), "0"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// dial connects from h's namespace (the root namespace when h is nil) and
// makes one round trip.
func dial(h *Host, to netip.AddrPort, timeout time.Duration) error {
	var conn net.Conn
	open := func() (err error) {
		conn, err = net.DialTimeout("tcp", to.String(), timeout)
		return err
	}
	var err error
	if h == nil {
		err = open()
	} else {
		err = h.Do(open)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	return roundTrip(conn, timeout)
}

func roundTrip(conn net.Conn, timeout time.Duration) error {
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		return err
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return err
	}
	if string(buf) != "ping\n" {
		return errors.New("echo answered " + strconv.Quote(string(buf)))
	}
	return nil
}

// timedOut fails unless err is a timeout: a partition drops packets, it
// never refuses them.
func timedOut(t *testing.T, what string, err error) {
	t.Helper()
	var netErr net.Error
	if err == nil {
		t.Fatalf("%s: went through", what)
	}
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("%s: %v, want a timeout", what, err)
	}
}

func TestCutAndHeal(t *testing.T) {
	needNamespaces(t)
	ctx := context.Background()
	l, err := New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = l.Close()
		}
	})
	if !l.Subnet().Contains(l.RootAddr()) || !strings.HasPrefix(l.Subnet().String(), "10.231.") {
		t.Fatalf("subnet %s, root %s", l.Subnet(), l.RootAddr())
	}
	a, err := l.AddHost(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.AddHost(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	c, err := l.AddHost(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if a.Addr == b.Addr || !l.Subnet().Contains(a.Addr) || !l.Subnet().Contains(b.Addr) {
		t.Fatalf("addresses %s and %s in %s", a.Addr, b.Addr, l.Subnet())
	}
	atB := echo(t, b)
	const patience = time.Second

	if err := dial(a, atB, 5*time.Second); err != nil {
		t.Fatalf("a to b before the cut: %v", err)
	}
	if err := dial(nil, atB, 5*time.Second); err != nil {
		t.Fatalf("the runner to b: %v", err)
	}
	// The hosts reach nothing outside the lab: no route but their /24.
	if err := a.Do(func() error {
		_, err := net.DialTimeout("tcp", "192.0.2.1:9", patience)
		return err
	}); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("a to an address outside the lab: %v, want network unreachable", err)
	}

	// A connection made before the cut stops answering; a new one cannot
	// be made; both time out. The runner and c still reach b.
	var held net.Conn
	if err := a.Do(func() (err error) {
		held, err = net.DialTimeout("tcp", atB.String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := l.Cut(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	if !l.IsCut("b", "a") {
		t.Fatal("IsCut(b, a) after Cut(a, b) is false")
	}
	timedOut(t, "a to b across the cut", dial(a, atB, patience))
	timedOut(t, "a round trip on a connection made before the cut", roundTrip(held, patience))
	if err := dial(nil, atB, 5*time.Second); err != nil {
		t.Fatalf("the runner to b during the cut: %v", err)
	}
	if err := dial(c, atB, 5*time.Second); err != nil {
		t.Fatalf("c to b during the cut of a and b: %v", err)
	}
	atA := echo(t, a)
	timedOut(t, "b to a across the cut", dial(b, atA, patience))

	if err := l.Heal(ctx, "b", "a"); err != nil {
		t.Fatal(err)
	}
	if err := dial(a, atB, 5*time.Second); err != nil {
		t.Fatalf("a to b after the heal: %v", err)
	}
	if err := dial(b, atA, 5*time.Second); err != nil {
		t.Fatalf("b to a after the heal: %v", err)
	}

	// Isolate cuts every other host, never the runner.
	if err := l.Isolate(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	timedOut(t, "c to an isolated b", dial(c, atB, patience))
	timedOut(t, "a to an isolated b", dial(a, atB, patience))
	if err := dial(nil, atB, 5*time.Second); err != nil {
		t.Fatalf("the runner to an isolated b: %v", err)
	}
	if err := l.Rejoin(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := dial(c, atB, 5*time.Second); err != nil {
		t.Fatalf("c to b after the rejoin: %v", err)
	}

	// A loss of every packet is a cut of everything, the runner's link too;
	// a zero degradation restores it.
	if err := l.Degrade(ctx, "b", Degradation{Loss: 1}); err != nil {
		t.Fatal(err)
	}
	timedOut(t, "the runner to b losing every packet", dial(nil, atB, patience))
	timedOut(t, "b losing every packet to a", dial(b, atA, patience))
	if err := l.Degrade(ctx, "b", Degradation{}); err != nil {
		t.Fatal(err)
	}
	if err := dial(a, atB, 5*time.Second); err != nil {
		t.Fatalf("a to b after the degradation ended: %v", err)
	}
	if err := l.Degrade(ctx, "b", Degradation{Delay: 10 * time.Millisecond}); err != nil && !errors.Is(err, ErrNoNetem) {
		t.Fatal(err)
	}

	// Close removes every namespace and the runner's link.
	prefix := l.Prefix()
	closed = true
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if left := namespaces(t, prefix); len(left) > 0 {
		t.Fatalf("left after Close: %v", left)
	}
	if linkExists(ctx, l.rootIf) {
		t.Fatalf("%s left after Close", l.rootIf)
	}
}

func TestFlap(t *testing.T) {
	needNamespaces(t)
	ctx := context.Background()
	l, err := New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, name := range []string{"a", "b"} {
		if _, err := l.AddHost(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	var seen atomic.Int64
	stop := l.Flap(ctx, 50*time.Millisecond, func() { seen.Add(1) }, "a", "b")
	// The flap is seen cut at least once, then healed at least once.
	for _, want := range []bool{true, false} {
		for l.IsCut("a", "b") != want {
			time.Sleep(5 * time.Millisecond)
		}
	}
	cuts, err := stop()
	if err != nil {
		t.Fatal(err)
	}
	if cuts < 1 || int64(cuts) != seen.Load() || l.IsCut("a", "b") {
		t.Fatalf("after stop: %d cuts, %d seen by onCut, cut now %v", cuts, seen.Load(), l.IsCut("a", "b"))
	}
	b, _ := l.Host("b")
	a, _ := l.Host("a")
	if err := dial(a, echo(t, b), 5*time.Second); err != nil {
		t.Fatalf("a to b after the flap stopped: %v", err)
	}
}

func TestSweepRemovesWhatDeadRunsLeft(t *testing.T) {
	needNamespaces(t)
	ctx := context.Background()
	// A pid no process has: a child that has exited and been waited for
	// (another child is tried if its pid was taken again at once).
	dead := 0
	for range 100 {
		child := exec.Command("true")
		if err := child.Run(); err != nil {
			t.Fatal(err)
		}
		if !alive(child.Process.Pid) {
			dead = child.Process.Pid
			break
		}
	}
	if dead == 0 {
		t.Fatal("every exited child's pid was taken again at once")
	}
	stale := namePrefix + "-" + strconv.Itoa(dead) + "-7-sw"
	if _, err := run(ctx, "ip", "netns", "add", stale); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeNamespace(ctx, stale) })
	mine := namePrefix + "-" + strconv.Itoa(os.Getpid()) + "-7-keep"
	if _, err := run(ctx, "ip", "netns", "add", mine); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeNamespace(ctx, mine) })

	if err := Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s, whose process is gone, survived the sweep (%v)", stale, err)
	}
	if _, err := os.Stat("/run/netns/" + mine); err != nil {
		t.Fatalf("%s, whose process lives, was swept: %v", mine, err)
	}
}

func TestProbeSaysWhyNamespacesAreUnavailable(t *testing.T) {
	// An ip that fails as ip netns add does for a user who is not root.
	fake := filepath.Join(t.TempDir(), "ip")
	script := "#!/bin/sh\necho 'mount --make-shared /run/netns failed: Permission denied' >&2\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	saved := probeCommand
	probeCommand = fake
	defer func() { probeCommand = saved }()
	err := probe()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("probe with a failing ip: %v, want ErrUnavailable", err)
	}
	if want := "needs root and network namespaces (ip netns add: permission denied)"; err.Error() != want {
		t.Fatalf("probe said %q, want %q", err, want)
	}
}

// namespaces lists the namespaces whose names begin with prefix.
func namespaces(t *testing.T, prefix string) []string {
	t.Helper()
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}
