// Command fencing shows fenceq's lease protocol on an embedded Redis: a
// worker stalls past its lease, the reaper recovers the job, a second worker
// completes it, and the first worker's late acknowledgement is rejected as
// stale instead of overwriting the result.
//
//	go run ./examples/fencing                         # embedded, in-memory Redis
//	go run ./examples/fencing -redis 127.0.0.1:6379   # a real Redis
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

func main() {
	addr := flag.String("redis", "", "Redis address (default: an embedded in-memory Redis)")
	flag.Parse()
	if *addr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			log.Fatalf("start embedded Redis: %v", err)
		}
		defer mr.Close()
		*addr = mr.Addr()
		fmt.Printf("embedded Redis at %s (in memory, not durable)\n", *addr)
	}
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	defer rdb.Close()
	if err := run(context.Background(), rdb); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, rdb *redis.Client) error {
	// A prefix of its own, so the demo never touches other data, and its
	// keys are removed at the end.
	prefix := fmt.Sprintf("fenceq-demo-%d", time.Now().UnixNano())
	defer func() {
		keys, _ := rdb.Keys(ctx, prefix+":*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	}()
	b, err := broker.New(rdb, broker.Options{Prefix: prefix})
	if err != nil {
		return err
	}
	const queue, lease = "emails", 300 * time.Millisecond

	id, err := b.Client().Enqueue(ctx, broker.Job{Queue: queue, Kind: "send_welcome", Payload: []byte(`{"to":"ada@example.com"}`)})
	if err != nil {
		return err
	}
	fmt.Printf("enqueued job %s\n", id)

	a, err := claimOne(ctx, b, queue, lease)
	if err != nil {
		return err
	}
	fmt.Printf("worker A claimed it: attempt %d, fencing token (id, generation) = (%s, %d)\n", a.Attempt, a.ID, a.Generation)

	fmt.Printf("worker A stalls (a GC pause, a network partition) past its %v lease...\n", lease)
	time.Sleep(lease + 100*time.Millisecond)
	expired, err := b.Inspector().ExpiredLeases(ctx, queue, 10)
	if err != nil {
		return err
	}
	fmt.Printf("expired leases not yet reaped: %d (A could still renew or settle it now)\n", len(expired))

	reaped, err := b.Leases().Reap(ctx, queue, 100)
	if err != nil {
		return err
	}
	for _, r := range reaped.Reaped {
		fmt.Printf("reaper recovered %s: now %s, generation %d\n", r.ID, r.State, r.Generation)
	}

	bl, err := claimOne(ctx, b, queue, lease)
	if err != nil {
		return err
	}
	fmt.Printf("worker B claimed it: attempt %d, generation %d\n", bl.Attempt, bl.Generation)

	late, err := b.Leases().Ack(ctx, a, []byte("sent by A"))
	if err != nil {
		return err
	}
	fmt.Printf("worker A wakes up and acks: %s (nothing changed)\n", late)

	ok, err := b.Leases().Ack(ctx, bl, []byte("sent by B"))
	if err != nil {
		return err
	}
	fmt.Printf("worker B acks: %s\n", ok)

	j, err := b.Inspector().Job(ctx, queue, id)
	if err != nil {
		return err
	}
	fmt.Printf("job %s: state %s, result %q, generation %d\n", j.ID, j.State, j.Result, j.Generation)
	return nil
}

func claimOne(ctx context.Context, b *broker.Broker, queue string, lease time.Duration) (broker.Lease, error) {
	res, err := b.Leases().Claim(ctx, queue, 1, lease)
	if err != nil {
		return broker.Lease{}, err
	}
	if len(res.Leases) != 1 {
		return broker.Lease{}, fmt.Errorf("claim took %d jobs, want 1", len(res.Leases))
	}
	return res.Leases[0], nil
}
