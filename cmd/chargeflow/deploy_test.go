//go:build lab

package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// The deploy files can't be run here (no Docker daemon, no registry), so
// these tests check what can be checked without one: docker-compose.yml
// parses, and every command, flag and environment variable that it and the
// Dockerfile hand the binary is one the binary has (docs/deployment.md).

// composeService is what the tests read of one service in the output of
// `docker-compose config`, which has resolved the anchors and merge keys.
type composeService struct {
	Image       string                            `yaml:"image"`
	Build       *struct{ Context, Target string } `yaml:"build"`
	Entrypoint  any                               `yaml:"entrypoint"`
	Command     any                               `yaml:"command"`
	Environment map[string]*string                `yaml:"environment"`
	Healthcheck *struct {
		Test    []string `yaml:"test"`
		Disable bool     `yaml:"disable"`
	} `yaml:"healthcheck"`
	StopGracePeriod string `yaml:"stop_grace_period"`
	MemLimit        string `yaml:"mem_limit"`
	CPUs            string `yaml:"cpus"`
	Volumes         []any  `yaml:"volumes"`
	Ports           []any  `yaml:"ports"`
}

// goRuntimeEnv are variables the Go runtime reads, not the binary's code.
var goRuntimeEnv = map[string]bool{"GOMEMLIMIT": true}

// bytesOf reads a size as Compose ("256m") or the Go runtime ("200MiB")
// writes it.
func bytesOf(t *testing.T, what, size string) int64 {
	t.Helper()
	units := []struct {
		suffix string
		n      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(size, u.suffix); ok {
			n, err := strconv.ParseInt(num, 10, 64)
			require.NoError(t, err, "%s: %q", what, size)
			return n * u.n
		}
	}
	n, err := strconv.ParseInt(size, 10, 64)
	require.NoError(t, err, "%s: %q", what, size)
	return n
}

// env returns the service's environment as plain strings.
func (s composeService) env() map[string]string {
	m := make(map[string]string, len(s.Environment))
	for k, v := range s.Environment {
		if v != nil {
			m[k] = *v
		} else {
			m[k] = ""
		}
	}
	return m
}

