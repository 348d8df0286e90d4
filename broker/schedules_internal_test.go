package broker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// publishFirst is a go-redis hook that, before the first transaction that
// writes a stored schedule, runs publish: a pool publishing its config
// between the Go-side read of an Add and its write.
type publishFirst struct {
	publish func()
	done    atomic.Bool
}

func (h *publishFirst) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *publishFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *publishFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "hset" && !h.done.Swap(true) {
				h.publish()
			}
		}
		return next(ctx, cmds)
	}
}

// An Add that a pool's config publication overtakes between its read
// and its write is refused: the WATCH covers the config schedules.
func TestScheduleAddRacesConfigPublish(t *testing.T) {
	mr := miniredis.RunT(t)
	hooked := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	plain := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = hooked.Close(); _ = plain.Close() })
	operator, err := New(hooked, Options{})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := New(plain, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := Schedule{Name: "race", Every: time.Minute, Job: Job{Queue: "q", Kind: "k"}}
	h := &publishFirst{publish: func() {
		if err := pool.Schedules().PublishConfig(ctx, []Schedule{s}); err != nil {
			t.Error(err)
		}
	}}
	hooked.AddHook(h)
	if err := operator.Schedules().Add(ctx, s); !errors.Is(err, ErrScheduleFromConfig) {
		t.Fatalf("Add overtaken by a config publication answered %v", err)
	}
	if !h.done.Load() {
		t.Fatal("the hook never ran: the test tests nothing")
	}
	if ok, _ := plain.HExists(ctx, "fenceq:{schedules}:defs", "race").Result(); ok {
		t.Fatal("the schedule was stored beside the config one")
	}
}
