package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// an idle pool of two queues picks up a new job at once (a
// wake-up), not after its poll interval (5s here), also right after
// bursts that left both queues marked drained, and with a slot busy.
func TestIdlePickupTwoQueues(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprint("strict ", strict), func(t *testing.T) {
			mr := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			b, err := broker.New(c, broker.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			ran := make(chan time.Time, 100)
			block := make(chan struct{})
			p, err := worker.New(b, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
				if j.Kind == "block" {
					<-block
				}
				ran <- time.Now()
				return nil
			}), worker.Config{Queues: []worker.Queue{{Name: "a"}, {Name: "b"}}, StrictPriority: strict,
				Concurrency: 2, LeaseDuration: time.Minute, PollInterval: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer func() { close(block); _ = p.Shutdown(ctx) }()
			var worst time.Duration
			for i := range 20 {
				q := []string{"a", "b"}[i%2]
				n := 1 + i%3 // bursts of 1 to 3: fused claims find the queues drained
				sent := time.Now()
				for range n {
					if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: q, Kind: "k"}); err != nil {
						t.Fatal(err)
					}
				}
				for range n {
					select {
					case at := <-ran:
						worst = max(worst, at.Sub(sent))
					case <-time.After(10 * time.Second):
						t.Fatalf("round %d: a job of %s not picked up in 10s", i, q)
					}
				}
				if i == 10 { // from here one slot stays busy
					if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "a", Kind: "block"}); err != nil {
						t.Fatal(err)
					}
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("worst pickup %v", worst)
			if worst > time.Second {
				t.Fatalf("worst pickup %v with a 5s poll interval: a wake-up was missed", worst)
			}
		})
	}
}
