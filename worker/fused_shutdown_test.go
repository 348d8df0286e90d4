package worker_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// stallFused holds the reply of the first fused ack-and-claim call that
// took a job until release is closed; lose makes it a connection error.
type stallFused struct {
	once    sync.Once
	ran     chan struct{}
	release chan struct{}
	lose    bool
}

func (s *stallFused) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (s *stallFused) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (s *stallFused) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			took := scriptReply(cmd, func(v []any) bool {
				c, ok := v[len(v)-1].([]any)
				return ok && len(c) > 3 && c[2].(int64) > 0
			})
			if err == nil && took {
				hit := false
				s.once.Do(func() { hit = true })
				if hit {
					close(s.ran)
					<-s.release
					if s.lose {
						for _, c := range cmds {
							c.SetErr(io.ErrUnexpectedEOF)
						}
						return io.ErrUnexpectedEOF
					}
				}
			}
		}
		return err
	}
}

// Shutdown begins while a fused call that claimed the next job
// is in flight; its reply lands (or is lost and asked for again) after
// Shutdown has closed the pool. The job it claimed must be given back
// uncharged, the acked job done, Shutdown clean, the pool's slots whole.
func TestShutdownDuringFusedCall(t *testing.T) {
	for _, lose := range []bool{false, true} {
		name := "reply lands"
		if lose {
			name = "reply lost"
		}
		t.Run(name, func(t *testing.T) {
			s := &stallFused{ran: make(chan struct{}), release: make(chan struct{}), lose: lose}
			var runs atomic.Int32
			b, p, ids := fusedRig(t, 2, worker.Config{Concurrency: 1, LeaseDuration: time.Minute},
				func(context.Context, *handlers.Job) error { runs.Add(1); return nil }, s)
			ctx := context.Background()
			if err := p.Start(ctx); err != nil {
				t.Fatal(err)
			}
			<-s.ran
			done := make(chan error, 1)
			go func() { done <- p.Shutdown(ctx) }()
			time.Sleep(100 * time.Millisecond) // let Shutdown close the pool (either order is a case worth passing)
			close(s.release)
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Shutdown did not return")
			}
			st := p.Stats()
			t.Logf("stats %+v", st)
			first, err := b.Inspector().Job(ctx, worker.QueueDefault, ids[0])
			if err != nil {
				t.Fatal(err)
			}
			second, err := b.Inspector().Job(ctx, worker.QueueDefault, ids[1])
			if err != nil {
				t.Fatal(err)
			}
			if first.State != broker.StateDone || second.State != broker.StatePending || second.Attempt != 0 || runs.Load() != 1 {
				t.Fatalf("first %s (attempt %d), second %s (attempt %d), %d runs; want done, pending on attempt 0, 1 run",
					first.State, first.Attempt, second.State, second.Attempt, runs.Load())
			}
		})
	}
}

// loseAfterHalt loses the reply of the first fused ack-and-claim call that
// took a job, and of each re-send of it, once the pool has halted: the
// call is held until then, so that Shutdown stops waiting for the handler
// whose ack it is (abandoned) while it is out.
type loseAfterHalt struct {
	halted func() <-chan struct{}
	ran    chan struct{} // closed when the call has run
	lost   atomic.Bool
}

func (s *loseAfterHalt) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (s *loseAfterHalt) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (s *loseAfterHalt) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if err != nil || !tookOne(cmd) {
				continue
			}
			if s.lost.CompareAndSwap(false, true) {
				close(s.ran)
				<-s.halted()
			}
			for _, c := range cmds {
				c.SetErr(io.ErrUnexpectedEOF)
			}
			return io.ErrUnexpectedEOF
		}
		return err
	}
}

// A handler succeeds and its own goroutine sends the ack with the claim of
// the next job (the direct path); the call is out when Shutdown gives up
// waiting for that handler (abandons it), and its reply is lost. The claim
// is asked for again under its id (recoverClaim), and Shutdown must wait
// for that, as it did when the acker sent every ack: when it returns the
// job the claim took is given back (pending, uncharged), not left running
// under a pool that has stopped, for a reaper to charge an attempt.
func TestShutdownWaitsForAbandonedHandlersFusedClaim(t *testing.T) {
	worker.SetAbandonAfter(t, 50*time.Millisecond)
	var p *worker.Pool
	s := &loseAfterHalt{halted: func() <-chan struct{} { return worker.Halted(p) }, ran: make(chan struct{})}
	b, p, ids := fusedRig(t, 2, worker.Config{Concurrency: 1, LeaseDuration: time.Minute, ShutdownTimeout: 10 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)},
		func(context.Context, *handlers.Job) error { return nil }, s)
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-s.ran // the first job is acked, the second claimed; the reply is held
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := b.Inspector().Counts(ctx, worker.QueueDefault)
	if err != nil {
		t.Fatal(err)
	}
	second, err := b.Inspector().Job(ctx, worker.QueueDefault, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	if c.Running != 0 || second.State != broker.StatePending || second.Attempt != 0 {
		t.Errorf("Shutdown returned with %d jobs running; the one the lost claim took is %s on attempt %d: want it given back, pending on attempt 0",
			c.Running, second.State, second.Attempt)
	}
	// Without Shutdown waiting, the asking goes on after it: let it end
	// before the test's server does.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if c, err := b.Inspector().Counts(ctx, worker.QueueDefault); err != nil || c.Running == 0 {
			break
		}
	}
}
