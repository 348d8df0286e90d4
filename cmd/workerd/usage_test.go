package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// runBare runs workerd with exactly args: no --redis, and no Redis
// reachable through the environment, so a command that got as far as
// connecting would fail the test with a connection error.
func runBare(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(string) string { return "redis://127.0.0.1:1" }}
	code := run(context.Background(), e, args)
	return code, out.String(), errOut.String()
}

// --help and -h print the command's usage once, on standard output, and
// exit 0.
func TestHelpPrintsUsageOnceOnStandardOutput(t *testing.T) {
	for _, c := range commands() {
		for _, help := range []string{"--help", "-h"} {
			t.Run(c.name+help, func(t *testing.T) {
				code, out, errOut := runBare(c.name, help)
				if code != 0 || errOut != "" {
					t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, errOut)
				}
				if !strings.HasPrefix(out, "Usage: workerd "+c.name+" ") || strings.Count(out, "Usage:") != 1 || !strings.Contains(out, "\nFlags:\n") {
					t.Fatalf("want the usage once, with its flags:\n%s", out)
				}
			})
		}
	}
}

// A usage error is one line on standard error saying what was wrong, then
// one hint line, exit 2, and nothing on standard output (where a script
// reads an id).
func TestUsageErrorIsOneLineAndAHint(t *testing.T) {
	type usageCase struct {
		args []string
		want string // in the first line
	}
	var cases []usageCase
	for _, c := range commands() {
		cases = append(cases, usageCase{[]string{c.name, "--no-such-flag"}, "unknown flag --no-such-flag"})
	}
	cases = append(cases,
		usageCase{[]string{"enqueue"}, "missing QUEUE"},
		usageCase{[]string{"enqueue", "q"}, "missing the job kind"},
		usageCase{[]string{"release", "q"}, "missing ID"},
		usageCase{[]string{"cancel"}, "missing QUEUE and ID"},
		usageCase{[]string{"retry"}, "missing QUEUE"},
		usageCase{[]string{"retry", "q", "--dead", "--limit", "-1"}, "--limit -1: give 0 (every dead job) or more"},
		usageCase{[]string{"pause"}, "missing QUEUE"},
		usageCase{[]string{"resume", "a", "b"}, "unexpected arguments: b"},
		usageCase{[]string{"jobs"}, "missing QUEUE"},
		usageCase{[]string{"jobs", "q"}, "missing --state: give one of blocked, scheduled, pending, running, done, dead, cancelled"},
		usageCase{[]string{"jobs", "q", "--state", "deadd"}, "--state deadd: want one of blocked"},
		usageCase{[]string{"jobs", "q", "--state", "dead", "--limit", "0"}, "--limit 0"},
		usageCase{[]string{"inspect", "job", "q"}, "missing ID; usage: workerd inspect job QUEUE ID"},
		usageCase{[]string{"inspect", "a", "b"}, "unexpected arguments: b"},
		usageCase{[]string{"dev", "extra"}, "unexpected arguments: extra"},
		usageCase{[]string{"bench", "--prefix", "fenceq"}, "drop --prefix"},
		usageCase{[]string{"bench", "--cluster", "127.0.0.1:1"}, "not a cluster"},
		usageCase{[]string{"enqueue", "q", "k", "--bogus"}, "unknown flag --bogus"},
		// A value the flag package cannot read: the flag with two dashes,
		// what it takes and how to write it.
		usageCase{[]string{"enqueue", "q", "k", "--delay", "5"}, `--delay "5": want a duration with its unit (ms, s, m or h), e.g. --delay 5s`},
		usageCase{[]string{"enqueue", "q", "k", "-delay", "5"}, `--delay "5": want a duration`},
		usageCase{[]string{"enqueue", "q", "k", "--delay"}, "--delay needs a value: write --delay 5s"},
		usageCase{[]string{"enqueue", "q", "k", "--max-attempts", "x"}, `--max-attempts "x": want a whole number, e.g. --max-attempts 10`},
		usageCase{[]string{"enqueue", "q", "k", "--raw=maybe"}, `--raw "maybe": want true or false, e.g. --raw=true`},
		usageCase{[]string{"enqueue", "q", "k", "--meta", "x"}, `--meta "x": "x" has no '=': write KEY=VALUE`},
	)
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runBare(tc.args...)
			lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
			if code != 2 || out != "" || len(lines) != 2 {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 2, nothing, and two lines", code, out, errOut)
			}
			name := tc.args[0]
			if !strings.HasPrefix(lines[0], "workerd "+name+": ") || !strings.Contains(lines[0], tc.want) {
				t.Errorf("first line %q; want it to start with %q and say %q", lines[0], "workerd "+name+": ", tc.want)
			}
			if want := "Run 'workerd " + name + " --help' for usage."; lines[1] != want {
				t.Errorf("second line %q; want %q", lines[1], want)
			}
		})
	}
}

func TestTopLevelUsage(t *testing.T) {
	if code, out, errOut := runBare(); code != 2 || out != "" || !strings.Contains(errOut, "Commands:") {
		t.Errorf("no arguments: exit %d, stdout %q; want 2 and the command list on standard error (%q)", code, out, errOut)
	}
	if code, out, errOut := runBare("--help"); code != 0 || errOut != "" || !strings.Contains(out, "  jobs ") {
		t.Errorf("--help: exit %d, stderr %q; want 0 and the command list on standard output (%q)", code, errOut, out)
	}
	code, out, errOut := runBare("frobnicate")
	if code != 2 || out != "" || errOut != "workerd: unknown command \"frobnicate\"\nRun 'workerd --help' for the commands.\n" {
		t.Errorf("unknown command: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
