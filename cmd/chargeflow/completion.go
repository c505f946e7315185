package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// runCompletion prints a shell's completion script. Each one asks the
// binary itself for the words (printCompletions), so completion follows
// the commands and flags of the build that is installed.
func runCompletion(_ context.Context, e env, args []string) error {
	fs := newFlagSet("completion", e)
	if err := parseToolFlags(fs, e, args); err != nil {
		return err
	}
	pos, err := positional(fs, "SHELL")
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		self = "chargeflow"
	}
	self = strconv.Quote(filepath.Clean(self))
	var script string
	switch pos[0] {
	case "bash":
		script = "complete -o default -C " + self + " chargeflow\n"
	case "zsh":
		script = "autoload -U +X bashcompinit && bashcompinit\ncomplete -o default -C " + self + " chargeflow\n"
	case "fish":
		script = "complete -c chargeflow -f -a '(env COMP_LINE=(commandline -cp) COMP_POINT=(string length -- (commandline -cp)) " +
			self + " chargeflow (commandline -ct) \"\")'\n"
	default:
		return usageErrorf("completion: %q: want bash, zsh or fish", pos[0])
	}
	_, err = fmt.Fprint(e.stdout, script)
	return err
}

// printCompletions prints, one a line, the words that complete the last
// word of line up to point: a command's subcommands, or its flags.
func printCompletions(e env, line, point string) {
	if p, err := strconv.Atoi(point); err == nil && p >= 0 && p <= len(line) {
		line = line[:p]
	}
	for _, w := range completions(line) {
		fmt.Fprintln(e.stdout, w)
	}
}

// completions is what completes line's last word.
func completions(line string) []string {
	words := strings.Fields(line)
	current := ""
	if len(words) > 0 && !strings.HasSuffix(line, " ") {
		current, words = words[len(words)-1], words[:len(words)-1]
	}
	if len(words) > 0 {
		words = words[1:] // the program's own name
	}
	cmds := commands()
	var leaf *command
	for _, w := range words {
		if strings.HasPrefix(w, "-") {
			continue
		}
		i := slices.IndexFunc(cmds, func(c command) bool { return c.name == w })
		if i < 0 {
			break
		}
		if cmds[i].subs == nil {
			leaf = &cmds[i]
			break
		}
		cmds = cmds[i].subs
	}
	var candidates []string
	if leaf == nil {
		for _, c := range cmds {
			candidates = append(candidates, c.name)
		}
	} else if strings.HasPrefix(current, "-") {
		candidates = flagsOf(*leaf)
	}
	var out []string
	for _, c := range candidates {
		if strings.HasPrefix(c, current) {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

// flagsOf is a command's flags, "--name", read from the flag set it builds
// without running it (env.inspect).
func flagsOf(c command) []string {
	var names []string
	e := env{getenv: func(string) string { return "" }, stdout: io.Discard, stderr: io.Discard,
		inspect: func(fs *flag.FlagSet, _ func(string) bool) {
			fs.VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
		}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = c.run(ctx, e, nil)
	return names
}
