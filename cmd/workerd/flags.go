package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
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
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n == 0 {
			fmt.Fprint(e.stdout, "  none\n")
		}
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
			return nil, flagError(fs, err)
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

// The messages of the flag package, which name a flag with one dash.
var (
	flagUnknown  = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	flagBadValue = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-+([^:]+): (.*)$`)
	flagNoValue  = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
)

// flagError rewrites an error of the flag package as workerd writes flags,
// with two dashes, and says how to write a value it could not read.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if m := flagUnknown.FindStringSubmatch(msg); m != nil {
		return usagef("unknown flag --%s", m[1])
	}
	if m := flagNoValue.FindStringSubmatch(msg); m != nil {
		return usagef("--%s needs a value: write --%s%s", m[1], m[1], valueExample(fs, m[1]))
	}
	if m := flagBadValue.FindStringSubmatch(msg); m != nil {
		name := m[2]
		kind := valueKind(fs, name)
		if kind == "" { // a flag of workerd's own type: its Set said what was wrong
			return usagef("--%s %q: %s", name, m[1], m[3])
		}
		return usagef("--%s %q: want %s, e.g. --%s%s", name, m[1], kind, name, valueExample(fs, name))
	}
	return usagef("%v", err)
}

// valueKind says what a flag's value is, for a message.
func valueKind(fs *flag.FlagSet, name string) string {
	switch flagValue(fs, name).(type) {
	case time.Duration:
		return "a duration with its unit (ms, s, m or h)"
	case bool:
		return "true or false"
	case int, int64, uint, uint64:
		return "a whole number"
	case float64:
		return "a number"
	}
	return ""
}

// valueExample is a value a flag takes, as it follows the flag's name:
// " 5s", or "=true" for a boolean (a boolean's value needs the '=').
func valueExample(fs *flag.FlagSet, name string) string {
	switch flagValue(fs, name).(type) {
	case time.Duration:
		return " 5s"
	case bool:
		return "=true"
	case int, int64, uint, uint64:
		return " 10"
	case float64:
		return " 0.5"
	}
	return " VALUE"
}

func flagValue(fs *flag.FlagSet, name string) any {
	f := fs.Lookup(name)
	if f == nil {
		return nil
	}
	if g, ok := f.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}
