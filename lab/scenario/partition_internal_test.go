package scenario

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chargeflow/chargeflow/lab/netlab"
)

// Where network namespaces cannot be made, a partition scenario is not run,
// starts nothing, and its report says so and why: never a pass, never a
// failure.
func TestPartitionScenariosWithoutNamespacesAreNotRun(t *testing.T) {
	saved := netProbe
	netProbe = func() error { return fmt.Errorf("%w (ip netns add: permission denied)", netlab.ErrUnavailable) }
	t.Cleanup(func() { netProbe = saved })

	dir := t.TempDir()
	// Nothing may be started: the binary and the server do not exist.
	r, err := NewRunner(Config{Binary: "/nonexistent/chargeflow", DatabaseURL: "postgres://nobody@127.0.0.1:1/none", Dir: dir, Short: true})
	if err != nil {
		t.Fatal(err)
	}
	group, ok := Group("partitions")
	if !ok || len(group) != 4 {
		t.Fatalf("the group partitions has %d scenarios (%v)", len(group), ok)
	}
	var reports []Report
	for _, sc := range group {
		if !sc.Partitions || !sc.HAPostgres || sc.FullOnly {
			t.Fatalf("%s: Partitions %v, HAPostgres %v, FullOnly %v", sc.Name, sc.Partitions, sc.HAPostgres, sc.FullOnly)
		}
		if byName, ok := Find(sc.Name); !ok || byName.Name != sc.Name {
			t.Fatalf("%s is not found by its name", sc.Name)
		}
		rep, err := r.Run(context.Background(), sc)
		if err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		if want := "needs root and network namespaces (ip netns add: permission denied)"; rep.NotRun != want {
			t.Fatalf("%s: NotRun %q, want %q", sc.Name, rep.NotRun, want)
		}
		if rep.Passed {
			t.Fatalf("%s: a scenario that was not run passed", sc.Name)
		}
		reports = append(reports, rep)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Fatalf("a scenario that was not run left %d entries in its folder", len(entries))
	}
	var table, violations bytes.Buffer
	PrintTable(&table, reports)
	PrintViolations(&violations, reports)
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if len(lines) != 1+len(group) {
		t.Fatalf("table:\n%s", table.String())
	}
	for i, line := range lines[1:] {
		if !strings.HasPrefix(line, group[i].Name+" ") || !strings.Contains(line, "not run: needs root and network namespaces (ip netns add: permission denied)") ||
			strings.Contains(line, " ok ") || strings.Contains(line, "FAIL") {
			t.Fatalf("row %q", line)
		}
	}
	if violations.Len() > 0 {
		t.Fatalf("violations listed for scenarios not run:\n%s", violations.String())
	}
}

// A charge sent before a cut and answered after it crossed it; one
// answered before, or sent after, did not.
func TestCrossed(t *testing.T) {
	cut := time.Now()
	l := &labNet{cuts: []time.Time{cut}}
	for _, c := range []struct {
		from, to time.Time
		want     bool
	}{
		{cut.Add(-time.Second), cut.Add(time.Second), true},
		{cut.Add(-2 * time.Second), cut.Add(-time.Second), false},
		{cut.Add(time.Second), cut.Add(2 * time.Second), false},
	} {
		if got := l.crossed(c.from, c.to); got != c.want {
			t.Errorf("crossed(%v, %v) = %v", c.from.Sub(cut), c.to.Sub(cut), got)
		}
	}
}

// The requests a cut API answered only after the clients' timeout are
// counted from its log, and only those since the offset.
func TestSlowRequests(t *testing.T) {
	path := t.TempDir() + "/api.log"
	before := `{"msg":"POST /v1/charges 201","method":"POST","route":"/v1/charges","duration_ms":9000}` + "\n"
	after := `{"msg":"POST /v1/charges 201","method":"POST","route":"/v1/charges","duration_ms":6758.6}
{"msg":"POST /v1/charges 503","method":"POST","route":"/v1/charges","duration_ms":5001.1}
{"msg":"POST /v1/charges 201","method":"POST","route":"/v1/charges","duration_ms":32.9}
{"msg":"GET /v1/charges/:id 200","method":"GET","route":"/v1/charges/:id","duration_ms":7000}
`
	if err := os.WriteFile(path, []byte(before+after), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := slowRequests(path, int64(len(before)), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("slowRequests counted %d, want 2", n)
	}
}
