package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// cliBroker is a broker on the CLI test's miniredis.
func (c *cli) broker() *broker.Broker {
	c.t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: c.mr.Addr()})
	c.t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}

// workerd workers lists the live pools, as a table or as JSON; workerd
// inspect QUEUE names the pool holding each lease.
func TestWorkersCommand(t *testing.T) {
	c := newCLI(t)
	if out := c.ok("", "workers"); !strings.Contains(out, "no live pools") {
		t.Errorf("empty registry: %q", out)
	}
	var empty workersJSON
	if err := json.Unmarshal([]byte(c.ok("", "workers", "--json")), &empty); err != nil || empty.Workers == nil || len(empty.Workers) != 0 {
		t.Errorf("empty registry as JSON: %+v, %v", empty, err)
	}

	b := c.broker()
	ctx := context.Background()
	c.ok("", "enqueue", "mail", "send", "--id", "j1")
	res, err := b.Leases().Claim(ctx, "mail", 1, time.Minute)
	if err != nil || len(res.Leases) != 1 {
		t.Fatalf("claim: %v, %v", res, err)
	}
	l := res.Leases[0]
	reg, err := b.Leases().RegisterWorker(broker.WorkerInfo{ID: "abc", Name: "pool 0", Host: "box-1", PID: 99, Version: "v1.2.3",
		Queues: []string{"mail", "sms"}, Concurrency: 4}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Since 90s before the deadline of a lease of a minute: running for 30s.
	if err := reg.Refresh(ctx, []broker.RunningJob{{Queue: "mail", ID: "j1", Generation: l.Generation, Since: l.Deadline.Add(-90 * time.Second)}}); err != nil {
		t.Fatal(err)
	}

	out, errOut := c.ok2("", "workers")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "POOL ") {
		t.Fatalf("want a header and one pool; got\n%s", out)
	}
	for _, want := range []string{"pool 0", "box-1", "99", "v1.2.3", "mail,sms", "1/4"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("the pool's line %q lacks %q", lines[1], want)
		}
	}
	if !strings.Contains(errOut, "1 live pool(s), running 1 of 4 slots") {
		t.Errorf("stderr %q", errOut)
	}

	var j workersJSON
	raw := c.ok("", "workers", "--json")
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		t.Fatal(err)
	}
	if len(j.Workers) != 1 || j.Now.IsZero() {
		t.Fatalf("JSON %+v", j)
	}
	if w := j.Workers[0]; w.ID != "abc" || w.Host != "box-1" || w.PID != 99 || w.Running != 1 || len(w.Jobs) != 1 || w.Jobs[0].ID != "j1" {
		t.Errorf("JSON pool %+v", w)
	}
	for _, name := range []string{`"id"`, `"host"`, `"pid"`, `"version"`, `"queues"`, `"concurrency"`, `"running"`, `"jobs"`, `"started_at"`, `"seen_at"`, `"expires_at"`, `"generation"`, `"since"`} {
		if !strings.Contains(raw, name) {
			t.Errorf("workers --json lacks %s", name)
		}
	}

	out = c.ok("", "inspect", "mail")
	if !strings.Contains(out, "HELD BY") || !strings.Contains(out, "box-1 pid 99 (pool 0)") || !strings.Contains(out, "30s") {
		t.Errorf("inspect does not name the holder:\n%s", out)
	}
	var q queueDetailJSON
	if err := json.Unmarshal([]byte(c.ok("", "inspect", "mail", "--json")), &q); err != nil {
		t.Fatal(err)
	}
	if len(q.Leases) != 1 || q.Leases[0].Holder == nil {
		t.Fatalf("inspect --json: %+v", q.Leases)
	}
	if h := q.Leases[0].Holder; h.Pool != "abc" || h.Host != "box-1" || h.PID != 99 || h.Name != "pool 0" || h.RunningSeconds < 29 || h.RunningSeconds > 40 {
		t.Errorf("inspect --json holder %+v", h)
	}

	// A pool shutting down says so.
	reg.SetStopping()
	if err := reg.Refresh(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if out := c.ok("", "workers"); !strings.Contains(out, "0/4 stopping") {
		t.Errorf("a stopping pool's line:\n%s", out)
	}

	if code, _, errOut := c.run("", "workers", "extra"); code != 2 || !strings.Contains(errOut, "extra") {
		t.Errorf("workers extra: exit %d, %q", code, errOut)
	}
}

// With more pools than a listing reads, workerd workers says it lists
// only some. (It said "1000 live pool(s)" of 1,003.)
func TestWorkersCommandTruncated(t *testing.T) {
	c := newCLI(t)
	b := c.broker()
	for i := range broker.MaxWorkersListed + 3 {
		reg, err := b.Leases().RegisterWorker(broker.WorkerInfo{ID: fmt.Sprint("p", i), Host: "h", Concurrency: 1}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Refresh(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	_, errOut := c.ok2("", "workers")
	if !strings.Contains(errOut, fmt.Sprintf("Only the first %d are listed: the registry holds %d pools", broker.MaxWorkersListed, broker.MaxWorkersListed+3)) {
		t.Errorf("stderr %q does not say the listing is truncated", errOut)
	}
	var out workersJSON
	if err := json.Unmarshal([]byte(c.ok("", "workers", "--json")), &out); err != nil || !out.Truncated || out.Indexed != broker.MaxWorkersListed+3 {
		t.Errorf("JSON: truncated %v indexed %d, %v", out.Truncated, out.Indexed, err)
	}
}
