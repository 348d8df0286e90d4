package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// RED (liveness, lower severity): Redis goes away while a handler of a
// saturated pool finishes; Shutdown (no deadline) follows. Before fused
// claims Shutdown took about ShutdownTimeout + the abandon wait: the ack
// failed, the handler retried until the pool halted. Now the ack carried a
// claim, and the acker asks for that claim again for up to a whole lease
// (here 20s) before it lets the handler go, and Shutdown waits for it:
// every pool with long leases hangs that long on a Redis outage.
func TestRedShutdownWaitsALeaseForFusedClaim(t *testing.T) {
	worker.SetAbandonAfter(t, 200*time.Millisecond)
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		if _, err := b.Enqueue(ctx, broker.Job{Queue: worker.QueueDefault, Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	started, finish := make(chan struct{}, 3), make(chan struct{})
	p, err := worker.New(b, handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		started <- struct{}{}
		<-finish
		return nil
	}), worker.Config{Concurrency: 1, LeaseDuration: 20 * time.Second, ShutdownTimeout: 50 * time.Millisecond,
		PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-started
	mr.Close()    // Redis is gone
	close(finish) // the handler succeeds: its ack goes out with a claim
	time.Sleep(100 * time.Millisecond)
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- p.Shutdown(ctx) }()
	select {
	case <-done:
		t.Logf("Shutdown took %v", time.Since(began))
	case <-time.After(10 * time.Second):
		<-done
		t.Fatalf("Shutdown (ShutdownTimeout 50ms, abandon after 200ms) with Redis down took %v: the acker re-asks a fused claim for up to a lease (20s)", time.Since(began))
	}
}
