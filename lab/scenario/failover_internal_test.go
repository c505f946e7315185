package scenario

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The client's round robin sends each request to the next API in turn, so
// two APIs share the load evenly, concurrent callers included.
func TestRoundRobinAlternatesBetweenAPIs(t *testing.T) {
	t.Parallel()
	apis := []*proc{{addr: "http://127.0.0.1:1"}, {addr: "http://127.0.0.1:2"}}
	next := roundRobin(apis)
	require.Equal(t, []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:1"}, []string{next(), next(), next()})

	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				u := next()
				mu.Lock()
				counts[u]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, map[string]int{"http://127.0.0.1:1": 100, "http://127.0.0.1:2": 100}, counts)
}

// The failover's measurement is printed after what fired, on the
// scenario's row.
func TestTableShowsWhatARunTimed(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	PrintTable(&out, []Report{{Scenario: "failover", Passed: true, Fired: map[string]int{"failover:promoted": 1},
		Measured: map[string]time.Duration{"kill→first 201": 9456 * time.Millisecond}, Counts: map[string]int{}}})
	row := strings.Split(strings.TrimSpace(out.String()), "\n")[1]
	require.True(t, strings.HasSuffix(row, "failover:promoted=1 kill→first 201=9.46s"), row)
}

// The HA cluster's three ports are free and consecutive.
func TestFreePortsAreFreeAndConsecutive(t *testing.T) {
	t.Parallel()
	base, err := freePorts(3)
	require.NoError(t, err)
	for p := base; p < base+3; p++ {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		require.NoError(t, err, "port %d", p)
		ln.Close()
	}
}

// soak-replicas must see what the soak sees, with the failover in place of
// the restart of PostgreSQL and a kill of each of its two APIs.
func TestReplicasMustFire(t *testing.T) {
	t.Parallel()
	got := replicasMustFire()
	require.NotContains(t, got, "postgres:restart")
	for _, name := range []string{"failover:primary_killed", "failover:promoted", "kill:api-0", "kill:api-1"} {
		require.Contains(t, got, name)
	}
	for _, name := range soakMustFire() {
		if name != "postgres:restart" {
			require.Contains(t, got, name)
		}
	}
	sc, ok := Find("soak-replicas")
	require.True(t, ok)
	require.Equal(t, 2, sc.APIs)
	require.True(t, sc.HAPostgres)
	require.True(t, sc.FullOnly, "a second soak stays out of make test")
	require.True(t, slices.Equal(got, sc.MustFire))
}
