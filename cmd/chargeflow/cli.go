package main

// The one framework every command goes through: a tree of commands, help
// that lists a command's flags (and exits 0), usage errors that say what
// to run for help (exit 2), and exit codes that tell a script what kind of
// failure it got (docs/operations.md, "Exit codes").

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// The exit codes.
const (
	exitOK = 0
	// exitFailed: the command failed for a reason none of the others names
	// (a role stopped on an error).
	exitFailed = 1
	// exitUsage: the command line or the configuration is wrong; nothing
	// was done.
	exitUsage = 2
	// exitNotFound: what was asked for does not exist (the API answered 404).
	exitNotFound = 3
	// exitRefused: the API refused the request (another 4xx): sending it
	// again unchanged will not help.
	exitRefused = 4
	// exitUnavailable: the API or the database could not be reached, or
	// answered 5xx or 429, or the outcome is unknown: trying again (with
	// the same idempotency key) may help.
	exitUnavailable = 5
)

// exitError is an error with the exit code it ends the process with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// withExit gives err an exit code; nil stays nil.
func withExit(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// usageErrorf is an error in how the command was called: exit 2.
func usageErrorf(format string, a ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, a...)}
}

// errHelp says help was asked for and shown: exit 0. It is the flag
// package's own, which a flag set returns on -h.
var errHelp = flag.ErrHelp

