package broker

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// splitPipeline runs a pipeline that reads the limits hash in two parts,
// and between them calls between: what another client's call may do
// between two commands of a pipeline, which Redis does not run as one.
// A transaction it leaves whole, calling between before it.
type splitPipeline struct {
	between func()
}

func (h *splitPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *splitPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *splitPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if f := h.between; f != nil && len(cmds) > 0 && cmds[0].Name() == "multi" {
			// A transaction runs whole: another client's call comes
			// before it (or after), never between its commands.
			h.between = nil
			f()
			return next(ctx, cmds)
		}
		for i, c := range cmds {
			if f := h.between; f != nil && i > 0 && c.Name() == "hmget" {
				h.between = nil
				if err := next(ctx, cmds[:i]); err != nil {
					return err
				}
				f()
				return next(ctx, cmds[i:])
			}
		}
		return next(ctx, cmds)
	}
}

// Counts reads a queue's pending count as ready0's length less its
// tombstones: read in two steps, a claim that pops tombstones between them
// makes them count as pending jobs. Here 3 tombstones and no pending job
// read as 3 pending (FAILS: Counts' pipeline is no transaction).
func TestCountsPendingBetweenReads(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &splitPipeline{}
	rdb.AddHook(hook)
	b, err := New(rdb, Options{Prefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		if _, err := b.Client().Enqueue(ctx, Job{Queue: "q", Kind: "k", ID: id}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Inspector().Cancel(ctx, "q", id); err != nil {
			t.Fatal(err)
		}
	}
	hook.between = func() {
		if _, err := b.Leases().Claim(ctx, "q", 1, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	c, err := b.Inspector().Counts(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if hook.between != nil {
		t.Fatal("the claim did not run")
	}
	if c.Pending != 0 {
		t.Fatalf("Counts: %d pending, want 0: the queue holds only tombstones of cancelled jobs", c.Pending)
	}
}
