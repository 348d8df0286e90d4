package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// A purge of 100,000 dead jobs goes in bounded steps on a real server:
// every job goes, the ones that left the state meanwhile stay, the queue
// checks clean, and no step holds Redis for long (invariant 8). The jobs
// are written straight into Redis as the scripts file them (a hash in
// state dead and its entry in the dead index), 1,000 per pipeline, beside
// a few made the ordinary way.
func TestPurgeHundredThousand(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 jobs")
	}
	c := client(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("fqpurge-%d", time.Now().UnixNano())
	t.Cleanup(func() { deletePrefixKeys(t, prefix) })
	b, err := broker.New(c, broker.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	const q, n = "big", 100_000
	base := prefix + ":{" + q + "}:"
	now := time.Now().UnixMilli()
	for i := 0; i < n; i += 1000 {
		p := c.Pipeline()
		for j := i; j < i+1000; j++ {
			id := fmt.Sprintf("j%06d", j)
			p.HSet(ctx, base+"job:"+id, "kind", "k", "payload", "", "state", "dead", "attempt", 1, "max_attempts", 1,
				"gen", 1, "token", "", "priority", 0, "created_at", now, "run_at", now, "finished_at", now-100_000+int64(j/100),
				"last_error", "boom")
			p.ZAdd(ctx, base+"dead", redis.Z{Score: float64(now - 100_000 + int64(j/100)), Member: id})
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A few the ordinary way, dead after the ones written by hand.
	var real []string
	for range 3 {
		id, err := b.Client().Enqueue(ctx, broker.Job{Queue: q, Kind: "k", MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.Leases().Claim(ctx, q, 1, time.Minute)
		if err != nil || len(res.Leases) != 1 {
			t.Fatalf("Claim: %v %+v", err, res)
		}
		if _, err := b.Leases().Fail(ctx, res.Leases[0], broker.Failure{Error: "x", Dead: true}); err != nil {
			t.Fatal(err)
		}
		real = append(real, id)
	}
	if err := b.Inspector().SetEvents(ctx, q, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(broker.ResendHorizon + 200*time.Millisecond) // a purge leaves jobs finished within it

	var slowest time.Duration
	last := time.Now()
	steps := 0
	var retried string
	start := time.Now()
	p, err := b.Inspector().Purge(ctx, q, broker.StateDead, func(p broker.PurgeProgress) {
		if d := time.Since(last); d > slowest {
			slowest = d
		}
		steps++
		if steps == 50 {
			// Half way, an operator retries a job the purge has not reached.
			retried = real[0]
			if _, err := b.Inspector().Retry(ctx, q, retried); err != nil {
				t.Error(err)
			}
		}
		last = time.Now()
	})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("purged %d dead jobs in %d steps, %v (slowest step %v, round trip included)", p.Deleted, p.Steps, took, slowest)
	if p.Deleted != n+len(real)-1 {
		t.Fatalf("deleted %d, want %d", p.Deleted, n+len(real)-1)
	}
	if want := (n+len(real)-1)/broker.PurgeStep + 1; p.Steps < want-1 || p.Steps > want {
		t.Fatalf("%d steps for %d jobs", p.Steps, p.Deleted)
	}
	if slowest > 250*time.Millisecond {
		t.Fatalf("a step took %v: not a bounded step", slowest)
	}
	c2, err := b.Inspector().Counts(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if c2.Dead != 0 || c2.Pending != 1 {
		t.Fatalf("after the purge: %+v, want no dead job and the retried one pending", c2)
	}
	if j, err := b.Inspector().Job(ctx, q, retried); err != nil || j.State != broker.StatePending {
		t.Fatalf("retried job: %+v %v", j, err)
	}
	bad, err := b.Inspector().Check(ctx, q)
	if err != nil || len(bad) > 0 {
		t.Fatalf("Check: %v %v", bad, err)
	}
	if keys, _ := c.Keys(ctx, base+"job:*").Result(); len(keys) != 1 {
		t.Fatalf("%d job hashes left, want the retried one", len(keys))
	}
}
