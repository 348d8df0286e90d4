package fence_test

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

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
