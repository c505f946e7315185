package scenario

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chargeflow/chargeflow/lab/internal/childproc"
)

// proc is one chargeflow process the runner starts, kills and restarts.
// Every incarnation appends its stderr (its JSON log) to the same file, so
// the log audit and the fault counts see the whole history.
type proc struct {
	name string
	bin  string
	args []string
	env  []string
	log  string // path of the log file
	// netns, when set, is the network namespace every incarnation runs in
	// (ip netns exec), the process's host in a network lab.
	netns string
	// seed seeds the crash points (the run's seed mixed with the process's
	// name); each incarnation draws from seed+n, so
	// a restarted process does not replay its predecessor's draws (which
	// would crash it at the same request forever) and a run still replays.
	seed uint64

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	addr    string
	starts  int
	killed  int
	exitErr error
	// readyAt is when the current incarnation said it was ready (an API's
	// "listening", a worker's or reconciler's "started" line); zero until
	// then.
	readyAt time.Time
}

// readyMessages are the log lines by which a role that serves no HTTP says
// it is ready.
var readyMessages = map[string]string{"worker": "worker started", "reconciler": "reconciler started"}

// start runs a new incarnation and, when the process serves HTTP, waits for
// its "listening" line and records the address.
func (p *proc) start(ctx context.Context, listens bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exitedLocked() {
		return fmt.Errorf("%s is already running", p.name)
	}
	logFile, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	offset, _ := logFile.Seek(0, io.SeekEnd)
	cmd := exec.Command(p.bin, p.args...)
	if p.netns != "" {
		// ip netns exec execs the binary: the pid, and so the process
		// group a kill signals, stay the child's.
		cmd = exec.Command("ip", append([]string{"netns", "exec", p.netns, p.bin}, p.args...)...)
	}
	cmd.Env = append(p.env[:len(p.env):len(p.env)], fmt.Sprintf("CHARGEFLOW_CRASHPOINT_SEED=%d", p.seed+uint64(p.starts)))
	cmd.Stderr = logFile
	cmd.Stdout = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	p.cmd, p.done, p.starts, p.readyAt = cmd, done, p.starts+1, time.Time{}
	if !listens {
		if msg, ok := readyMessages[p.args[0]]; ok {
			go p.watchReady(ctx, offset, msg, done)
		}
		return nil
	}
	addr, err := waitListening(ctx, p.log, offset, done)
	if err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	p.addr, p.readyAt = "http://"+addr, time.Now()
	return nil
}

// watchReady follows the incarnation that done belongs to until its log
// says msg, and records when.
func (p *proc) watchReady(ctx context.Context, offset int64, msg string, done <-chan struct{}) {
	for !childproc.Logged(p.log, offset, msg) {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == done {
		p.readyAt = time.Now()
	}
}

// upFor is how long the current incarnation has been ready: zero while it
// starts, and once it has exited.
func (p *proc) upFor() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exitedLocked() || p.readyAt.IsZero() {
		return 0
	}
	return time.Since(p.readyAt)
}

func (p *proc) exitedLocked() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// running reports whether the current incarnation is alive.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.exitedLocked()
}

// kill sends SIGKILL (no cleanup runs, exactly like a crash) and waits.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	alive := cmd != nil && !p.exitedLocked()
	if alive {
		p.killed++
	}
	p.mu.Unlock()
	if !alive {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// wait waits for the current incarnation to exit on its own.
func (p *proc) wait(ctx context.Context) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// url is the address of the current incarnation.
func (p *proc) url() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// waitListening follows a log file from offset until a "listening" line.
func waitListening(ctx context.Context, path string, offset int64, exited <-chan struct{}) (string, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if addr, ok := childproc.ListeningAddr(path, offset); ok {
			return addr, nil
		}
		select {
		case <-exited:
			if addr, ok := childproc.ListeningAddr(path, offset); ok {
				return addr, nil
			}
			return "", fmt.Errorf("exited before listening; see %s", path)
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("not listening after a minute; see %s", path)
		}
	}
}

// runOnce runs a short command (migrate, tenant create) to completion and
// returns its stdout; stderr goes to the log file.
func runOnce(ctx context.Context, bin string, env []string, logPath string, args ...string) (string, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return "", err
	}
	defer logFile.Close()
	var stdout strings.Builder
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Stdout = &stdout
	cmd.Stderr = logFile
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("chargeflow %s: %w (see %s)", strings.Join(args, " "), err, logPath)
	}
	return stdout.String(), nil
}

// countInLogs counts the lines of the log files under dir that contain
// every one of the given substrings.
func countInLogs(dir string, substrings ...string) (int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, path := range files {
		err := eachLine(path, func(line string) {
			for _, s := range substrings {
				if !strings.Contains(line, s) {
					return
				}
			}
			n++
		})
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

func eachLine(path string, fn func(string)) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for scanner.Scan() {
		fn(scanner.Text())
	}
	return scanner.Err()
}
