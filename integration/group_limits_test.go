package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// TestGroupMaxRunningOnAPool: on a real Redis and a real pool of 8, a
// group with max running 1 never runs two of its jobs at once, and one
// whose own limit is 3 never four, while the pool runs several groups side
// by side. Judged in the handlers, which is stricter than valid leases (a
// handler starts after its claim and ends before its ack).
func TestGroupMaxRunningOnAPool(t *testing.T) {
	c := client(t)
	prefix := fmt.Sprintf("fqglimits%d", time.Now().UnixNano())
	t.Cleanup(func() { dropPrefix(t, c, prefix) })
	b, err := broker.New(c, broker.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := b.Inspector()
	const q = "reports"
	if _, err := in.ChangeGroupLimits(ctx, q, "", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 1}, MaxRunning: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := in.ChangeGroupLimits(ctx, q, "wide", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 3}, MaxRunning: true}); err != nil {
		t.Fatal(err)
	}
	limit := map[string]int{"a": 1, "b": 1, "c": 1, "wide": 3}

	var mu sync.Mutex
	running, most := map[string]int{}, map[string]int{}
	all, mostAll := 0, 0
	mux := handlers.NewMux()
	mux.HandleFunc("work", func(ctx context.Context, job *handlers.Job) error {
		mu.Lock()
		running[job.Group]++
		all++
		most[job.Group] = max(most[job.Group], running[job.Group])
		mostAll = max(mostAll, all)
		mu.Unlock()
		defer func() {
			mu.Lock()
			running[job.Group]--
			all--
			mu.Unlock()
		}()
		select {
		case <-time.After(15 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	pool, err := worker.New(b, mux, worker.Config{
		Queues: []worker.Queue{{Name: q}}, Concurrency: 8, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	var jobs []broker.Job
	for i := range 12 {
		for g := range limit {
			jobs = append(jobs, broker.Job{Queue: q, Kind: "work", Group: g, ID: fmt.Sprintf("%s-%d", g, i)})
		}
	}
	for _, r := range b.Client().EnqueueMany(ctx, jobs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if err := pool.Start(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, j := range jobs {
		info, err := b.Client().Wait(wctx, q, j.ID)
		if err != nil || info.State != broker.StateDone {
			t.Fatalf("job %s: %v %v", j.ID, info.State, err)
		}
	}
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	if err := pool.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for g, n := range limit {
		if most[g] > n {
			t.Errorf("group %s ran %d jobs at once; its limit is %d", g, most[g], n)
		}
	}
	if mostAll < 2 {
		t.Fatalf("the pool never ran two jobs at once (%v): the test saw nothing of the limits", most)
	}
	if bad, err := in.Check(ctx, q); err != nil || len(bad) > 0 {
		t.Fatalf("Check after the run: %v %v", bad, err)
	}
	if n := c.HLen(ctx, prefix+":{"+q+"}:grunning").Val(); n != 0 {
		t.Errorf("grunning has %d fields after every job is done", n)
	}
}

// The runnable example does what the README says once the claim enforces
// the limits: one report at a time per customer, three for big-corp, and
// each account's entries one at a time and in order.
func TestGroupsExample(t *testing.T) {
	client(t) // skips (or fails under CI) without Redis
	prefix := fmt.Sprintf("fqgexample%d", time.Now().UnixNano())
	t.Cleanup(func() { dropPrefix(t, client(t), prefix) })
	out, err := exec.Command("go", "run", "../examples/groups", "-redis", redisAddr, "-prefix", prefix).CombinedOutput()
	if err != nil {
		t.Fatalf("go run ../examples/groups: %v\n%s", err, out)
	}
	for _, want := range []string{
		"reports, most running at once: acme=1 globex=1 big-corp=3",
		"webhooks key-a: 6 calls",
		"ledger acct-1: entries ran in the order [0 1 2 3 4 5], in order=true, most at once=1",
		"ledger acct-2: entries ran in the order [0 1 2 3 4 5], in order=true, most at once=1",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the example's output lacks %q:\n%s", want, out)
		}
	}
}
