package scenario

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// haCluster is a primary and a synchronous standby run by pg_auto_failover
// (a monitor and two nodes on loopback), started by scripts/ha-postgres in a
// folder of the run. Every process reaches it through one multi-host URL
// with target_session_attrs=read-write, so that after a failover new
// connections find the new primary.
type haCluster struct {
	script string
	root   string
	port   int // the monitor's; the nodes listen on the next two
	url    string
	// env and addrs place the monitor and the nodes in namespaces of a
	// network lab (haNetwork); empty, everything is on loopback.
	env   []string
	addrs map[string]string
}

// addr is the address the monitor or a node (node1, node2) listens on.
func (c *haCluster) addr(node string) string {
	if a, ok := c.addrs[node]; ok {
		return a
	}
	return "127.0.0.1"
}

// startHACluster starts a new cluster on three free consecutive ports, on
// loopback or, with a network, each server in its host's namespace.
func startHACluster(ctx context.Context, script, root string, network *haNetwork) (*haCluster, error) {
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("this scenario runs PostgreSQL under pg_auto_failover with %s, which is missing (run from the repository, or pass --pg-script from the same folder): %w", script, err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	port, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	c := &haCluster{script: script, root: root, port: port}
	if network != nil {
		c.env, c.addrs = network.env, network.addrs
	}
	out, err := c.run(ctx, "start")
	if err != nil {
		return c, err
	}
	c.url = strings.TrimSpace(out)
	return c, nil
}

// freePorts finds n consecutive free ports on the loopback address and
// returns the first. They are drawn below Linux's default range of
// ephemeral ports (32768–60999): a port free now but in that range may be
// taken as the local end of an outgoing connection before PostgreSQL binds
// it, which a busy machine's loopback traffic does often enough.
func freePorts(n int) (int, error) {
	for range 100 {
		base := 20000 + rand.IntN(12000)
		free := true
		for p := base; p < base+n && free; p++ {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				free = false
				continue
			}
			ln.Close()
		}
		if free {
			return base, nil
		}
	}
	return 0, fmt.Errorf("found no %d consecutive free ports", n)
}

