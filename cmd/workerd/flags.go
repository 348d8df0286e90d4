package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// errHelp ends a command after it printed its --help.
var errHelp = errors.New("help requested")

// newFlags is a flag set that reports errors instead of exiting. Its Usage
// prints the command's help on standard output; parse calls it for --help
// only, so a mistyped flag never puts the help where a script reads.
func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, "Usage: workerd %s %s\n\n", name, synopsis)
		if s := summary(name); s != "" {
			fmt.Fprintf(e.stdout, "%s%s.\n\n", strings.ToUpper(s[:1]), s[1:])
		}
		fmt.Fprint(e.stdout, "Flags:\n")
		fs.SetOutput(e.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parse parses flags anywhere among the arguments (flag stops at the first
// positional one) and checks the number of positional arguments.
func parse(fs *flag.FlagSet, synopsis string, args []string, minPos, maxPos int) ([]string, error) {
	// flag calls Usage on every error as well as on -h: silence it while
	// parsing, and print the help once, below, only when it was asked for.
	help := fs.Usage
	fs.Usage = func() {}
	defer func() { fs.Usage = help }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				help()
				return nil, errHelp
			}
			return nil, usagef("%v", err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch {
	case len(pos) < minPos:
		missing := "arguments"
		if names := positionalNames(synopsis); len(names) >= minPos {
			missing = strings.Join(names[len(pos):minPos], " and ")
		}
		return nil, usagef("missing %s; usage: workerd %s %s", missing, fs.Name(), firstLine(synopsis))
	case maxPos >= 0 && len(pos) > maxPos:
		return nil, usagef("unexpected arguments: %s", strings.Join(pos[maxPos:], " "))
	}
	return pos, nil
}

// positionalNames are the leading argument names of a synopsis, as in
// "QUEUE ID [--json]" → QUEUE, ID; missing ones are named in errors.
func positionalNames(synopsis string) []string {
	var names []string
	for _, w := range strings.Fields(synopsis) {
		if w != strings.ToUpper(w) || strings.ContainsAny(w, "[|-") {
			break
		}
		names = append(names, w)
	}
	return names
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func summary(name string) string {
	for _, c := range commands() {
		if c.name == name {
			return c.summary
		}
	}
	return ""
}
