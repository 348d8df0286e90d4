package worker_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// countScripts counts the scripts a client runs.
type countScripts struct{ n atomic.Int64 }

func (c *countScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *countScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isScript(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *countScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if isScript(cmd) {
				c.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// An orphaned lease is recovered within its lease and one reap interval
// (invariant 5) while every slot of the pool is always busy and the ready
// index never empties: maintenance runs on its own loop, so neither a full
// pool nor a claim that always finds work delays it.
func TestOrphanReapedWithinIntervalUnderLoad(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const lease, poll = 600 * time.Millisecond, 20 * time.Millisecond
	reapInterval := max(lease/3, poll)
	jobs := make([]broker.Job, 2000)
	for i := range jobs {
		jobs[i] = broker.Job{Queue: worker.QueueDefault, Kind: "busy"}
	}
	for _, r := range b.Client().EnqueueMany(ctx, jobs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// The orphan: claimed ahead of the backlog by a worker that then
	// vanishes, just before the pool starts on the backlog.
	orphan, err := b.Client().Enqueue(ctx, broker.Job{Queue: worker.QueueDefault, Kind: "orphan", Priority: broker.PriorityMax})
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Leases().Claim(ctx, worker.QueueDefault, 1, lease)
	if err != nil || len(res.Leases) != 1 || res.Leases[0].ID != orphan {
		t.Fatalf("orphan claim: %v", err)
	}
	expires := time.Now().Add(lease) // no later than this on Redis's clock (miniredis: the same clock)
	p, err := worker.New(b, handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		time.Sleep(time.Millisecond)
		return nil
	}), worker.Config{Concurrency: 2, LeaseDuration: lease, PollInterval: poll, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	// Generous for a loaded machine, but well short of a second reap
	// interval lost to each claim or of recovery only at restart.
	bound := lease + reapInterval + 500*time.Millisecond
	for {
		j, err := b.Inspector().Job(ctx, worker.QueueDefault, orphan)
		if err != nil {
			t.Fatal(err)
		}
		if j.Generation != res.Leases[0].Generation {
			late := time.Since(expires)
			t.Logf("orphan recovered %v after its lease expired (reap interval %v)", late.Round(time.Millisecond), reapInterval)
			break
		}
		if time.Since(expires) > bound-lease {
			t.Fatalf("the orphan was not recovered within lease + reap interval + slack (%v)", bound)
		}
		time.Sleep(5 * time.Millisecond)
	}
	counts, err := b.Inspector().Counts(ctx, worker.QueueDefault)
	if err != nil {
		t.Fatal(err)
	}
	if counts.Pending == 0 {
		t.Fatal("the queue ran dry, so this did not test recovery under load")
	}
}

// An idle pool's loops wait: in a second, the dispatcher claims about
// once per poll interval and maintenance reaps and trims once per reap
// interval, nowhere near a loop that spins on Redis.
func TestIdlePoolDoesNotSpin(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	scripts := &countScripts{}
	c.AddHook(scripts)
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := worker.New(b, handlers.HandlerFunc(func(context.Context, *handlers.Job) error { return nil }),
		worker.Config{LeaseDuration: 3 * time.Second, PollInterval: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past the first claim and reap
	before := scripts.n.Load()
	time.Sleep(time.Second)
	ran := scripts.n.Load() - before
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// 5 claims and one reap with its trim; 20 leaves room for a slow
	// machine's timers but not for a spinning loop.
	if ran > 20 {
		t.Fatalf("an idle pool ran %d scripts in a second", ran)
	}
	t.Logf("an idle pool ran %d scripts in a second", ran)
}
