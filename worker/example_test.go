package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// A Pool claims jobs from its queues and runs a handler on each. Here an
// in-memory Redis (miniredis) stands in for a real one.
func ExamplePool() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	// A producer enqueues; any process with a broker on the same Redis can.
	id, err := b.Client().Enqueue(ctx, broker.Job{Queue: "emails", Kind: "welcome", Payload: []byte(`{"to":"ada@example.com"}`)})
	if err != nil {
		panic(err)
	}

	done := make(chan struct{})
	mux := handlers.NewMux()
	mux.HandleFunc("welcome", func(ctx context.Context, j *handlers.Job) error {
		defer close(done)
		fmt.Printf("attempt %d of %s: %s\n", j.Attempt, j.Kind, j.Payload)
		return nil // nil acknowledges the job: it is done
	})
	pool, err := worker.New(b, mux, worker.Config{
		Queues:      []worker.Queue{{Name: "emails"}},
		Concurrency: 4,
		Logger:      slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	if err := pool.Start(ctx); err != nil {
		panic(err)
	}
	<-done

	// Shutdown lets running handlers finish and settles what they returned.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Shutdown(sctx); err != nil {
		panic(err)
	}
	info, err := b.Inspector().Job(ctx, "emails", id)
	if err != nil {
		panic(err)
	}
	fmt.Println("state:", info.State, "succeeded:", pool.Stats().Succeeded)
	// Output:
	// attempt 1 of welcome: {"to":"ada@example.com"}
	// state: done succeeded: 1
}
