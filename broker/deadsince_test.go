package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// DeadSince counts the deaths after the instant it is given and answers
// the newest's, to count from next time: a death is counted once, a
// retried job is no longer dead, and a queue without one answers 0, 0.
func TestDeadSince(t *testing.T) {
	mr := miniredis.RunT(t)
	at := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	mr.SetTime(at)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := b.Inspector()
	if n, newest, err := in.DeadSince(ctx, "q", 0); err != nil || n != 0 || newest != 0 {
		t.Fatalf("an empty queue: %d, %d, %v; want 0, 0", n, newest, err)
	}
	kill := func(id string) {
		t.Helper()
		if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "k", ID: id}); err != nil {
			t.Fatal(err)
		}
		res, err := b.Leases().Claim(ctx, "q", 1, time.Minute)
		if err != nil || len(res.Leases) != 1 {
			t.Fatalf("claim %s: %v", id, err)
		}
		if _, err := b.Leases().Fail(ctx, res.Leases[0], broker.Failure{Error: "no", Dead: true}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		kill(fmt.Sprint("a", i))
	}
	n, newest, err := in.DeadSince(ctx, "q", 0)
	if err != nil || n != 3 || newest != at.UnixMilli() {
		t.Fatalf("3 dead: %d, newest %d, %v; want 3, %d", n, newest, err, at.UnixMilli())
	}
	mr.SetTime(at.Add(time.Second))
	kill("b0")
	if n, newest2, err := in.DeadSince(ctx, "q", newest); err != nil || n != 1 || newest2 != at.Add(time.Second).UnixMilli() {
		t.Fatalf("one more: %d, newest %d, %v; want 1", n, newest2, err)
	}
	if _, err := in.Retry(ctx, "q", "b0"); err != nil {
		t.Fatal(err)
	}
	if n, _, err := in.DeadSince(ctx, "q", newest); err != nil || n != 0 {
		t.Fatalf("after the retry: %d, %v; want 0", n, err)
	}
	if _, _, err := in.DeadSince(ctx, "no{braces}", 0); err == nil {
		t.Fatal("a queue name no queue can have was read")
	}
}
