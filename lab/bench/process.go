package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/lab/internal/childproc"
	"github.com/chargeflow/chargeflow/migrations"
	"github.com/chargeflow/chargeflow/tenant"
)

// ProcessConfig configures StartProcesses.
type ProcessConfig struct {
	// Binary is the chargeflow binary the API, the worker and the fake
	// provider are started from.
	Binary string
	// Env is the environment the children inherit; chargeflow's own
	// variables in it are replaced.
	Env []string
	// ServerURL names the PostgreSQL server; a fresh database is created on
	// it (its database name is ignored) and dropped by Close.
	ServerURL string
	// Dir is where the run's folder (process logs, the provider's ledger)
	// goes. Default: the system's temporary folder.
	Dir string
	// APIMaxConns and WorkerConcurrency are passed as --max-conns and
	// --concurrency; zero keeps the commands' defaults.
	APIMaxConns       int
	WorkerConcurrency int
	// Keep keeps the database and the logs.
	Keep bool
}

// StartProcesses creates and migrates a fresh database, creates a tenant
// and starts `chargeflow fakepsp` and `chargeflow api` as child processes,
// exactly as an operator would run them (the API's memory and CPU are then
// its own and can be read from /proc). The worker is started on demand as
// `chargeflow worker`.
func StartProcesses(ctx context.Context, cfg ProcessConfig) (_ *System, err error) {
	if cfg.Binary == "" || cfg.ServerURL == "" {
		return nil, errors.New("bench: Binary and ServerURL are required")
	}
	dir, err := os.MkdirTemp(cmp.Or(cfg.Dir, os.TempDir()), "chargeflow-bench-")
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("chargeflow_bench_%d", time.Now().UnixNano())
	databaseURL, drop, err := childproc.FreshDatabase(ctx, cfg.ServerURL, name)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	sys := &System{
		Mode:              "process",
		DatabaseURL:       databaseURL,
		APIMaxConns:       cmp.Or(cfg.APIMaxConns, app.Defaults().APIPool.MaxConns),
		WorkerConcurrency: cmp.Or(cfg.WorkerConcurrency, app.Defaults().Worker.Concurrency),
	}
	// The fake provider stands in for a provider on other machines, whose
	// durability costs this machine nothing; its ledger goes to memory
	// (/dev/shm) where the system has it, so that its fsyncs do not take
	// the CPU the system under test is measured on (docs/benchmarks.md,
	// "What each line measures").
	sys.ProviderLedger = dir
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if shm, err := os.MkdirTemp("/dev/shm", "chargeflow-bench-ledger-"); err == nil {
			sys.ProviderLedger = shm
		}
	}
	var children []*child
	sys.close = func(ctx context.Context) error {
		var errs []error
		for i := len(children) - 1; i >= 0; i-- {
			errs = append(errs, children[i].stop())
		}
		if cfg.Keep {
			return errors.Join(errs...)
		}
		errs = append(errs, drop(ctx), os.RemoveAll(dir), os.RemoveAll(sys.ProviderLedger))
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			_ = sys.close(context.WithoutCancel(ctx))
		}
	}()

	if err := migrate(ctx, databaseURL); err != nil {
		return nil, err
	}
	conn, err := sys.conn(ctx)
	if err != nil {
		return nil, err
	}
	created, apiKey, err := tenant.Create(ctx, conn, "bench")
	_ = conn.Close(ctx)
	if err != nil {
		return nil, err
	}
	sys.TenantID, sys.APIKey = created.ID, apiKey

	env := childEnv(cfg.Env, "DATABASE_URL="+databaseURL, "LOG_LEVEL=info")
	start := func(name string, args ...string) (*child, error) {
		c, err := startChild(cfg.Binary, env, filepath.Join(dir, name+".log"), args...)
		if err == nil {
			children = append(children, c)
		}
		return c, err
	}
	psp, err := start("fakepsp", "fakepsp", "--addr", "127.0.0.1:0", "--no-dedupe", "--ledger", filepath.Join(sys.ProviderLedger, "fakepsp-ledger.jsonl"))
	if err != nil {
		return nil, err
	}
	if sys.PSPURL, err = psp.listenURL(ctx); err != nil {
		return nil, err
	}
	sys.PSPPID = psp.cmd.Process.Pid
	apiProc, err := start("api", "api", "--addr", "127.0.0.1:0",
		"--max-conns", strconv.Itoa(sys.APIMaxConns), "--rate-limit", strconv.Itoa(benchRateLimit),
		// No load balancer waits on its readiness: a long drain would only
		// make every run longer.
		"--shutdown-grace", "1s")
	if err != nil {
		return nil, err
	}
	if sys.APIURL, err = apiProc.listenURL(ctx); err != nil {
		return nil, err
	}
	sys.APIPID = apiProc.cmd.Process.Pid
	sys.replays = func(ctx context.Context) (replaySources, error) { return scrapeReplays(ctx, sys.APIURL) }
	if err := childproc.WaitReady(ctx, sys.APIURL); err != nil {
		return nil, err
	}

	workers := 0
	sys.startWorker = func(ctx context.Context) (func() error, error) {
		workers++
		w, err := startChild(cfg.Binary, env, filepath.Join(dir, fmt.Sprintf("worker-%d.log", workers)),
			"worker", "--psp-url", sys.PSPURL, "--concurrency", strconv.Itoa(sys.WorkerConcurrency))
		if err != nil {
			return nil, err
		}
		sys.WorkerPID = w.cmd.Process.Pid
		return func() error {
			// No worker runs until the next starts: a CPU sample taken
			// meanwhile must not read a process that is gone.
			sys.WorkerPID = 0
			return w.stop()
		}, nil
	}
	return sys, nil
}

// migrate applies every migration to the fresh database.
func migrate(ctx context.Context, databaseURL string) error {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("open database pool: %w", err)
	}
	defer pool.Close()
	return migrations.Apply(ctx, pool, slog.New(slog.DiscardHandler))
}

// childEnv is the environment of a child: env without chargeflow's
// variables, plus set.
func childEnv(env []string, set ...string) []string {
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if name == "DATABASE_URL" || name == "PSP_URL" || name == "LOG_LEVEL" ||
			strings.HasPrefix(name, "CHARGEFLOW_") && name != "CHARGEFLOW_TEST_AS_MAIN" {
			continue
		}
		out = append(out, kv)
	}
	return append(out, set...)
}

// child is a chargeflow process the benchmark started. Its stderr and
// stdout go to a log file, not through this process, so writing its logs
// costs this process nothing.
type child struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func startChild(binary string, env []string, logPath string, args ...string) (*child, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start chargeflow %s: %w", args[0], err)
	}
	c := &child{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(c.done)
	}()
	return c, nil
}

// stop asks the process to stop (SIGTERM: the API drains, the worker lets
// running jobs finish) and kills it after fifteen seconds.
func (c *child) stop() error {
	select {
	case <-c.done:
		return nil
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return nil
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
		return fmt.Errorf("%s did not stop within 15 s; killed (log: %s)", c.cmd.Args[1], c.log)
	}
}

// listenURL waits for the process's "listening" log line.
func (c *child) listenURL(ctx context.Context) (string, error) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if addr, ok := childproc.ListeningAddr(c.log, 0); ok {
			return "http://" + addr, nil
		}
		select {
		case <-c.done:
			return "", fmt.Errorf("chargeflow %s exited before listening; see %s", c.cmd.Args[1], c.log)
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("chargeflow %s is not listening after a minute; see %s", c.cmd.Args[1], c.log)
}
