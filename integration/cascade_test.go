package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// Invariant 8 at the scale the audit used: a job with 100,000 dependents,
// and a chain of 20,000, on a private real Redis. Every call settles a
// bounded step (the assertion); the longest script Redis ran, from its own
// SLOWLOG, is logged for docs/benchmarks.md, never asserted on.
func TestBoundedCascadesAtScale(t *testing.T) {
	admin := startServer(t)
	ctx := context.Background()
	b, err := broker.New(admin, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.LoadScripts(ctx); err != nil { // so SLOWLOG times runs, not compiles
		t.Fatal(err)
	}
	admin.ConfigSet(ctx, "slowlog-log-slower-than", "0")
	admin.ConfigSet(ctx, "slowlog-max-len", "100")

	enqueue := func(jobs []broker.Job) {
		for len(jobs) > 0 {
			n := min(len(jobs), 1000)
			for _, e := range b.Client().EnqueueMany(ctx, jobs[:n]) {
				if e.Err != nil {
					t.Fatal(e.Err)
				}
			}
			jobs = jobs[n:]
		}
	}
	// settle runs the reaper's upkeep until no dependent is left, and
	// answers how many calls it took.
	settle := func(q string) int {
		for calls := 1; ; calls++ {
			r, err := b.Leases().Reap(ctx, q, 100)
			if err != nil {
				t.Fatal(err)
			}
			if !r.CascadeLeft {
				return calls
			}
		}
	}
	slowest := func() time.Duration { return slowestScript(t, admin) }

	const fanOut, chain = 100_000, 20_000
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "fan", Kind: "k", ID: "parent"}); err != nil {
		t.Fatal(err)
	}
	jobs := make([]broker.Job, fanOut)
	for i := range jobs {
		jobs[i] = broker.Job{Queue: "fan", Kind: "k", DependsOn: []string{"parent"}}
	}
	enqueue(jobs)
	res, err := b.Leases().Claim(ctx, "fan", 1, time.Minute)
	if err != nil || len(res.Leases) != 1 {
		t.Fatalf("claim of the parent: %+v %v", res, err)
	}
	admin.SlowLogReset(ctx)
	began := time.Now()
	if _, err := b.Leases().Ack(ctx, res.Leases[0], nil); err != nil {
		t.Fatal(err)
	}
	ackTook := time.Since(began)
	ackScript := slowest()
	calls := settle("fan")
	stepScript := slowest()
	c, err := b.Inspector().Counts(ctx, "fan")
	if err != nil {
		t.Fatal(err)
	}
	if c.Pending != fanOut || c.Blocked != 0 {
		t.Fatalf("after the cascade: %+v; want %d pending", c, fanOut)
	}
	if calls < (fanOut-100)/100 {
		t.Fatalf("%d steps of at most 100 released %d dependents", calls, fanOut)
	}
	t.Logf("fan-out of %d: ack %v (script %v), then %d reap steps, the longest script %v", fanOut, ackTook, ackScript, calls, stepScript)

	jobs = make([]broker.Job, chain)
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "chain", Kind: "k", ID: "link-0"}); err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		jobs[i] = broker.Job{Queue: "chain", Kind: "k", ID: fmt.Sprintf("link-%d", i+1), DependsOn: []string{fmt.Sprintf("link-%d", i)}}
	}
	enqueue(jobs)
	admin.SlowLogReset(ctx)
	if _, err := b.Inspector().Cancel(ctx, "chain", "link-0"); err != nil {
		t.Fatal(err)
	}
	cancelScript := slowest()
	if c, err := b.Inspector().Counts(ctx, "chain"); err != nil || c.Cancelled > 1+50 || c.Blocked == 0 {
		t.Fatalf("after the cancel of the root: %+v %v; want at most its budget of 50 links cancelled by the cancel itself", c, err)
	}
	calls = settle("chain")
	stepScript = slowest()
	c, err = b.Inspector().Counts(ctx, "chain")
	if err != nil {
		t.Fatal(err)
	}
	if c.Cancelled != chain+1 || c.Blocked != 0 {
		t.Fatalf("after cancelling the chain's root: %+v; want all %d cancelled", c, chain+1)
	}
	bad, err := b.Inspector().Check(ctx, "chain")
	if err != nil || len(bad) > 0 {
		t.Fatalf("Check: %v %v", bad, err)
	}
	t.Logf("chain of %d: cancel's script %v, then %d reap steps, the longest script %v", chain, cancelScript, calls, stepScript)
}

// slowestScript answers the longest script run in the server's SLOWLOG (set
// slowlog-log-slower-than to 0 first), and empties the log.
func slowestScript(t *testing.T, admin *redis.Client) time.Duration {
	t.Helper()
	ctx := context.Background()
	entries, err := admin.SlowLogGet(ctx, 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	var worst time.Duration
	for _, e := range entries {
		if len(e.Args) == 0 {
			continue
		}
		// The broker runs its scripts as a FUNCTION library (FCALL), or
		// by EVALSHA where functions are missing.
		cmd := strings.ToLower(e.Args[0])
		if (strings.HasPrefix(cmd, "eval") || strings.HasPrefix(cmd, "fcall")) && e.Duration > worst {
			worst = e.Duration
		}
	}
	admin.SlowLogReset(ctx)
	return worst
}
