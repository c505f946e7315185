package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// processCPU is the CPU time (user + system) a process has used, from
// /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start after the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// selfCPU is the CPU time this process has used.
func selfCPU() time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}

// isPostgres reports whether pid is a PostgreSQL process of this machine
// (a remote server's backend pids mean nothing here).
func isPostgres(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.HasPrefix(string(comm), "postgres")
}

// cpuTime is an amount of CPU time, with a helper to spread it over ops.
type cpuTime time.Duration

func (c cpuTime) perOp(ops int64) float64 {
	return float64(time.Duration(c).Microseconds()) / float64(ops)
}

// cpuSample is the CPU time of the processes of a measurement at one
// instant (or, after sub, over an interval).
type cpuSample struct {
	self cpuTime
	api  cpuTime
	// postgres sums the backends of the benchmark's database by pid, so
	// that an interval can match them up.
	postgres  cpuTime
	byBackend map[int]time.Duration
	known     bool
}

// sub is the CPU used between o and c. A backend that appeared in between
// counts in full; one that went away is lost (pools keep theirs).
func (c cpuSample) sub(o cpuSample) cpuSample {
	d := cpuSample{self: c.self - o.self, api: c.api - o.api, known: c.known && o.known}
	for pid, t := range c.byBackend {
		d.postgres += cpuTime(t - o.byBackend[pid])
	}
	return d
}

// add sums two intervals.
func (c cpuSample) add(o cpuSample) cpuSample {
	if c.self == 0 && c.api == 0 && c.postgres == 0 {
		return o
	}
	return cpuSample{self: c.self + o.self, api: c.api + o.api, postgres: c.postgres + o.postgres, known: c.known && o.known}
}

// cpu samples this process, the API's process and the database's backends.
// It is "known" only where every part could be read: on Linux, with the
// API in its own process or in this one, and Postgres on this machine.
func (r *runner) cpu(ctx context.Context) (cpuSample, error) {
	s := cpuSample{self: cpuTime(selfCPU()), known: true, byBackend: map[int]time.Duration{}}
	if r.sys.APIPID != 0 {
		t, err := processCPU(r.sys.APIPID)
		if err != nil {
			s.known = false
		}
		s.api = cpuTime(t)
	}
	rows, err := r.admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return cpuSample{}, fmt.Errorf("list backends: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return cpuSample{}, err
		}
		if !isPostgres(pid) {
			s.known = false
			continue
		}
		t, err := processCPU(pid)
		if err != nil {
			continue // it just exited
		}
		s.byBackend[pid] = t
		s.postgres += cpuTime(t)
	}
	return s, rows.Err()
}

// memory is a process's resident set, from /proc/<pid>/status.
type memory struct {
	rss uint64 // VmRSS, bytes
	hwm uint64 // VmHWM, the peak resident set, bytes
}

func processMemory(pid int) (memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, err
	}
	defer f.Close()
	var m memory
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		name, value, ok := strings.Cut(scanner.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return memory{}, fmt.Errorf("/proc/%d/status %s: %w", pid, name, err)
		}
		if name == "VmRSS" {
			m.rss = kb << 10
		} else {
			m.hwm = kb << 10
		}
	}
	if err := scanner.Err(); err != nil {
		return memory{}, err
	}
	if m.hwm == 0 {
		return memory{}, fmt.Errorf("/proc/%d/status has no VmHWM", pid)
	}
	return m, nil
}

// memorySampler records the API's resident set every interval while the
// benchmark runs.
type memorySampler struct {
	pid      int
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	// max and samples are written by the sampler goroutine only, read
	// after done is closed.
	max     uint64
	samples int
	err     error
}

func startMemorySampler(pid int, interval time.Duration) *memorySampler {
	m := &memorySampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			mem, err := processMemory(pid)
			if err != nil {
				m.err = err
				return
			}
			m.max = max(m.max, mem.rss)
			m.samples++
			select {
			case <-m.stop:
				return
			case <-ticker.C:
			}
		}
	}()
	return m
}

// halt stops the sampler; it may be called more than once.
func (m *memorySampler) halt() {
	m.stopOnce.Do(func() { close(m.stop) })
	<-m.done
}

// finish stops the sampler and returns the highest VmRSS it saw and the
// process's VmHWM now.
func (m *memorySampler) finish() (maxRSS, hwm uint64, err error) {
	m.halt()
	if m.err != nil {
		return 0, 0, m.err
	}
	mem, err := processMemory(m.pid)
	if err != nil {
		return 0, 0, err
	}
	return m.max, mem.hwm, nil
}

// SettleCPU is the CPU each settled charge cost over a drain, per process,
// in microseconds. In process (Go benchmarks, tests) the worker and the
// fake provider run in the benchmark's own process, and Worker counts all
// of it.
type SettleCPU struct {
	Worker   float64 `json:"worker"`
	Provider float64 `json:"provider"`
	Postgres float64 `json:"postgres"`
}

// Total is the sum over the processes.
func (c SettleCPU) Total() float64 { return c.Worker + c.Provider + c.Postgres }

// settleSample is the CPU of a drain's processes at one instant.
type settleSample struct {
	cpuSample
	workerPID int
	worker    cpuTime
	provider  cpuTime
}

// settleCPU samples the database's backends, the fake provider and the
// running worker (or this process, where they run in it).
func (r *runner) settleCPU(ctx context.Context) (settleSample, error) {
	base, err := r.cpu(ctx)
	if err != nil {
		return settleSample{}, err
	}
	s := settleSample{cpuSample: base, worker: base.self}
	if r.sys.PSPPID != 0 {
		t, err := processCPU(r.sys.PSPPID)
		s.known = s.known && err == nil
		s.provider = cpuTime(t)
	}
	if s.workerPID = r.sys.WorkerPID; s.workerPID != 0 {
		t, err := processCPU(s.workerPID)
		s.known = s.known && err == nil
		s.worker = cpuTime(t)
	}
	return s, nil
}

// sub is the CPU used between o and c. A worker started in between (a
// new process) counts in full.
func (c settleSample) sub(o settleSample) settleSample {
	d := settleSample{cpuSample: c.cpuSample.sub(o.cpuSample), workerPID: c.workerPID,
		worker: c.worker - o.worker, provider: c.provider - o.provider}
	if c.workerPID != o.workerPID {
		d.worker = c.worker
	}
	return d
}

// perCharge spreads the sample over n settled charges; nil if any part
// could not be read.
func (c settleSample) perCharge(n int64) *SettleCPU {
	if !c.known || n <= 0 {
		return nil
	}
	return &SettleCPU{Worker: c.worker.perOp(n), Provider: c.provider.perOp(n), Postgres: c.postgres.perOp(n)}
}
