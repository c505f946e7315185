//go:build lab

package main

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// userDocs is every page a user reads: README.md and docs/*.md, joined.
func userDocs(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	pages = append(pages, filepath.Join(root, "README.md"))
	var b strings.Builder
	for _, p := range pages {
		text, err := os.ReadFile(p)
		require.NoError(t, err)
		b.Write(text)
		b.WriteString("\n")
	}
	return b.String()
}

// The docs name every command line of the binary (`chargeflow charge
// refund`, `chargeflow scenario list`, …) and every flag any of them takes,
// so cutting a page never loses one and a new flag cannot ship unexplained.
// The settings table of docs/operations.md counts: it is generated from the
// flag sets (TestSettingsReference).
func TestDocsNameEveryCommandAndFlag(t *testing.T) {
	t.Parallel()
	docs := userDocs(t)

	// Every command and action: settingsInvocations reaches each command
	// (TestSettingsReference requires it) and each action that has flags;
	// its arguments past the action are placeholders. `scenario list`
	// takes no flags, so it is named here.
	lines := [][]string{{"scenario", "list"}}
	for _, args := range settingsInvocations {
		lines = append(lines, args[:min(2, len(args))])
	}
	var missing []string
	for _, words := range lines {
		line := "chargeflow " + strings.Join(words, " ")
		if !regexp.MustCompile(regexp.QuoteMeta(line) + `([^a-z0-9_-]|$)`).MatchString(docs) {
			missing = append(missing, line)
		}
	}
	flags := map[string][]string{}
	for _, args := range settingsInvocations {
		set, _ := inspectFlags(t, args, func(string) string { return "" })
		set.VisitAll(func(f *flag.Flag) {
			flags[f.Name] = append(flags[f.Name], set.Name())
		})
	}
	require.NotEmpty(t, flags)
	for name, commands := range flags {
		if !regexp.MustCompile(`--` + regexp.QuoteMeta(name) + `([^a-z0-9-]|$)`).MatchString(docs) {
			missing = append(missing, "--"+name+" ("+strings.Join(commands, ", ")+")")
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "README.md and docs/ never name these commands and flags")
}

// goSource is every non-test Go file of the repository, parsed, with the
// folder that holds it. It walks the tree rather than naming packages, so a
// package that moves is still read.
func goSource(t *testing.T, root string) map[string][]*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	files := map[string][]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files[filepath.Dir(path)] = append(files[filepath.Dir(path)], f)
		return nil
	})
	require.NoError(t, err)
	return files
}

// stringConst is the value of a constant declared as a string literal.
func stringConst(spec *ast.ValueSpec, i int) (string, bool) {
	if i >= len(spec.Values) {
		return "", false
	}
	lit, ok := spec.Values[i].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	v, err := strconv.Unquote(lit.Value)
	return v, err == nil
}

// constants calls fn for every constant of every file.
func constants(files map[string][]*ast.File, fn func(dir string, spec *ast.ValueSpec)) {
	for dir, parsed := range files {
		for _, f := range parsed {
			for _, decl := range f.Decls {
				gen, ok := decl.(*ast.GenDecl)
				if !ok || gen.Tok != token.CONST {
					continue
				}
				for _, spec := range gen.Specs {
					fn(dir, spec.(*ast.ValueSpec))
				}
			}
		}
	}
}

// problemCodes are the values of every constant of a type named Code: the
// codes a problem answer carries (the server's and the client's).
func problemCodes(files map[string][]*ast.File) []string {
	var codes []string
	constants(files, func(_ string, spec *ast.ValueSpec) {
		var typeName string
		switch typ := spec.Type.(type) {
		case *ast.Ident:
			typeName = typ.Name
		case *ast.SelectorExpr:
			typeName = typ.Sel.Name
		}
		if typeName != "Code" {
			return
		}
		for i := range spec.Names {
			if v, ok := stringConst(spec, i); ok && !slices.Contains(codes, v) {
				codes = append(codes, v)
			}
		}
	})
	return codes
}

// instrument is the name of an OpenTelemetry meter's constructor of an
// instrument (Int64Counter, Float64ObservableGauge, …).
var instrument = regexp.MustCompile(`^(Int64|Float64)(Observable)?(Counter|UpDownCounter|Histogram|Gauge)$`)

