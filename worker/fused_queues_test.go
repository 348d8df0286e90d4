package worker_test

import (
	"context"
	"fmt"
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

// twoQueues is a pool on miniredis serving queues "a" and "b" (cfg's
// Queues/StrictPriority), with backlog jobs waiting in "b" before it
// starts. When the handler has run trigger jobs of "b", it enqueues one job
// into "a". It answers how many jobs of "b" had started when a's job ran,
// and how many were in the backlog.
func twoQueues(t *testing.T, cfg worker.Config, backlog, trigger int) (bRunsBeforeA int64) {
	t.Helper()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range backlog {
		if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "b", Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	var bRuns atomic.Int64
	aRanAt := make(chan int64, 1)
	var once sync.Once
	p, err := worker.New(b, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		if j.Queue == "a" {
			aRanAt <- bRuns.Load()
			return nil
		}
		if bRuns.Add(1) == int64(trigger) {
			once.Do(func() {
				if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "a", Kind: "k"}); err != nil {
					panic(err)
				}
			})
		}
		return nil
	}), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}()
	select {
	case n := <-aRanAt:
		return n
	case <-time.After(20 * time.Second):
		t.Fatalf("the job of queue a never ran (b: %d of %d jobs run)", bRuns.Load(), backlog)
		return 0
	}
}

// Under StrictPriority, a job enqueued into the first queue while the
// pool works through a backlog of the second must be the next job the pool
// starts ("from a later queue only when the earlier ones have nothing
// ready"). The trap: the pool's first claim finds "a" empty and marks it
// drained; if every ack's fused claim then went to "b" and passed the slot
// on, no slot would be freed for the dispatcher, the only one that looks
// at "a" again (and the only one that clears the flag, on a wake-up it
// would never block for), and "a" would wait for all of "b".
func TestStrictPriorityNotStarvedByDrainedFlag(t *testing.T) {
	for _, conc := range []int{1, 4} {
		t.Run(fmt.Sprint("concurrency ", conc), func(t *testing.T) {
			const backlog, trigger = 400, 10
			n := twoQueues(t, worker.Config{
				Queues:         []worker.Queue{{Name: "a"}, {Name: "b"}},
				StrictPriority: true,
				Concurrency:    conc,
				LeaseDuration:  time.Minute,
			}, backlog, trigger)
			// Strict priority allows the jobs of "b" already running (and
			// the ones a batch of acks claimed at the moment of the
			// enqueue): a handful, not hundreds.
			if n > trigger+4*int64(conc)+10 {
				t.Fatalf("queue a's job (strict priority, first) ran after %d jobs of b; enqueued when %d had run (backlog %d)", n, trigger, backlog)
			}
		})
	}
}

// The same with weighted queues (1:1). Every claim tries "a" first
// half the time; starved by the drained flag, a's job waited for the whole
// backlog of "b" (the chance that weighted order alone keeps it waiting
// 100 claims is 2^-100). The trigger is late enough that some claim has
// tried "a" first, and found it empty, before the job comes.
func TestWeightedQueueNotStarvedByDrainedFlag(t *testing.T) {
	const backlog, trigger = 400, 60
	n := twoQueues(t, worker.Config{
		Queues:        []worker.Queue{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}},
		Concurrency:   2,
		LeaseDuration: time.Minute,
	}, backlog, trigger)
	if n > trigger+100 {
		t.Fatalf("queue a's job (weight 1 of 2) ran after %d jobs of b; enqueued when %d had run (backlog %d)", n, trigger, backlog)
	}
}

// A queue with a backlog of its own is not starved either once a flow
// control limit made one claim of it take fewer than asked (it was). Queue "a" has
// 40 jobs and MaxRunning 1, queue "b" a backlog of 400; weights 1:1,
// Concurrency 4. Each freed slot should go to a claim that tries "a" first
// half the time, so "a" runs one job at a time beside "b" all along.
func TestLimitedQueueNotStarvedByDrainedFlag(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := b.Inspector().SetMaxRunning(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	const na, nb = 40, 400
	for range na {
		if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "a", Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	for range nb {
		if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "b", Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	var aRuns, bRuns atomic.Int64
	aAtBEnd := make(chan int64, 1)
	p, err := worker.New(b, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		time.Sleep(2 * time.Millisecond)
		if j.Queue == "a" {
			aRuns.Add(1)
		} else if bRuns.Add(1) == nb {
			aAtBEnd <- aRuns.Load()
		}
		return nil
	}), worker.Config{
		Queues:        []worker.Queue{{Name: "a"}, {Name: "b"}},
		Concurrency:   4,
		LeaseDuration: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(ctx) }()
	select {
	case n := <-aAtBEnd:
		// b's backlog is 400 jobs on about 3 slots (~130 job lengths);
		// "a" with its one slot finishes its 40 well within that.
		if n < na/2 {
			t.Fatalf("when b's backlog of %d was done, a (MaxRunning 1, %d ready) had run %d jobs", nb, na, n)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("b's backlog not done after 30s: a %d, b %d", aRuns.Load(), bRuns.Load())
	}
}
