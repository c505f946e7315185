package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
		fs, _ := inspectFlags(t, args, func(string) string { return "" })
		fs.VisitAll(func(f *flag.Flag) {
			flags[f.Name] = append(flags[f.Name], fs.Name())
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