// composeConfig runs `docker-compose config` on the repository's
// docker-compose.yml, which validates it, and returns its services. DOCKER_HOST
// points at nothing, so this also shows no Docker daemon is needed.
func composeConfig(t *testing.T, root string) map[string]composeService {
	t.Helper()
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Fatalf("docker-compose is not on PATH, so docker-compose.yml cannot be validated: run scripts/ensure-docker-compose (as root it installs Debian's docker-compose package; make test runs it)")
	}
	cmd := exec.Command(bin, "--project-directory", root, "-f", filepath.Join(root, "docker-compose.yml"), "config")
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix:///nonexistent/docker.sock")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "docker-compose config rejects docker-compose.yml:\n%s", stderr.String())
	var config struct {
		Services map[string]composeService `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(stdout.Bytes(), &config), "docker-compose config printed:\n%s", stdout.String())
	require.NotEmpty(t, config.Services, "docker-compose config printed:\n%s", stdout.String())
	return config.Services
}

// recordingEnv is a getenv that answers from a fixed environment and
// remembers every name it was asked for.
type recordingEnv struct {
	values map[string]string
	mu     sync.Mutex
	asked  map[string]bool
}

func newRecordingEnv(values map[string]string) *recordingEnv {
	return &recordingEnv{values: values, asked: map[string]bool{}}
}

func (r *recordingEnv) getenv(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked[name] = true
	return r.values[name]
}

// startupReachesDatabase names the commands whose start-up reads all of its
// environment (flags, crash points, telemetry, broken modes) before it first
// needs the database, and does nothing else with side effects before then. Run
// with a cancelled context they stop right there, so envReads can run their
// real start-up. Any other command is only run with -h: the fake provider, say,
// would open its ledger and a listener first. A command missing here can only
// make the check stricter, never let an unread variable through.
var startupReachesDatabase = map[string]bool{"migrate": true, "api": true, "worker": true, "reconciler": true}

// checkArgs requires that args (a subcommand and its flags) are a real
// subcommand with real flags: the flag package rejects an unknown flag before
// it reaches a trailing -h, so only real ones end in flag.ErrHelp. It returns
// the environment variables the command reads: those of its flags (each
// flag's CHARGEFLOW_ name and older alias) and any read while binding them.
func checkArgs(t *testing.T, what string, args []string, values map[string]string) map[string]bool {
	t.Helper()
	require.NotEmpty(t, args, "%s: no command", what)
	// Cancelled: were -h ever not reached, the command stops at its first
	// wait instead of serving.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := newRecordingEnv(values)
	var stderr bytes.Buffer
	err := run(ctx, append(slices.Clone(args), "-h"), rec.getenv, io.Discard, &stderr)
	require.ErrorIs(t, err, flag.ErrHelp, "%s: `chargeflow %s` is not a subcommand with real flags:\n%s", what, strings.Join(args, " "), stderr.String())
	fs, fromEnv := inspectFlags(t, args, rec.getenv)
	fs.VisitAll(func(f *flag.Flag) {
		if fromEnv(f.Name) {
			for _, name := range envNames(f.Name) {
				rec.asked[name] = true
			}
		}
	})
	return rec.asked
}

// envReads returns every environment variable `chargeflow args…` reads,
// answering from values: while binding its flags (through checkArgs) and, for
// the commands of startupReachesDatabase, during its real start-up.
func envReads(t *testing.T, what string, args []string, values map[string]string) map[string]bool {
	t.Helper()
	read := checkArgs(t, what, args, values)
	if !startupReachesDatabase[args[0]] {
		return read
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := newRecordingEnv(values)
	var stderr bytes.Buffer
	err := run(ctx, args, rec.getenv, io.Discard, &stderr)
	require.ErrorIs(t, err, context.Canceled, "%s: `chargeflow %s` did not get as far as the database; its start-up failed:\n%s", what, strings.Join(args, " "), stderr.String())
	for name := range rec.asked {
		read[name] = true
	}
	return read
}

// unreadEnv returns, sorted, the variables of env that `chargeflow args…`
// never reads.
func unreadEnv(t *testing.T, what string, args []string, env map[string]string) []string {
	t.Helper()
	read := envReads(t, what, args, env)
	var unread []string
	for name := range env {
		if !read[name] {
			unread = append(unread, name)
		}
	}
	slices.Sort(unread)
	return unread
}

// stringList is a command or entrypoint in its list form. The shell form is
// refused: the image has no shell, and a list is what the binary gets.
func stringList(t *testing.T, what string, v any) []string {
	t.Helper()
	items, ok := v.([]any)
	require.True(t, ok, "%s: want a YAML list such as [\"api\", \"--addr\", \"0.0.0.0:8080\"], got %#v", what, v)
	out := make([]string, len(items))
	for i, item := range items {
		s, ok := item.(string)
		require.True(t, ok, "%s: item %d is %#v, not a string", what, i, item)
		out[i] = s
	}
	return out
}

func TestDockerCompose(t *testing.T) {
	t.Parallel()

	root := repoRoot(t)
	services := composeConfig(t, root)
	binary := dockerfileEntrypoint(t, root)

	var names []string
	for name := range services {
		names = append(names, name)
	}
	for _, want := range []string{"postgres", "migrate", "api", "worker", "reconciler", "fakepsp", "jaeger", "prometheus", "grafana"} {
		require.Contains(t, names, want, "docker-compose.yml has no %s service", want)
	}

	// The chargeflow services are those built from the repository's
	// Dockerfile: the product's roles as its default (last) stage, one
	// image; the bundled fake provider, a command of the laboratory, as its
	// lab stage, another.
	var chargeflow, product, lab []string
	for name, s := range services {
		if s.Build == nil {
			continue
		}
		dir, err := filepath.EvalSymlinks(s.Build.Context)
		require.NoError(t, err, "%s: build context", name)
		require.Equal(t, root, dir, "%s: built from somewhere else than the repository", name)
		switch s.Build.Target {
		case "":
			require.Equal(t, "chargeflow:local", s.Image, "%s: every product service uses the one image", name)
			command := stringList(t, name+" command", s.Command)
			require.NotContains(t, labCommandNames, command[0], "%s: the product image has no %s; run it from the lab target", name, command[0])
			product = append(product, name)
		case "lab":
			require.Equal(t, "chargeflow-lab:local", s.Image, "%s: every laboratory service uses the lab image", name)
			lab = append(lab, name)
		default:
			t.Fatalf("%s: built from the Dockerfile's stage %q: want its default (the product) or lab", name, s.Build.Target)
		}
		chargeflow = append(chargeflow, name)
	}
	slices.Sort(chargeflow)
	slices.Sort(product)
	require.Equal(t, []string{"api", "fakepsp", "migrate", "reconciler", "worker"}, chargeflow)
	require.Equal(t, []string{"api", "migrate", "reconciler", "worker"}, product)
	require.Equal(t, []string{"fakepsp"}, lab)

	for _, name := range chargeflow {
		s := services[name]
		require.Nil(t, s.Entrypoint, "%s: the entrypoint is the image's (the binary); put the subcommand in command:", name)
		command := stringList(t, name+" command", s.Command)
		values := s.env()
		ours := maps.Clone(values)
		maps.DeleteFunc(ours, func(k, _ string) bool { return goRuntimeEnv[k] })

		unread := unreadEnv(t, name, command, ours)
		require.Empty(t, unread, "%s: `chargeflow %s` never reads these variables; remove them or fix their names", name, command[0])

		// A probe runs the binary by its path (there is no shell); the
		// image's own HEALTHCHECK is checked with the Dockerfile.
		if hc := s.Healthcheck; hc != nil && !hc.Disable && !slices.Equal(hc.Test, []string{"NONE"}) {
			require.GreaterOrEqual(t, len(hc.Test), 3, "%s: health check %q", name, hc.Test)
			require.Equal(t, []string{"CMD", binary}, hc.Test[:2], "%s: a health check runs the binary itself, in the exec form (the image has no shell or curl)", name)
			require.Equal(t, "healthcheck", hc.Test[2], "%s: health check %q", name, hc.Test)
			checkArgs(t, name+" healthcheck", hc.Test[2:], values)
		}

		// Every role has limits, and its Go heap limit is under its
		// container's (docs/deployment.md, "Resources").
		require.NotEmpty(t, s.MemLimit, "%s: no mem_limit", name)
		require.NotEmpty(t, s.CPUs, "%s: no cpus", name)
		limit := bytesOf(t, name+" mem_limit", s.MemLimit)
		if v, ok := values["GOMEMLIMIT"]; ok {
			require.Less(t, bytesOf(t, name+" GOMEMLIMIT", v), limit, "%s: GOMEMLIMIT must be under mem_limit", name)
		}

		// Docker's stop timeout outlasts the role's own stop on SIGTERM.
		if want := stopWithin(command[0], shutdownGraceOf(t, command, values)); want > 0 {
			require.NotEmpty(t, s.StopGracePeriod, "%s: no stop_grace_period: Docker's 10s would kill it mid-stop (it takes up to %s)", name, want)
			got, err := time.ParseDuration(s.StopGracePeriod)
			require.NoError(t, err, "%s: stop_grace_period", name)
			require.Greater(t, got, want, "%s: stop_grace_period %s does not outlast its stop on SIGTERM (up to %s)", name, got, want)
		}
	}

	// Readiness, not liveness, gates the API: /readyz, which goes 503 when
	// it drains.
	api := services["api"]
	if api.Healthcheck != nil {
		require.Contains(t, api.Healthcheck.Test, "http://127.0.0.1:8080/readyz", "api: its health check is readiness")
	}

	// The trace of a charge goes from the API request to the provider call,
	// through the worker; the reconciler's lookups are traced too. All of
	// them export to Jaeger, which takes OTLP over HTTP on 4318.
	for _, name := range []string{"api", "worker", "reconciler"} {
		values := services[name].env()
		endpoint, err := otlpTracesEndpoint(env{getenv: func(k string) string { return values[k] }})
		require.NoError(t, err, name)
		require.Equal(t, "http://jaeger:4318/v1/traces", endpoint, "%s: its traces go to Jaeger", name)
	}
	require.Equal(t, "true", services["jaeger"].env()["COLLECTOR_OTLP_ENABLED"], "jaeger: OTLP must be on")

	checkComposeMonitoring(t, root, services)
}

// composeMount is a volume of a service: a bind mount when source is a path
// on the host, a named volume otherwise.
type composeMount struct {
	source, target string
	bind, readOnly bool
}

// composeMounts reads a service's volumes in either syntax, as `docker-compose
// config` prints them (bind sources are absolute by then).
func composeMounts(t *testing.T, name string, s composeService) []composeMount {
	t.Helper()
	var out []composeMount
	for _, v := range s.Volumes {
		switch v := v.(type) {
		case string:
			parts := strings.Split(v, ":")
			require.GreaterOrEqual(t, len(parts), 2, "%s: volume %q", name, v)
			m := composeMount{source: parts[0], target: parts[1], bind: strings.HasPrefix(parts[0], "/")}
			if len(parts) > 2 {
				m.readOnly = slices.Contains(strings.Split(parts[2], ","), "ro")
			}
			out = append(out, m)
		case map[string]any:
			source, _ := v["source"].(string)
			target, _ := v["target"].(string)
			readOnly, _ := v["read_only"].(bool)
			out = append(out, composeMount{source: source, target: target, bind: v["type"] == "bind", readOnly: readOnly})
		default:
			t.Fatalf("%s: volume %#v", name, v)
		}
	}
	return out
}

// hostPath is the file on the host that a path inside the container is,
// through the service's bind mounts.
func hostPath(mounts []composeMount, inContainer string) (string, bool) {
	for _, m := range mounts {
		if !m.bind {
			continue
		}
		if inContainer == m.target {
			return m.source, true
		}
		if rest, ok := strings.CutPrefix(inContainer, m.target+"/"); ok {
			return filepath.Join(m.source, rest), true
		}
	}
	return "", false
}

// listenPort is the port of the --addr or --metrics-addr a chargeflow
// command listens on.
func listenPort(command []string) string {
	for i, arg := range command {
		for _, flagName := range []string{"--addr", "--metrics-addr"} {
			value, ok := strings.CutPrefix(arg, flagName+"=")
			if !ok && arg == flagName && i+1 < len(command) {
				value, ok = command[i+1], true
			}
			if ok {
				_, port, _ := strings.Cut(value, ":")
				return port
			}
		}
	}
	return ""
}

// checkComposeMonitoring checks what docker-compose.yml says of monitoring
// (docs/deployment.md, "Prometheus and Grafana"): pinned images; ports on
// loopback; Prometheus and Grafana provisioned from deploy/ by read-only
// bind mounts of files in the repository, every one of which is mounted;
// Prometheus scraping every role where it serves /metrics; Grafana's data
// source, dashboards and anonymous viewers.
func checkComposeMonitoring(t *testing.T, root string, services map[string]composeService) {
	t.Helper()
	mounted := map[string]bool{} // host paths bind-mounted into some service
	for name, s := range services {
		if s.Build == nil {
			_, tag, ok := strings.Cut(s.Image, ":")
			require.True(t, ok && tag != "" && tag != "latest", "%s: image %q is not pinned to a version", name, s.Image)
		}
		for _, p := range s.Ports {
			switch p := p.(type) {
			case string:
				require.True(t, strings.HasPrefix(p, "127.0.0.1:"), "%s: port %q is published beyond 127.0.0.1", name, p)
			case map[string]any:
				require.Equal(t, "127.0.0.1", p["host_ip"], "%s: port %v is published beyond 127.0.0.1", name, p)
			default:
				t.Fatalf("%s: port %#v", name, p)
			}
		}
		for _, m := range composeMounts(t, name, s) {
			if !m.bind {
				continue
			}
			rel, err := filepath.Rel(root, m.source)
			require.NoError(t, err)
			require.False(t, rel == ".." || strings.HasPrefix(rel, "../"), "%s: mounts %s, from outside the repository", name, m.source)
			_, err = os.Stat(m.source)
			require.NoError(t, err, "%s: mounts %s, which the repository does not have (Docker would create an empty directory)", name, rel)
			require.True(t, m.readOnly, "%s: mounts %s read-write", name, rel)
			mounted[m.source] = true
		}
	}

	prometheus, grafana := services["prometheus"], services["grafana"]
	require.Regexp(t, `^prom/prometheus:v[0-9]+\.[0-9]+\.[0-9]+$`, prometheus.Image)
	require.Regexp(t, `^grafana/grafana:[0-9]+\.[0-9]+\.[0-9]+$`, grafana.Image)

	// Every file of deploy/ but the rules' unit tests is in a container.
	err := filepath.WalkDir(filepath.Join(root, "deploy"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "_test.yml") {
			return err
		}
		for p := path; p != root; p = filepath.Dir(p) {
			if mounted[p] {
				return nil
			}
		}
		rel, _ := filepath.Rel(root, path)
		t.Errorf("docker-compose.yml mounts %s into no service", rel)
		return nil
	})
	require.NoError(t, err)

	// Prometheus reads the repository's configuration and every rule file
	// it names, relative to it.
	promMounts := composeMounts(t, "prometheus", prometheus)
	var configFile string
	for _, arg := range stringList(t, "prometheus command", prometheus.Command) {
		if v, ok := strings.CutPrefix(arg, "--config.file="); ok {
			configFile = v
		}
	}
	require.NotEmpty(t, configFile, "prometheus: no --config.file in its command")
	host, ok := hostPath(promMounts, configFile)
	require.True(t, ok, "prometheus: its --config.file %s is not mounted", configFile)
	require.Equal(t, filepath.Join(root, "deploy", "prometheus", "prometheus.yml"), host)
	config := readPrometheusConfig(t, root)
	require.NotEmpty(t, config.RuleFiles)
	for _, f := range config.RuleFiles {
		host, ok := hostPath(promMounts, filepath.Join(filepath.Dir(configFile), f))
		require.True(t, ok, "prometheus: the rule file %s is not mounted", f)
		require.FileExists(t, host)
	}

	// It scrapes each role at the port the role's command listens on, and
	// every role that serves /metrics is scraped.
	scraped := map[string]bool{}
	for job, targets := range config.scrapeTargets() {
		require.NotEmpty(t, targets, "prometheus.yml: job %s has no target", job)
		for _, target := range targets {
			host, port, ok := strings.Cut(target, ":")
			require.True(t, ok, "prometheus.yml: job %s: target %q", job, target)
			s, ok := services[host]
			require.True(t, ok, "prometheus.yml: job %s scrapes %s, which is no service", job, host)
			require.Equal(t, listenPort(stringList(t, host+" command", s.Command)), port, "prometheus.yml: job %s scrapes %s, which its command does not listen on", job, target)
			scraped[host] = true
		}
	}
	for _, sc := range config.ScrapeConfigs {
		require.Contains(t, []string{"", "/metrics"}, sc.MetricsPath, "prometheus.yml: job %s", sc.JobName)
	}
	for _, role := range []string{"api", "worker", "reconciler"} {
		require.True(t, scraped[role], "prometheus.yml scrapes no %s", role)
	}

	// Grafana: provisioned from the repository, its data source the
	// Prometheus service, open to anonymous viewers and no more.
	grafanaMounts := composeMounts(t, "grafana", grafana)
	provisioning, ok := hostPath(grafanaMounts, "/etc/grafana/provisioning/datasources")
	require.True(t, ok, "grafana: /etc/grafana/provisioning/datasources is not mounted")
	require.Equal(t, filepath.Join(root, "deploy", "grafana", "provisioning", "datasources"), provisioning)
	sources := readYAML[grafanaDatasources](t, filepath.Join(provisioning, "prometheus.yml"))
	require.Len(t, sources.Datasources, 1)
	require.Equal(t, "http://prometheus:9090", sources.Datasources[0].URL, "grafana: its data source is the prometheus service")
	dashboards, ok := hostPath(grafanaMounts, "/etc/grafana/provisioning/dashboards")
	require.True(t, ok, "grafana: /etc/grafana/provisioning/dashboards is not mounted")
	providers := readYAML[grafanaDashboardProviders](t, filepath.Join(dashboards, "chargeflow.yml"))
	require.Len(t, providers.Providers, 1)
	dir, ok := hostPath(grafanaMounts, providers.Providers[0].Options.Path)
	require.True(t, ok, "grafana: the dashboards' path %s is not mounted", providers.Providers[0].Options.Path)
	require.FileExists(t, filepath.Join(dir, filepath.Base(dashboardFile)))
	env := grafana.env()
	require.Equal(t, "true", env["GF_AUTH_ANONYMOUS_ENABLED"], "grafana: anonymous access for local use")
	require.Equal(t, "Viewer", env["GF_AUTH_ANONYMOUS_ORG_ROLE"], "grafana: anonymous users only view")
	if home := env["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" {
		host, ok := hostPath(grafanaMounts, home)
		require.True(t, ok, "grafana: the home dashboard %s is not mounted", home)
		require.FileExists(t, host)
	}
}

// TestDeployEnvCheck shows that the check above catches a misspelt variable,
// and one that is real but read by another command only.
func TestDeployEnvCheck(t *testing.T) {
	t.Parallel()

	api := []string{"api", "--addr", "0.0.0.0:8080"}
	require.Empty(t, unreadEnv(t, "api", api, map[string]string{
		"DATABASE_URL":                "postgres://postgres@127.0.0.1:1/chargeflow?sslmode=disable",
		"LOG_LEVEL":                   "info",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
		"OTEL_SERVICE_NAME":           "api",
		"CHARGEFLOW_CRASHPOINTS":      "",
	}))
	require.Equal(t, []string{"CHARGEFLOW_BROKEN", "DATABSE_URL"}, unreadEnv(t, "api", api, map[string]string{
		"DATABSE_URL":       "postgres://postgres@127.0.0.1:1/chargeflow?sslmode=disable",
		"CHARGEFLOW_BROKEN": "resend_on_rerun", // the worker's negative control
	}))
	// The fake provider reads no database and sends no traces.
	require.Equal(t, []string{"DATABASE_URL", "OTEL_EXPORTER_OTLP_ENDPOINT"}, unreadEnv(t, "fakepsp", []string{"fakepsp", "--addr", "0.0.0.0:9090"}, map[string]string{
		"DATABASE_URL":                "postgres://postgres@127.0.0.1:1/chargeflow?sslmode=disable",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
		"LOG_LEVEL":                   "info",
	}))
}

func TestDockerfile(t *testing.T) {
	t.Parallel()

	root := repoRoot(t)
	stages := parseDockerfile(t, root)
	require.GreaterOrEqual(t, len(stages), 2, "Dockerfile: want a build stage and a final stage")
	build, final := stages[0], stages[len(stages)-1]
	require.True(t, strings.HasPrefix(build.from, "golang:"), "Dockerfile: build from the official Go image, not %s", build.from)
	finalImage, _, _ := strings.Cut(final.from, " ")
	require.True(t, finalImage == "scratch" || strings.HasPrefix(finalImage, "gcr.io/distroless/static"),
		"Dockerfile: the final stage is minimal (distroless static or scratch), not %s", final.from)

	// A static build: no cgo, so nothing to link against at run time.
	var built bool
	for _, stage := range stages[:len(stages)-1] {
		for _, in := range stage.with("RUN") {
			if strings.Contains(in.args, "go build") {
				require.Contains(t, in.args, "CGO_ENABLED=0", "Dockerfile: %s", in.args)
				require.Contains(t, in.args, "-trimpath", "Dockerfile: %s", in.args)
				require.Contains(t, in.args, "./cmd/chargeflow", "Dockerfile: %s", in.args)
				built = true
			}
		}
	}
	require.True(t, built, "Dockerfile: no stage before the last runs go build")

	// A numeric, non-root user: a runtime can check it without /etc/passwd.
	users := final.with("USER")
	require.NotEmpty(t, users, "Dockerfile: the final stage sets no USER, so it runs as root")
	uid, _, _ := strings.Cut(users[len(users)-1].args, ":")
	n, err := strconv.ParseUint(uid, 10, 32)
	require.NoError(t, err, "Dockerfile: USER %s is not numeric", users[len(users)-1].args)
	require.NotZero(t, n, "Dockerfile: USER %s is root", users[len(users)-1].args)

	// The binary is where ENTRYPOINT says, and CMD is a real subcommand.
	binary := dockerfileEntrypoint(t, root)
	var copied bool
	for _, in := range final.with("COPY") {
		fields := strings.Fields(in.args)
		copied = copied || fields[len(fields)-1] == binary
	}
	require.True(t, copied, "Dockerfile: nothing is copied to the ENTRYPOINT %s", binary)

	// The laboratory's stage, which docker-compose.yml runs the fake
	// provider from, is not the default, and runs the binary from the same
	// path, so the services' health checks hold in both images.
	lab := slices.IndexFunc(stages, func(s dockerStage) bool { return strings.HasSuffix(strings.ToLower(s.from), " as lab") })
	require.GreaterOrEqual(t, lab, 0, "Dockerfile: no stage named lab")
	require.Less(t, lab, len(stages)-1, "Dockerfile: the lab stage is the last, so the default image would be the laboratory's")
	labEntrypoints := stages[lab].with("ENTRYPOINT")
	require.Len(t, labEntrypoints, 1, "Dockerfile: the lab stage needs one ENTRYPOINT")
	require.Equal(t, []string{binary}, execForm(t, "lab ENTRYPOINT", labEntrypoints[0].args))
	cmds := final.with("CMD")
	require.Len(t, cmds, 1, "Dockerfile: the final stage needs one CMD")
	checkArgs(t, "Dockerfile CMD", execForm(t, "CMD", cmds[0].args), nil)

	// The health check runs the binary: the image has no curl or shell.
	healthchecks := final.with("HEALTHCHECK")
	require.Len(t, healthchecks, 1, "Dockerfile: the final stage needs one HEALTHCHECK")
	_, probe, ok := strings.Cut(healthchecks[0].args, "CMD ")
	require.True(t, ok, "Dockerfile: HEALTHCHECK %s has no CMD", healthchecks[0].args)
	test := execForm(t, "HEALTHCHECK CMD", probe)
	require.Equal(t, binary, test[0], "Dockerfile: the health check runs the binary")
	require.Greater(t, len(test), 1, "Dockerfile: HEALTHCHECK CMD %q", test)
	require.Equal(t, "healthcheck", test[1], "Dockerfile: HEALTHCHECK CMD %q", test)
	checkArgs(t, "Dockerfile HEALTHCHECK", test[1:], nil)

	// The build context leaves out the private PostgreSQL clusters (another
	// owner, mode 0700: unreadable) and the repository's history.
	ignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	require.NoError(t, err)
	lines := strings.Split(string(ignore), "\n")
	for _, want := range []string{".data", ".git"} {
		require.Contains(t, lines, want, ".dockerignore leaves %s in the build context", want)
	}
}

// shutdownGraceOf is --shutdown-grace as `chargeflow command…` would have it
// in an environment of values: the command line, the environment, or the
// role's default; 0 for a command without one.
func shutdownGraceOf(t *testing.T, command []string, values map[string]string) time.Duration {
	t.Helper()
	fs, _ := inspectFlags(t, command, func(string) string { return "" })
	if fs.Lookup("shutdown-grace") == nil {
		return 0
	}
	require.NoError(t, parseFlags(fs, env{getenv: func(k string) string { return values[k] }}, command[1:]))
	grace, err := time.ParseDuration(fs.Lookup("shutdown-grace").Value.String())
	require.NoError(t, err)
	return grace
}
