package worker_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// flaky loses script calls at random: some never reach Redis, some run
// and lose their reply (a connection error either way).
type flaky struct {
	mu              sync.Mutex
	rnd             *rand.Rand
	before, after   float64
	on              atomic.Bool
	nBefore, nAfter atomic.Int64
	fusedLost       atomic.Int64
	partial         bool // lose the replies of every other call of a pipeline
}

func (f *flaky) roll() (skip, lose bool) {
	if !f.on.Load() {
		return false, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	x := f.rnd.Float64()
	return x < f.before, x >= f.before && x < f.before+f.after
}

func isScript(cmd redis.Cmder) bool {
	n := cmd.Name()
	return n == "evalsha" || n == "eval" || n == "fcall"
}

func (f *flaky) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *flaky) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isScript(cmd) {
			return next(ctx, cmd)
		}
		skip, lose := f.roll()
		if skip {
			f.nBefore.Add(1)
			cmd.SetErr(io.ErrUnexpectedEOF)
			return io.ErrUnexpectedEOF
		}
		err := next(ctx, cmd)
		if lose && err == nil {
			f.nAfter.Add(1)
			cmd.SetErr(io.ErrUnexpectedEOF)
			return io.ErrUnexpectedEOF
		}
		return err
	}
}
func (f *flaky) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || !isScript(cmds[0]) {
			return next(ctx, cmds)
		}
		skip, lose := f.roll()
		if skip {
			f.nBefore.Add(1)
			for _, c := range cmds {
				c.SetErr(io.ErrUnexpectedEOF)
			}
			return io.ErrUnexpectedEOF
		}
		err := next(ctx, cmds)
		if lose && err == nil && f.partial && len(cmds) > 1 {
			f.nAfter.Add(1)
			for i, c := range cmds {
				if i%2 == 0 {
					continue
				}
				if scriptReply(c, func(v []any) bool { _, ok := v[len(v)-1].([]any); return ok }) {
					f.fusedLost.Add(1)
				}
				c.SetErr(io.ErrUnexpectedEOF)
			}
			return io.ErrUnexpectedEOF
		}
		if lose && err == nil {
			f.nAfter.Add(1)
			for _, c := range cmds {
				if scriptReply(c, func(v []any) bool { _, ok := v[len(v)-1].([]any); return ok }) {
					f.fusedLost.Add(1)
				}
				c.SetErr(io.ErrUnexpectedEOF)
			}
			return io.ErrUnexpectedEOF
		}
		return err
	}
}

// a pool works through a backlog while a tenth of its script
// calls never reach Redis and another tenth lose their reply, fused
// ack-and-claim calls among them. Every job must run exactly once, done on
// its first attempt (a lost reply never costs an attempt, and a long lease
// means nothing is reaped), with never more than Concurrency handlers at
// once, and the pool must not stall.
func TestFusedChaosLostReplies(t *testing.T) {
	for _, conc := range []int{1, 3, 8, 300} {
		t.Run(fmt.Sprint("concurrency ", conc), func(t *testing.T) {
			n := 300
			if conc > 100 {
				n = 1500
			}
			f := &flaky{rnd: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)), before: 0.2, after: 0.25}
			b, pb, ids := fusedBrokers(t, n, f)
			ctx := context.Background()
			var mu sync.Mutex
			ran := map[string]int{}
			var running, most atomic.Int32
			p, err := worker.New(pb, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
				now := running.Add(1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				mu.Lock()
				ran[j.ID]++
				mu.Unlock()
				time.Sleep(200 * time.Microsecond)
				running.Add(-1)
				return nil
			}), worker.Config{Concurrency: conc, LeaseDuration: time.Minute, PollInterval: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Start(ctx); err != nil {
				t.Fatal(err)
			}
			f.on.Store(true)
			deadline := time.Now().Add(30 * time.Second)
			for {
				c, err := b.Inspector().Counts(ctx, worker.QueueDefault)
				if err != nil {
					t.Fatal(err)
				}
				if c.Done+c.Dead == int64(n) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("stalled: %+v (lost before %d, after %d)", c, f.nBefore.Load(), f.nAfter.Load())
				}
				time.Sleep(10 * time.Millisecond)
			}
			f.on.Store(false)
			if err := p.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			t.Logf("lost before %d, after %d (fused %d)", f.nBefore.Load(), f.nAfter.Load(), f.fusedLost.Load())
			if most.Load() > int32(conc) {
				t.Errorf("%d handlers at once, Concurrency %d", most.Load(), conc)
			}
			for _, id := range ids {
				j, err := b.Inspector().Job(ctx, worker.QueueDefault, id)
				if err != nil {
					t.Fatal(err)
				}
				if ran[id] != 1 || j.State != broker.StateDone || j.Attempt != 1 {
					t.Errorf("job %s: %d runs, %s on attempt %d", id, ran[id], j.State, j.Attempt)
				}
			}
		})
	}
}

