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
// argument it is (a reap, or a trim's first step) meets a server that
// accepted it and never answers.
const blockedBatch = 77

// hangMaintenance holds every maintenance script call (its last argument is
// blockedBatch) until release is closed, or, when it honours the context,
// until the call's context ends; one that does not is go-redis over a
// silent socket, which ends a read only at its read timeout (30s here).
type hangMaintenance struct {
	honoursCtx bool
	once       sync.Once
	ran        chan struct{}
	release    chan struct{}
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
				done := ctx.Done()
				if !h.honoursCtx {
					done = nil
				}
				select {
				case <-done:
					cmd.SetErr(ctx.Err())
					return ctx.Err()
				case <-time.After(30 * time.Second):
					cmd.SetErr(context.DeadlineExceeded)
					return cmd.Err()
				case <-h.release:
				}
			}
		}
		return next(ctx, cmd)
	}
}

// Shutdown returns soon after its ctx ends even while the maintenance
// service's reap hangs, whether or not the call honours its context:
// maintenance does not wait for a reap once it is stopped (nothing is
// lost, since a reap is safe to abort).
func TestShutdownWhileReapHangs(t *testing.T) {
	for _, tc := range []struct {
		name       string
		honoursCtx bool
		within     time.Duration
	}{
		{"CallEndsWithItsContext", true, 10 * time.Second},
		{"SilentServer", false, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &hangMaintenance{honoursCtx: tc.honoursCtx, ran: make(chan struct{}), release: make(chan struct{})}
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
			case <-time.After(tc.within):
				t.Fatalf("Shutdown has not returned %v after its ctx ended while a reap hangs", tc.within)
			}
		})
	}
}
