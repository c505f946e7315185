// Package netlab builds, for one scenario run, a network of Linux network
// namespaces whose links can be cut: a switch namespace holding a bridge,
// one namespace per host with a veth into the bridge, addresses in a private
// /24 of 10.231.0.0/16 drawn per run, and one veth from the root namespace
// into the bridge, so that the process that built the lab (the scenario
// runner: its clients, its checker) reaches every host. That link is never
// cut.
//
// A cut drops packets silently in the switch, in both directions, as a
// partition does: a TCP connect or write across it times out, it is never
// refused. The switch port of every host carries an HTB qdisc whose one class
// leads to a pfifo of length 0 (everything sent to it is dropped); a u32
// filter on the port of a, matching the source address of b, sends b's
// packets to a into that class. Loss is a classic BPF filter drawing a random
// number into the same class. Nothing else is needed than the ip and tc of
// iproute2 and a kernel with HTB, u32 and cls_bpf; a delay needs sch_netem.
//
// Every name carries the run's prefix, cfnl-<pid>-<N>- (N the third octet of
// the run's /24), and the root veth is cfnl<N>, its alias naming the pid:
// New sweeps what a run whose process is gone left behind, Close removes
// everything the run made. Nothing is sent to any address outside the
// namespaces the lab made: the hosts have no route but their /24.
package netlab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUnavailable is what Probe and New return, wrapped with the reason,
// when this process cannot make network namespaces (not root, no ip, a
// kernel or a sandbox without them).
var ErrUnavailable = errors.New("needs root and network namespaces")

// ErrNoNetem is what Degrade returns for a delay on a kernel without
// sch_netem.
var ErrNoNetem = errors.New("netlab: a delay needs the kernel's netem qdisc, which this kernel lacks")

// namePrefix begins every namespace and root link a lab makes.
const namePrefix = "cfnl"

// aliasPrefix begins the alias of a lab's root link; the pid follows.
const aliasPrefix = "chargeflow-netlab pid="

// The addresses: 10.231.N.0/24 per run, the root namespace at .1, hosts
// from .10 on.
const (
	firstHost = 10
	maxHosts  = 240
)

// Lab is one run's network.
type Lab struct {
	index  int          // N of 10.231.N.0/24
	prefix string       // cfnl-<pid>-<N>-
	subnet netip.Prefix // 10.231.N.0/24
	root   netip.Addr   // 10.231.N.1, the runner's end
	sw     string       // the switch namespace
	rootIf string       // cfnl<N>, in the root namespace

	mu      sync.Mutex
	hosts   map[string]*Host
	order   []*Host
	cuts    map[[2]string]bool
	degrade map[string]bool
	netemOK *bool
	closed  bool
}

// Host is one namespace of the lab, with one address.
type Host struct {
	// Name is the host's name in the lab ("node1", "api").
	Name string
	// NS is its namespace (for ip netns exec).
	NS string
	// Addr is its address.
	Addr netip.Addr
	id   int
	port string // its bridge port in the switch namespace
}

// probeOnce caches Probe: one namespace made and removed per process.
var (
	probeOnce sync.Once
	probeErr  error
)

// Probe reports whether network namespaces can be made here, by making one
// and removing it (once per process). Its error wraps ErrUnavailable with
// what failed, e.g. "ip netns add: permission denied".
func Probe() error {
	probeOnce.Do(func() { probeErr = probe() })
	return probeErr
}

// probeCommand runs the probe's commands; a test points it at a command
// that fails, to see the path of a machine without namespaces.
var probeCommand = "ip"

func probe() error {
	for _, tool := range []string{probeCommand, "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w (%s: not found)", ErrUnavailable, tool)
		}
	}
	name := fmt.Sprintf("%s-%d-probe-%d", namePrefix, os.Getpid(), rand.Uint32())
	if out, err := exec.Command(probeCommand, "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("%w (ip netns add: %s)", ErrUnavailable, reason(out, err))
	}
	if out, err := exec.Command(probeCommand, "netns", "del", name).CombinedOutput(); err != nil {
		return fmt.Errorf("%w (ip netns del: %s)", ErrUnavailable, reason(out, err))
	}
	return nil
}