// metricNames are the names every instrument is created with: the first
// argument of each instrument constructor, a string literal or a string
// constant of the module.
func metricNames(t *testing.T, files map[string][]*ast.File) []string {
	t.Helper()
	local := map[string]map[string]string{} // folder → constant → value
	global := map[string][]string{}         // constant → values anywhere
	constants(files, func(dir string, spec *ast.ValueSpec) {
		for i, name := range spec.Names {
			if v, ok := stringConst(spec, i); ok {
				if local[dir] == nil {
					local[dir] = map[string]string{}
				}
				local[dir][name.Name] = v
				global[name.Name] = append(global[name.Name], v)
			}
		}
	})
	var names []string
	for dir, parsed := range files {
		for _, f := range parsed {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || !instrument.MatchString(sel.Sel.Name) {
					return true
				}
				var values []string
				switch arg := call.Args[0].(type) {
				case *ast.BasicLit:
					if v, err := strconv.Unquote(arg.Value); err == nil {
						values = []string{v}
					}
				case *ast.Ident:
					if v, ok := local[dir][arg.Name]; ok {
						values = []string{v}
					}
				case *ast.SelectorExpr:
					values = global[arg.Sel.Name]
				}
				require.Len(t, values, 1, "%s: cannot tell the name of the instrument %s creates", dir, sel.Sel.Name)
				if !slices.Contains(names, values[0]) {
					names = append(names, values[0])
				}
				return true
			})
		}
	}
	return names
}

// scenarioNames are the names of every crash scenario: the Name of each
// composite literal of a type named Scenario, or of a []Scenario's elements.
func scenarioNames(files map[string][]*ast.File) []string {
	isScenario := func(e ast.Expr) bool {
		switch typ := e.(type) {
		case *ast.Ident:
			return typ.Name == "Scenario"
		case *ast.SelectorExpr:
			return typ.Sel.Name == "Scenario"
		}
		return false
	}
	var names []string
	name := func(lit *ast.CompositeLit) {
		for _, elt := range lit.Elts {
			kv, ok := elt.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, ok := kv.Key.(*ast.Ident)
			if !ok || key.Name != "Name" {
				continue
			}
			if v, ok := kv.Value.(*ast.BasicLit); ok && v.Kind == token.STRING {
				if n, err := strconv.Unquote(v.Value); err == nil && !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
		}
	}
	for _, parsed := range files {
		for _, f := range parsed {
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.CompositeLit)
				if !ok {
					return true
				}
				if isScenario(lit.Type) {
					name(lit)
				}
				if arr, ok := lit.Type.(*ast.ArrayType); ok && isScenario(arr.Elt) {
					for _, elt := range lit.Elts {
						if inner, ok := elt.(*ast.CompositeLit); ok && inner.Type == nil {
							name(inner)
						}
					}
				}
				return true
			})
		}
	}
	return names
}

// The docs name every problem code a client may branch on, every metric the
// processes export and every crash scenario of the catalogue, each in
// backticks as a reader searches for it (a metric by its OpenTelemetry name
// or as Prometheus shows it), so cutting a page never loses one and a new
// one cannot ship unexplained. They are found in the repository's Go source,
// not in a list, wherever their packages live.
func TestDocsNameEveryCodeMetricAndScenario(t *testing.T) {
	t.Parallel()
	files := goSource(t, repoRoot(t))
	docs := userDocs(t)

	codes := problemCodes(files)
	require.Contains(t, codes, "idempotency_key_reused", "the walk found no problem codes")
	metrics := metricNames(t, files)
	require.Contains(t, metrics, "chargeflow.outbox.unknown_outcomes", "the walk found no metrics")
	scenarios := scenarioNames(files)
	require.Contains(t, scenarios, "soak", "the walk found no scenarios")
	require.Contains(t, scenarios, "webhooks-crash", "the walk found no scenarios")

	var missing []string
	for _, code := range codes {
		// `invalid_json`, or with its status: `400 invalid_json`.
		if !regexp.MustCompile("`([0-9]{3} )?" + regexp.QuoteMeta(code) + "`").MatchString(docs) {
			missing = append(missing, code)
		}
	}
	for _, name := range metrics {
		// chargeflow.api.problems, or as Prometheus shows it:
		// `chargeflow_api_problems_total`, `chargeflow_charges{state="pending"}`.
		prometheus := strings.ReplaceAll(name, ".", "_")
		named := "`(" + regexp.QuoteMeta(name) + "|" + regexp.QuoteMeta(prometheus) + "(_[a-z]+)*)[`{]"
		if !regexp.MustCompile(named).MatchString(docs) {
			missing = append(missing, name)
		}
	}
	for _, name := range scenarios {
		if !strings.Contains(docs, "`"+name+"`") {
			missing = append(missing, "scenario "+name)
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "README.md and docs/ never name these problem codes, metrics and scenarios (in backticks)")
}
