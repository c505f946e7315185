//go:build lab

package main

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/token"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// The monitoring files under deploy/ (Prometheus's alert rules, Grafana's
// dashboard and provisioning) name metrics and labels as strings that no
// compiler checks. These tests hold them to what the processes serve at
// /metrics, and the rules to docs/operations.md's "What to alert on" table.
// promtool checks their syntax and the rules' behaviour (make test).

// alertRule is one rule of deploy/prometheus/alerts.yml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func alertRules(t *testing.T, root string) []alertRule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "alerts.yml"))
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(data, &file), "deploy/prometheus/alerts.yml")
	var rules []alertRule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	require.NotEmpty(t, rules, "deploy/prometheus/alerts.yml has no rules")
	return rules
}

// prometheusConfig is what the tests read of deploy/prometheus/prometheus.yml.
type prometheusConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
		DNSSDConfigs []struct {
			Names []string `yaml:"names"`
			Type  string   `yaml:"type"`
			Port  int      `yaml:"port"`
		} `yaml:"dns_sd_configs"`
	} `yaml:"scrape_configs"`
}

func readPrometheusConfig(t *testing.T, root string) prometheusConfig {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "prometheus.yml"))
	require.NoError(t, err)
	var c prometheusConfig
	require.NoError(t, yaml.Unmarshal(data, &c), "deploy/prometheus/prometheus.yml")
	return c
}

// scrapeTargets are the host:port each job of the configuration scrapes, a
// DNS name with its port for service discovery.
func (c prometheusConfig) scrapeTargets() map[string][]string {
	out := map[string][]string{}
	for _, sc := range c.ScrapeConfigs {
		for _, s := range sc.StaticConfigs {
			out[sc.JobName] = append(out[sc.JobName], s.Targets...)
		}
		for _, d := range sc.DNSSDConfigs {
			for _, name := range d.Names {
				out[sc.JobName] = append(out[sc.JobName], fmt.Sprintf("%s:%d", name, d.Port))
			}
		}
	}
	return out
}

// grafanaDatasources is a datasource provisioning file of Grafana.
type grafanaDatasources struct {
	APIVersion  int `yaml:"apiVersion"`
	Datasources []struct {
		Name string `yaml:"name"`
		UID  string `yaml:"uid"`
		Type string `yaml:"type"`
		URL  string `yaml:"url"`
	} `yaml:"datasources"`
}

