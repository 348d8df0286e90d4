package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// holdPing delays the client's PING (the first thing Start sends) until
// let is closed, so that a test can call Shutdown while Start is under way.
type holdPing struct {
	held chan struct{} // closed when a PING is being held
	let  chan struct{}
	once atomic.Bool
}

func (h *holdPing) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdPing) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *holdPing) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "ping" && h.once.CompareAndSwap(false, true) {
			close(h.held)
			<-h.let
		}
		return next(ctx, cmd)
	}
}

// shutdownRig is a pool of two slots on a miniredis of its own, whose
// handler is h, and what a probe reads back.
type shutdownRig struct {
	mr *miniredis.Miniredis
	c  *redis.Client
	b  *broker.Broker
	p  *worker.Pool
}

func newShutdownRig(t *testing.T, h handlers.HandlerFunc, hooks ...redis.Hook) *shutdownRig {
	t.Helper()
	r := &shutdownRig{mr: miniredis.NewMiniRedis()}
	if err := r.mr.Start(); err != nil {
		t.Fatal(err)
	}
	r.c = redis.NewClient(&redis.Options{Addr: r.mr.Addr()})
	for _, hk := range hooks {
		r.c.AddHook(hk)
	}
	var err error
	if r.b, err = broker.New(r.c, broker.Options{}); err != nil {
		t.Fatal(err)
	}
	r.p, err = worker.New(r.b, h, worker.Config{
		Concurrency: 2, LeaseDuration: 3 * time.Second, PollInterval: 20 * time.Millisecond,
		ShutdownTimeout: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *shutdownRig) close() {
	_ = r.c.Close()
	r.mr.Close()
}

func (r *shutdownRig) enqueue(t *testing.T) string {
	t.Helper()
	id, err := r.b.Client().Enqueue(context.Background(), broker.Job{Queue: worker.QueueDefault, Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (r *shutdownRig) job(t *testing.T, id string) broker.JobInfo {
	t.Helper()
	j, err := r.b.Inspector().Job(context.Background(), worker.QueueDefault, id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// within fails t unless f returns within d, and answers what f returned.
func within(t *testing.T, what string, d time.Duration, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
		return nil
	}
}

// Every way a pool can be shut down ends every goroutine it started (an
// abandoned handler's own goroutine once that handler returns), and leaves
// the jobs it held where the shutdown contract says: finished in the grace,
// or released uncharged.
func TestShutdownPathsLeaveNothing(t *testing.T) {
	worker.SetAbandonAfter(t, 100*time.Millisecond)
	ctx := context.Background()

	t.Run("Idle", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		r := newShutdownRig(t, func(context.Context, *handlers.Job) error { return nil })
		defer r.close()
		if err := r.p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // into the dispatcher's block and maintenance's wait
		if err := within(t, "Shutdown", 5*time.Second, func() error { return r.p.Shutdown(ctx) }); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Twice", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		r := newShutdownRig(t, func(context.Context, *handlers.Job) error { return nil })
		defer r.close()
		if err := r.p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		first := make(chan error, 1)
		go func() { first <- r.p.Shutdown(ctx) }()
		second := within(t, "a second Shutdown", 5*time.Second, func() error { return r.p.Shutdown(ctx) })
		err := <-first
		if (err == nil) == (second == nil) {
			t.Fatalf("two Shutdowns answered %v and %v: want one nil, one error", err, second)
		}
	})

	t.Run("FinishesInGrace", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		running := make(chan struct{}, 1)
		r := newShutdownRig(t, func(context.Context, *handlers.Job) error {
			running <- struct{}{}
			time.Sleep(20 * time.Millisecond)
			return nil
		})
		defer r.close()
		if err := r.p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		id := r.enqueue(t)
		<-running
		if err := within(t, "Shutdown", 5*time.Second, func() error { return r.p.Shutdown(ctx) }); err != nil {
			t.Fatal(err)
		}
		if j := r.job(t, id); j.State != broker.StateDone {
			t.Fatalf("a handler that finished in its grace: %s, want done", j.State)
		}
	})

	t.Run("CancelledAfterGrace", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		running := make(chan struct{}, 1)
		r := newShutdownRig(t, func(ctx context.Context, _ *handlers.Job) error {
			running <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		})
		defer r.close()
		if err := r.p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		id := r.enqueue(t)
		<-running
		if err := within(t, "Shutdown", 5*time.Second, func() error { return r.p.Shutdown(ctx) }); err != nil {
			t.Fatal(err)
		}
		if j := r.job(t, id); j.State != broker.StatePending || j.Attempt != 0 {
			t.Fatalf("a handler cancelled after its grace: %s attempt %d, want pending, uncharged", j.State, j.Attempt)
		}
	})

	t.Run("Abandoned", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		running, returnNow := make(chan struct{}, 1), make(chan struct{})
		r := newShutdownRig(t, func(ctx context.Context, _ *handlers.Job) error {
			running <- struct{}{}
			<-returnNow // ignores its context
			return errors.New("late")
		})
		defer r.close()
		if err := r.p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		id := r.enqueue(t)
		<-running
		if err := within(t, "Shutdown", 5*time.Second, func() error { return r.p.Shutdown(ctx) }); err != nil {
			t.Fatal(err)
		}
		if j := r.job(t, id); j.State != broker.StatePending || j.Attempt != 0 {
			t.Fatalf("an abandoned handler's job: %s attempt %d, want pending, uncharged", j.State, j.Attempt)
		}
		close(returnNow) // its late settlement must end, not wait for a stopped pool
		time.Sleep(50 * time.Millisecond)
		if j := r.job(t, id); j.State != broker.StatePending || j.Attempt != 0 {
			t.Fatalf("after the abandoned handler returned: %s attempt %d, want pending, uncharged", j.State, j.Attempt)
		}
	})

	t.Run("EndedContext", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		running := make(chan struct{}, 1)
		r := newShutdownRig(t, func(ctx context.Context, _ *handlers.Job) error {
			running <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		})
		defer r.close()
		if err := r.p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		id := r.enqueue(t)
		<-running
		ended, cancel := context.WithCancel(ctx)
		cancel()
		err := within(t, "Shutdown with an ended ctx", 5*time.Second, func() error { return r.p.Shutdown(ended) })
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Shutdown: %v, want nil or context.Canceled", err)
		}
		// Cancelled at once and released, by its own settlement or by
		// the abandoning.
		if j := r.job(t, id); j.State != broker.StatePending || j.Attempt != 0 {
			t.Fatalf("a handler of a pool shut down with an ended ctx: %s attempt %d, want pending, uncharged", j.State, j.Attempt)
		}
	})

	t.Run("DuringStart", func(t *testing.T) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		hold := &holdPing{held: make(chan struct{}), let: make(chan struct{})}
		r := newShutdownRig(t, func(context.Context, *handlers.Job) error { return nil }, hold)
		defer r.close()
		started := make(chan error, 1)
		go func() { started <- r.p.Start(ctx) }()
		<-hold.held // Start is checking the server
		shut := make(chan error, 1)
		go func() { shut <- r.p.Shutdown(ctx) }()
		time.Sleep(20 * time.Millisecond)
		close(hold.let)
		// Start says that the pool it started was shut down meanwhile, rather
		// than that it started.
		err := within(t, "Start", 5*time.Second, func() error { return <-started })
		if err == nil || !strings.Contains(err.Error(), "shut down while it was starting") {
			t.Fatalf("Start with Shutdown during its server check: %v, want it to say the pool was shut down", err)
		}
		if err := within(t, "Shutdown during Start", 5*time.Second, func() error { return <-shut }); err != nil {
			t.Fatal(err)
		}
		// Whatever the order, the pool claims nothing after its Shutdown
		// returned.
		id := r.enqueue(t)
		time.Sleep(100 * time.Millisecond)
		if j := r.job(t, id); j.State != broker.StatePending {
			t.Fatalf("a job enqueued after Shutdown: %s, want pending", j.State)
		}
	})
}