// reason is a command's failure in a few words: the last line it printed,
// lower-cased, without ip's own "Cannot ...:" preamble.
func reason(out []byte, err error) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		return err.Error()
	}
	if i := strings.LastIndex(last, ": "); i >= 0 {
		last = last[i+2:]
	}
	return strings.ToLower(last)
}

// New makes a lab: it sweeps what dead runs left, draws a /24 no interface
// or route of this machine uses and no other lab holds, and makes the
// switch and the runner's link into it.
func New(ctx context.Context) (*Lab, error) {
	if err := Probe(); err != nil {
		return nil, err
	}
	if err := Sweep(ctx); err != nil {
		return nil, err
	}
	used, err := usedPrefixes(ctx)
	if err != nil {
		return nil, err
	}
	start := rand.IntN(256)
	for i := range 256 {
		n := (start + i) % 256
		subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 231, byte(n), 0}), 24)
		if slices.ContainsFunc(used, subnet.Overlaps) {
			continue
		}
		l := &Lab{index: n, prefix: fmt.Sprintf("%s-%d-%d-", namePrefix, os.Getpid(), n), subnet: subnet,
			root: netip.AddrFrom4([4]byte{10, 231, byte(n), 1}), rootIf: fmt.Sprintf("%s%d", namePrefix, n),
			hosts: map[string]*Host{}, cuts: map[[2]string]bool{}, degrade: map[string]bool{}}
		l.sw = l.prefix + "sw"
		// The root link is the lock on N: the kernel refuses a second
		// link of that name, whichever process asks.
		if _, err := run(ctx, "ip", "link", "add", l.rootIf, "type", "veth", "peer", "name", l.rootIf+"s"); err != nil {
			if strings.Contains(err.Error(), "exists") {
				continue
			}
			return nil, err
		}
		if err := l.build(ctx); err != nil {
			_ = l.Close()
			return nil, err
		}
		return l, nil
	}
	return nil, errors.New("netlab: every 10.231.N.0/24 is in use")
}

