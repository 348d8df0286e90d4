package integration

import (
	"context"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// Invariant 8 for Delete: a pending parent of 100,000 dependents, deleted,
// hands them to the cascade as one entry. The delete's own script settles
// its inline budget only; the reaper's upkeep cancels the rest in bounded
// steps, each dependent once, and the queue checks clean. The longest
// script, from Redis's own SLOWLOG, is logged, never asserted on.
func TestDeleteParentOfHundredThousand(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 jobs")
	}
	admin := startServer(t)
	ctx := context.Background()
	b, err := broker.New(admin, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	admin.ConfigSet(ctx, "slowlog-log-slower-than", "0")
	admin.ConfigSet(ctx, "slowlog-max-len", "100")
	const q, n = "fan", 100_000
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: q, Kind: "k", ID: "parent", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for left := n; left > 0; {
		jobs := make([]broker.Job, min(left, 1000))
		for i := range jobs {
			jobs[i] = broker.Job{Queue: q, Kind: "k", DependsOn: []string{"parent"}}
		}
		for _, e := range b.Client().EnqueueMany(ctx, jobs) {
			if e.Err != nil {
				t.Fatal(e.Err)
			}
		}
		left -= len(jobs)
	}
	admin.SlowLogReset(ctx)
	st, err := b.Inspector().Delete(ctx, q, "parent", broker.StateScheduled)
	if err != nil || st != broker.StateScheduled {
		t.Fatalf("Delete of the parent: %v %v", st, err)
	}
	delScript := slowestScript(t, admin)
	c, err := b.Inspector().Counts(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if c.Cancelled > 50 || c.Blocked < n-50 {
		t.Fatalf("after the delete: %+v; want at most its inline budget of 50 dependents cancelled", c)
	}
	calls := 0
	for {
		calls++
		r, err := b.Leases().Reap(ctx, q, 100)
		if err != nil {
			t.Fatal(err)
		}
		if !r.CascadeLeft {
			break
		}
	}
	stepScript := slowestScript(t, admin)
	c, err = b.Inspector().Counts(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if c.Cancelled != n || c.Blocked != 0 || c.Pending != 0 {
		t.Fatalf("after the cascade: %+v; want all %d cancelled", c, n)
	}
	if calls < (n-100)/100 {
		t.Fatalf("%d steps of at most 100 cancelled %d dependents", calls, n)
	}
	bad, err := b.Inspector().Check(ctx, q)
	if err != nil || len(bad) > 0 {
		t.Fatalf("Check: %v %v", bad, err)
	}
	t.Logf("delete of a parent of %d: its script %v, then %d reap steps, the longest script %v", n, delScript, calls, stepScript)
}
