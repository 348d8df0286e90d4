package worker_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/internal/roundtrips"
	"github.com/fenceq/fenceq/worker"
)

// fusedRig is a pool on miniredis whose client carries hooks, with n jobs
// waiting before it starts, and a broker of its own client to watch it.
func fusedRig(t *testing.T, n int, cfg worker.Config, h handlers.HandlerFunc, hooks ...redis.Hook) (*broker.Broker, *worker.Pool, []string) {
	t.Helper()
	b, pb, ids := fusedBrokers(t, n, hooks...)
	p, err := worker.New(pb, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, p, ids
}

// fusedBrokers is a miniredis with n jobs of one attempt waiting: a broker
// to watch it, and one for a pool whose client carries hooks.
func fusedBrokers(t *testing.T, n int, hooks ...redis.Hook) (b, pb *broker.Broker, ids []string) {
	t.Helper()
	mr := miniredis.RunT(t)
	client := func(hooks ...redis.Hook) *broker.Broker {
		c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		for _, h := range hooks {
			c.AddHook(h)
		}
		b, err := broker.New(c, broker.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b, pb = client(), client(hooks...)
	for range n {
		id, err := b.Client().Enqueue(context.Background(), broker.Job{Queue: worker.QueueDefault, Kind: "k", MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return b, pb, ids
}

// waitFinished waits until n jobs of the default queue are done or dead.
func waitFinished(t *testing.T, b *broker.Broker, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := b.Inspector().Counts(context.Background(), worker.QueueDefault)
		if err != nil {
			t.Fatal(err)
		}
		if c.Done+c.Dead == int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %+v, want %d finished", c, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A pool working through a backlog one job at a time settles each job and
// claims the next in one round trip (broker.FusedAck, or FusedFail for
// odd jobs here, which fail for good), and the slot a settled job passes
// on never lets more handlers run than Concurrency.
func TestFusedClaim(t *testing.T) {
	for _, conc := range []int{1, 4} {
		const n = 200
		var running, most, runs atomic.Int32
		cnt := &roundtrips.Counter{}
		b, p, _ := fusedRig(t, n, worker.Config{Concurrency: conc}, func(context.Context, *handlers.Job) error {
			now := running.Add(1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			r := runs.Add(1)
			time.Sleep(100 * time.Microsecond)
			running.Add(-1)
			if r%2 == 1 {
				return handlers.Permanent(errors.New("odd"))
			}
			return nil
		}, cnt)
		cnt.Reset()
		if err := p.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitFinished(t, b, n)
		trips := cnt.Trips.Load()
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if runs.Load() != n || most.Load() > int32(conc) {
			t.Fatalf("concurrency %d: %d handler runs of %d jobs, at most %d at once", conc, runs.Load(), n, most.Load())
		}
		// Separate acks and claims would be 2 per job at concurrency 1;
		// the slack is the start-up checks, upkeep and the waits for done.
		t.Logf("concurrency %d: %d round trips for %d jobs", conc, trips, n)
		if conc == 1 && trips > n+n/5+40 {
			t.Fatalf("concurrency 1: %d round trips for %d jobs; want about one per job", trips, n)
		}
	}
}

// loseFusedClaim lets Redis run the first settlement that also claimed a
// job (an ack batch, in a pipeline, or a failure, on its own), and loses
// its reply (a dropped connection).
type loseFusedClaim struct{ lost atomic.Bool }

// tookOne reports whether cmd is a settlement whose claim took one job:
// its reply ends with the claim's, nested.
func tookOne(cmd redis.Cmder) bool {
	return scriptReply(cmd, func(v []any) bool {
		c, ok := v[len(v)-1].([]any)
		return ok && len(c) > 3 && c[2] == int64(1)
	})
}

func (l *loseFusedClaim) DialHook(next redis.DialHook) redis.DialHook { return next }
func (l *loseFusedClaim) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && tookOne(cmd) && l.lost.CompareAndSwap(false, true) {
			cmd.SetErr(io.ErrUnexpectedEOF)
			return io.ErrUnexpectedEOF
		}
		return err
	}
}
func (l *loseFusedClaim) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if err == nil && tookOne(cmd) && l.lost.CompareAndSwap(false, true) {
				for _, c := range cmds {
					c.SetErr(io.ErrUnexpectedEOF)
				}
				return io.ErrUnexpectedEOF
			}
		}
		return err
	}
}

// The reply of a settlement that claimed the next job is lost — an ack's,
// or a failure's: the pool asks for the claim again under its request id
// and runs the job it took, on its first attempt, and the settlement, sent
// again, answers what it did (invariant 9). Without the re-sent claim the
// job would sit running under nobody until its lease expired, and the
// reaper would make it dead (one attempt) without its handler ever running.
func TestFusedClaimReplyLost(t *testing.T) {
	for _, first := range []broker.State{broker.StateDone, broker.StateDead} {
		t.Run(string(first), func(t *testing.T) {
			lose := &loseFusedClaim{}
			var mu sync.Mutex
			ran := map[string]int{}
			b, p, ids := fusedRig(t, 2, worker.Config{Concurrency: 1, LeaseDuration: time.Minute}, func(_ context.Context, j *handlers.Job) error {
				mu.Lock()
				defer mu.Unlock()
				ran[j.ID]++
				if len(ran) == 1 && first == broker.StateDead {
					return handlers.Permanent(errors.New("the first job fails"))
				}
				return nil
			}, lose)
			if err := p.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			waitFinished(t, b, 2)
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !lose.lost.Load() {
				t.Fatal("no settlement claimed a job: the test lost nothing")
			}
			for i, id := range ids {
				j, err := b.Inspector().Job(context.Background(), worker.QueueDefault, id)
				if err != nil {
					t.Fatal(err)
				}
				w := broker.StateDone
				if i == 0 {
					w = first
				}
				if ran[id] != 1 || j.State != w || j.Attempt != 1 {
					t.Fatalf("job %d: %d runs, %s on attempt %d; want one run, %s on attempt 1", i, ran[id], j.State, j.Attempt, w)
				}
			}
		})
	}
}

// Under strict priority, a job of the first queue is taken next even while
// the acker is filling the pool from a later queue's backlog: a claim sent
// with acks goes only to the queue the dispatcher would try first. (It
// once went to the first queue not found drained, and the new job waited
// for the whole backlog of the other.)
func TestFusedClaimKeepsPriority(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const backlog = 200
	jobs := make([]broker.Job, backlog)
	for i := range jobs {
		jobs[i] = broker.Job{Queue: "low", Kind: "low"}
	}
	for _, e := range b.Client().EnqueueMany(ctx, jobs) {
		if e.Err != nil {
			t.Fatal(e.Err)
		}
	}
	var lowDone atomic.Int32
	highAt := make(chan int32, 1)
	p, err := worker.New(b, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		if j.Kind == "high" {
			highAt <- lowDone.Load()
			return nil
		}
		if lowDone.Add(1) == 10 {
			if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "high", Kind: "high"}); err != nil {
				t.Error(err)
			}
		}
		time.Sleep(time.Millisecond)
		return nil
	}), worker.Config{Queues: []worker.Queue{{Name: "high"}, {Name: "low"}}, StrictPriority: true, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(ctx) }()
	select {
	case n := <-highAt:
		if n > 20 {
			t.Fatalf("the high-priority job ran after %d low ones; it was enqueued after 10", n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the high-priority job never ran")
	}
}
