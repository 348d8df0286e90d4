package integration

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// TestGroupFairness enqueues one group's backlog first (10,000 jobs;
// 100,000 with FENCEQ_GROUPS_BIG=1), then 99 groups of 100, and starts a
// pool of 50 no-op handlers on a private redis-server. It reads the order
// of the starts from the queue's events (Redis's order and clock) and
// reports the time until the last small group's first start and how many
// of the big group's jobs started before it; then the same jobs without
// groups, which run first in, first out. With groups, fewer than 5 % of
// the big group's jobs may start before every small group has started
// once (round-robin predicts a claim or two).
//
//	go test ./integration/ -run TestGroupFairness -v
//	FENCEQ_GROUPS_BIG=1 go test ./integration/ -run TestGroupFairness -v
func TestGroupFairness(t *testing.T) {
	big := 10_000
	if groupsBig() {
		big = 100_000
	}
	const small, each = 99, 100
	admin := startServer(t)
	type outcome struct {
		name      string
		bigBefore int
		redisMs   int64         // first start to the last small group's first, Redis's clock
		wall      time.Duration // the pool's start to the same, the test's clock
	}
	var outs []outcome
	for _, grouped := range []bool{true, false} {
		name := "grouped"
		if !grouped {
			name = "ungrouped"
		}
		if err := admin.FlushDB(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		bigBefore, redisMs, wall := fairnessRun(t, admin, grouped, big, small, each)
		outs = append(outs, outcome{name, bigBefore, redisMs, wall})
	}
	var table strings.Builder
	fmt.Fprintf(&table, "one group of %d enqueued first, then %d groups of %d; pool of 50 no-op handlers\n", big, small, each)
	fmt.Fprintln(&table, "| jobs | big group's jobs started before the last small group's first | ms to it (Redis, from the first start) | ms to it (from the pool's start) |")
	fmt.Fprintln(&table, "| --- | ---: | ---: | ---: |")
	for _, o := range outs {
		fmt.Fprintf(&table, "| %s | %d | %d | %.1f |\n", o.name, o.bigBefore, o.redisMs, float64(o.wall.Microseconds())/1000)
	}
	t.Log("\n" + table.String())
	if g := outs[0]; g.bigBefore >= big/20 {
		t.Errorf("grouped: %d of the big group's %d jobs started before every small group had started once; want fewer than %d (5 %%)", g.bigBefore, big, big/20)
	}
}

// fairnessRun is one run of TestGroupFairness: the jobs, with or without
// their groups, then a pool until every small group has started a job.
func fairnessRun(t *testing.T, admin *redis.Client, grouped bool, big, small, each int) (bigBefore int, redisMs int64, wall time.Duration) {
	ctx := context.Background()
	const q = "fair"
	rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, PoolSize: 80})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{Prefix: "fair"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Inspector().SetEvents(ctx, q, 10*(big+small*each)); err != nil {
		t.Fatal(err)
	}
	var jobs []broker.Job
	add := func(id, group string) {
		j := broker.Job{Queue: q, Kind: "noop", ID: id, Payload: []byte(`{}`)}
		if grouped {
			j.Group = group
		}
		jobs = append(jobs, j)
	}
	for i := range big {
		add(fmt.Sprintf("big-%06d", i), "big")
	}
	for g := range small {
		for i := range each {
			add(fmt.Sprintf("s%02d-%03d", g, i), fmt.Sprintf("s%02d", g))
		}
	}
	for _, r := range b.Client().EnqueueMany(ctx, jobs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}

	var seen sync.Map
	var groupsSeen atomic.Int64
	all := make(chan struct{})
	h := handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		if g, ok := strings.CutPrefix(j.ID, "s"); ok {
			if _, dup := seen.LoadOrStore(g[:2], true); !dup && groupsSeen.Add(1) == int64(small) {
				close(all)
			}
		}
		return nil
	})
	p, err := worker.New(b, h, worker.Config{Queues: []worker.Queue{{Name: q}}, Concurrency: 50, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-all:
		wall = time.Since(start)
	case <-time.After(5 * time.Minute):
		t.Fatalf("not every small group started within 5 minutes (%d of %d)", groupsSeen.Load(), small)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}

	// The starts in Redis's order, up to the last small group's first.
	first, groups := int64(-1), map[string]bool{}
	for after := "0"; len(groups) < small; {
		evs, err := b.Inspector().Events(ctx, q, after, 5000, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			t.Fatalf("the events end with %d of %d small groups started", len(groups), small)
		}
		for _, e := range evs {
			after = e.StreamID
			if e.Event != "started" || len(groups) == small {
				continue
			}
			if first < 0 {
				first = e.Time.UnixMilli()
			}
			if strings.HasPrefix(e.JobID, "big-") {
				bigBefore++
			} else if !groups[e.JobID[1:3]] {
				groups[e.JobID[1:3]] = true
				redisMs = e.Time.UnixMilli() - first
			}
		}
	}
	return bigBefore, redisMs, wall
}