// grafanaDashboardProviders is a dashboard provisioning file of Grafana.
type grafanaDashboardProviders struct {
	APIVersion int `yaml:"apiVersion"`
	Providers  []struct {
		Name    string `yaml:"name"`
		Type    string `yaml:"type"`
		Options struct {
			Path string `yaml:"path"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

func readYAML[T any](t *testing.T, path string) T {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var v T
	require.NoError(t, yaml.Unmarshal(data, &v), path)
	return v
}

// datasourceRef is how a dashboard, a panel or a target names its data
// source.
type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashboardPanel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    *struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // a collapsed row's
}

type grafanaDashboard struct {
	UID           string           `json:"uid"`
	Title         string           `json:"title"`
	SchemaVersion int              `json:"schemaVersion"`
	Panels        []dashboardPanel `json:"panels"`
}

const dashboardFile = "deploy/grafana/dashboards/chargeflow.json"

func readDashboard(t *testing.T, root string) grafanaDashboard {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, dashboardFile))
	require.NoError(t, err)
	require.True(t, json.Valid(data), "%s is not valid JSON", dashboardFile)
	var d grafanaDashboard
	require.NoError(t, json.Unmarshal(data, &d), dashboardFile)
	return d
}

// panels is every panel of the dashboard but the rows, a collapsed row's
// panels included.
func (d grafanaDashboard) panels() []dashboardPanel {
	var out []dashboardPanel
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			out = append(out, p)
		}
	}
	walk(d.Panels)
	return out
}

// monitoredExpr is a PromQL expression of the rules or the dashboard, and
// where it is.
type monitoredExpr struct{ where, expr string }

func monitoredExprs(t *testing.T, root string) []monitoredExpr {
	t.Helper()
	var out []monitoredExpr
	for _, r := range alertRules(t, root) {
		out = append(out, monitoredExpr{"alerts.yml " + r.Alert + r.Record, r.Expr})
	}
	for _, p := range readDashboard(t, root).panels() {
		for _, target := range p.Targets {
			out = append(out, monitoredExpr{fmt.Sprintf("%s panel %q target %s", dashboardFile, p.Title, target.RefID), target.Expr})
		}
	}
	return out
}

// promSelector is a vector selector of a PromQL expression: a metric name
// (empty for {…} alone) and its label matchers.
type promSelector struct {
	metric   string
	matchers []promMatcher
}

type promMatcher struct{ label, op, value string }

// promQuery is what the checks need of a PromQL expression: its selectors
// and the label names of its by/without/on/ignoring/group_* clauses.
type promQuery struct {
	selectors []promSelector
	grouping  []string
}

var (
	promGrouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	promKeywords = map[string]bool{"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true, "atan2": true}
	// The aggregations, which may take by/without before their parentheses.
	promAggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
		"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true}
)

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func isIdentChar(c byte) bool { return isIdentStart(c) || ('0' <= c && c <= '9') }

func skipSpace(s string, i int) int {
	for i < len(s) && strings.IndexByte(" \t\r\n", s[i]) >= 0 {
		i++
	}
	return i
}

// promString reads the string literal at s[i] (", ' or `) and returns its
// value and the index after it.
func promString(s string, i int) (string, int, error) {
	quote := s[i]
	j := i + 1
	for j < len(s) && s[j] != quote {
		if s[j] == '\\' && quote != '`' {
			j++
		}
		j++
	}
	if j >= len(s) {
		return "", 0, fmt.Errorf("unterminated string at %d", i)
	}
	raw := s[i : j+1]
	if quote == '\'' {
		raw = `"` + strings.ReplaceAll(raw[1:len(raw)-1], `"`, `\"`) + `"`
	}
	v, err := strconv.Unquote(raw)
	if err != nil {
		return "", 0, fmt.Errorf("string %s: %w", s[i:j+1], err)
	}
	return v, j + 1, nil
}

// promMatchers reads the {…} at s[i] and returns the index after it.
func promMatchers(s string, i int) ([]promMatcher, int, error) {
	var out []promMatcher
	i++
	for {
		i = skipSpace(s, i)
		if i < len(s) && s[i] == '}' {
			return out, i + 1, nil
		}
		j := i
		for j < len(s) && isIdentChar(s[j]) {
			j++
		}
		if j == i {
			return nil, 0, fmt.Errorf("want a label name at %d", i)
		}
		m := promMatcher{label: s[i:j]}
		i = skipSpace(s, j)
		for _, op := range []string{"=~", "!~", "!=", "="} {
			if strings.HasPrefix(s[i:], op) {
				m.op = op
				break
			}
		}
		if m.op == "" {
			return nil, 0, fmt.Errorf("want a matcher operator at %d", i)
		}
		i = skipSpace(s, i+len(m.op))
		if i >= len(s) || strings.IndexByte("\"'`", s[i]) < 0 {
			return nil, 0, fmt.Errorf("want a string at %d", i)
		}
		v, next, err := promString(s, i)
		if err != nil {
			return nil, 0, err
		}
		m.value = v
		out = append(out, m)
		i = skipSpace(s, next)
		if i < len(s) && s[i] == ',' {
			i++
		}
	}
}

// parsePromQL finds the selectors and grouping labels of a PromQL
// expression, as written in Prometheus rules or Grafana targets (whose
// variables, $__rate_interval and the like, are skipped). It is no
// validator: promtool checks the rules' syntax; it reads the names.
func parsePromQL(s string) (promQuery, error) {
	var q promQuery
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case strings.IndexByte(" \t\r\n", c) >= 0:
			i++
		case c == '"' || c == '\'' || c == '`':
			_, next, err := promString(s, i)
			if err != nil {
				return q, err
			}
			i = next
		case c == '[': // a range or a subquery's: durations, Grafana variables
			j := strings.IndexByte(s[i:], ']')
			if j < 0 {
				return q, fmt.Errorf("unterminated [ at %d", i)
			}
			i += j + 1
		case c == '{':
			ms, next, err := promMatchers(s, i)
			if err != nil {
				return q, err
			}
			q.selectors = append(q.selectors, promSelector{matchers: ms})
			i = next
		case c == '$': // a Grafana variable: $name or ${name}
			i++
			if i < len(s) && s[i] == '{' {
				j := strings.IndexByte(s[i:], '}')
				if j < 0 {
					return q, fmt.Errorf("unterminated ${ at %d", i)
				}
				i += j + 1
			}
			for i < len(s) && isIdentChar(s[i]) {
				i++
			}
		case '0' <= c && c <= '9' || c == '.': // a number or a duration
			for i < len(s) && (isIdentChar(s[i]) || s[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			word := s[i:j]
			k := skipSpace(s, j)
			var next byte
			if k < len(s) {
				next = s[k]
			}
			i = j
			switch lower := strings.ToLower(word); {
			case promGrouping[lower]:
				if next == '(' {
					end := strings.IndexByte(s[k:], ')')
					if end < 0 {
						return q, fmt.Errorf("unterminated %s( at %d", word, k)
					}
					for _, l := range strings.Split(s[k+1:k+end], ",") {
						if l = strings.TrimSpace(l); l != "" {
							q.grouping = append(q.grouping, l)
						}
					}
					i = k + end + 1
				}
			case promKeywords[lower], promAggregations[lower], next == '(': // an operator, a function or an aggregation
			default:
				sel := promSelector{metric: word}
				if next == '{' {
					ms, after, err := promMatchers(s, k)
					if err != nil {
						return q, err
					}
					sel.matchers, i = ms, after
				}
				q.selectors = append(q.selectors, sel)
			}
		default: // operators, parentheses, commas
			i++
		}
	}
	return q, nil
}

// servedSeries is what a set of processes serve at /metrics: for each
// sample name (a histogram's _bucket, _sum and _count, a counter's _total:
// the names Prometheus stores), each label and the values seen, and the
// family each sample name belongs to.
type servedSeries struct {
	labels map[string]map[string]map[string]bool
	family map[string]string
}

func newServedSeries() servedSeries {
	return servedSeries{labels: map[string]map[string]map[string]bool{}, family: map[string]string{}}
}

func (s servedSeries) add(name, family string, labels []*dto.LabelPair, extra ...string) {
	if s.labels[name] == nil {
		s.labels[name] = map[string]map[string]bool{}
	}
	s.family[name] = family
	set := func(k, v string) {
		if s.labels[name][k] == nil {
			s.labels[name][k] = map[string]bool{}
		}
		s.labels[name][k][v] = true
	}
	for _, l := range labels {
		set(l.GetName(), l.GetValue())
	}
	for i := 0; i+1 < len(extra); i += 2 {
		set(extra[i], extra[i+1])
	}
}

func (s servedSeries) merge(other servedSeries) {
	for name, labels := range other.labels {
		for label, values := range labels {
			for v := range values {
				s.add(name, other.family[name], nil, label, v)
			}
		}
		if len(labels) == 0 {
			s.add(name, other.family[name], nil)
		}
	}
}

// parseExposition reads the Prometheus text format.
func parseExposition(t *testing.T, r io.Reader) servedSeries {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	require.NoError(t, err)
	s := newServedSeries()
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				for _, b := range m.GetHistogram().GetBucket() {
					s.add(name+"_bucket", name, m.GetLabel(), "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
				}
				s.add(name+"_bucket", name, m.GetLabel(), "le", "+Inf")
				s.add(name+"_sum", name, m.GetLabel())
				s.add(name+"_count", name, m.GetLabel())
			case dto.MetricType_SUMMARY:
				for _, q := range m.GetSummary().GetQuantile() {
					s.add(name, name, m.GetLabel(), "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64))
				}
				s.add(name+"_sum", name, m.GetLabel())
				s.add(name+"_count", name, m.GetLabel())
			default:
				s.add(name, name, m.GetLabel())
			}
		}
	}
	return s
}

func scrapeMetrics(t *testing.T, url string) servedSeries {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s/metrics", url)
	return parseExposition(t, resp.Body)
}

// unservedValues are the label values the rules name that the test's
// traffic does not produce (no worker dies mid-call in it, the provider
// refuses nothing), by sample name and label. Each must still be a string of
// the Go source, so a renamed value fails the test.
var unservedValues = map[string]map[string][]string{
	"chargeflow_outbox_unknown_outcomes_total":        {"reason": {"rerun_found_submitting"}},
	"chargeflow_provider_call_duration_seconds_count": {"outcome": {"not_applied"}},
}

// targetLabels are the labels Prometheus adds to every series it scrapes.
var targetLabels = map[string]bool{"job": true, "instance": true, "__name__": true}

// checkMonitoredExpr returns what is wrong with an expression against what
// the processes serve: metric names that none serves, label names that the
// metric does not have, and label values that were not served (after the
// test's traffic), unless unservedValues lists them and the Go source has
// them (literals).
func checkMonitoredExpr(e monitoredExpr, served servedSeries, literals map[string]bool) []string {
	q, err := parsePromQL(e.expr)
	if err != nil {
		return []string{fmt.Sprintf("%s: %s: %v", e.where, e.expr, err)}
	}
	var problems []string
	metrics := 0
	labelsOfExpr := map[string]bool{}
	for _, sel := range q.selectors {
		if sel.metric == "" {
			problems = append(problems, fmt.Sprintf("%s: a selector without a metric name: %s", e.where, e.expr))
			continue
		}
		metrics++
		labels, ok := served.labels[sel.metric]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: no process serves a metric %s", e.where, sel.metric))
			continue
		}
		for l := range labels {
			labelsOfExpr[l] = true
		}
		for _, m := range sel.matchers {
			if targetLabels[m.label] {
				continue
			}
			values, ok := labels[m.label]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: %s has no label %s", e.where, sel.metric, m.label))
				continue
			}
			if m.op != "=" && m.op != "=~" {
				continue
			}
			wanted := []string{m.value}
			if m.op == "=~" {
				if !regexp.MustCompile(`^[a-zA-Z0-9_./]+(\|[a-zA-Z0-9_./]+)*$`).MatchString(m.value) {
					continue // a real pattern, not a list of values
				}
				wanted = strings.Split(m.value, "|")
			}
			for _, v := range wanted {
				switch {
				case values[v]:
				case !slices.Contains(unservedValues[sel.metric][m.label], v):
					problems = append(problems, fmt.Sprintf("%s: %s{%s=%q}: no process served that value", e.where, sel.metric, m.label, v))
				case !literals[v]:
					problems = append(problems, fmt.Sprintf("%s: %s{%s=%q}: no Go source has that value", e.where, sel.metric, m.label, v))
				}
			}
		}
	}
	if metrics == 0 {
		problems = append(problems, fmt.Sprintf("%s: names no metric: %s", e.where, e.expr))
	}
	for _, l := range q.grouping {
		if !targetLabels[l] && !labelsOfExpr[l] {
			problems = append(problems, fmt.Sprintf("%s: groups by %s, which none of its metrics has", e.where, l))
		}
	}
	return problems
}