// exitCode is the process's exit status after err.
func exitCode(err error) int {
	if err == nil || errors.Is(err, errHelp) {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitFailed
}

// command is one node of the tree: a group of subcommands, or a command
// that runs.
type command struct {
	name string
	// args names the positional arguments for the usage line ("ID").
	args    string
	summary string
	// run runs the command with the arguments after its name; a group has
	// subs instead.
	run  func(ctx context.Context, e env, args []string) error
	subs []command
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// dispatch runs the command args names among cmds, path being the words
// that led to them ("charge").
func dispatch(ctx context.Context, e env, path []string, cmds []command, args []string) error {
	if len(args) == 0 {
		groupUsage(e.stderr, path, cmds)
		if len(path) == 0 {
			return usageErrorf("no command given")
		}
		return usageErrorf("%s: which command? (see above)", strings.Join(path, " "))
	}
	if isHelp(args[0]) {
		groupUsage(e.stdout, path, cmds)
		return errHelp
	}
	for _, c := range cmds {
		if c.name != args[0] {
			continue
		}
		if c.subs != nil {
			return dispatch(ctx, e, append(slices.Clone(path), c.name), c.subs, args[1:])
		}
		return c.run(ctx, e, args[1:])
	}
	if len(path) == 0 && slices.Contains(labCommandNames, args[0]) {
		return usageErrorf("%q is a command of the laboratory, which this build does not have; %s", args[0], labBuild)
	}
	groupUsage(e.stderr, path, cmds)
	where := "chargeflow"
	if len(path) > 0 {
		where += " " + strings.Join(path, " ")
	}
	return usageErrorf("unknown command %q: run '%s -h' for the commands", strings.Join(append(slices.Clone(path), args[0]), " "), where)
}

// groupUsage lists the commands of a group.
func groupUsage(w io.Writer, path []string, cmds []command) {
	name := strings.Join(append([]string{"chargeflow"}, path...), " ")
	fmt.Fprintf(w, "Usage: %s COMMAND [flags]\n", name)
	if len(path) > 0 {
		if c, ok := lookup(path); ok {
			fmt.Fprintf(w, "\n%s\n", c.summary)
		}
	}
	fmt.Fprintln(w, "\nCommands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range cmds {
		fmt.Fprintf(tw, "  %s\t%s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	_ = tw.Flush()
	if len(path) == 0 {
		fmt.Fprintln(w, "\nEvery flag of api, worker, reconciler, fakepsp, migrate and all is also CHARGEFLOW_<FLAG> in the\nenvironment (--call-timeout: CHARGEFLOW_CALL_TIMEOUT); docs/operations.md lists every setting.")
		if len(labCommands()) == 0 {
			fmt.Fprintf(w, "\nCommands not in this build: %s, the laboratory's; %s.\n", strings.Join(labCommandNames, ", "), labBuild)
		}
	}
	fmt.Fprintf(w, "\nRun '%s COMMAND -h' for a command's flags.\n", name)
}

// lookup finds the command at path ("charge", "get").
func lookup(path []string) (command, bool) {
	cmds := commands()
	var found command
	for _, word := range path {
		i := slices.IndexFunc(cmds, func(c command) bool { return c.name == word })
		if i < 0 {
			return command{}, false
		}
		found, cmds = cmds[i], cmds[i].subs
	}
	return found, len(path) > 0
}

// commandPath is the words of a flag set's name after "chargeflow".
func commandPath(fs *flag.FlagSet) []string {
	return strings.Fields(strings.TrimPrefix(fs.Name(), "chargeflow"))
}

// commandUsage writes a command's help: its usage line, what it does, and
// its flags, each with its default and, when it has one, the variable it
// is also read from.
func commandUsage(w io.Writer, fs *flag.FlagSet, fromEnv func(string) bool) {
	path := commandPath(fs)
	c, _ := lookup(path)
	line := strings.TrimSpace(fs.Name() + " " + c.args)
	fmt.Fprintf(w, "Usage: %s [flags]\n", line)
	if c.summary != "" {
		fmt.Fprintf(w, "\n%s\n", c.summary)
	}
	var flags []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
	if len(flags) == 0 {
		return
	}
	sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
	fmt.Fprintln(w, "\nFlags:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range flags {
		kind, usage := flag.UnquoteUsage(f)
		name := "--" + f.Name
		if kind != "" {
			name += " " + kind
		}
		var notes []string
		if !zeroDefault[f.DefValue] && !secretFlags[f.Name] {
			notes = append(notes, "default "+f.DefValue)
		}
		if fromEnv != nil && fromEnv(f.Name) {
			notes = append(notes, "env "+strings.Join(envNames(f.Name), " or "))
		}
		if len(notes) > 0 {
			usage += " (" + strings.Join(notes, "; ") + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, usage)
	}
	_ = tw.Flush()
}

// zeroDefault are defaults that mean "not given": help does not show them.
var zeroDefault = map[string]bool{"": true, "false": true, "0": true, "0s": true, "[]": true}

// parseArgs parses args into fs with flags and positional arguments in any
// order ("charge get ID --output json" and "charge get --output json ID");
// after "--" everything is positional. fs.Args() are then the positional
// arguments. -h, -help or --help prints the command's help to stdout and
// ends it with errHelp — once the flags before it parsed: a misspelt flag
// is refused, not hidden by help; a malformed flag is a usage error.
func parseArgs(fs *flag.FlagSet, e env, args []string, fromEnv func(string) bool) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var positional []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			commandUsage(e.stdout, fs, fromEnv)
			return errHelp
		}
		if err != nil {
			return usageErrorf("%s: %v (run '%s -h' for its flags)", strings.TrimPrefix(fs.Name(), "chargeflow "), err, fs.Name())
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
	// What is left is the positional arguments: Parse stops at "--" and
	// keeps what follows as fs.Args().
	return fs.Parse(append([]string{"--"}, positional...))
}

// positional checks a command's positional arguments: exactly the names
// given, and returns them. A last name ending in "..." ("ENTRY...") takes
// the rest, any number; the command says whether none will do.
func positional(fs *flag.FlagSet, names ...string) ([]string, error) {
	if n := len(names); n > 0 && strings.HasSuffix(names[n-1], "...") && fs.NArg() >= n-1 {
		return fs.Args(), nil
	}
	if fs.NArg() == len(names) {
		return fs.Args(), nil
	}
	name := strings.TrimPrefix(fs.Name(), "chargeflow ")
	if fs.NArg() < len(names) {
		return nil, usageErrorf("%s: missing %s (run '%s -h')", name, strings.Join(names[fs.NArg():], " and "), fs.Name())
	}
	return nil, usageErrorf("%s: unexpected argument %q (run '%s -h')", name, fs.Arg(len(names)), fs.Name())
}
