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

	id, _ := b.Client().Enqueue(ctx, broker.Job{Queue: "emails", Kind: "welcome", ID: "welcome-42"})
	first, _ := b.Leases().Claim(ctx, "emails", 1, 30*time.Second)
	a := first.Leases[0]
	fmt.Println("A holds", a.ID, "at generation", a.Generation)

	// An operator force-releases the job (or A's lease expires and is
	// reaped), and worker B claims it.
	_, _ = b.Inspector().ReleaseUnowned(ctx, "emails", id)
	second, _ := b.Leases().Claim(ctx, "emails", 1, 30*time.Second)
	bl := second.Leases[0]
	fmt.Println("B holds", bl.ID, "at generation", bl.Generation)

	late, _ := b.Leases().Ack(ctx, a, []byte("from A"))
	fmt.Println("A's late ack:", late)
	ok, _ := b.Leases().Ack(ctx, bl, []byte("from B"))
	fmt.Println("B's ack:", ok)

	j, _ := b.Inspector().Job(ctx, "emails", id)
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
	bt, _ := broker.NewBatcher(b.Client(), broker.BatcherOptions{})
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

	c, _ := b.Inspector().Counts(ctx, "emails")
	fmt.Println(c.Pending, "pending")
	// Output:
	// true
	// 100 pending
}

// WelcomeArgs is a typed job: its kind is declared once, on the type, and
// its payload is its JSON.
type WelcomeArgs struct {
	To string `json:"to"`
}

// Kind names the job kind; it reads nothing from the value.
func (WelcomeArgs) Kind() string { return "welcome" }

// DigestArgs also has default options: its queue, and a unique key
// computed from the value, so one digest per user and day is enqueued.
type DigestArgs struct {
	User string `json:"user"`
	Day  string `json:"day"`
}

// Kind names the job kind.
func (DigestArgs) Kind() string { return "digest" }

// EnqueueOptions are the defaults of every digest job.
func (a DigestArgs) EnqueueOptions() broker.EnqueueOptions {
	return broker.EnqueueOptions{Queue: "emails", MaxAttempts: 5, UniqueKey: "digest-" + a.User + "-" + a.Day}
}

// EnqueueArgs enqueues a value of an args type: kind and payload come from
// the value, options from the type's defaults overlaid by the caller's.
func ExampleClient_EnqueueArgs() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	ctx := context.Background()
	b, _ := broker.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), broker.Options{})

	id, _ := b.Client().EnqueueArgs(ctx, WelcomeArgs{To: "ada@example.com"}, nil)
	j, _ := b.Inspector().Job(ctx, broker.QueueDefault, id)
	fmt.Printf("%s job in queue %s: %s\n", j.Kind, j.Queue, j.Payload)

	digest := DigestArgs{User: "ada", Day: "2030-01-01"}
	first, _ := b.Client().EnqueueArgs(ctx, digest, &broker.EnqueueOptions{Priority: 10})
	j, _ = b.Inspector().Job(ctx, "emails", first)
	fmt.Printf("%s job in queue %s, priority %d, %d attempts\n", j.Kind, j.Queue, j.Priority, j.MaxAttempts)

	again, err := b.Client().EnqueueArgs(ctx, digest, nil)
	fmt.Println("same day again:", errors.Is(err, broker.ErrUniqueHeld), again == first)
	// Output:
	// welcome job in queue default: {"to":"ada@example.com"}
	// digest job in queue emails, priority 10, 5 attempts
	// same day again: true true
}

// JobFor builds the Job a typed enqueue stores, for the paths that take a
// Job: EnqueueMany, a Batcher, an outbox.
func ExampleJobFor() {
	var jobs []broker.Job
	for _, to := range []string{"ada@example.com", "grace@example.com"} {
		j, err := broker.JobFor(WelcomeArgs{To: to}, &broker.EnqueueOptions{Queue: "emails"})
		if err != nil {
			panic(err)
		}
		jobs = append(jobs, j)
	}
	for _, j := range jobs {
		fmt.Println(j.Queue, j.Kind, string(j.Payload))
	}

	_, err := broker.JobFor((*WelcomeArgs)(nil), nil)
	fmt.Println(err)
	// Output:
	// emails welcome {"to":"ada@example.com"}
	// emails welcome {"to":"grace@example.com"}
	// fenceq: invalid args "*broker_test.WelcomeArgs": is a nil pointer: pass a value of the type, or a pointer to one
}
