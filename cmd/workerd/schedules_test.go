package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// workerd schedule adds, changes, pauses, resumes and removes a schedule
// stored in Redis; workerd schedules lists it, as a table or JSON.
func TestScheduleCommands(t *testing.T) {
	c := newCLI(t)
	if out := c.ok("", "schedules"); !strings.Contains(out, "no schedules") {
		t.Fatalf("an empty listing: %q", out)
	}
	out := c.ok("", "schedule", "add", "digest", "--every", "1h", "--queue", "mail", "--kind", "digest", "--payload", `{"to":"ops"}`)
	if !strings.Contains(out, "added schedule digest") {
		t.Fatalf("add: %q", out)
	}
	// Sent again, the same add is no error.
	c.ok("", "schedule", "add", "digest", "--every", "1h", "--queue", "mail", "--kind", "digest", "--payload", `{"to":"ops"}`)
	c.ok("", "schedule", "add", "nightly", "--cron", "0 3 * * *", "--job", `{"queue":"mail","kind":"report","priority":5}`, "--catch-up")

	lines := strings.Split(strings.TrimSpace(c.ok("", "schedules")), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME ") {
		t.Fatalf("want a header and two schedules:\n%s", strings.Join(lines, "\n"))
	}
	if f := strings.Fields(lines[1]); f[0] != "digest" || f[1] != "redis" || !strings.Contains(lines[1], "every 1h") ||
		!strings.Contains(lines[1], "mail/digest") || !strings.Contains(lines[1], "never") || !strings.HasSuffix(lines[1], "active") {
		t.Errorf("digest's line: %q", lines[1])
	}

	// set changes what it is given and keeps the rest.
	c.ok("", "schedule", "set", "digest", "--kind", "digest2")
	c.ok("", "schedule", "pause", "nightly")
	var list []scheduleJSON
	if err := json.Unmarshal([]byte(c.ok("", "schedules", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 {
		t.Fatalf("JSON: %+v", list)
	}
	d, n := list[0], list[1]
	if d.Name != "digest" || d.Every != "1h0m0s" || d.Spec != "every 1h" || d.Paused || d.Next == "" ||
		!strings.Contains(compact(d.Job), `"kind":"digest2"`) || !strings.Contains(compact(d.Job), `"payload":{"to":"ops"}`) {
		t.Errorf("digest: %+v %s", d, d.Job)
	}
	if n.Name != "nightly" || n.Cron != "0 3 * * *" || !n.Paused || n.Next != "" || !n.CatchUp || !strings.Contains(compact(n.Job), `"priority":5`) {
		t.Errorf("nightly: %+v %s", n, n.Job)
	}
	c.ok("", "schedule", "resume", "nightly")
	c.ok("", "schedule", "rm", "digest")
	if out := c.ok("", "schedules"); strings.Contains(out, "digest") {
		t.Fatalf("removed, still listed:\n%s", out)
	}
}

// Each refusal says what was wrong: exit 2 for a bad command line or
// schedule, 1 for a schedule that is not there or already is.
func TestScheduleRefusals(t *testing.T) {
	c := newCLI(t)
	c.ok("", "schedule", "add", "x", "--every", "1m", "--queue", "q", "--kind", "k")
	rc := redis.NewClient(&redis.Options{Addr: c.mr.Addr()})
	t.Cleanup(func() { _ = rc.Close() })
	b, err := broker.New(rc, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Schedules().PublishConfig(context.Background(), []broker.Schedule{{Name: "yaml", Every: time.Hour, Job: broker.Job{Queue: "q", Kind: "k"}}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"schedule"}, 2, "missing the action"},
		{[]string{"schedule", "start", "x"}, 2, `unknown action "start"`},
		{[]string{"schedule", "pause"}, 2, "missing NAME"},
		{[]string{"schedule", "add", "y", "--queue", "q", "--kind", "k"}, 2, "add needs --every D or --cron EXPR"},
		{[]string{"schedule", "add", "y", "--every", "1m", "--cron", "@daily", "--queue", "q", "--kind", "k"}, 2, "exclude each other"},
		{[]string{"schedule", "add", "y", "--every", "10ms", "--queue", "q", "--kind", "k"}, 2, "give at least 1s"},
		{[]string{"schedule", "add", "y", "--cron", "61 * * * *", "--queue", "q", "--kind", "k"}, 2, "invalid cron"},
		{[]string{"schedule", "add", "y", "--every", "1m"}, 2, "needs a queue and a kind"},
		{[]string{"schedule", "add", "y", "--every", "1m", "--job", `{"queue":"q","kind":"k","id":"mine"}`}, 2, "has no id"},
		{[]string{"schedule", "add", "y", "--every", "1m", "--job", `{"queue":"q","kind":"k","color":"red"}`}, 2, "color"},
		{[]string{"schedule", "add", "y", "--every", "1m", "--queue", "q", "--kind", "k", "--payload", "not json"}, 2, "is not JSON"},
		{[]string{"schedule", "add", "y", "--every", "1m", "--queue", "q{x}", "--kind", "k"}, 2, "hash tag"},
		{[]string{"schedule", "add", strings.Repeat("n", 201), "--every", "1m", "--queue", "q", "--kind", "k"}, 2, "at most 200"},
		{[]string{"schedule", "add", "x", "--every", "2m", "--queue", "q", "--kind", "k"}, 1, "already stored"},
		{[]string{"schedule", "pause", "nope"}, 1, `no schedule named "nope"`},
		{[]string{"schedule", "set", "nope", "--every", "1m"}, 1, `no schedule named "nope"`},
		{[]string{"schedule", "rm", "x", "--every", "1m"}, 2, "--every is for add and set"},
		{[]string{"schedules", "extra"}, 2, "unexpected arguments: extra"},
		{[]string{"schedule", "add", "yaml", "--every", "1m", "--queue", "q", "--kind", "k"}, 1, "is in a running pool's configuration"},
		{[]string{"schedule", "set", "yaml", "--every", "1m"}, 1, "change it there"},
		{[]string{"schedule", "pause", "yaml"}, 1, `no schedule named "yaml" is stored in Redis`},
	} {
		code, out, errOut := c.run("", tc.args...)
		first, _, _ := strings.Cut(errOut, "\n")
		if code != tc.code || out != "" || !strings.Contains(first, tc.want) || strings.Contains(first, "fenceq:") {
			t.Errorf("workerd %s: exit %d, stdout %q, stderr %q; want exit %d and %q in one line with one prefix", strings.Join(tc.args, " "), code, out, errOut, tc.code, tc.want)
		}
	}
}