func (c *haCluster) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.script, args...)
	cmd.Env = append(append(os.Environ(), "CHARGEFLOW_DATA="+c.root, "CHARGEFLOW_HA_PORT="+strconv.Itoa(c.port)), c.env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s", c.script, strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// URL is the multi-host URL of the pair (database postgres).
func (c *haCluster) URL() string { return c.url }

func (c *haCluster) folder() string { return filepath.Join(c.root, fmt.Sprintf("ha-%d", c.port)) }

// primary names the node that answers as a primary (not in recovery), and
// its port. It asks again until primaryWait has passed: on a busy machine a
// node that has just been promoted, or that serves the whole load, may take
// longer than one try to answer, and no answer is not proof there is no
// primary.
func (c *haCluster) primary(ctx context.Context) (string, int, error) {
	deadline := time.Now().Add(primaryWait)
	for {
		for i, node := range []string{"node1", "node2"} {
			port := c.port + 1 + i
			if isPrimary(ctx, c.addr(node), port) {
				return node, port, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", 0, fmt.Errorf("no node answers as a primary (asked for %s)", primaryWait)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// primaryWait is how long primary asks before it gives up; each try may
// take 5 s.
const primaryWait = time.Minute

// isPrimary reports whether the node at addr and port answers and is not in
// recovery.
func isPrimary(ctx context.Context, addr string, port int) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", net.JoinHostPort(addr, strconv.Itoa(port))))
	if err != nil {
		return false
	}
	defer conn.Close(cctx)
	var recovering bool
	return conn.QueryRow(cctx, `SELECT pg_is_in_recovery()`).Scan(&recovering) == nil && !recovering
}

// killPrimary SIGKILLs the primary node — its pg_autoctl keeper and its
// PostgreSQL, every process of its group, as if the machine died — and
// waits until its port no longer answers. It returns the node's name.
func (c *haCluster) killPrimary(ctx context.Context) (string, int, error) {
	node, port, err := c.primary(ctx)
	if err != nil {
		return "", 0, err
	}
	data, err := os.ReadFile(filepath.Join(c.folder(), node+".pgid"))
	if err != nil {
		return "", 0, err
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return "", 0, fmt.Errorf("%s.pgid: %w", node, err)
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		return "", 0, fmt.Errorf("SIGKILL %s (group %d): %w", node, pgid, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(c.addr(node), strconv.Itoa(port)), 200*time.Millisecond)
		if err != nil {
			return node, port, nil
		}
		conn.Close()
		time.Sleep(20 * time.Millisecond)
	}
	return "", 0, fmt.Errorf("%s still answers 30 s after SIGKILL", node)
}

// states is the monitor's view of the nodes (for the progress lines).
func (c *haCluster) states(ctx context.Context) string {
	out, err := c.run(ctx, "status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(out, "\n") {
		if nodes, ok := strings.CutPrefix(line, "nodes: "); ok {
			return nodes
		}
	}
	return "unknown"
}

// stop stops the monitor and both nodes; the caller removes the folder.
func (c *haCluster) stop(ctx context.Context) error {
	_, err := c.run(ctx, "stop")
	return err
}

// failOver SIGKILLs the primary node mid-load and measures the time from
// the kill to the first charge accepted on the new primary: a charge with a
// fresh key, first sent after the kill, and sent again by the careful client
// until it is answered; its 201 can only come from a commit on the standby
// promoted in the meantime. It checks that the other node is now the
// primary.
func (s *system) failOver(ctx context.Context) error {
	if s.ha == nil {
		return errors.New("failOver needs HAPostgres")
	}
	s.logf("SIGKILL of the primary node (keeper and PostgreSQL); the monitor must promote the standby")
	killed, _, err := s.ha.killPrimary(ctx)
	if err != nil {
		return err
	}
	killedAt := time.Now()
	s.mu.Lock()
	s.fired["failover:primary_killed"]++
	s.mu.Unlock()
	probe := s.request("probe", int(s.probes.Add(1)))
	if a := s.client.post(ctx, probe); a.status != 201 {
		return fmt.Errorf("the first charge sent after the kill got no 201 (status %d, %s)", a.status, a.body)
	}
	tookOver := time.Since(killedAt)
	promoted, _, err := s.ha.primary(ctx)
	if err != nil {
		return fmt.Errorf("after the failover: %w", err)
	}
	if promoted == killed {
		return fmt.Errorf("%s was killed, yet answers as the primary", killed)
	}
	s.mu.Lock()
	s.fired["failover:promoted"]++
	s.measured["kill→first 201"] = tookOver
	s.mu.Unlock()
	s.logf("%s promoted; first charge accepted %s after the kill (%s)", promoted, tookOver.Round(10*time.Millisecond), s.ha.states(ctx))
	return nil
}

// rejoin starts the killed node again, as an operator would: it comes back
// as the new primary's synchronous standby.
func (s *system) rejoin(ctx context.Context) {
	if _, err := s.ha.run(ctx, "start"); err != nil {
		s.logf("the killed node did not rejoin: %v", err)
		return
	}
	s.mu.Lock()
	s.fired["failover:rejoined"]++
	s.mu.Unlock()
	s.logf("the killed node rejoined: %s", s.ha.states(ctx))
}

// failoverRun sends charges through the careful clients, SIGKILLs the
// primary node once a third are acknowledged, measures how long until a
// charge is accepted on the new primary, lets the traffic finish on it,
// and brings the lost node back as the standby.
func failoverRun(short, full int) func(ctx context.Context, s *system) error {
	return func(ctx context.Context, s *system) error {
		if err := s.rejectCard(ctx); err != nil {
			return err
		}
		n := s.charges(short, full)
		if err := s.midTraffic(ctx, "failover", n, func() error { return s.failOver(ctx) }); err != nil {
			return err
		}
		if got := s.client.ackedCount(); got < n {
			return fmt.Errorf("only %d of %d charges were acknowledged; the clients gave up on the rest", got, n)
		}
		if err := s.waitLeader(ctx); err != nil {
			return err
		}
		s.rejoin(ctx)
		s.settleUnderFaults(ctx)
		return nil
	}
}

// waitLeader waits until a worker holds River's leadership on the new
// primary (the leader runs the rescuer of jobs left running by a dead
// worker, the scheduler of retries, the cleaners): a leader row whose lease
// has not expired by the database's clock.
func (s *system) waitLeader(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var leaders int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM river_leader WHERE expires_at > now()`).Scan(&leaders)
		if err == nil && leaders > 0 {
			s.mu.Lock()
			s.fired["failover:river_leader"]++
			s.mu.Unlock()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return errors.New("no River leader on the new primary a minute after the failover")
}

// roundRobin spreads the client's requests over the APIs, as a load
// balancer in front of them does: each request goes to the next one.
func roundRobin(apis []*proc) func() string {
	var next atomic.Uint64
	return func() string {
		return apis[(next.Add(1)-1)%uint64(len(apis))].url()
	}
}
