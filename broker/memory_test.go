package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// On a server without MEMORY USAGE ... SAMPLES and INFO memory
// (miniredis), the memory reads degrade and say so: Footprint still counts
// the jobs, and neither read is an error that stops a caller. The figures
// themselves are checked on a real server (integration:
// TestFootprintRealRedis).
func TestMemoryOnAServerThatCannotSay(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "k", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}

	f, err := b.Inspector().Footprint(ctx, "q")
	if err != nil {
		t.Fatalf("Footprint failed on a server without MEMORY USAGE: %v", err)
	}
	if f.Measured || !strings.Contains(f.Unmeasured, "MEMORY USAGE") || f.Estimate != 0 || f.PerJob != 0 {
		t.Fatalf("footprint %+v: want unmeasured, saying why, with no byte figures", f)
	}
	if f.Jobs[broker.StatePending] != 3 || f.TotalJobs() != 3 {
		t.Fatalf("jobs %v: want the 3 pending counted anyway", f.Jobs)
	}

	if _, err := b.Inspector().ServerMemory(ctx); !errors.Is(err, broker.ErrNoMemoryInfo) {
		t.Fatalf("ServerMemory: %v, want ErrNoMemoryInfo", err)
	}
	if _, err := b.Inspector().QueueMemory(ctx, "q"); !errors.Is(err, broker.ErrNoMemoryInfo) {
		t.Fatalf("QueueMemory: %v, want ErrNoMemoryInfo", err)
	}
	var v *broker.ValidationError
	if _, err := b.Inspector().Footprint(ctx, "a{b}"); !errors.As(err, &v) {
		t.Fatalf("Footprint of a bad queue name: %v, want a ValidationError", err)
	}
}
