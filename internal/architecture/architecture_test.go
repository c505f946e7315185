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

// listed is one package as go list describes it.
type listed struct {
	ImportPath string
	Imports    []string
	Deps       []string
	GoFiles    []string
}

// goList lists the module's packages as the build with tags sees them.
func goList(t *testing.T, root string, tags ...string) []listed {
	t.Helper()
	args := []string{"list", "-json=ImportPath,Imports,Deps,GoFiles"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err)
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		require.NoError(t, dec.Decode(&p))
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// packages is what go list says each package of the module imports of
// the module, test files aside, in the product build or the laboratory's
// (-tags lab), keyed and valued without the module prefix.
func packages(t *testing.T, root string) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for _, tags := range [][]string{nil, {"lab"}} {
		for _, p := range goList(t, root, tags...) {
			ours := got[strings.TrimPrefix(p.ImportPath, module+"/")]
			if ours == nil {
				ours = []string{}
			}
			for _, imp := range p.Imports {
				if rel, ok := strings.CutPrefix(imp, module+"/"); ok && !slices.Contains(ours, rel) {
					ours = append(ours, rel)
				}
			}
			slices.Sort(ours)
			got[strings.TrimPrefix(p.ImportPath, module+"/")] = ours
		}
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

// lab is the laboratory's folder: the fake provider, the scenarios, the
// benchmark and what only they use (docs/architecture.md, "The laboratory
// apart").
const lab = module + "/lab"

func inLab(path string) bool { return path == lab || strings.HasPrefix(path, lab+"/") }

// No package of the product depends on the laboratory, directly or not, in
// either build: every package outside lab/, and cmd/chargeflow itself in
// the product build. With -tags lab cmd/chargeflow is the laboratory's
// binary, and does depend on it, which shows the check sees such a
// dependency when there is one.
func TestProductNeverImportsTheLab(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	const command = module + "/cmd/chargeflow"
	for _, tags := range [][]string{nil, {"lab"}} {
		var checked int
		for _, p := range goList(t, root, tags...) {
			if inLab(p.ImportPath) {
				continue
			}
			labDeps := slices.DeleteFunc(slices.Clone(p.Deps), func(dep string) bool { return !inLab(dep) })
			if len(tags) > 0 && p.ImportPath == command {
				require.NotEmpty(t, labDeps, "the lab build of %s depends on no package of the laboratory", command)
				continue
			}
			require.Empty(t, labDeps, "%s (tags %v) depends on the laboratory", p.ImportPath, tags)
			checked++
		}
		require.NotZero(t, checked)
	}
}

// labSeams are the product's packages that have files only the lab build
// compiles, each for the one reason it says: code that must sit at the
// lines it tests, or the binary's own commands. Any other file tagged lab
// outside lab/ would be laboratory code inside the product.
var labSeams = map[string]string{
	"crashpoint":     "arming the crash points, which sit in the product's code",
	"outbox":         "the negative control, a branch of the worker's run",
	"cmd/chargeflow": "the laboratory's commands, and reading its variables",
	"internal/clock": "skewing the clock the product's decisions read",
}

func TestLabOnlyFilesOnlyAtTheSeams(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	product := map[string][]string{}
	for _, p := range goList(t, root) {
		product[p.ImportPath] = p.GoFiles
	}
	seen := map[string]bool{}
	for _, p := range goList(t, root, "lab") {
		if inLab(p.ImportPath) {
			continue
		}
		var labOnly []string
		for _, f := range p.GoFiles {
			if !slices.Contains(product[p.ImportPath], f) {
				labOnly = append(labOnly, f)
			}
		}
		if len(labOnly) == 0 {
			continue
		}
		name := strings.TrimPrefix(p.ImportPath, module+"/")
		_, ok := labSeams[name]
		require.True(t, ok, "%s has files only the lab build compiles (%s): laboratory code belongs in lab/", name, strings.Join(labOnly, ", "))
		seen[name] = true
	}
	for name := range labSeams {
		require.True(t, seen[name], "labSeams lists %s, which has no file only the lab build compiles", name)
	}
}
