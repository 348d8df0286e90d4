package worker

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
)

// stopped fails t unless wait returns within d.
func stopped(t *testing.T, name string, s service, d time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { s.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: wait did not return %v after stop", name, d)
	}
}

// A loop's stop may be called any number of times, before or after start;
// wait returns once its goroutine has returned, and at once for a loop
// that never started.
func TestLoopLifecycle(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	t.Run("RunningLoop", func(t *testing.T) {
		l := newLoop()
		var exited atomic.Bool
		l.run(func() {
			<-l.ctx.Done()
			time.Sleep(10 * time.Millisecond) // wait must not return before this
			exited.Store(true)
		})
		l.stop()
		l.stop()
		l.wait()
		if !exited.Load() {
			t.Fatal("wait returned before the loop's goroutine did")
		}
		l.stop()
		l.wait() // again: at once
	})
	t.Run("NeverStarted", func(t *testing.T) {
		l := newLoop()
		l.stop()
		l.wait()
		var ran atomic.Bool
		l.run(func() { ran.Store(true) }) // too late: nothing runs
		l.wait()
		if ran.Load() {
			t.Fatal("a loop ran after it was stopped and waited for")
		}
	})
}

type idleRelayer struct{ calls atomic.Int64 }

func (r *idleRelayer) RelayOnce(ctx context.Context) (int, error) {
	r.calls.Add(1)
	return 0, nil
}

// Each service of a pool, started on its own, ends when it is stopped:
// its stop is idempotent, and its wait returns once its loop has exited.
func TestServicesStop(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer c.Close()
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	relayer := &idleRelayer{}
	p, err := New(b, handlers.HandlerFunc(func(context.Context, *handlers.Job) error { return nil }), Config{
		LeaseDuration: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond,
		Periodic: []Periodic{{Name: "tick", Every: time.Hour, Job: broker.Job{Queue: QueueDefault, Kind: "k"}}},
		Outbox:   relayer,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    service
	}{
		{"dispatcher", p.dispatcher}, {"maintenance", p.maintenance}, {"heartbeat", p.heartbeat},
		{"acker", p.acker}, {"scheduler", p.scheduler}, {"relay", p.relay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.s.start()
			time.Sleep(120 * time.Millisecond) // into its loop: a wait, a block, a tick
			tc.s.stop()
			tc.s.stop()
			stopped(t, tc.name, tc.s, 5*time.Second)
			tc.s.stop()
			stopped(t, tc.name, tc.s, time.Second)
		})
	}
	if relayer.calls.Load() == 0 {
		t.Error("the relay never ran its Relayer")
	}
}

// A scheduler without schedules and a relay without an outbox have no
// loop to run: stopping them returns at once.
func TestIdleServicesStop(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for name, s := range map[string]service{"scheduler": &scheduler{loop: newLoop()}, "relay": newRelay(context.Background(), relayParams{})} {
		s.start()
		s.stop()
		stopped(t, name, s, time.Second)
	}
}
