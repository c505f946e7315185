package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// What the deploy tests (deploy_test.go, in the lab build) and the product
// build's test (product_test.go, in both) read of the repository's
// Dockerfile.

// repoRoot is the top of the repository: the tests run in cmd/chargeflow.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	root, err = filepath.EvalSymlinks(root)
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"))
	return root
}

// dockerInstruction is one instruction of a Dockerfile: its keyword in upper
// case and its arguments, continuation lines joined.
type dockerInstruction struct {
	keyword string
	args    string
}

// dockerStage is one FROM and the instructions after it.
type dockerStage struct {
	from         string
	instructions []dockerInstruction
}

// parseDockerfile splits the repository's Dockerfile into stages. It knows
// the default escape character and comments only, which is all it uses.
func parseDockerfile(t *testing.T, root string) []dockerStage {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "Dockerfile"))
	require.NoError(t, err)
	defer f.Close()
	var stages []dockerStage
	var pending string
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if rest, ok := strings.CutSuffix(line, "\\"); ok {
			pending += rest + " "
			continue
		}
		line, pending = pending+line, ""
		keyword, args, _ := strings.Cut(line, " ")
		in := dockerInstruction{keyword: strings.ToUpper(keyword), args: strings.TrimSpace(args)}
		if in.keyword == "FROM" {
			stages = append(stages, dockerStage{from: in.args})
			continue
		}
		require.NotEmpty(t, stages, "Dockerfile: %s before the first FROM", in.keyword)
		stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, in)
	}
	require.NoError(t, scanner.Err())
	require.Empty(t, pending, "Dockerfile ends in a continuation line")
	return stages
}

// with returns the stage's instructions that have keyword.
func (s dockerStage) with(keyword string) []dockerInstruction {
	var out []dockerInstruction
	for _, in := range s.instructions {
		if in.keyword == keyword {
			out = append(out, in)
		}
	}
	return out
}

// execForm parses a JSON array argument: the exec form, no shell.
func execForm(t *testing.T, what, args string) []string {
	t.Helper()
	var list []string
	require.NoError(t, json.Unmarshal([]byte(args), &list), "%s: want the exec form, a JSON array (the image has no shell), got %s", what, args)
	require.NotEmpty(t, list, what)
	return list
}

// dockerfileEntrypoint returns the path of the binary the final stage runs.
func dockerfileEntrypoint(t *testing.T, root string) string {
	t.Helper()
	stages := parseDockerfile(t, root)
	require.NotEmpty(t, stages)
	final := stages[len(stages)-1]
	entrypoints := final.with("ENTRYPOINT")
	require.Len(t, entrypoints, 1, "Dockerfile: the final stage needs one ENTRYPOINT")
	entrypoint := execForm(t, "ENTRYPOINT", entrypoints[0].args)
	require.Len(t, entrypoint, 1, "Dockerfile: ENTRYPOINT is the binary alone, so a command is a subcommand and its flags")
	require.True(t, filepath.IsAbs(entrypoint[0]), "Dockerfile: ENTRYPOINT %q is not an absolute path", entrypoint[0])
	return entrypoint[0]
}
