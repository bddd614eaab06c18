package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/fuseadvise/fuseadvise/patterns"
)

// Env is what a command may touch of the outside world; tests substitute buffers.
type Env struct {
	Stdout, Stderr io.Writer
	Stdin          io.Reader
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
}

// A Command is one verb, in the style of cmd/go's base.Command.
type Command struct {
	Name      string
	UsageLine string // "analyze [flags] TRACE..."
	Short     string // one line for "fuseadvise help"
	Long      string // the help text
	// Flags registers the verb's flags on fs and returns the function that runs it.
	Flags func(fs *flag.FlagSet) func(ctx context.Context, env *Env, args []string) error
}

// commands is the verb table, in the order "help" lists them.
var commands = []*Command{
	cmdAnalyze,
	cmdDiff,
	cmdPprof,
	cmdGen,
	cmdVerify,
	cmdBench,
	cmdReport,
	cmdPR,
	cmdRun,
	cmdVersion,
}

func lookup(name string) *Command {
	for _, c := range commands {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// usageError is a bad command line: main prints it with the verb's usage, exit status 2.
type usageError struct {
	cmd *Command
	msg string
}

func (e *usageError) Error() string {
	if e.cmd != nil {
		return e.cmd.Name + ": " + e.msg
	}
	return e.msg
}

// usagef reports a bad command line from inside a verb; dispatch names the verb.
func usagef(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// exitError carries an exit status other than 2 (for example 1: a verification failed).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var x *exitError
	if errors.As(err, &x) {
		return x.code
	}
	return 2
}

const helpText = `fuseadvise finds chains of PyTorch ops worth fusing in a profiler trace, writes fused
Triton kernels for them, proves them right in Triton's interpreter and measures them on a GPU.

Usage:

	fuseadvise VERB [flags] FILE...

The verbs are:
`

func dispatch(ctx context.Context, env *Env, args []string) error {
	if len(args) == 0 {
		return &usageError{msg: "no verb given; run 'fuseadvise help' for the verbs"}
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			c := lookup(args[1])
			if c == nil {
				return &usageError{msg: fmt.Sprintf("unknown help topic %q; run 'fuseadvise help'", args[1])}
			}
			printCommandHelp(env.Stdout, c)
			return nil
		}
		printHelp(env.Stdout)
		return nil
	}
	c := lookup(name)
	if c == nil {
		return &usageError{msg: fmt.Sprintf("unknown verb %q; run 'fuseadvise help'", name)}
	}
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	run := c.Flags(fs)
	rest, err := parseInterleaved(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		printCommandHelp(env.Stdout, c)
		return nil
	}
	if err != nil {
		return &usageError{cmd: c, msg: err.Error()}
	}
	err = run(ctx, env, rest)
	var u *usageError
	if errors.As(err, &u) && u.cmd == nil {
		u.cmd = c
	}
	return err
}

// parseInterleaved parses flags that may appear before, between or after the positional
// arguments ("analyze a.json -top 5"), which the flag package alone stops at. "--" ends flags.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil // everything after "--" is positional
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func printHelp(w io.Writer) {
	fmt.Fprint(w, helpText)
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "\t%-10s %s\n", c.Name, c.Short)
	}
	fmt.Fprint(w, "\nUse \"fuseadvise help VERB\" for more about a verb.\n")
}

func printCommandHelp(w io.Writer, c *Command) {
	fmt.Fprintf(w, "usage: fuseadvise %s\n\n%s\n", c.UsageLine, strings.TrimSpace(c.Long))
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	c.Flags(fs)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	fmt.Fprintln(w, "\nFlags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// helpWidth is the width help paragraphs built from data (the catalog) are wrapped to.
const helpWidth = 93

// wrap breaks s into lines of at most width bytes at spaces (a longer word stands alone).
func wrap(s string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(s) {
		switch {
		case n == 0:
		case n+1+len(w) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// catalogIDs lists the registered pattern ids, in the catalog's order.
func catalogIDs() string {
	var ids []string
	for _, p := range patterns.Catalog() {
		ids = append(ids, p.ID)
	}
	return strings.Join(ids, ", ")
}
