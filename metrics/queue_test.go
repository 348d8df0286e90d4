package metrics_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/version"
	"github.com/fenceq/fenceq/metrics"
)

// commands counts the commands a client sends, a pipeline's one by one.
type commands struct{ n atomic.Int64 }

func (c *commands) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// one answers the single sample of name with the labels given, or fails.
func one(t *testing.T, reg prometheus.Gatherer, name, labels string) float64 {
	t.Helper()
	for _, s := range samples(t, reg, name) {
		if l, v, _ := strings.Cut(s, " "); l == labels {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	t.Fatalf("no sample %s{%s}: %v", name, labels, samples(t, reg, name))
	return 0
}

// The queue metrics read from Redis: the oldest pending job's age, the
// blocked state, and counters of the jobs that every pool settled done,
// failed or killed since the first scrape, read in a bounded number of
// commands; and the build's version.
func TestQueueMetricsFromRedis(t *testing.T) {
	mr := miniredis.RunT(t)
	start := time.Date(2026, 12, 3, 9, 0, 10, 0, time.UTC)
	mr.SetTime(start)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	var cmds commands
	rdb.AddHook(&cmds)
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const q = "emails"
	enqueue := func(n int, prefix string) {
		for i := range n {
			if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: q, Kind: "send", ID: fmt.Sprintf("%s-%d", prefix, i), MaxAttempts: 2}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// settle claims n jobs and acks them, fails them once (a retry) or for good.
	settle := func(n int, how string) {
		res, err := b.Leases().Claim(ctx, q, n, time.Minute)
		if err != nil || len(res.Leases) != n {
			t.Fatalf("claim %d: %d, %v", n, len(res.Leases), err)
		}
		for _, l := range res.Leases {
			switch how {
			case "ack":
				_, err = b.Leases().Ack(ctx, l, nil)
			case "retry":
				_, err = b.Leases().Fail(ctx, l, broker.Failure{Error: "try again"})
			case "dead":
				_, err = b.Leases().Fail(ctx, l, broker.Failure{Error: "no such address", Dead: true})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue(10, "before")
	settle(3, "ack")
	settle(1, "dead")
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: q, Kind: "send", ID: "after-all", DependsOn: []string{"before-9"}}); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.New(b.Inspector(), q))
	mr.SetTime(start.Add(30 * time.Second)) // the oldest pending job has waited 30 s
	if got := one(t, reg, "fenceq_queue_succeeded_total", "queue="+q); got != 0 {
		t.Fatalf("succeeded on the first scrape %v, want 0: the counters start at this process's first scrape", got)
	}
	before := cmds.n.Load() // the scripts are loaded now
	_ = one(t, reg, "fenceq_queue_succeeded_total", "queue="+q)
	if n := cmds.n.Load() - before; n != 5 {
		t.Errorf("a scrape of one queue sent %d commands, want 5 (overview, throughput, 2 for the dead, info memory)", n)
	}
	if got := one(t, reg, "fenceq_queue_oldest_pending_age_seconds", "queue="+q); got != 30 {
		t.Errorf("oldest pending age %v, want 30", got)
	}
	if got := one(t, reg, "fenceq_queue_jobs", "queue="+q+",state=blocked"); got != 1 {
		t.Errorf("blocked %v, want 1", got)
	}
	if got := one(t, reg, "fenceq_build_info", "goversion="+runtime.Version()+",version="+version.String()); got != 1 {
		t.Errorf("build info %v, want 1", got)
	}

	// In the same minute, and two minutes later: every settlement counts once.
	settle(2, "ack")
	settle(1, "retry")
	settle(1, "dead")
	_ = one(t, reg, "fenceq_queue_succeeded_total", "queue="+q)
	mr.SetTime(start.Add(2*time.Minute + 30*time.Second))
	settle(2, "ack")
	for range 2 {
		if got := one(t, reg, "fenceq_queue_succeeded_total", "queue="+q); got != 4 {
			t.Errorf("succeeded %v, want 4", got)
		}
		if got := one(t, reg, "fenceq_queue_failed_total", "queue="+q); got != 2 {
			t.Errorf("failed %v, want 2 (a retry and a death)", got)
		}
		if got := one(t, reg, "fenceq_queue_dead_total", "queue="+q); got != 1 {
			t.Errorf("dead %v, want 1", got)
		}
	}
}

// A collector named more than QueuesMax queues reads the first QueuesMax
// and says how many it left out.
func TestQueueMetricsBounded(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, metrics.QueuesMax+5)
	for i := range names {
		names[i] = fmt.Sprintf("q%03d", i)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.New(b.Inspector(), names...))
	if got := one(t, reg, "fenceq_scrape_queues_left_out", ""); got != 5 {
		t.Errorf("left out %v, want 5", got)
	}
	if got := len(samples(t, reg, "fenceq_queue_oldest_pending_age_seconds")); got != metrics.QueuesMax {
		t.Errorf("%d queues read, want %d", got, metrics.QueuesMax)
	}
}

// Scrapes at once (two Prometheus servers) count each settlement once:
// they take turns at the queues' counters.
func TestQueueMetricsConcurrentScrapes(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.New(b.Inspector(), "q"))
	_ = one(t, reg, "fenceq_queue_succeeded_total", "queue=q") // the baseline
	for i := range 20 {
		if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "k", ID: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := b.Leases().Claim(ctx, "q", 20, time.Minute)
	if err != nil || len(res.Leases) != 20 {
		t.Fatalf("claim: %v", err)
	}
	done := make(chan struct{})
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				if _, err := reg.Gather(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for _, l := range res.Leases {
		if _, err := b.Leases().Ack(ctx, l, nil); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := one(t, reg, "fenceq_queue_succeeded_total", "queue=q"); got != 20 {
		t.Fatalf("succeeded %v after 20 acks under concurrent scrapes, want 20", got)
	}
}
