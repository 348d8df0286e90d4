package worker_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// Two pools share a queue's backlog; one shuts down half way, and the
// reply of the first script it sends once its Shutdown begins is lost (an
// ack with a fused claim, a claim, a release). The other pool finishes the
// backlog: every job runs exactly once, on its first attempt, so nothing
// the stopping pool held — running, claimed in flight or claimed with an
// ack — was charged an attempt or left for the reaper.
func TestSharedQueueOneStopsWithALostReply(t *testing.T) {
	mr := miniredis.RunT(t)
	ctx := context.Background()
	const n, lease = 400, 10 * time.Second
	var mu sync.Mutex
	runs := map[string]int{}
	h := handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		time.Sleep(2 * time.Millisecond)
		return nil
	})
	counted := func(next handlers.Handler) handlers.Handler {
		return handlers.HandlerFunc(func(ctx context.Context, j *handlers.Job) error {
			mu.Lock()
			runs[j.ID]++
			mu.Unlock()
			return next.ProcessJob(ctx, j)
		})
	}
	var armed atomic.Bool
	drop := &dropReply{drop: func(cmd redis.Cmder) bool { return armed.Load() && isScript(cmd) }}
	pool := func(hooks ...redis.Hook) (*broker.Broker, *worker.Pool) {
		c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		for _, hk := range hooks {
			c.AddHook(hk)
		}
		b, err := broker.New(c, broker.Options{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := worker.New(b, counted(h), worker.Config{Concurrency: 4, LeaseDuration: lease,
			PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return b, p
	}
	b, pa := pool(drop)
	_, pb := pool()
	jobs := make([]broker.Job, n)
	for i := range jobs {
		jobs[i] = broker.Job{Queue: worker.QueueDefault, Kind: "k", MaxAttempts: 5}
	}
	ids := make([]string, n)
	for i, r := range b.Client().EnqueueMany(ctx, jobs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids[i] = r.ID
	}
	for _, p := range []*worker.Pool{pa, pb} {
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for pa.Stats().Succeeded+pb.Stats().Succeeded < n/4 {
		time.Sleep(time.Millisecond)
	}
	armed.Store(true)
	sctx, cancel := context.WithTimeout(ctx, lease/2)
	defer cancel()
	if err := pa.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if !drop.dropped.Load() {
		t.Log("pool A sent no script after its Shutdown began: no reply was lost")
	}
	deadline := time.Now().Add(lease / 2) // well before any lease expires: no reaper helps
	for _, id := range ids {
		for {
			j, err := b.Inspector().Job(ctx, worker.QueueDefault, id)
			if err != nil {
				t.Fatal(err)
			}
			if j.State.Final() {
				if j.State != broker.StateDone || j.Attempt != 1 {
					t.Fatalf("job %s: %s on attempt %d, want done on attempt 1", id, j.State, j.Attempt)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s still %s (attempt %d) long after pool A stopped: left for the reaper", id, j.State, j.Attempt)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	if err := pb.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if runs[id] != 1 {
			t.Fatalf("job %s ran %d times, want once", id, runs[id])
		}
	}
	if sa, sb := pa.Stats(), pb.Stats(); sa.Reaped+sb.Reaped != 0 || sa.Stale+sb.Stale != 0 {
		t.Fatalf("reaped %d, stale %d: want none", sa.Reaped+sb.Reaped, sa.Stale+sb.Stale)
	}
}