// as TestFusedChaosLostReplies, and Shutdown (no deadline) comes
// while the pool is in the middle of the backlog, calls still being lost.
// After it no job may be left running under nobody, and none may be
// charged an attempt it did not run: every job is done after exactly one
// run, or pending and never run.
func TestFusedChaosShutdown(t *testing.T) {
	for _, conc := range []int{1, 3, 8} {
		for round := range 3 {
			t.Run(fmt.Sprint("concurrency ", conc, " round ", round), func(t *testing.T) {
				const n = 200
				f := &flaky{rnd: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)), before: 0.2, after: 0.25}
				b, pb, ids := fusedBrokers(t, n, f)
				ctx := context.Background()
				var mu sync.Mutex
				ran := map[string]int{}
				var runs, running, most atomic.Int32
				p, err := worker.New(pb, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
					now := running.Add(1)
					for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
					}
					mu.Lock()
					ran[j.ID]++
					mu.Unlock()
					runs.Add(1)
					time.Sleep(200 * time.Microsecond)
					running.Add(-1)
					return nil
				}), worker.Config{Concurrency: conc, LeaseDuration: time.Minute, PollInterval: 50 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				if err := p.Start(ctx); err != nil {
					t.Fatal(err)
				}
				f.on.Store(true)
				stopAt := int32(20 + 30*round)
				for runs.Load() < stopAt {
					time.Sleep(time.Millisecond)
				}
				if err := p.Shutdown(ctx); err != nil {
					t.Fatal(err)
				}
				f.on.Store(false)
				if most.Load() > int32(conc) {
					t.Errorf("%d handlers at once, Concurrency %d", most.Load(), conc)
				}
				c, _ := b.Inspector().Counts(ctx, worker.QueueDefault)
				t.Logf("after Shutdown: %+v; lost before %d, after %d (fused %d)", c, f.nBefore.Load(), f.nAfter.Load(), f.fusedLost.Load())
				for _, id := range ids {
					j, err := b.Inspector().Job(ctx, worker.QueueDefault, id)
					if err != nil {
						t.Fatal(err)
					}
					ok := (j.State == broker.StateDone && ran[id] == 1 && j.Attempt == 1) ||
						(j.State == broker.StatePending && ran[id] == 0 && j.Attempt == 0)
					if !ok {
						t.Errorf("job %s after Shutdown: %s, attempt %d, %d runs", id, j.State, j.Attempt, ran[id])
					}
				}
			})
		}
	}
}

// two queues, so one batch of acks is a pipeline of several
// script calls (acks of a, acks of b, the claim in one of them), and a lost
// reply loses the answers of some calls of the pipeline but not others,
// as a Cluster node's failure does.
func TestFusedChaosPartialPipeline(t *testing.T) {
	const per = 200
	f := &flaky{rnd: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)), before: 0.1, after: 0.3, partial: true}
	b, pb, _ := fusedBrokers(t, 0, f)
	ctx := context.Background()
	ids := map[string][]string{}
	for _, q := range []string{"a", "b"} {
		for range per {
			id, err := b.Client().Enqueue(ctx, broker.Job{Queue: q, Kind: "k", MaxAttempts: 1})
			if err != nil {
				t.Fatal(err)
			}
			ids[q] = append(ids[q], id)
		}
	}
	var mu sync.Mutex
	ran := map[string]int{}
	var running, most, doneN atomic.Int32
	p, err := worker.New(pb, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		now := running.Add(1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		mu.Lock()
		ran[j.Queue+"/"+j.ID]++
		mu.Unlock()
		time.Sleep(300 * time.Microsecond)
		running.Add(-1)
		doneN.Add(1)
		return nil
	}), worker.Config{Queues: []worker.Queue{{Name: "a"}, {Name: "b"}}, Concurrency: 6, LeaseDuration: time.Minute, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	f.on.Store(true)
	deadline := time.Now().Add(40 * time.Second)
	for {
		ca, _ := b.Inspector().Counts(ctx, "a")
		cb, _ := b.Inspector().Counts(ctx, "b")
		if ca.Done+ca.Dead+cb.Done+cb.Dead == 2*per {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stalled: a %+v b %+v", ca, cb)
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.on.Store(false)
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("lost before %d, after %d (fused %d)", f.nBefore.Load(), f.nAfter.Load(), f.fusedLost.Load())
	if most.Load() > 6 {
		t.Errorf("%d handlers at once", most.Load())
	}
	for q, l := range ids {
		for _, id := range l {
			j, err := b.Inspector().Job(ctx, q, id)
			if err != nil {
				t.Fatal(err)
			}
			if ran[q+"/"+id] != 1 || j.State != broker.StateDone || j.Attempt != 1 {
				t.Errorf("job %s/%s: %d runs, %s on attempt %d", q, id, ran[q+"/"+id], j.State, j.Attempt)
			}
		}
	}
}
