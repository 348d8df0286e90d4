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

// inspect shows a queue's limits and what holds it back, so that "0
// running" with jobs pending reads as a limit, or as no pool, never as a
// puzzle.
func TestInspectShowsLimitsAndThrottling(t *testing.T) {
	c := newCLI(t)
	for range 3 {
		c.ok("", "enqueue", "mail", "welcome")
	}
	out := c.ok("", "inspect", "mail")
	if !strings.Contains(out, "limits: none (set them with 'workerd limit mail')\n") ||
		!strings.Contains(out, "nothing holds the 3 pending job(s) back, and none runs: check that a pool serves queue mail\n") {
		t.Fatalf("no limits, no pool:\n%s", out)
	}
	c.ok("", "limit", "mail", "--rate", "1", "--per", "1h")
	rdb := redis.NewClient(&redis.Options{Addr: c.mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ls, err := b.Leases().Claim(context.Background(), "mail", 5, time.Hour); err != nil || len(ls.Leases) != 1 {
		t.Fatalf("claim under a rate of 1: %d leases (%v)", len(ls.Leases), err)
	}
	out = c.ok("", "inspect", "mail")
	if !strings.Contains(out, "limits: at most 1 starts per 1h0m0s (1 started in the last 1h0m0s)\n") ||
		!strings.Contains(out, "throttled: at most 1 starts per 1h0m0s; next start in 1h0m0s\n") || strings.Contains(out, "check that a pool") {
		t.Fatalf("the rate used up:\n%s", out)
	}
	var q queueDetailJSON
	if err := json.Unmarshal([]byte(c.ok("", "inspect", "mail", "--json")), &q); err != nil {
		t.Fatal(err)
	}
	if q.Limits != (limitsJSON{Rate: 1, PerSeconds: 3600}) || q.RateStarted != 1 || q.NextStartSeconds < 3590 || q.NextStartSeconds > 3600 ||
		q.Throttled != "at most 1 starts per 1h0m0s; next start in 1h0m0s" {
		t.Fatalf("--json: %+v", q.queueJSON)
	}
	all := c.ok("", "inspect")
	if !strings.Contains(all, "mail (throttled)") || !strings.Contains(all, "held back by their limits:\n  mail: at most 1 starts per 1h0m0s; next start in 1h0m0s\n") {
		t.Fatalf("every queue:\n%s", all)
	}
	c.ok("", "limit", "mail", "--max-running", "1")
	if out = c.ok("", "inspect", "mail"); !strings.Contains(out, "limits: at most 1 running (1 running), at most 1 starts per 1h0m0s") ||
		!strings.Contains(out, "throttled: max running reached (1 of 1); at most 1 starts") {
		t.Fatalf("max running reached too:\n%s", out)
	}
}
