package worker_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// A handler that Shutdown abandoned and that returns success afterwards
// finds the acker gone: its ack must give up, not wait for an answer that
// never comes. Several handlers, since each one raced the halt for a place
// in the acker's queue.
func TestAbandonedHandlerEnds(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	worker.SetAbandonAfter(t, 50*time.Millisecond)
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer c.Close()
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	ran, returnNow := make(chan struct{}, n), make(chan struct{})
	p, err := worker.New(b, handlers.HandlerFunc(func(ctx context.Context, _ *handlers.Job) error {
		ran <- struct{}{}
		<-ctx.Done()
		<-returnNow // ignores its cancellation
		return nil
	}), worker.Config{Concurrency: n, ShutdownTimeout: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := b.Client().Enqueue(context.Background(), broker.Job{Queue: worker.QueueDefault, Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		<-ran
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(returnNow) // the abandoned handlers return now; goleak waits for them
}