// goStringLiterals is every string literal of the repository's Go source.
func goStringLiterals(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, files := range goSource(t, root) {
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if v, err := strconv.Unquote(lit.Value); err == nil {
						out[v] = true
					}
				}
				return true
			})
		}
	}
	return out
}

// The parser reads names right, and the check catches a metric, a label and
// a value that do not exist: what TestMonitoringMetricsServed relies on.
func TestMonitoringPromQLCheck(t *testing.T) {
	t.Parallel()

	q, err := parsePromQL(`histogram_quantile(0.99, sum by (le, op) (rate(x_seconds_bucket{op!="lookup", job=~'a|b'}[$__rate_interval] offset 5m))) > 5 and on(instance) absent(y) or sum without (le) (z:rate5m) / 1e-3`)
	require.NoError(t, err)
	var names []string
	for _, s := range q.selectors {
		names = append(names, s.metric)
	}
	require.Equal(t, []string{"x_seconds_bucket", "y", "z:rate5m"}, names)
	require.Equal(t, []promMatcher{{"op", "!=", "lookup"}, {"job", "=~", "a|b"}}, q.selectors[0].matchers)
	require.Equal(t, []string{"le", "op", "instance", "le"}, q.grouping)

	served := newServedSeries()
	served.add("chargeflow_charges", "chargeflow_charges", nil, "state", "pending", "estimate", "false")
	served.add("chargeflow_charges", "chargeflow_charges", nil, "state", "failed", "estimate", "true")
	served.add("chargeflow_outbox_unknown_outcomes_total", "chargeflow_outbox_unknown_outcomes_total", nil, "reason", "timeout")
	literals := map[string]bool{"rerun_found_submitting": true, "needs_review": true}
	check := func(expr string) []string {
		return checkMonitoredExpr(monitoredExpr{"test", expr}, served, literals)
	}
	require.Empty(t, check(`max by (state) (chargeflow_charges{state=~"pending|failed",job="api"}) > 0`))
	require.Empty(t, check(`chargeflow_outbox_unknown_outcomes_total{reason=~"timeout|rerun_found_submitting"}`), "a value listed as unserved, in the source")
	require.Len(t, check(`chargeflow_bogus_total > 0`), 1, "a metric no process serves")
	require.Len(t, check(`chargeflow_charges{status="pending"}`), 1, "a label the metric does not have")
	require.Len(t, check(`chargeflow_charges{state="pendng"}`), 1, "a value not served")
	require.Len(t, check(`chargeflow_charges{state="needs_review"}`), 1, "a value in the source but not served, nor listed")
	require.Len(t, check(`sum by (tenant) (chargeflow_charges)`), 1, "a grouping label no metric has")
	require.Len(t, check(`vector(1)`), 1, "an expression of no metric")
}

