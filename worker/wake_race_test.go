package worker_test

import (
	"context"
	"encoding/hex"
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

// enqueueAfterClaim enqueues a job (through another client) right after a
// claim has come back to the dispatcher and before the dispatcher goes
// on: the wake-up lands between "nothing ready" and the blocking wait.
type enqueueAfterClaim struct {
	armed    atomic.Bool
	enqueue  func() // sets sent
	enqueued chan struct{}
}

// isClaim reports whether cmd is a script that carries a claim request id
// (32 hex digits): on an idle pool, only the dispatcher's claims do.
func isClaim(cmd redis.Cmder) bool {
	if !isScript(cmd) {
		return false
	}
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && len(s) == 32 {
			if _, err := hex.DecodeString(s); err == nil {
				return true
			}
		}
	}
	return false
}

func (e *enqueueAfterClaim) DialHook(next redis.DialHook) redis.DialHook { return next }
func (e *enqueueAfterClaim) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (e *enqueueAfterClaim) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if isClaim(cmd) && e.armed.CompareAndSwap(true, false) {
			e.enqueue()
			close(e.enqueued)
		}
		return err
	}
}

// A job enqueued while the dispatcher is between a claim that found
// nothing and its blocking wait is picked up at once: its wake-up token
// waits in the list for the wait that comes next, it is not lost until the
// poll interval (1.5s here) runs out.
func TestWakeBetweenClaimAndBlock(t *testing.T) {
	mr := miniredis.RunT(t)
	ctx := context.Background()
	other := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = other.Close() })
	ob, err := broker.New(other, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var sent time.Time
	hook := &enqueueAfterClaim{enqueued: make(chan struct{}), enqueue: func() {
		sent = time.Now()
		if _, err := ob.Client().Enqueue(ctx, broker.Job{Queue: worker.QueueDefault, Kind: "k"}); err != nil {
			t.Error(err)
		}
	}}
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(hook)
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan time.Time, 1)
	const poll = 1500 * time.Millisecond
	p, err := worker.New(b, handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		started <- time.Now()
		return nil
	}), worker.Config{PollInterval: poll, LeaseDuration: 9 * time.Second, Logger: slog.New(slog.DiscardHandler)})
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
	// Idle after its first claim; the next claim comes when the pool's
	// wait ends (a second, the client's longest block, or the poll).
	time.Sleep(50 * time.Millisecond)
	hook.armed.Store(true)
	select {
	case <-hook.enqueued:
	case <-time.After(2 * poll):
		t.Fatal("the dispatcher sent no claim")
	}
	select {
	case at := <-started:
		if d := at.Sub(sent); d > 500*time.Millisecond {
			t.Fatalf("picked up %v after the enqueue: the wake-up was missed", d)
		} else {
			t.Logf("picked up %v after the enqueue", d)
		}
	case <-time.After(2 * poll):
		t.Fatal("the job was never picked up")
	}
}
