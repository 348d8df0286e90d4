package worker_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// blockedBatch is the ReapBatch of the test below: a script call whose last
// argument it is, a reap (or a trim's first step), hangs.
const blockedBatch = 77

// hangMaintenance holds every maintenance script call (its last argument is
// blockedBatch) until the call's context ends or release is closed: a Redis
// that accepted the call and never answers.
type hangMaintenance struct {
	once    sync.Once
	ran     chan struct{}
	release chan struct{}
}

func (h *hangMaintenance) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *hangMaintenance) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *hangMaintenance) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		switch cmd.Name() {
		case "fcall", "evalsha", "eval":
			if len(args) > 0 && args[len(args)-1] == blockedBatch {
				h.once.Do(func() { close(h.ran) })
				select {
				case <-ctx.Done():
					cmd.SetErr(ctx.Err())
					return ctx.Err()
				case <-h.release:
				}
			}
		}
		return next(ctx, cmd)
	}
}

// Shutdown returns after its ctx ends even while the maintenance service's
// reap hangs: stopping the service ends the call (nothing is lost, since a
// reap is safe to abort).
func TestShutdownWhileReapHangs(t *testing.T) {
	h := &hangMaintenance{ran: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { close(h.release) })
	cfg := worker.Config{Logger: slog.New(slog.DiscardHandler), PollInterval: 10 * time.Millisecond, LeaseDuration: 60 * time.Millisecond, ReapBatch: blockedBatch}
	_, p, _ := fusedRig(t, 0, cfg, func(context.Context, *handlers.Job) error { return nil }, h)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.ran:
	case <-time.After(10 * time.Second):
		t.Fatal("no reap in 10s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Shutdown(ctx)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown has not returned 10s after its ctx ended while a reap hangs")
	}
}
