package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// Red team, invariant 8 ("no script's work grows with anything but the
// batch size its caller passes"; "never blocks Redis for more than a few
// ms"): Retry of ONE job that depends on many jobs re-reads every one of
// its dependencies and re-adds itself to each one's children in a single
// script. Its cost grows with the job's stored depends_on, not with what
// the caller passed (one id), and RetryDead multiplies it by its limit.
// With 50,000 dependencies one Retry blocks Redis for about 0.4 s
// (1.1 s at 100,000; past busy-reply-threshold, 5 s, around 450,000, when
// every other client gets BUSY and the script, having written, cannot be
// killed). This test fails.
func TestRedteamFanInRetryIsUnbounded(t *testing.T) {
	admin := startServer(t)
	ctx := context.Background()
	b, err := broker.New(admin, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 50_000
	deps := make([]string, n)
	jobs := make([]broker.Job, n)
	for i := range jobs {
		deps[i] = fmt.Sprintf("p%d", i)
		jobs[i] = broker.Job{Queue: "q", Kind: "k", ID: deps[i]}
	}
	for i := 0; i < n; i += 1000 {
		for _, e := range b.EnqueueMany(ctx, jobs[i:i+1000]) {
			if e.Err != nil {
				t.Fatal(e.Err)
			}
		}
	}
	if _, err := b.Enqueue(ctx, broker.Job{Queue: "q", Kind: "k", ID: "child", DependsOn: deps}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Cancel(ctx, "q", "child"); err != nil {
		t.Fatal(err)
	}

	admin.ConfigSet(ctx, "slowlog-log-slower-than", "0")
	admin.ConfigSet(ctx, "slowlog-max-len", "100")
	admin.SlowLogReset(ctx)
	if _, err := b.Retry(ctx, "q", "child"); err != nil {
		t.Fatal(err)
	}
	entries, err := admin.SlowLogGet(ctx, 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	var worst time.Duration
	for _, e := range entries {
		if len(e.Args) > 0 && strings.HasPrefix(strings.ToLower(e.Args[0]), "eval") && e.Duration > worst {
			worst = e.Duration
		}
	}
	if worst > 50*time.Millisecond {
		t.Fatalf("Retry of one job with %d dependencies held Redis for %v in one script; invariant 8 allows a few ms", n, worst)
	}
}
