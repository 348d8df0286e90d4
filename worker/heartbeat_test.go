package worker_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// nodeDown fails, while down is set, every command that names a key of one
// queue, as the Redis node holding that queue's slot would while it is
// unreachable. The other queues' commands, even in the same pipeline, go
// through.
type nodeDown struct {
	tag  string // the queue's hash tag, "{name}"
	down atomic.Bool
}

func (n *nodeDown) hits(c redis.Cmder) bool {
	if !n.down.Load() {
		return false
	}
	for _, a := range c.Args() {
		if s, ok := a.(string); ok && strings.Contains(s, n.tag) {
			return true
		}
	}
	return false
}

func (n *nodeDown) DialHook(next redis.DialHook) redis.DialHook { return next }

func (n *nodeDown) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		if n.hits(c) {
			c.SetErr(io.EOF)
			return io.EOF
		}
		return next(ctx, c)
	}
}

func (n *nodeDown) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var up []redis.Cmder
		for _, c := range cmds {
			if n.hits(c) {
				c.SetErr(io.EOF)
			} else {
				up = append(up, c)
			}
		}
		if len(up) == 0 {
			return io.EOF
		}
		return next(ctx, up)
	}
}

// A lease that passes its local deadline while its ack waits out an outage
// of its queue's node must not stop the heartbeat from renewing the leases
// of other queues: their handlers keep running.
func TestSettlingLeasePastDeadlineLeavesOthersRenewed(t *testing.T) {
	const lease = 300 * time.Millisecond
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	down := &nodeDown{tag: "{b}"}
	c.AddHook(down)
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}

	longStarted, finishLong := make(chan struct{}), make(chan struct{})
	cause := make(chan error, 1)
	var longRuns atomic.Int32
	var outageBegan atomic.Bool
	settling := make(chan struct{})
	mux := handlers.NewMux()
	mux.HandleFunc("long", func(ctx context.Context, _ *handlers.Job) error {
		longRuns.Add(1)
		close(longStarted)
		select {
		case <-ctx.Done():
			cause <- context.Cause(ctx)
			return ctx.Err()
		case <-finishLong:
			return nil
		}
	})
	mux.HandleFunc("quick", func(context.Context, *handlers.Job) error {
		if outageBegan.CompareAndSwap(false, true) {
			down.down.Store(true) // its ack now fails and is retried
			close(settling)
		}
		return nil
	})
	p, err := worker.New(b, mux, worker.Config{
		Queues:        []worker.Queue{{Name: "a"}, {Name: "b"}},
		LeaseDuration: lease, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	longID, err := b.Client().Enqueue(ctx, broker.Job{Queue: "a", Kind: "long"})
	if err != nil {
		t.Fatal(err)
	}
	<-longStarted
	quickID, err := b.Client().Enqueue(ctx, broker.Job{Queue: "b", Kind: "quick"})
	if err != nil {
		t.Fatal(err)
	}
	<-settling

	// The quick job's lease passes its deadline after one lease; the long
	// one's would pass after two leases without a renewal.
	select {
	case got := <-cause:
		t.Fatalf("the healthy handler was cancelled while another queue's ack was retried: %v", got)
	case <-time.After(5 * lease):
	}
	down.down.Store(false)
	close(finishLong)

	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for _, j := range []struct{ queue, id string }{{"a", longID}, {"b", quickID}} {
		info, err := b.Client().Wait(wctx, j.queue, j.id)
		if err != nil || info.State != broker.StateDone {
			t.Fatalf("job %s of queue %s: %+v, %v; want done", j.id, j.queue, info, err)
		}
	}
	if n := longRuns.Load(); n != 1 {
		t.Fatalf("the long job ran %d times, want 1", n)
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.LeasesLost != 0 {
		t.Fatalf("stats: %+v; want no lease lost", s)
	}
}
