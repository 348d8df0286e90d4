package fence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/fence"
)

func TestRedisHSet(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	f, err := fence.NewRedis(rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	write := func(job string, gen int64, v string) bool {
		t.Helper()
		ok, err := f.HSet(ctx, "account:7", fence.Token{JobID: job, Generation: gen}, "balance", v)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	steps := []struct {
		job     string
		gen     int64
		value   string
		applied bool
		stored  string
	}{
		{"j1", 1, "10", true, "10"},  // the first claim writes
		{"j1", 3, "30", true, "30"},  // its successor writes
		{"j1", 1, "11", false, "30"}, // the stale claim comes back: refused
		{"j1", 3, "31", true, "31"},  // the valid claim may write again
		{"j2", 1, "99", true, "99"},  // another job is fenced on its own
		{"j1", 2, "20", false, "99"}, // still stale for j1
	}
	for i, s := range steps {
		if got := write(s.job, s.gen, s.value); got != s.applied {
			t.Fatalf("step %d (%s gen %d): applied %v, want %v", i, s.job, s.gen, got, s.applied)
		}
		if v, _ := rdb.HGet(ctx, "account:7", "balance").Result(); v != s.stored {
			t.Fatalf("step %d: balance %q, want %q", i, v, s.stored)
		}
	}
	if _, err := f.HSet(ctx, "k", fence.Token{JobID: "j", Generation: 1}, "odd"); err == nil {
		t.Fatal("an odd number of field/value strings was accepted")
	}
}

// A job trimmed by retention and enqueued again under its id runs with
// generations above its predecessor's, so its fenced writes are applied,
// and the old job's stay refused.
func TestFenceAcrossIDReuse(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fence.NewRedis(rdb)
	if err != nil {
		t.Fatal(err)
	}
	run := func(value string) broker.Lease {
		t.Helper()
		if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "k", ID: "invoice-7"}); err != nil {
			t.Fatal(err)
		}
		// Other jobs come and go meanwhile, as in any busy queue.
		for range 3 {
			if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "other"}); err != nil {
				t.Fatal(err)
			}
		}
		res, err := b.Leases().Claim(ctx, "q", 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var mine broker.Lease
		for _, l := range res.Leases {
			if l.ID == "invoice-7" {
				mine = l
			}
			if _, err := b.Leases().Ack(ctx, l, nil); err != nil {
				t.Fatal(err)
			}
		}
		ok, err := f.HSet(ctx, "account:7", fence.Token{JobID: mine.ID, Generation: mine.Generation}, "balance", value)
		if err != nil || !ok {
			t.Fatalf("the fenced write of generation %d: applied %v, %v", mine.Generation, ok, err)
		}
		return mine
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mr.SetTime(now)
	old := run("10")
	mr.SetTime(now.Add(time.Hour)) // retention of a minute trims it
	if n, err := b.Leases().Trim(ctx, "q", broker.Retention{Done: time.Minute}, 100); err != nil || n == 0 {
		t.Fatalf("Trim: %d, %v", n, err)
	}
	if _, err := b.Inspector().Job(ctx, "q", "invoice-7"); !errors.Is(err, broker.ErrJobNotFound) {
		t.Fatalf("invoice-7 should have been trimmed: %v", err)
	}
	reused := run("20")
	if reused.Generation <= old.Generation {
		t.Fatalf("the re-created job runs under generation %d, not above the old job's %d", reused.Generation, old.Generation)
	}
	if ok, _ := f.HSet(ctx, "account:7", fence.Token{JobID: old.ID, Generation: old.Generation}, "balance", "11"); ok {
		t.Fatal("the old job's late write was applied over the new job's")
	}
}
