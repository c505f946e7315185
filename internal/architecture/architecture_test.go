package architecture_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/chargeflow/chargeflow"

// row is one line of the package table.
type row struct {
	layer   int
	imports []string
}

// moduleRoot is the folder that holds go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	require.NoError(t, err)
	gomod := strings.TrimSpace(string(out))
	require.NotEmpty(t, gomod, "not inside the module")
	return filepath.Dir(gomod)
}

// table reads the package table of docs/architecture.md.
func table(t *testing.T, root string) map[string]row {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	require.NoError(t, err)
	_, packages, found := strings.Cut(string(doc), "\n## Packages\n")
	require.True(t, found, "docs/architecture.md has no Packages section")
	packages, _, _ = strings.Cut(packages, "\n## ")

	backticked := regexp.MustCompile("`([^`]+)`")
	rows := map[string]row{}
	scanner := bufio.NewScanner(strings.NewReader(packages))
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		require.GreaterOrEqual(t, len(cells), 5, "row %q", line)
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		layerWord, _, _ := strings.Cut(strings.TrimSpace(cells[2]), " ")
		layer, err := strconv.Atoi(layerWord)
		require.NoError(t, err, "row %q: the layer column starts with a number", line)
		var imports []string
		for _, m := range backticked.FindAllStringSubmatch(cells[3], -1) {
			imports = append(imports, m[1])
		}
		slices.Sort(imports)
		_, dup := rows[name]
		require.False(t, dup, "%s is in the table twice", name)
		rows[name] = row{layer: layer, imports: imports}
	}
	require.NoError(t, scanner.Err())
	require.NotEmpty(t, rows)
	return rows
}

// packages is what go list says each package of the module imports of
// the module, test files aside, keyed and valued without the module prefix.
func packages(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err)
	got := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
		}
		require.NoError(t, dec.Decode(&p))
		ours := []string{}
		for _, imp := range p.Imports {
			if rel, ok := strings.CutPrefix(imp, module+"/"); ok {
				ours = append(ours, rel)
			}
		}
		slices.Sort(ours)
		got[strings.TrimPrefix(p.ImportPath, module+"/")] = ours
	}
	return got
}

func TestPackageTableIsTrue(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	rows := table(t, root)
	actual := packages(t, root)

	for name := range rows {
		_, ok := actual[name]
		require.True(t, ok, "docs/architecture.md lists %s, which is not a package", name)
	}
	for name, imports := range actual {
		r, ok := rows[name]
		require.True(t, ok, "package %s is missing from docs/architecture.md's table", name)
		if r.imports == nil {
			r.imports = []string{}
		}
		require.Equal(t, r.imports, imports, "%s: the table's imports differ from the code's", name)
	}
}

func TestDependenciesPointDown(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	rows := table(t, root)
	for name, imports := range packages(t, root) {
		from, ok := rows[name]
		require.True(t, ok, "package %s is missing from docs/architecture.md's table", name)
		for _, imp := range imports {
			to, ok := rows[imp]
			require.True(t, ok, "package %s is missing from docs/architecture.md's table", imp)
			require.Less(t, to.layer, from.layer,
				"%s (layer %d) imports %s (layer %d): imports must point to a lower layer", name, from.layer, imp, to.layer)
		}
	}
}
