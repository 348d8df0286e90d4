package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// brokerOf is a broker on the CLI's miniredis, with workerd's default
// prefix, for what the CLI has no command for (claiming, failing).
func (c *cli) brokerOf() *broker.Broker {
	c.t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: c.mr.Addr()})
	c.t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{Prefix: "fenceq"})
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}

// dead makes n dead jobs of queue q.
func (c *cli) dead(b *broker.Broker, q string, n int) {
	c.t.Helper()
	ctx := context.Background()
	for i := range n {
		c.ok("", "enqueue", q, "k", "--id", fmt.Sprintf("d%d", i), "--max-attempts", "1")
		res, err := b.Leases().Claim(ctx, q, 1, time.Minute)
		if err != nil || len(res.Leases) != 1 {
			c.t.Fatalf("claim: %v %+v", err, res)
		}
		if _, err := b.Leases().Fail(ctx, res.Leases[0], broker.Failure{Error: "boom", Dead: true}); err != nil {
			c.t.Fatal(err)
		}
	}
}

func TestDeleteCommand(t *testing.T) {
	c := newCLI(t)
	b := c.brokerOf()
	c.ok("", "enqueue", "q", "k", "--id", "later", "--delay", "1h")
	if out := c.ok("", "delete", "q", "later"); !strings.Contains(out, "deleted later (was scheduled)") {
		t.Fatalf("delete: %s", out)
	}
	if code, _, errOut := c.run("", "inspect", "job", "q", "later"); code != 1 || !strings.Contains(errOut, `no job "later"`) {
		t.Fatalf("inspect after delete: exit %d %s", code, errOut)
	}
	c.dead(b, "q", 1)
	code, _, errOut := c.run("", "delete", "q", "d0", "--state", "pending")
	if code != 1 || !strings.Contains(errOut, "it is dead now, not pending as seen") {
		t.Fatalf("delete --state pending of a dead job: exit %d %q", code, errOut)
	}
	if out := c.ok("", "delete", "q", "d0", "--state", "dead"); !strings.Contains(out, "deleted d0 (was dead)") {
		t.Fatalf("delete --state dead: %s", out)
	}
	c.ok("", "enqueue", "q", "k", "--id", "busy")
	if _, err := b.Leases().Claim(context.Background(), "q", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = c.run("", "delete", "q", "busy")
	if code != 1 || !strings.Contains(errOut, "it is running") || !strings.Contains(errOut, "cancel it") {
		t.Fatalf("delete of a running job: exit %d %q", code, errOut)
	}
	if code, _, errOut := c.run("", "delete", "q", "busy", "--state", "bogus"); code != 2 || !strings.Contains(errOut, "--state bogus") {
		t.Fatalf("delete --state bogus: exit %d %q", code, errOut)
	}
	if code, _, errOut := c.run("", "delete", "nosuchq", "x"); code != 1 || !strings.Contains(errOut, "nosuchq") {
		t.Fatalf("delete in a queue that does not exist: exit %d %q", code, errOut)
	}
}

func TestPurgeCommand(t *testing.T) {
	c := newCLI(t)
	b := c.brokerOf()
	c.dead(b, "q", 3)
	c.ok("", "enqueue", "q", "k", "--id", "alive")
	code, out, errOut := c.run("no\n", "purge", "q", "--state", "dead")
	if code != 1 || !strings.Contains(out, "This deletes the 3 dead job(s) of q") || !strings.Contains(errOut, "nothing deleted") {
		t.Fatalf("purge answered no: exit %d %q %q", code, out, errOut)
	}
	if code, _, errOut := c.run("", "purge", "q", "--state", "dead"); code != 1 || !strings.Contains(errOut, "pass --yes") {
		t.Fatalf("purge with no answer: exit %d %q", code, errOut)
	}
	if j := c.job("q", "d1"); j.State != "dead" {
		t.Fatalf("a refused purge deleted: %+v", j)
	}
	// Just dead, they are left for the re-send horizon, and it says so.
	if out := c.ok("", "purge", "q", "--state", "dead", "--yes"); !strings.Contains(out, "purged 0 dead job(s) of q; 3 left that finished in the last 5s") ||
		!strings.Contains(out, "purge again in a few seconds") {
		t.Fatalf("purge within the horizon: %s", out)
	}
	c.mr.SetTime(time.Now().Add(broker.ResendHorizon + time.Second))
	if out := c.ok("yes\n", "purge", "q", "--state", "dead"); !strings.Contains(out, "purged 3 dead job(s) of q") {
		t.Fatalf("purge: %s", out)
	}
	if out := c.ok("", "purge", "q", "--state", "dead", "--yes"); !strings.Contains(out, "no dead jobs in q") {
		t.Fatalf("purge of nothing: %s", out)
	}
	if j := c.job("q", "alive"); j.State != "pending" {
		t.Fatalf("purge touched a pending job: %+v", j)
	}
	for args, want := range map[string]string{
		"purge q":                    "missing --state",
		"purge q --state pending":    "purge takes done, dead or cancelled",
		"purge q --state nonsense":   "purge takes done, dead or cancelled",
		"purge --state dead --yes":   "QUEUE",
		"purge nosuchq --state dead": "nosuchq",
	} {
		code, _, errOut := c.run("", strings.Fields(args)...)
		if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("workerd %s: exit %d, stderr %q; want it to say %q", args, code, errOut, want)
		}
	}
}

func TestPromoteCommand(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "q", "k", "--id", "later", "--delay", "1h")
	if out := c.ok("", "promote", "q", "later"); !strings.Contains(out, "promoted later: pending now") {
		t.Fatalf("promote: %s", out)
	}
	if j := c.job("q", "later"); j.State != "pending" {
		t.Fatalf("after promote: %+v", j)
	}
	code, _, errOut := c.run("", "promote", "q", "later")
	if code != 1 || !strings.Contains(errOut, "it is pending") || !strings.Contains(errOut, "only a scheduled job") {
		t.Fatalf("promote of a pending job: exit %d %q", code, errOut)
	}
}

func TestReleaseRefusesFinished(t *testing.T) {
	c := newCLI(t)
	b := c.brokerOf()
	c.dead(b, "q", 1)
	before := c.job("q", "d0")
	code, _, errOut := c.run("", "release", "q", "d0")
	if code != 1 || !strings.Contains(errOut, "it is dead") || !strings.Contains(errOut, "nothing to release") {
		t.Fatalf("release of a dead job: exit %d %q", code, errOut)
	}
	if after := c.job("q", "d0"); after.Generation != before.Generation {
		t.Fatalf("release of a dead job moved its generation %d → %d", before.Generation, after.Generation)
	}
}
