package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// workerd limit --group-*: the queue's group defaults, then one group's
// override of them, changing only what is given, and shown after.
func TestLimitGroupFlags(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "q", "k")
	c.ok("", "limit", "q", "--max-running", "7")
	out := c.ok("", "limit", "q", "--group-max-running", "2", "--group-rate", "10/1s")
	for _, w := range []string{"q: at most 7 running\n", "q, each group: at most 2 running, at most 10 starts per 1s\n"} {
		if !strings.Contains(out, w) {
			t.Fatalf("after setting the group defaults, workerd limit printed\n%s\nwant the line %q", out, w)
		}
	}
	if out := c.ok("", "limit", "q", "--group-ordered"); !strings.Contains(out, "each group: ordered (one at a time), at most 10 starts per 1s") {
		t.Fatalf("--group-ordered: %s", out)
	}
	if out := c.ok("", "limit", "q", "--group-ordered=false", "--group-rate", "5/m"); !strings.Contains(out, "each group: at most 2 running, at most 5 starts per 1m0s") {
		t.Fatalf("--group-ordered=false --group-rate 5/m: %s", out)
	}
	out = c.ok("", "limit", "q", "--group", "acme", "--group-max-running", "5")
	for _, w := range []string{
		"q, each group: at most 2 running, at most 5 starts per 1m0s; 1 group has limits of its own\n",
		"q, group acme: at most 5 running, at most 5 starts per 1m0s (its own: at most 5 running; the rest from the defaults)\n",
	} {
		if !strings.Contains(out, w) {
			t.Fatalf("after acme's override, workerd limit printed\n%s\nwant the line %q", out, w)
		}
	}
	if out := c.ok("", "limit", "q"); !strings.Contains(out, "1 group has limits of its own (--group G shows one)") {
		t.Fatalf("workerd limit q does not say that a group has its own limits: %s", out)
	}
	if out := c.ok("", "limit", "q", "--group", "acme", "--group-rate", "none", "--group-max-running", "default"); !strings.Contains(out, "group acme: at most 2 running (its own: no rate; the rest from the defaults)") {
		t.Fatalf("--group-rate none --group-max-running default: %s", out)
	}
	if out := c.ok("", "limit", "q", "--group", "globex"); !strings.Contains(out, "group globex: at most 2 running, at most 5 starts per 1m0s (no limits of its own: the defaults)") {
		t.Fatalf("a group without an override: %s", out)
	}
	if out := c.ok("", "limit", "q", "--group", "acme", "--reset"); !strings.Contains(out, "group acme: at most 2 running, at most 5 starts per 1m0s (no limits of its own") || strings.Contains(out, "of their own") || strings.Contains(out, "of its own;") {
		t.Fatalf("--reset: %s", out)
	}
	// The queue's own limits were kept throughout.
	if out := c.ok("", "limit", "q"); !strings.HasPrefix(out, "q: at most 7 running\n") {
		t.Fatalf("the queue's own limits after the group changes: %s", out)
	}
	// Both kinds in one command.
	if out := c.ok("", "limit", "q", "--max-running", "9", "--group-max-running", "none"); !strings.Contains(out, "q: at most 9 running\nq, each group: at most 5 starts per 1m0s\n") {
		t.Fatalf("--max-running with --group-max-running: %s", out)
	}
}

