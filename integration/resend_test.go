package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// asleep makes the Redis server admin reaches busy for d (DEBUG SLEEP, as
// a slow fsync or a long script would), and returns once it is: a probe's
// PING goes unanswered. The channel answers when the server wakes.
func asleep(t *testing.T, admin *redis.Client, d time.Duration) <-chan error {
	t.Helper()
	woke := make(chan error, 1)
	go func() { woke <- admin.Do(context.Background(), "DEBUG", "SLEEP", fmt.Sprint(d.Seconds())).Err() }()
	probe := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, ReadTimeout: 20 * time.Millisecond, MaxRetries: -1})
	defer func() { _ = probe.Close() }()
	for probe.Ping(context.Background()).Err() == nil {
	}
	return woke
}

// TestBrokerResendsThroughABusyServer is the audit's case: a client with a
// 150 ms read timeout, Redis busy for 600 ms. Claim, Retry and EnqueueMany
// ran on Redis; they answer what they did, not an i/o timeout: the claim
// its lease (a job of one attempt runs, not reaped dead), the retry the
// job's previous state, the enqueue its jobs. When the server stays busy
// past the broker's bound, the error says that the outcome is unknown and
// names the claim's request id, which answers its lease once Redis is back.
func TestBrokerResendsThroughABusyServer(t *testing.T) {
	admin := startServer(t, "--enable-debug-command", "local")
	ctx := context.Background()
	newBroker := func(o redis.Options) *broker.Broker {
		o.Addr, o.ReadTimeout = admin.Options().Addr, 150*time.Millisecond
		c := redis.NewClient(&o)
		t.Cleanup(func() { _ = c.Close() })
		b, err := broker.New(c, broker.Options{Prefix: "resend"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := newBroker(redis.Options{})
	const q = "q"

	once, err := b.Client().Enqueue(ctx, broker.Job{Queue: q, Kind: "k", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	woke := asleep(t, admin, 600*time.Millisecond)
	res, err := b.Leases().Claim(ctx, q, 1, time.Minute)
	if err != nil {
		t.Fatalf("Claim while Redis was busy: %v", err)
	}
	if len(res.Leases) != 1 || res.Leases[0].ID != once || res.Leases[0].Attempt != 1 {
		t.Fatalf("Claim while Redis was busy answered %+v; want job %s, attempt 1", res.Leases, once)
	}
	if err := <-woke; err != nil {
		t.Fatalf("DEBUG SLEEP: %v", err)
	}
	got, err := b.Leases().Fail(ctx, res.Leases[0], broker.Failure{Error: "boom", Dead: true})
	o := got.Outcome
	if err != nil || o != broker.OK {
		t.Fatalf("Fail of the lease the claim answered: %v %v", o, err)
	}

	woke = asleep(t, admin, 600*time.Millisecond)
	prev, err := b.Inspector().Retry(ctx, q, once)
	if err != nil || prev != broker.StateDead {
		t.Fatalf("Retry while Redis was busy answered %q, %v; want dead, no error", prev, err)
	}
	<-woke

	woke = asleep(t, admin, 600*time.Millisecond)
	for i, e := range b.Client().EnqueueMany(ctx, []broker.Job{{Queue: q, Kind: "k", ID: "a"}, {Queue: q, Kind: "k"}, {Queue: "r", Kind: "k"}}) {
		if e.Err != nil {
			t.Fatalf("EnqueueMany while Redis was busy: job %d answered %v", i, e.Err)
		}
	}
	<-woke
	c, err := b.Inspector().Counts(ctx, q)
	if err != nil || c.Pending != 3 || c.Running != 0 || c.Dead != 0 {
		t.Fatalf("counts %+v, %v: want 3 pending (the retried job and two enqueued), none running or dead", c, err)
	}

	// Busy past the bound: a client without go-redis's own retries, so the
	// bound is the broker's alone.
	quick := newBroker(redis.Options{MaxRetries: -1})
	woke = asleep(t, admin, 3*time.Second)
	_, err = quick.Leases().Claim(ctx, q, 1, time.Minute)
	var unknown *broker.OutcomeUnknownError
	if !errors.Is(err, broker.ErrOutcomeUnknown) || !errors.As(err, &unknown) || unknown.RequestID == "" {
		t.Fatalf("Claim while Redis stayed busy: %v; want an *OutcomeUnknownError naming the request id", err)
	}
	<-woke
	res, err = quick.Leases().ClaimRequest(ctx, unknown.RequestID, q, 1, time.Minute)
	if err != nil || len(res.Leases) != 1 || res.Leases[0].ID != once {
		t.Fatalf("ClaimRequest under the id the error named: %+v, %v; want the lease of %s", res.Leases, err, once)
	}
	if info, err := b.Inspector().Job(ctx, q, once); err != nil || info.ClaimID != res.Leases[0].ClaimID() {
		t.Fatalf("job %+v, %v: want it held by the lease the re-ask answered", info, err)
	}
}
