package main

import (
	"strings"
	"testing"
)

// --group reaches the job, and inspect job shows it in both forms; a job
// enqueued without one shows none; a bad group is a usage error.
func TestEnqueueGroup(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "mail", "welcome", "--id", "g-1", "--group", "acme")
	if got := c.job("mail", "g-1").Group; got != "acme" {
		t.Fatalf("inspect --json group = %q, want acme", got)
	}
	if text := c.ok("", "inspect", "job", "mail", "g-1"); !strings.Contains(text, "\ngroup       acme\n") {
		t.Errorf("inspect job text lacks the group row:\n%s", text)
	}
	c.ok("", "enqueue", "mail", "welcome", "--id", "g-2")
	if got := c.job("mail", "g-2").Group; got != "" {
		t.Fatalf("group of a job enqueued without --group: %q", got)
	}
	if text := c.ok("", "inspect", "job", "mail", "g-2"); strings.Contains(text, "group") {
		t.Errorf("inspect job shows a group for a job without one:\n%s", text)
	}
	if js := c.ok("", "inspect", "job", "mail", "g-2", "--json"); strings.Contains(js, `"group"`) {
		t.Errorf("inspect job --json has a group for a job without one: %s", js)
	}
	for _, bad := range []string{" acme", strings.Repeat("g", 129), "a\x01b"} {
		code, _, errOut := c.run("", "enqueue", "mail", "welcome", "--id", "bad", "--group", bad)
		if code != 2 || !strings.Contains(errOut, "group") {
			t.Errorf("--group %.20q: exit %d, stderr %q; want 2 naming the group", bad, code, errOut)
		}
	}
	c.ok(`{"kind": "welcome", "id": "g-3", "group": "globex"}`+"\n", "enqueue", "mail", "--jsonl", "-")
	if got := c.job("mail", "g-3").Group; got != "globex" {
		t.Fatalf("group of a --jsonl job = %q, want globex", got)
	}
}
