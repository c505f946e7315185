package client_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/client"
)

// The client has a constant for every problem code the server has, under
// the server's name, and no other: a code added to, renamed in or removed
// from api/problem.go fails here until the client follows. Both sides are
// read from their source, so a constant cannot hide from the comparison, and
// the server's side is also held to api.Codes(), the list it serves from.
func TestCodesMatchTheServer(t *testing.T) {
	t.Parallel()
	ours := codeConstants(t, ".")
	theirs := codeConstants(t, "../api")
	require.Equal(t, theirs, ours, "the client's Code constants against api/problem.go's")

	var served []string
	for _, code := range api.Codes() {
		served = append(served, string(code))
	}
	var values []string
	for _, value := range ours {
		values = append(values, value)
	}
	slices.Sort(served)
	slices.Sort(values)
	require.Equal(t, served, values, "the client's codes against api.Codes()")
	require.Equal(t, "refund_exceeds_charge", string(client.CodeRefundExceedsCharge))
}

// codeConstants reads the constants of type Code declared in the source
// files (tests aside) of the package in dir: name → value.
func codeConstants(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	fset := token.NewFileSet()
	constants := map[string]string{}
	for _, entry := range entries {
		name := entry.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		require.NoError(t, err)
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				value := spec.(*ast.ValueSpec)
				if ident, ok := value.Type.(*ast.Ident); !ok || ident.Name != "Code" {
					continue
				}
				for i, n := range value.Names {
					lit, ok := value.Values[i].(*ast.BasicLit)
					require.True(t, ok, "%s is not a string literal", n.Name)
					s, err := strconv.Unquote(lit.Value)
					require.NoError(t, err)
					_, dup := constants[n.Name]
					require.False(t, dup, n.Name)
					constants[n.Name] = s
				}
			}
		}
	}
	require.NotEmpty(t, constants)
	return constants
}
