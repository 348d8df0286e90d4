package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// killJobs claims the queue's pending jobs and fails each one permanently
// with its error, so that they end dead.
func killJobs(t *testing.T, c *cli, queue string, errs map[string]string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: c.mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := b.Leases().Claim(ctx, queue, len(errs), time.Minute)
	if err != nil || len(r.Leases) != len(errs) {
		t.Fatalf("claim: %d leases, %v", len(r.Leases), err)
	}
	for _, l := range r.Leases {
		if _, err := b.Leases().Fail(ctx, l, broker.Failure{Error: errs[l.ID], Dead: true}); err != nil {
			t.Fatal(err)
		}
	}
}

// workerd jobs lists a state's jobs, one line each with the id first, in
// the order of the state's index; --json prints one object per line with
// the fields of inspect job --json.
func TestJobsListsAState(t *testing.T) {
	c := newCLI(t)
	long := "connect to smtp.example.com:25: connection refused\nwhile sending the welcome mail to a user who signed up today"
	c.ok("", "enqueue", "mail", "welcome", "--id", "m-1")
	c.ok("", "enqueue", "mail", "reset", "--id", "m-2", "--max-attempts", "3")
	killJobs(t, c, "mail", map[string]string{"m-1": "timeout", "m-2": long})
	c.ok("", "enqueue", "mail", "welcome", "--id", "m-3")

	out, errOut := c.ok2("", "jobs", "mail", "--state", "dead")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 || errOut != "" {
		t.Fatalf("want two lines and nothing on stderr; got\n%s---\n%s", out, errOut)
	}
	if f := strings.Fields(lines[0]); len(f) != 5 || f[0] != "m-1" || f[1] != "dead" || f[2] != "welcome" || f[3] != "1/25" || f[4] != "timeout" {
		t.Errorf("first line %q; want m-1, dead, welcome, 1/25, timeout", lines[0])
	}
	if !strings.HasPrefix(lines[1], "m-2 ") || !strings.Contains(lines[1], " 1/3 ") || !strings.Contains(lines[1], "connection refused while") ||
		!strings.HasSuffix(lines[1], "…") || len([]rune(lines[1][strings.Index(lines[1], "connect to"):])) != lastErrorWidth {
		t.Errorf("second line %q; want m-2 with its error on one line, cut to %d characters", lines[1], lastErrorWidth)
	}
	if strings.Index(lines[0], "timeout") != strings.Index(lines[1], "connect to") {
		t.Errorf("columns are not aligned:\n%s", out)
	}

	out = c.ok("", "jobs", "mail", "--state", "dead", "--json")
	var got []jobJSON
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var j jobJSON
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, j)
	}
	if len(got) != 2 || got[0].ID != "m-1" || got[1].ID != "m-2" || got[1].LastError != long || got[1].MaxAttempts != 3 || got[0].State != "dead" {
		t.Fatalf("--json: %+v", got)
	}

	if out := c.ok("", "jobs", "mail", "--state", "pending"); !strings.HasPrefix(out, "m-3 ") || strings.Count(out, "\n") != 1 {
		t.Errorf("pending: %q", out)
	}
	out, errOut = c.ok2("", "jobs", "mail", "--state", "dead", "--limit", "1")
	if !strings.HasPrefix(out, "m-1 ") || strings.Count(out, "\n") != 1 || errOut != "1 of 2 dead jobs of mail; --limit N for more\n" {
		t.Errorf("--limit 1: stdout %q, stderr %q; want 1 of 2", out, errOut)
	}
	// All of them listed: nothing more to say.
	if _, errOut = c.ok2("", "jobs", "mail", "--state", "dead", "--limit", "2"); errOut != "" {
		t.Errorf("--limit 2 of 2: stderr %q; want nothing", errOut)
	}
	out, errOut = c.ok2("", "jobs", "mail", "--state", "cancelled")
	if out != "" || errOut != "no cancelled jobs in queue mail\n" {
		t.Errorf("no jobs: stdout %q, stderr %q", out, errOut)
	}
}

// The README's dead-job workflow: list the dead jobs, read one's error,
// retry it.
func TestDeadJobWorkflow(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "mail", "welcome", "--id", "m-1")
	killJobs(t, c, "mail", map[string]string{"m-1": "smtp down"})
	id := strings.Fields(c.ok("", "jobs", "mail", "--state", "dead"))[0]
	if j := c.job("mail", id); j.LastError != "smtp down" {
		t.Fatalf("inspect job: %+v", j)
	}
	c.ok("", "retry", "mail", id)
	if out := c.ok("", "jobs", "mail", "--state", "pending"); strings.Fields(out)[0] != "m-1" || strings.Fields(out)[1] != "pending" {
		t.Fatalf("after retry: %q", out)
	}
}

// A table longer than one dashboard page (broker.PageLimitMax) lists every
// job asked for, in index order.
func TestJobsListsPastAPage(t *testing.T) {
	c := newCLI(t)
	rdb := redis.NewClient(&redis.Options{Addr: c.mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := broker.PageLimitMax + 50
	jobs := make([]broker.Job, n+10)
	for i := range jobs {
		jobs[i] = broker.Job{Queue: "mail", Kind: "welcome", ID: fmt.Sprintf("m-%04d", i)}
	}
	for _, e := range b.Client().EnqueueMany(context.Background(), jobs) {
		if e.Err != nil {
			t.Fatal(e.Err)
		}
	}
	out := c.ok("", "jobs", "mail", "--state", "pending", "--limit", strconv.Itoa(n))
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("--limit %d listed %d jobs", n, len(lines))
	}
	for i, l := range lines {
		if want := fmt.Sprintf("m-%04d ", i); !strings.HasPrefix(l, want) {
			t.Fatalf("line %d is %q, want job %s", i, l, want)
		}
	}
}
