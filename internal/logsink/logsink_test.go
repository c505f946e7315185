package logsink

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gatedWriter records every Write it gets, and holds each one until the
// test lets it through.
type gatedWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	calls  int
	gate   chan struct{} // nil: no gate
	inside chan struct{} // told when a Write starts waiting on the gate
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	if g.gate != nil {
		g.inside <- struct{}{}
		<-g.gate
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	return g.buf.Write(p)
}

func (g *gatedWriter) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.String()
}

// Lines written while the destination is busy go out together, in order,
// in one call, and Write never waited for the destination.
func TestLinesWhileWritingGoOutTogether(t *testing.T) {
	dst := &gatedWriter{gate: make(chan struct{}), inside: make(chan struct{})}
	w := New(dst)
	_, err := w.Write([]byte("first\n"))
	require.NoError(t, err)
	<-dst.inside // the goroutine is writing "first" and holds there
	for i := range 5 {
		n, err := fmt.Fprintf(w, "line %d\n", i)
		require.NoError(t, err)
		require.Equal(t, len("line 0\n"), n)
	}
	close(dst.gate) // let both writes through
	go func() {
		for range dst.inside {
		}
	}()
	w.Flush()
	assert.Equal(t, "first\nline 0\nline 1\nline 2\nline 3\nline 4\n", dst.String())
	dst.mu.Lock()
	assert.Equal(t, 2, dst.calls, "the five lines logged during the first write go out in one")
	dst.mu.Unlock()
	require.NoError(t, w.Close())
	close(dst.inside)
}

// Under concurrent writers, every line arrives whole, once, and each
// writer's lines keep their order; Flush returns only when what was
// written before it reached the destination.
func TestConcurrentLinesArriveWholeAndInOrder(t *testing.T) {
	dst := &gatedWriter{}
	w := New(dst)
	const writers, lines = 16, 500
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			for i := range lines {
				fmt.Fprintf(w, "g%02d %04d .%s\n", g, i, strings.Repeat("x", i%97))
			}
			w.Flush()
			assert.Contains(t, dst.String(), fmt.Sprintf("g%02d %04d ", g, lines-1), "Flush returned before this writer's last line was written")
		})
	}
	wg.Wait()
	require.NoError(t, w.Close())
	next := make([]int, writers)
	for line := range strings.Lines(dst.String()) {
		var g, i int
		var pad string
		_, err := fmt.Sscanf(line, "g%02d %04d %s\n", &g, &i, &pad)
		require.NoError(t, err, "a line arrived torn: %q", line)
		require.Equal(t, next[g], i, "writer %d's lines out of order", g)
		require.Equal(t, "."+strings.Repeat("x", i%97), pad, "a line arrived torn: %q", line)
		next[g]++
	}
	for g := range writers {
		assert.Equal(t, lines, next[g], "writer %d", g)
	}
}

// A destination that stops taking lines makes Write wait once maxPending
// bytes are held, instead of growing the heap.
func TestWriteWaitsWhenTooMuchIsHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dst := &gatedWriter{gate: make(chan struct{}), inside: make(chan struct{})}
		w := New(dst)
		_, _ = w.Write([]byte("x"))
		<-dst.inside // held: the destination is stuck
		big := bytes.Repeat([]byte("y"), maxPending/2)
		_, _ = w.Write(big)
		_, _ = w.Write(big) // exactly maxPending: still taken
		returned := make(chan struct{})
		go func() {
			_, _ = w.Write([]byte("z"))
			close(returned)
		}()
		synctest.Wait() // every goroutine is blocked: the writer on the gate, "z" on the Writer
		select {
		case <-returned:
			t.Fatal("a Write past maxPending returned while the destination was stuck")
		default:
		}
		w.mu.Lock()
		held := len(w.pending)
		w.mu.Unlock()
		assert.Equal(t, maxPending, held)
		close(dst.gate)
		go func() {
			for range dst.inside {
			}
		}()
		<-returned
		require.NoError(t, w.Close())
		close(dst.inside)
		assert.Equal(t, 1+maxPending+1, len(dst.String()))
		assert.True(t, strings.HasSuffix(dst.String(), "yz"))
	})
}

// After Close, lines are written directly, after everything held.
func TestWriteAfterCloseGoesDirectly(t *testing.T) {
	dst := &gatedWriter{}
	w := New(dst)
	_, _ = w.Write([]byte("a\n"))
	require.NoError(t, w.Close())
	require.NoError(t, w.Close(), "a second Close is harmless")
	_, _ = w.Write([]byte("b\n"))
	assert.Equal(t, "a\nb\n", dst.String(), "written synchronously, no Flush needed")
}
