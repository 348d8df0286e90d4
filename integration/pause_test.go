package integration

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

type pauseRig struct {
	admin *redis.Client
	b     *broker.Broker
	pool  *worker.Pool
	runs  atomic.Int32
	logs  syncBuffer
}

// newPauseRig starts a private server and a pool whose handler is run.
func newPauseRig(t *testing.T, lease time.Duration, run func(ctx context.Context, n int32) error) *pauseRig {
	r := &pauseRig{admin: startServer(t)}
	// The pool's own client: a command stuck behind CLIENT PAUSE must not
	// outlive the renew deadline by much.
	c := redis.NewClient(&redis.Options{Addr: r.admin.Options().Addr, ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	var err error
	if r.b, err = broker.New(c, broker.Options{}); err != nil {
		t.Fatal(err)
	}
	r.pool, err = worker.New(r.b, handlers.HandlerFunc(func(ctx context.Context, _ *handlers.Job) error {
		return run(ctx, r.runs.Add(1))
	}), worker.Config{LeaseDuration: lease, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&r.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.pool.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = r.pool.Shutdown(ctx)
	})
	return r
}

func (r *pauseRig) pause(t *testing.T, d time.Duration) {
	if err := r.admin.Do(context.Background(), "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
}

func (r *pauseRig) waitDone(t *testing.T, id string) broker.JobInfo {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if j, err := r.b.Inspector().Job(context.Background(), worker.QueueDefault, id); err == nil && j.State.Final() {
			return j
		}
	}
	t.Fatalf("job %s did not finish; logs:\n%s", id, r.logs.String())
	return broker.JobInfo{}
}

// A CLIENT PAUSE shorter than the lease only delays a renew: the job runs
// once and completes once.
func TestClientPauseShorterThanLease(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	r := newPauseRig(t, 1500*time.Millisecond, func(ctx context.Context, _ int32) error {
		close(started)
		select {
		case <-time.After(1500 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	id, err := r.b.Client().Enqueue(context.Background(), broker.Job{Queue: worker.QueueDefault, Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	r.pause(t, 400*time.Millisecond)
	j := r.waitDone(t, id)
	if j.State != broker.StateDone || j.Attempt != 1 || r.runs.Load() != 1 {
		t.Fatalf("state %s attempt %d after %d runs; want done once", j.State, j.Attempt, r.runs.Load())
	}
	if s := r.pool.Stats(); s.LeasesLost != 0 || s.Stale != 0 {
		t.Fatalf("stats %+v\n%s", s, r.logs.String())
	}
}

// A CLIENT PAUSE longer than the lease: the heartbeat cannot renew, so at
// the locally measured deadline the handler's context is cancelled with
// ErrLeaseExpired; after the pause the job is recovered and exactly one
// completion is stored.
func TestClientPauseLongerThanLease(t *testing.T) {
	t.Parallel()
	started, cause := make(chan struct{}), make(chan error, 1)
	var done atomic.Int32
	r := newPauseRig(t, 600*time.Millisecond, func(ctx context.Context, n int32) error {
		if n > 1 {
			done.Add(1)
			return nil
		}
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	})
	id, err := r.b.Client().Enqueue(context.Background(), broker.Job{Queue: worker.QueueDefault, Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	begin := time.Now()
	r.pause(t, 2500*time.Millisecond)
	select {
	case c := <-cause:
		if !errors.Is(c, handlers.ErrLeaseExpired) {
			t.Fatalf("cause = %v, want ErrLeaseExpired", c)
		}
		if took := time.Since(begin); took > 2*time.Second {
			t.Fatalf("cancelled %v into the pause, after it ended rather than at the deadline", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler not cancelled")
	}
	j := r.waitDone(t, id)
	if j.State != broker.StateDone || done.Load() != 1 {
		t.Fatalf("state %s with %d completions; want done once", j.State, done.Load())
	}
}

// Startup warns loudly when an eviction policy could drop job hashes.
func TestStartupWarnsAboutEviction(t *testing.T) {
	t.Parallel()
	admin := startServer(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	b, err := broker.New(admin, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	p, err := worker.New(b, handlers.NewMux(), worker.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "maxmemory-policy is not noeviction") || !strings.Contains(logs.String(), "allkeys-lru") {
		t.Fatalf("no eviction warning in:\n%s", logs.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
