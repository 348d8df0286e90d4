package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// workerd groups lists a queue's groups, largest backlogs first, as a table
// with a header, or as one JSON object; --group reads one; an unknown queue
// and a bad flag say what was wrong.
func TestGroupsListsAQueuesGroups(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "mail", "welcome", "--id", "plain")
	base := "fenceq:{mail}:"
	c.mr.HSet(base+"limits", "groups", "1", "g_max_running", "2")
	for _, id := range []string{"a1", "a2", "a3"} {
		if _, err := c.mr.ZAdd(base+"gready:acme", 1, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.mr.ZAdd(base+"gready:globex", 1, "g1"); err != nil {
		t.Fatal(err)
	}
	c.mr.ZAdd(base+"grotation", 1, "")
	c.mr.ZAdd(base+"grotation", 2, "globex")
	c.mr.ZAdd(base+"gwait", 1_800_000_000_000, "acme")
	c.mr.HSet(base+"grunning", "acme", "2")
	c.mr.HSet(base+"glimits", "globex", "- 5 1000 1")

	out, errOut := c.ok2("", "groups", "mail")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "GROUP ") {
		t.Fatalf("want a header and two groups; got\n%s", out)
	}
	if f := strings.Fields(lines[1]); len(f) < 8 || f[0] != "acme" || f[1] != "2" || f[2] != "3" || f[3] != "2" || f[4] != "-" || f[5] != "no" ||
		!strings.Contains(lines[1], "waiting until 2027-01-15T08:00:00Z") {
		t.Errorf("first line %q; want acme, 2 running, 3 ready, max 2, no rate, not ordered, waiting until 2027-01-15T08:00:00Z", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) < 8 || f[0] != "globex" || f[2] != "1" || f[3] != "1" || f[4] != "5/1s" || f[5] != "yes" ||
		!strings.Contains(lines[2], "in turn") {
		t.Errorf("second line %q; want globex, 1 ready, max 1 (ordered), 5/1s, ordered, in turn", lines[2])
	}
	if !strings.Contains(errOut, "2 of 2 groups") || !strings.Contains(errOut, "ungrouped pending: 1") {
		t.Errorf("stderr %q; want what the listing covered", errOut)
	}

	var j groupsJSON
	if err := json.Unmarshal([]byte(c.ok("", "groups", "mail", "--json", "--limit", "1")), &j); err != nil {
		t.Fatal(err)
	}
	if j.Queue != "mail" || len(j.Groups) != 1 || j.Scanned != 2 || j.Truncated || j.Ungrouped != 1 || j.Defaults.MaxRunning != 2 {
		t.Fatalf("JSON %+v", j)
	}
	if g := j.Groups[0]; g.Name != "acme" || g.Running != 2 || g.Ready != 3 || !g.Waiting || g.WaitUntil != "2027-01-15T08:00:00Z" || g.InTurn {
		t.Errorf("JSON group %+v", g)
	}
	// The names a script reads stay as they are.
	raw := c.ok("", "groups", "mail", "--json", "--group", "globex")
	for _, name := range []string{`"name":"globex"`, `"running":0`, `"ready":1`, `"max_running":1`, `"rate":5`, `"per_ms":1000`,
		`"ordered":true`, `"override":true`, `"in_turn":true`, `"waiting":false`, `"scanned":1`, `"truncated":false`, `"ungrouped_pending":1`} {
		if !strings.Contains(raw, name) {
			t.Errorf("JSON %s lacks %s", raw, name)
		}
	}

	if _, errOut := c.ok2("", "groups", "mail", "--group", "initech"); !strings.Contains(errOut, `group "initech" of queue mail has no jobs`) {
		t.Errorf("a group with no state: stderr %q", errOut)
	}
	if code, _, errOut := c.run("", "groups", "mial"); code != 1 || !strings.Contains(errOut, `no queue "mial" (known queues: mail)`) {
		t.Errorf("unknown queue: exit %d, %q", code, errOut)
	}
	for _, bad := range [][]string{{"--limit", "0"}, {"--limit", "501"}, {"--group", " acme"}} {
		if code, _, errOut := c.run("", append([]string{"groups", "mail"}, bad...)...); code != 2 || !strings.Contains(errOut, bad[0]) {
			t.Errorf("%v: exit %d, %q; want a usage error naming the flag", bad, code, errOut)
		}
	}
}

// workerd jobs --group lists one group's jobs: for pending ones the
// group's own index, in its order; --json reads them whole.
func TestJobsOfAGroup(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "mail", "welcome", "--id", "a-1", "--group", "acme")
	c.ok("", "enqueue", "mail", "welcome", "--id", "g-1", "--group", "globex")
	c.ok("", "enqueue", "mail", "welcome", "--id", "a-2", "--group", "acme", "--payload", `{"n":2}`)
	c.ok("", "enqueue", "mail", "welcome", "--id", "plain")
	out := c.ok("", "jobs", "mail", "--state", "pending")
	if f := strings.Fields(out); len(f) < 16 || f[0] != "plain" {
		t.Errorf("every pending job, the ungrouped first:\n%s", out)
	}
	out = c.ok("", "jobs", "mail", "--state", "pending", "--group", "acme")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "a-1 ") || !strings.HasPrefix(lines[1], "a-2 ") {
		t.Errorf("acme's pending jobs:\n%s", out)
	}
	out = c.ok("", "jobs", "mail", "--state", "pending", "--group", "acme", "--json")
	lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], `"id":"a-2"`) || !strings.Contains(lines[1], `"n":2`) {
		t.Errorf("acme's pending jobs, whole:\n%s", out)
	}
	if _, errOut := c.ok2("", "jobs", "mail", "--state", "pending", "--group", "acme", "--limit", "1"); errOut != "1 of 2 pending jobs of mail in group \"acme\"; --limit N for more\n" {
		t.Errorf("acme's first pending job: stderr %q; want 1 of 2", errOut)
	}
	if _, errOut := c.ok2("", "jobs", "mail", "--state", "pending", "--group", "initech"); !strings.Contains(errOut, `no pending jobs in queue mail in group "initech"`) {
		t.Errorf("a group with none: %q", errOut)
	}
	if code, _, errOut := c.run("", "jobs", "mail", "--state", "pending", "--group", "acme "); code != 2 || !strings.Contains(errOut, "--group") {
		t.Errorf("a bad group: exit %d, %q", code, errOut)
	}
}
