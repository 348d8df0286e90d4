package broker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// A worker whose lease was taken over cannot settle the job any more: its
// late ack answers Stale and the successor's result is the one kept.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	ctx := context.Background()
	b, _ := broker.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), broker.Options{})

	id, _ := b.Enqueue(ctx, broker.Job{Queue: "emails", Kind: "welcome", ID: "welcome-42"})
	first, _ := b.Claim(ctx, "emails", 1, 30*time.Second)
	a := first.Leases[0]
	fmt.Println("A holds", a.ID, "at generation", a.Generation)

	// An operator force-releases the job (or A's lease expires and is
	// reaped), and worker B claims it.
	_, _ = b.ReleaseUnowned(ctx, "emails", id)
	second, _ := b.Claim(ctx, "emails", 1, 30*time.Second)
	bl := second.Leases[0]
	fmt.Println("B holds", bl.ID, "at generation", bl.Generation)

	late, _ := b.Ack(ctx, a, []byte("from A"))
	fmt.Println("A's late ack:", late)
	ok, _ := b.Ack(ctx, bl, []byte("from B"))
	fmt.Println("B's ack:", ok)

	j, _ := b.Job(ctx, "emails", id)
	fmt.Printf("%s: %s, result %q\n", j.ID, j.State, j.Result)
	// Output:
	// A holds welcome-42 at generation 1
	// B holds welcome-42 at generation 3
	// A's late ack: stale
	// B's ack: ok
	// welcome-42: done, result "from B"
}

// Many goroutines enqueue one job each and wait for its answer; a Batcher
// lets their jobs share round trips, and answers each as Enqueue would.
func ExampleBatcher() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	ctx := context.Background()
	b, _ := broker.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), broker.Options{})
	bt, _ := broker.NewBatcher(b, broker.BatcherOptions{})
	defer bt.Close()

	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(1)
		go func() { // a request handler, say
			defer wg.Done()
			if _, err := bt.Enqueue(ctx, broker.Job{Queue: "emails", Kind: "welcome", ID: fmt.Sprint("welcome-", i)}); err != nil {
				fmt.Println(err)
			}
		}()
	}
	wg.Wait()
	_, err := bt.Enqueue(ctx, broker.Job{Queue: "emails", Kind: "welcome", ID: "welcome-7"})
	fmt.Println(errors.Is(err, broker.ErrJobExists))

	c, _ := b.Counts(ctx, "emails")
	fmt.Println(c.Pending, "pending")
	// Output:
	// true
	// 100 pending
}