// build makes the switch and the root link of a lab whose root veth pair
// exists.
func (l *Lab) build(ctx context.Context) error {
	steps := [][]string{
		{"ip", "link", "set", l.rootIf, "alias", aliasPrefix + strconv.Itoa(os.Getpid())},
		{"ip", "netns", "add", l.sw},
		{"ip", "-n", l.sw, "link", "set", "lo", "up"},
		{"ip", "-n", l.sw, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", l.sw, "link", "set", "br0", "up"},
		{"ip", "link", "set", l.rootIf + "s", "netns", l.sw},
		{"ip", "-n", l.sw, "link", "set", l.rootIf + "s", "master", "br0"},
		{"ip", "-n", l.sw, "link", "set", l.rootIf + "s", "up"},
		{"ip", "addr", "add", l.root.String() + "/24", "dev", l.rootIf},
		{"ip", "link", "set", l.rootIf, "up"},
	}
	for _, step := range steps {
		if _, err := run(ctx, step[0], step[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// Subnet is the lab's /24.
func (l *Lab) Subnet() netip.Prefix { return l.subnet }

// RootAddr is the runner's address in the lab.
func (l *Lab) RootAddr() netip.Addr { return l.root }

// Prefix begins the name of every namespace of the lab.
func (l *Lab) Prefix() string { return l.prefix }

// AddHost makes a host: a namespace with its loopback up and an eth0 on the
// bridge, at the next address.
func (l *Lab) AddHost(ctx context.Context, name string) (*Host, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errors.New("netlab: the lab is closed")
	}
	if h, ok := l.hosts[name]; ok {
		l.mu.Unlock()
		return h, nil
	}
	id := len(l.order)
	if id >= maxHosts {
		l.mu.Unlock()
		return nil, errors.New("netlab: no address left")
	}
	h := &Host{Name: name, NS: l.prefix + name, id: id, port: fmt.Sprintf("p%d", id),
		Addr: netip.AddrFrom4([4]byte{10, 231, byte(l.index), byte(firstHost + id)})}
	l.hosts[name] = h
	l.order = append(l.order, h)
	l.mu.Unlock()

	steps := [][]string{
		{"ip", "netns", "add", h.NS},
		{"ip", "-n", h.NS, "link", "set", "lo", "up"},
		{"ip", "-n", l.sw, "link", "add", h.port, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
		{"ip", "-n", l.sw, "link", "set", h.port, "master", "br0"},
		{"ip", "-n", l.sw, "link", "set", h.port, "up"},
		{"ip", "-n", h.NS, "addr", "add", h.Addr.String() + "/24", "dev", "eth0"},
		{"ip", "-n", h.NS, "link", "set", "eth0", "up"},
		// The port's qdisc: unclassified packets pass untouched (default
		// 0 sends them directly); class 1:1 leads to a queue of length 0,
		// which drops everything it is given.
		{"tc", "-n", l.sw, "qdisc", "add", "dev", h.port, "root", "handle", "1:", "htb"},
		{"tc", "-n", l.sw, "class", "add", "dev", h.port, "parent", "1:", "classid", "1:1", "htb", "rate", "1mbit"},
		{"tc", "-n", l.sw, "qdisc", "add", "dev", h.port, "parent", "1:1", "handle", "10:", "pfifo", "limit", "0"},
	}
	for _, step := range steps {
		if _, err := run(ctx, step[0], step[1:]...); err != nil {
			return nil, fmt.Errorf("netlab: host %s: %w", name, err)
		}
	}
	return h, nil
}

// Host returns a host by name.
func (l *Lab) Host(name string) (*Host, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.hosts[name]
	return h, ok
}

// Hosts lists the hosts in the order they were made.
func (l *Lab) Hosts() []*Host {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.order)
}

// Command is a command run inside host h's namespace.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// Do runs fn on a thread inside h's namespace: a socket fn opens (a
// listener, a dialled connection) belongs to h's network for good, as if a
// process of h had opened it. fn must not start goroutines that open
// sockets.
func (h *Host) Do(fn func() error) error {
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer self.Close()
	target, err := os.Open("/run/netns/" + h.NS)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := setns(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netlab: enter %s: %w", h.NS, err)
	}
	fnErr := fn()
	if err := setns(self); err != nil {
		// The thread stays locked, and dies with the goroutine: it is in
		// the wrong namespace.
		return errors.Join(fnErr, fmt.Errorf("netlab: leave %s: %w", h.NS, err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

// setns moves the calling thread into the network namespace of f.
func setns(f *os.File) error {
	return unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
}

func (l *Lab) pair(a, b string) (*Host, *Host, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ha, ok := l.hosts[a]
	if !ok {
		return nil, nil, fmt.Errorf("netlab: no host %q", a)
	}
	hb, ok := l.hosts[b]
	if !ok {
		return nil, nil, fmt.Errorf("netlab: no host %q", b)
	}
	if ha == hb {
		return nil, nil, fmt.Errorf("netlab: a host cannot be cut from itself (%s)", a)
	}
	return ha, hb, nil
}

// cutPref is the filter priority of the cut of the host with id from a
// port; loss filters come after every cut.
func cutPref(id int) string { return strconv.Itoa(100 + id) }

const lossPref = "1000"

// Cut drops every packet between hosts a and b, both ways, silently.
// Cutting a cut pair does nothing; a cut that failed part way counts as
// made, so that Heal undoes what of it was done.
func (l *Lab) Cut(ctx context.Context, a, b string) error {
	ha, hb, err := l.pair(a, b)
	if err != nil {
		return err
	}
	key := pairKey(a, b)
	l.mu.Lock()
	if l.cuts[key] {
		l.mu.Unlock()
		return nil
	}
	l.cuts[key] = true
	l.mu.Unlock()
	for _, p := range [][2]*Host{{ha, hb}, {hb, ha}} {
		to, from := p[0], p[1]
		if _, err := run(ctx, "tc", "-n", l.sw, "filter", "add", "dev", to.port, "parent", "1:", "protocol", "ip",
			"pref", cutPref(from.id), "u32", "match", "ip", "src", from.Addr.String()+"/32", "flowid", "1:1"); err != nil {
			return fmt.Errorf("netlab: cut %s from %s: %w", a, b, err)
		}
	}
	return nil
}

// Heal restores the link between a and b. Healing a pair that is not cut
// does nothing; a heal that failed part way can be asked again.
func (l *Lab) Heal(ctx context.Context, a, b string) error {
	ha, hb, err := l.pair(a, b)
	if err != nil {
		return err
	}
	key := pairKey(a, b)
	l.mu.Lock()
	cut := l.cuts[key]
	l.mu.Unlock()
	if !cut {
		return nil
	}
	var errs []error
	for _, p := range [][2]*Host{{ha, hb}, {hb, ha}} {
		to, from := p[0], p[1]
		_, err := run(ctx, "tc", "-n", l.sw, "filter", "del", "dev", to.port, "parent", "1:", "protocol", "ip", "pref", cutPref(from.id))
		if err != nil && !strings.Contains(err.Error(), "Cannot find specified filter") {
			errs = append(errs, fmt.Errorf("netlab: heal %s and %s: %w", a, b, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	l.mu.Lock()
	delete(l.cuts, key)
	l.mu.Unlock()
	return nil
}

// IsCut reports whether a and b are cut from each other.
func (l *Lab) IsCut(a, b string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cuts[pairKey(a, b)]
}

func pairKey(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// Isolate cuts a from each of others, or from every other host when none
// is named. The runner's link stays.
func (l *Lab) Isolate(ctx context.Context, a string, others ...string) error {
	for _, b := range l.others(a, others) {
		if err := l.Cut(ctx, a, b); err != nil {
			return err
		}
	}
	return nil
}

// Rejoin heals what Isolate cut.
func (l *Lab) Rejoin(ctx context.Context, a string, others ...string) error {
	var errs []error
	for _, b := range l.others(a, others) {
		errs = append(errs, l.Heal(ctx, a, b))
	}
	return errors.Join(errs...)
}

func (l *Lab) others(a string, others []string) []string {
	if len(others) > 0 {
		return others
	}
	var out []string
	for _, h := range l.Hosts() {
		if h.Name != a {
			out = append(out, h.Name)
		}
	}
	return out
}

// HealAll heals every cut.
func (l *Lab) HealAll(ctx context.Context) error {
	l.mu.Lock()
	var pairs [][2]string
	for k := range l.cuts {
		pairs = append(pairs, k)
	}
	l.mu.Unlock()
	var errs []error
	for _, p := range pairs {
		errs = append(errs, l.Heal(ctx, p[0], p[1]))
	}
	return errors.Join(errs...)
}

// Degradation is what Degrade does to a host's link: lose a share of the
// packets in each direction, and delay them (the delay needs netem).
type Degradation struct {
	Loss  float64 // 0 to 1
	Delay time.Duration
}

// Degrade worsens every link of host a, in both directions (the runner's
// too): each packet to or from a is lost with probability d.Loss, and
// delayed by d.Delay. A zero Degradation restores the link.
func (l *Lab) Degrade(ctx context.Context, a string, d Degradation) error {
	l.mu.Lock()
	h, ok := l.hosts[a]
	was := l.degrade[a]
	l.mu.Unlock()
	if !ok {
		return fmt.Errorf("netlab: no host %q", a)
	}
	if d.Loss < 0 || d.Loss > 1 {
		return fmt.Errorf("netlab: loss %v is not a probability", d.Loss)
	}
	if d.Delay > 0 {
		if !l.hasNetem(ctx) {
			return ErrNoNetem
		}
		return errors.New("netlab: delays are not built yet on kernels with netem")
	}
	ports := l.ports()
	if was {
		for _, port := range ports {
			_, _ = run(ctx, "tc", "-n", l.sw, "filter", "del", "dev", port, "parent", "1:", "protocol", "ip", "pref", lossPref)
		}
		l.mu.Lock()
		delete(l.degrade, a)
		l.mu.Unlock()
	}
	if d.Loss == 0 {
		return nil
	}
	threshold := uint32(d.Loss * float64(1<<32-1))
	for _, port := range ports {
		// Into a: every packet on a's port; out of a: the packets from
		// a's address on every other port.
		var prog string
		if port == h.port {
			prog = lossProgram(threshold)
		} else {
			prog = lossFromProgram(h.Addr, threshold)
		}
		if _, err := run(ctx, "tc", "-n", l.sw, "filter", "add", "dev", port, "parent", "1:", "protocol", "ip",
			"pref", lossPref, "bpf", "bytecode", prog, "classid", "1:1"); err != nil {
			return fmt.Errorf("netlab: degrade %s: %w", a, err)
		}
	}
	l.mu.Lock()
	l.degrade[a] = true
	l.mu.Unlock()
	return nil
}

// ports are the bridge ports of every host and the runner's.
func (l *Lab) ports() []string {
	var out []string
	for _, h := range l.Hosts() {
		out = append(out, h.port)
	}
	return out
}

// Classic BPF, as tc's bytecode takes it: "count,code jt jf k,...". A
// filter's program returns -1 for "the filter's class" and 0 for no match;
// the packet starts at its Ethernet header, so the IPv4 source is at 26.
const (
	bpfLdAbsW = 0x20       // A = packet word at k
	bpfJeqK   = 0x15       // if A == k
	bpfJgeK   = 0x35       // if A >= k
	bpfRetK   = 0x06       // return k
	bpfRandom = 0xfffff038 // k of the ancillary load of a random word (SKF_AD_OFF + SKF_AD_RANDOM)
	bpfMatch  = 0xffffffff // -1
)

// lossProgram matches a packet with probability threshold/2^32.
func lossProgram(threshold uint32) string {
	return fmt.Sprintf("4,%d 0 0 %d,%d 1 0 %d,%d 0 0 %d,%d 0 0 0",
		bpfLdAbsW, bpfRandom, bpfJgeK, threshold, bpfRetK, bpfMatch, bpfRetK)
}

// lossFromProgram matches a packet from src with probability
// threshold/2^32.
func lossFromProgram(src netip.Addr, threshold uint32) string {
	b := src.As4()
	addr := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	return fmt.Sprintf("6,%d 0 0 26,%d 0 3 %d,%d 0 0 %d,%d 1 0 %d,%d 0 0 %d,%d 0 0 0",
		bpfLdAbsW, bpfJeqK, addr, bpfLdAbsW, bpfRandom, bpfJgeK, threshold, bpfRetK, bpfMatch, bpfRetK)
}

// hasNetem reports whether the kernel takes a netem qdisc, trying one on
// the switch's loopback once.
func (l *Lab) hasNetem(ctx context.Context) bool {
	l.mu.Lock()
	known := l.netemOK
	l.mu.Unlock()
	if known != nil {
		return *known
	}
	_, err := run(ctx, "tc", "-n", l.sw, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
	ok := err == nil
	if ok {
		_, _ = run(ctx, "tc", "-n", l.sw, "qdisc", "del", "dev", "lo", "root")
	}
	l.mu.Lock()
	l.netemOK = &ok
	l.mu.Unlock()
	return ok
}

// Flap cuts the links between a and each of others (every other host when
// none is named), heals them, and so on, each state lasting period, until
// stop is called; onCut, when set, is called after each cut. stop heals and
// returns how many times the links were cut, and the first error.
func (l *Lab) Flap(ctx context.Context, period time.Duration, onCut func(), a string, others ...string) (stop func() (int, error)) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var cuts int
	var firstErr error
	// The cuts and heals themselves are not interrupted by stop: a heal
	// cut short would leave one direction dropping.
	links := context.WithoutCancel(ctx)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := l.Isolate(links, a, others...); err != nil {
				firstErr = err
				return
			}
			cuts++
			if onCut != nil {
				onCut()
			}
			if !sleep(ctx, period) {
				return
			}
			if err := l.Rejoin(links, a, others...); err != nil {
				firstErr = err
				return
			}
			if !sleep(ctx, period) {
				return
			}
		}
	}()
	return func() (int, error) {
		cancel()
		<-done
		heal, hcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer hcancel()
		err := l.Rejoin(heal, a, others...)
		return cuts, errors.Join(firstErr, err)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// Close kills whatever still runs in the lab's namespaces and removes them
// and the root link.
func (l *Lab) Close() error {
	l.mu.Lock()
	l.closed = true
	hosts := slices.Clone(l.order)
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	for _, h := range hosts {
		errs = append(errs, removeNamespace(ctx, h.NS))
	}
	errs = append(errs, removeNamespace(ctx, l.sw))
	if linkExists(ctx, l.rootIf) {
		if _, err := run(ctx, "ip", "link", "del", l.rootIf); err != nil && linkExists(ctx, l.rootIf) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeNamespace SIGKILLs the processes in a namespace and removes it.
func removeNamespace(ctx context.Context, ns string) error {
	if _, err := os.Stat("/run/netns/" + ns); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for range 50 {
		out, err := run(ctx, "ip", "netns", "pids", ns)
		if err != nil || strings.TrimSpace(out) == "" {
			break
		}
		for _, f := range strings.Fields(out) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, err := run(ctx, "ip", "netns", "del", ns)
	return err
}

func linkExists(ctx context.Context, name string) bool {
	_, err := run(ctx, "ip", "link", "show", "dev", name)
	return err == nil
}

// nsName is a lab's namespace: cfnl-<pid>-<N>-<host>, or the probe's.
var nsName = regexp.MustCompile(`^` + namePrefix + `-(\d+)-`)

// Sweep removes the namespaces and root links of labs whose process is
// gone (a run killed before it could clean up).
func Sweep(ctx context.Context) error {
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var errs []error
	for _, e := range entries {
		m := nsName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		if pid, _ := strconv.Atoi(m[1]); !alive(pid) {
			errs = append(errs, removeNamespace(ctx, e.Name()))
		}
	}
	out, err := run(ctx, "ip", "-o", "link", "show")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		// "7: cfnl12@if6: <...> ... \    alias chargeflow-netlab pid=123"
		fields := strings.Fields(line)
		if len(fields) < 2 || !strings.HasPrefix(fields[1], namePrefix) {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(fields[1], ":"), "@")
		_, alias, ok := strings.Cut(line, "alias "+aliasPrefix)
		if !ok {
			continue
		}
		pid, _ := strconv.Atoi(strings.Fields(alias)[0])
		if !alive(pid) {
			if _, err := run(ctx, "ip", "link", "del", name); err != nil && linkExists(ctx, name) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// alive reports whether a process with the pid exists.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// usedPrefixes lists the IPv4 prefixes of this machine's addresses and
// routes (the default route aside), which a lab's /24 must not overlap.
func usedPrefixes(ctx context.Context) ([]netip.Prefix, error) {
	var out []netip.Prefix
	addrs, err := run(ctx, "ip", "-o", "-4", "addr", "show")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(addrs, "\n") {
		fields := strings.Fields(line)
		for i, f := range fields {
			if f == "inet" && i+1 < len(fields) {
				if p, err := netip.ParsePrefix(fields[i+1]); err == nil {
					out = append(out, p.Masked())
				}
			}
		}
	}
	routes, err := run(ctx, "ip", "-4", "route", "show", "table", "all")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(routes, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		dst := fields[0]
		if slices.Contains([]string{"broadcast", "local", "unicast", "blackhole", "unreachable", "prohibit"}, dst) && len(fields) > 1 {
			dst = fields[1]
		}
		if dst == "default" {
			continue
		}
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if p, err := netip.ParsePrefix(dst); err == nil && p.Bits() > 0 {
			out = append(out, p.Masked())
		}
	}
	return out, nil
}

// run runs a command and returns its output; its error carries what the
// command printed.
func run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