// Every metric and label that an alert rule or a dashboard panel names is
// one that real processes serve at /metrics once charges went through them
// (the API, a worker and a reconciler, each its own process, as in
// docker-compose.yml); every chargeflow_ metric they serve has a panel; and
// an alert on a metric's absence watches one that a single role serves, so
// that its absence means that role is missing.
func TestMonitoringMetricsServed(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)

	s := startSystem(t)
	worker := s.startWorker("CHARGEFLOW_METRICS_ADDR=127.0.0.1:0")
	reconciler := s.startReconciler(nil, "--metrics-addr", "127.0.0.1:0")

	// A charge that succeeds, its replay, and a refused request.
	body := `{"amount": 700, "currency": "USD", "payment_method": "pm_card_visa"}`
	first := postCharge(s.apiURL, s.apiKey, "monitoring-key-0000001", body)
	require.NoError(t, first.err)
	require.Equal(t, http.StatusCreated, first.status, first.body)
	replay := postCharge(s.apiURL, s.apiKey, "monitoring-key-0000001", body)
	require.NoError(t, replay.err)
	require.Equal(t, http.StatusCreated, replay.status, replay.body)
	bad := postCharge(s.apiURL, s.apiKey, "monitoring-key-0000002", `{"amount": 7`)
	require.NoError(t, bad.err)
	require.Equal(t, http.StatusBadRequest, bad.status, bad.body)
	s.waitNoneIn(30*time.Second, "pending", "submitting")

	// An outcome the provider's answer does not prove, which the
	// reconciler's lookup resolves.
	s.faults(fakepsp.Schedule{Rules: []fakepsp.Rule{{On: fakepsp.OnCharge, Fault: fakepsp.FaultApplyThenTimeout, P: 1, MS: 2000}}})
	lost := s.post("monitoring-key-0000003", "pm_card_visa", 800)
	require.Eventually(t, func() bool { return s.state(lost) == "succeeded" }, 30*time.Second, 20*time.Millisecond)
	s.faults(fakepsp.Schedule{})

	byRole := map[string]servedSeries{
		"api":        scrapeMetrics(t, s.apiURL),
		"worker":     scrapeMetrics(t, worker.listenAddr()),
		"reconciler": scrapeMetrics(t, reconciler.listenAddr()),
	}
	served := newServedSeries()
	for _, role := range byRole {
		served.merge(role)
	}
	require.Contains(t, served.labels, "chargeflow_outbox_unknown_outcomes_total", "the traffic made no unknown outcome")

	exprs := monitoredExprs(t, root)
	literals := goStringLiterals(t, root)
	var problems []string
	named := map[string]bool{} // families the dashboard names
	dashboardExprs := 0
	for _, e := range exprs {
		problems = append(problems, checkMonitoredExpr(e, served, literals)...)
		if !strings.HasPrefix(e.where, dashboardFile) {
			continue
		}
		dashboardExprs++
		q, err := parsePromQL(e.expr)
		require.NoError(t, err)
		for _, sel := range q.selectors {
			named[served.family[sel.metric]] = true
		}
	}
	require.NotZero(t, dashboardExprs)
	require.Empty(t, problems, "the monitoring files name metrics, labels or values that the processes do not serve:\n%s", strings.Join(problems, "\n"))

	var unshown []string
	for _, family := range served.family {
		if strings.HasPrefix(family, "chargeflow_") && !named[family] && !slices.Contains(unshown, family) {
			unshown = append(unshown, family)
		}
	}
	slices.Sort(unshown)
	require.Empty(t, unshown, "%s has no panel of these metrics the processes serve", dashboardFile)

	absent := regexp.MustCompile(`absent\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)
	for _, r := range alertRules(t, root) {
		for _, m := range absent.FindAllStringSubmatch(r.Expr, -1) {
			var servers []string
			for role, series := range byRole {
				if _, ok := series.labels[m[1]]; ok {
					servers = append(servers, role)
				}
			}
			require.Len(t, servers, 1, "%s: absent(%s) is meant to say a role is missing, but %v serve it", r.Alert, m[1], servers)
		}
	}
	require.Contains(t, byRole["reconciler"].labels, "chargeflow_reconciler_lag_seconds")
	require.Contains(t, byRole["api"].labels, "chargeflow_charges")
}

// Every rule is an alert with a for:, a severity of page or ticket and the
// words an operator reads, and the rules are the ones docs/operations.md's
// "What to alert on" table lists, with its PromQL, severity and for.
func TestMonitoringRules(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	rules := alertRules(t, root)

	byName := map[string]alertRule{}
	for _, r := range rules {
		require.NotEmpty(t, r.Alert, "alerts.yml: a rule that is no alert (expr %s)", r.Expr)
		require.NotContains(t, byName, r.Alert, "alerts.yml: two rules named %s", r.Alert)
		byName[r.Alert] = r
		require.NotEmpty(t, r.For, "%s: no for:", r.Alert)
		_, err := model.ParseDuration(r.For)
		require.NoError(t, err, "%s: for: %s", r.Alert, r.For)
		require.Contains(t, []string{"page", "ticket"}, r.Labels["severity"], "%s: severity", r.Alert)
		for _, a := range []string{"summary", "description"} {
			text := r.Annotations[a]
			require.NotEmpty(t, strings.TrimSpace(text), "%s: no %s", r.Alert, a)
			// Plain words for people: the only data they carry is the
			// alert's value and labels that name no charge, tenant or
			// card.
			for _, ref := range regexp.MustCompile(`\$labels\.([a-zA-Z_]+)`).FindAllStringSubmatch(text, -1) {
				require.Contains(t, []string{"op", "outcome", "provider", "state", "reason", "decision", "code", "job", "instance"}, ref[1], "%s: %s names the label %s", r.Alert, a, ref[1])
			}
			require.NotRegexp(t, `\b(ch|tn|re|cfk|cfo|pm)_[A-Za-z0-9]`, text, "%s: %s names an id or a payment method", r.Alert, a)
		}
	}

	doc, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(doc), "**What to alert on.**")
	require.True(t, ok, "docs/operations.md has no \"What to alert on\"")
	_, table, ok = strings.Cut(table, "\n| condition |")
	require.True(t, ok, "docs/operations.md: no table under \"What to alert on\"")
	table, _, _ = strings.Cut(table, "\n\n")
	lines := strings.Split(table, "\n")[2:] // past the header and the rule
	require.NotEmpty(t, lines)

	alertCell := regexp.MustCompile("`([A-Za-z]+)`: (page|ticket), ([0-9]+[smhd])")
	code := regexp.MustCompile("`([^`]+)`")
	documented := map[string]bool{}
	for _, line := range lines {
		// Cells split on | but not on the escaped \|.
		cells := strings.Split(strings.ReplaceAll(line, `\|`, "\x00"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(strings.ReplaceAll(cells[i], "\x00", `\|`))
		}
		require.GreaterOrEqual(t, len(cells), 5, "docs/operations.md: row %q", line)
		alerts := alertCell.FindAllStringSubmatch(cells[2], -1)
		exprs := code.FindAllStringSubmatch(cells[3], -1)
		require.NotEmpty(t, alerts, "docs/operations.md: row %q names no alert as `Name`: severity, for", line)
		require.Len(t, exprs, len(alerts), "docs/operations.md: row %q: one PromQL expression per alert", line)
		for i, a := range alerts {
			name, severity, dur := a[1], a[2], a[3]
			r, ok := byName[name]
			require.True(t, ok, "docs/operations.md names the alert %s, which alerts.yml does not have", name)
			documented[name] = true
			require.Equal(t, strings.ReplaceAll(exprs[i][1], `\|`, `|`), r.Expr, "%s: the PromQL of docs/operations.md and of alerts.yml", name)
			require.Equal(t, severity, r.Labels["severity"], "%s: severity", name)
			require.Equal(t, dur, r.For, "%s: for", name)
		}
	}
	for name := range byName {
		require.True(t, documented[name], "alerts.yml has %s, which docs/operations.md's table does not list", name)
	}
}

// The dashboard is valid JSON of a recent schema whose every panel queries
// the provisioned Prometheus data source, and the provisioning files point
// Grafana at it.
func TestMonitoringDashboard(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)

	sources := readYAML[grafanaDatasources](t, filepath.Join(root, "deploy", "grafana", "provisioning", "datasources", "prometheus.yml"))
	require.Equal(t, 1, sources.APIVersion)
	require.Len(t, sources.Datasources, 1)
	source := sources.Datasources[0]
	require.Equal(t, "prometheus", source.Type)
	require.NotEmpty(t, source.UID, "the data source needs a uid for the dashboard to name it")

	providers := readYAML[grafanaDashboardProviders](t, filepath.Join(root, "deploy", "grafana", "provisioning", "dashboards", "chargeflow.yml"))
	require.Equal(t, 1, providers.APIVersion)
	require.Len(t, providers.Providers, 1)
	require.Equal(t, "file", providers.Providers[0].Type)
	require.NotEmpty(t, providers.Providers[0].Options.Path)

	d := readDashboard(t, root)
	require.NotEmpty(t, d.UID)
	require.NotEmpty(t, d.Title)
	require.GreaterOrEqual(t, d.SchemaVersion, 36, "a dashboard schema of Grafana 9 or later, where data sources are named by uid")
	panels := d.panels()
	require.NotEmpty(t, panels)
	ids := map[int]bool{}
	for _, p := range panels {
		require.NotEmpty(t, p.Title, "panel %d has no title", p.ID)
		require.NotZero(t, p.ID, "panel %q has no id", p.Title)
		require.False(t, ids[p.ID], "two panels have the id %d", p.ID)
		ids[p.ID] = true
		require.NotNil(t, p.GridPos, "panel %q has no gridPos", p.Title)
		require.NotNil(t, p.Datasource, "panel %q has no datasource", p.Title)
		require.Equal(t, datasourceRef{Type: "prometheus", UID: source.UID}, *p.Datasource, "panel %q: the provisioned data source", p.Title)
		require.NotEmpty(t, p.Targets, "panel %q has no target", p.Title)
		refs := map[string]bool{}
		for _, target := range p.Targets {
			require.NotEmpty(t, strings.TrimSpace(target.Expr), "panel %q target %s has no expression", p.Title, target.RefID)
			require.NotEmpty(t, target.RefID, "panel %q: a target without refId", p.Title)
			require.False(t, refs[target.RefID], "panel %q: two targets %s", p.Title, target.RefID)
			refs[target.RefID] = true
			if target.Datasource != nil {
				require.Equal(t, *p.Datasource, *target.Datasource, "panel %q target %s: the panel's data source", p.Title, target.RefID)
			}
		}
	}
}
