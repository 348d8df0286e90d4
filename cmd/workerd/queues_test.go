package main

import (
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// A name that is no queue is most likely a typo: reading commands say so,
// naming the known queues, and exit 1 (like a job that does not exist);
// commands that change a queue's settings refuse it too, and change
// nothing, unless given --create.
func TestUnknownQueueIsRefused(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "mail", "welcome")
	c.ok("", "enqueue", "sms", "code")
	const known = `no queue "mial" (known queues: mail, sms)`
	for _, args := range [][]string{
		{"inspect", "mial"},
		{"inspect", "mial", "--follow"},
		{"inspect", "job", "mial", "some-id"},
		{"jobs", "mial", "--state", "dead"},
		{"check", "mial"},
		{"events", "mial"},
		{"limit", "mial"},
		{"resume", "mial"},
		{"retry", "mial", "--dead"},
		{"retry", "mial", "some-id"},
		{"cancel", "mial", "some-id"},
		{"release", "mial", "some-id"},
		{"pause", "mial"},
		{"events", "mial", "--keep", "100"},
		{"events", "mial", "--off"},
		{"limit", "mial", "--max-running", "2"},
		{"limit", "mial", "--clear"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errOut := c.run("", args...)
			want := "workerd " + args[0] + ": " + known
			if code != 1 || out != "" || !strings.HasPrefix(errOut, want) || strings.Count(errOut, "\n") != 1 {
				t.Fatalf("exit %d, stdout %q, stderr %q; want 1, nothing, and one line starting %q", code, out, errOut, want)
			}
			sets := args[0] == "pause" || len(args) > 2 && (args[0] == "events" || args[0] == "limit")
			if sets != strings.Contains(errOut, "add --create") {
				t.Errorf("stderr %q: a command that changes settings should point at --create, and only such a command", errOut)
			}
		})
	}
	if keys := c.mr.Keys(); strings.Contains(strings.Join(keys, " "), "{mial}") {
		t.Fatalf("a refused command wrote to the unknown queue: %v", keys)
	}
}

// With no queue at all, the message says where queues come from, and under
// which prefix it looked (a wrong --prefix looks the same as a typo).
func TestUnknownQueueWithoutQueues(t *testing.T) {
	c := newCLI(t)
	code, _, errOut := c.run("", "inspect", "mail")
	if code != 1 || !strings.Contains(errOut, `no queue "mail" (no queues yet: a queue appears with its first enqueue)`) {
		t.Fatalf("exit %d: %q", code, errOut)
	}
	c.ok("", "enqueue", "mail", "welcome")
	code, _, errOut = c.run("", "inspect", "mail", "--prefix", "other")
	if code != 1 || !strings.Contains(errOut, `no queue "mail" (no queues under prefix "other" yet`) {
		t.Fatalf("another prefix: exit %d: %q", code, errOut)
	}
}

// A queue may be paused (or limited, or record events) before its first
// job, with --create; it is then a queue for every command, until nothing
// is set on it any more.
func TestCreateSetsUpAQueueBeforeItsFirstJob(t *testing.T) {
	c := newCLI(t)
	if out := c.ok("", "pause", "later", "--create"); !strings.Contains(out, "paused later") {
		t.Fatalf("pause --create: %s", out)
	}
	if out := c.ok("", "inspect", "later"); !strings.Contains(out, "PAUSED") {
		t.Fatalf("inspect of a queue paused before its first job: %s", out)
	}
	c.ok("", "limit", "later", "--max-running", "2")
	c.ok("", "resume", "later")
	if out := c.ok("", "limit", "later"); !strings.Contains(out, "at most 2 running") {
		t.Fatalf("limit: %s", out)
	}
	c.ok("", "limit", "later", "--clear")
	if code, _, errOut := c.run("", "check", "later"); code != 1 || !strings.Contains(errOut, `no queue "later"`) {
		t.Fatalf("a queue with no job and nothing set is no queue again: exit %d: %q", code, errOut)
	}
	c.ok("", "events", "later", "--keep", "10", "--create")
	if out := c.ok("", "check", "later"); !strings.Contains(out, "ok: 1 queue") {
		t.Fatalf("check of a queue recording events before its first job: %s", out)
	}
}

// "inspect job" without its queue and id is a usage error naming what is
// missing, not the inspection of a queue called "job"; unless there is one.
func TestInspectJobMissingArguments(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "mail", "welcome")
	for args, want := range map[string]string{
		"inspect job":      "workerd inspect: missing QUEUE and ID; usage: workerd inspect job QUEUE ID\n",
		"inspect job mail": "workerd inspect: missing ID; usage: workerd inspect job QUEUE ID\n",
	} {
		code, out, errOut := c.run("", strings.Fields(args)...)
		if code != 2 || out != "" || errOut != want+"Run 'workerd inspect --help' for usage.\n" {
			t.Errorf("workerd %s: exit %d, stdout %q, stderr %q; want 2 and %q", args, code, out, errOut, want)
		}
	}
	c.ok("", "enqueue", "job", "k")
	if out := c.ok("", "inspect", "job"); !strings.Contains(out, "queue job: 1 pending") {
		t.Fatalf("inspect of a queue named job: %s", out)
	}
}

// workerd refuses a queue name workerd.yaml refuses, with the rule, before
// it writes anything: enqueue, --jsonl and the commands that set a queue
// up ahead of its first job.
func TestQueueNameRuleOnTheCommandLine(t *testing.T) {
	c := newCLI(t)
	for _, args := range [][]string{
		{"enqueue", "a b", "k"},
		{"pause", "a b", "--create"},
		{"limit", "a b", "--max-running", "2", "--create"},
		{"events", "a\u00a0b", "--keep", "10", "--create"},
	} {
		code, out, errOut := c.run("", args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "must not contain white space; "+broker.QueueNameRule) || strings.Contains(errOut, "fenceq:") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and the rule", args, code, out, errOut)
		}
	}
	code, out, errOut := c.run(`{"kind":"k","queue":"a b"}`+"\n", "enqueue", "a b", "--jsonl", "-")
	if code != 2 || out != "" || !strings.HasPrefix(errOut, `workerd enqueue: invalid queue "a b": must not contain white space`) {
		t.Errorf("--jsonl into %q: exit %d, stdout %q, stderr %q; want 2 before a line is read", "a b", code, out, errOut)
	}
	// A line's own error carries no second prefix either.
	code, _, errOut = c.run(`{"kind":"k","priority":1000}`+"\n", "enqueue", "q", "--jsonl", "-")
	if code != 1 || errOut != "line 1: invalid priority \"1000\": must be between -100 and 100\n" {
		t.Errorf("--jsonl, a bad line: exit %d, stderr %q", code, errOut)
	}
	if qs := c.ok("", "inspect", "--json"); strings.Contains(qs, `"a b"`) {
		t.Errorf("a refused name became a queue:\n%s", qs)
	}
}
