package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// Invariant 8 for fan-in (found by the red team): enqueue and Retry read
// every dependency of a job in one script, so a job's dependencies are
// bounded (MaxDependsOn); one more is refused before anything is written.
// Retry of a job at the bound is logged with the longest script Redis ran
// (its SLOWLOG), for docs/benchmarks.md; a job with 50,000 dependencies
// held Redis for 0.4 s before the bound.
func TestDependsOnIsBounded(t *testing.T) {
	admin := startServer(t)
	ctx := context.Background()
	b, err := broker.New(admin, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	const n = broker.MaxDependsOn
	deps := make([]string, n+1)
	jobs := make([]broker.Job, n+1)
	for i := range jobs {
		deps[i] = fmt.Sprintf("p%d", i)
		jobs[i] = broker.Job{Queue: "q", Kind: "k", ID: deps[i]}
	}
	for _, e := range b.Client().EnqueueMany(ctx, jobs) {
		if e.Err != nil {
			t.Fatal(e.Err)
		}
	}
	_, err = b.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "k", ID: "too-many", DependsOn: deps})
	if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("enqueue with %d dependencies: %v; want a ValidationError naming the bound", n+1, err)
	}
	if _, err := b.Inspector().Job(ctx, "q", "too-many"); !errors.Is(err, broker.ErrJobNotFound) {
		t.Fatalf("a refused enqueue wrote the job: %v", err)
	}

	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "k", ID: "child", DependsOn: deps[:n]}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Inspector().Cancel(ctx, "q", "child"); err != nil {
		t.Fatal(err)
	}
	admin.ConfigSet(ctx, "slowlog-log-slower-than", "0")
	admin.ConfigSet(ctx, "slowlog-max-len", "100")
	admin.SlowLogReset(ctx)
	if _, err := b.Inspector().Retry(ctx, "q", "child"); err != nil {
		t.Fatal(err)
	}
	if j, err := b.Inspector().Job(ctx, "q", "child"); err != nil || j.State != broker.StateBlocked {
		t.Fatalf("the retried child: %+v %v; want blocked on its %d dependencies", j, err, n)
	}
	worst := slowestScript(t, admin)
	t.Logf("Retry of a job with %d dependencies: its script ran %v", n, worst)
}
