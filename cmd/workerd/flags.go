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

// newFlags is a flag set that reports errors instead of exiting.
func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, "Usage: workerd %s %s\n\nFlags:\n", name, synopsis)
		fs.SetOutput(e.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parse parses flags anywhere among the arguments (flag stops at the first
// positional one) and checks the number of positional arguments.
func parse(fs *flag.FlagSet, synopsis string, args []string, minPos, maxPos int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.Usage()
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
		return nil, usagef("missing arguments; usage: workerd %s %s", fs.Name(), synopsis)
	case maxPos >= 0 && len(pos) > maxPos:
		return nil, usagef("unexpected arguments: %s", strings.Join(pos[maxPos:], " "))
	}
	return pos, nil
}
