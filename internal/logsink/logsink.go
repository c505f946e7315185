// Package logsink writes a process's log lines from one goroutine, so that
// a request never waits on the write of its log line.
//
// slog's handlers write each record to their io.Writer under a mutex. To a
// file or a pipe that is one write system call per line, made by the
// request's goroutine with every other logging goroutine queued behind it;
// under load the API spent more CPU on those calls than on building the
// lines (docs/architecture.md, "Log lines are written in groups"). A Writer
// copies each line into memory and returns; its goroutine writes what has
// gathered in one call, and the lines that arrive meanwhile go out together
// in the next. Nothing waits on a timer: on a quiet process each line is
// written as soon as it is logged, as before.
//
// What can be lost: the lines copied but not yet written when the process
// dies without Flush (SIGKILL, a runtime fatal error) — those logged in the
// last few microseconds. Callers that end the process on purpose (a crash
// point, main's exit) call Flush first.
package logsink

import (
	"io"
	"sync"
)

// maxPending bounds the lines held in memory: a Write that would go past
// it waits for the goroutine to write what is held, so a stuck destination
// slows logging down instead of growing the heap.
const maxPending = 1 << 20

// Writer is an io.Writer that hands lines to a goroutine. Lines keep their
// order. Close it to stop the goroutine; a Write after Close goes straight
// to the destination.
type Writer struct {
	dst io.Writer

	mu      sync.Mutex
	changed sync.Cond // broadcast when pending shrinks or the goroutine goes idle
	pending []byte    // copied, not yet handed to dst
	spare   []byte    // the buffer the goroutine last wrote, reused
	writing bool      // the goroutine holds lines or is about to take them
	queued  int64     // bytes ever copied in
	written int64     // bytes ever handed to dst
	closed  bool
	wake    chan struct{}
	done    chan struct{}
}

// New starts a Writer writing to dst.
func New(dst io.Writer) *Writer {
	w := &Writer{dst: dst, wake: make(chan struct{}, 1), done: make(chan struct{})}
	w.changed.L = &w.mu
	go w.run()
	return w
}

// Write copies p and returns at once, unless maxPending bytes are already
// waiting. Errors from the destination are not reported: a log line that
// cannot be written must not fail the request that logged it.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for !w.closed && len(w.pending) > 0 && len(w.pending)+len(p) > maxPending {
		w.changed.Wait()
	}
	if w.closed {
		for w.writing { // the goroutine's last lines go first
			w.changed.Wait()
		}
		return w.dst.Write(p)
	}
	w.pending = append(w.pending, p...)
	w.queued += int64(len(p))
	if !w.writing {
		w.writing = true
		w.wake <- struct{}{} // never blocks: only one wake is outstanding while writing is set
	}
	return len(p), nil
}

// run writes whatever has gathered, until there is nothing, then sleeps
// until the next Write.
func (w *Writer) run() {
	defer close(w.done)
	for range w.wake {
		w.mu.Lock()
		for len(w.pending) > 0 {
			buf := w.pending
			w.pending = w.spare[:0]
			w.changed.Broadcast()
			w.mu.Unlock()
			_, _ = w.dst.Write(buf)
			w.mu.Lock()
			w.written += int64(len(buf))
			w.spare = buf[:0]
			w.changed.Broadcast()
		}
		w.writing = false
		w.changed.Broadcast()
		w.mu.Unlock()
	}
}

// Flush waits until every line written before it was handed to the
// destination (not for lines that other goroutines write meanwhile).
func (w *Writer) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for target := w.queued; w.written < target; {
		w.changed.Wait()
	}
}

// Close writes what is held and stops the goroutine. Writes after it are
// made directly, in order.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	close(w.wake) // the goroutine writes what it holds, then ends
	w.changed.Broadcast()
	w.mu.Unlock()
	<-w.done
	return nil
}