// Every bad group flag is a usage error (exit 2) whose first line names
// the flag and what to give, and changes nothing.
func TestLimitGroupFlagsRefused(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "q", "k")
	c.ok("", "limit", "q", "--group-max-running", "2", "--group", "acme")
	before := c.ok("", "limit", "q", "--group", "acme")
	for _, tc := range []struct {
		args []string
		says []string
	}{
		{[]string{"--group", "acme", "--group-max-running", "0"}, []string{"--group-max-running", "none"}},
		{[]string{"--group", "acme", "--group-max-running", "-3"}, []string{"--group-max-running", "at least 1"}},
		{[]string{"--group", "acme", "--group-max-running", "lots"}, []string{"--group-max-running", "whole number"}},
		{[]string{"--group", "acme", "--group-rate", "10"}, []string{"--group-rate", "N/PERIOD"}},
		{[]string{"--group", "acme", "--group-rate", "0/1s"}, []string{"--group-rate", "at least 1"}},
		{[]string{"--group", "acme", "--group-rate", "10/soon"}, []string{"--group-rate", "duration"}},
		{[]string{"--group", "acme", "--group-rate", "2000/1s"}, []string{"--group-rate", "1ms apart", "at most 1000 per 1s"}},
		{[]string{"--group", "acme", "--group-rate", "10/1s", "--max-running", "3", "--rate", "5"}, []string{"--rate and --per go together"}},
		{[]string{"--group", "acme", "--group-ordered=maybe"}, []string{"--group-ordered", "=false"}},
		{[]string{"--group-max-running", "default"}, []string{"--group-max-running default", "--group G"}},
		{[]string{"--group-ordered=default"}, []string{"--group-ordered default", "--group G"}},
		{[]string{"--reset"}, []string{"--reset", "--group G"}},
		{[]string{"--group", " acme", "--group-max-running", "1"}, []string{"--group", "white space"}},
		{[]string{"--group", "", "--group-max-running", "1"}, []string{"--group needs"}},
		{[]string{"--group", "acme", "--clear", "--group-max-running", "1"}, []string{"--clear", "--group"}},
		{[]string{"--group", "acme", "--group-max-running", "default", "--reset", "--group-max-running", "x"}, []string{"--group-max-running"}},
	} {
		code, _, errOut := c.run("", append([]string{"limit", "q"}, tc.args...)...)
		msg, _, _ := strings.Cut(errOut, "\n")
		if code != 2 {
			t.Errorf("workerd limit q %v: exit %d (%q); want 2", tc.args, code, errOut)
			continue
		}
		for _, w := range tc.says {
			if !strings.Contains(msg, w) {
				t.Errorf("workerd limit q %v: %q does not say %q", tc.args, msg, w)
			}
		}
		if after := c.ok("", "limit", "q", "--group", "acme"); after != before {
			t.Fatalf("the refused workerd limit q %v changed the limits:\n%s\nwas\n%s", tc.args, after, before)
		}
	}
}

// A queue set up by its group limits alone (--create) is a queue: showing
// it again needs no --create.
func TestLimitGroupCreate(t *testing.T) {
	c := newCLI(t)
	if code, _, errOut := c.run("", "limit", "later", "--group-max-running", "2"); code != 1 || !strings.Contains(errOut, "--create") {
		t.Fatalf("group limits of no queue without --create: exit %d, %q", code, errOut)
	}
	c.ok("", "limit", "later", "--group-max-running", "2", "--create")
	if out := c.ok("", "limit", "later"); !strings.Contains(out, "each group: at most 2 running") {
		t.Fatalf("a queue set up by its group limits: %s", out)
	}
}

// A new override past broker.MaxGroupOverrides is a usage error naming
// --group and what to do, and changes nothing.
func TestLimitGroupOverrideCap(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "q", "k")
	for i := range broker.MaxGroupOverrides {
		c.mr.HSet("fenceq:{q}:glimits", "g"+strconv.Itoa(i), "1 - - -")
	}
	code, _, errOut := c.run("", "limit", "q", "--group", "one-more", "--group-max-running", "2")
	if msg, _, _ := strings.Cut(errOut, "\n"); code != 2 || !strings.Contains(msg, `--group "one-more"`) || !strings.Contains(msg, "reset") {
		t.Fatalf("the 100,001st override: exit %d, %q; want 2 naming --group and what to do", code, errOut)
	}
	if c.mr.HGet("fenceq:{q}:glimits", "one-more") != "" {
		t.Fatal("the refused override was stored")
	}
	// An existing one still changes.
	if out := c.ok("", "limit", "q", "--group", "g7", "--group-max-running", "4"); !strings.Contains(out, "group g7: at most 4 running") {
		t.Fatalf("changing an existing override at the cap: %s", out)
	}
}
