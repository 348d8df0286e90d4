package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

type outage struct {
	mr *miniredis.Miniredis
	b  *broker.Broker
}

func newOutage(t *testing.T) *outage {
	mr := miniredis.RunT(t)
	// miniredis's blocking commands ignore their timeout after Restart, so a
	// short read timeout bounds them; the pool blocks for half of it at most.
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), DialTimeout: 100 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &outage{mr: mr, b: b}
}

func (o *outage) start(t *testing.T, h handlers.HandlerFunc, lease time.Duration) *worker.Pool {
	p, err := worker.New(o.b, h, worker.Config{
		LeaseDuration: lease, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Loading the scripts compiles each one in miniredis's Lua, which on a
	// loaded machine can outlast the short read timeout above; Start may be
	// tried again after a failure, so a timeout there is tried again.
	err = p.Start(context.Background())
	for try := 1; err != nil && isTimeout(err) && try < 5; try++ {
		err = p.Start(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (o *outage) waitDone(t *testing.T, id string) broker.JobInfo {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if j, err := o.b.Inspector().Job(context.Background(), worker.QueueDefault, id); err == nil && j.State.Final() {
			return j
		}
	}
	t.Fatalf("job %s not finished", id)
	return broker.JobInfo{}
}

// A Redis outage while a handler runs stalls its settlement; when Redis is
// back, the ack goes through. Nothing is lost and nothing runs twice.
func TestOutageShorterThanLease(t *testing.T) {
	o := newOutage(t)
	started, finish := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	p := o.start(t, func(context.Context, *handlers.Job) error {
		runs.Add(1)
		close(started)
		<-finish
		return nil
	}, 10*time.Second)
	id, err := o.b.Client().Enqueue(context.Background(), broker.Job{Queue: worker.QueueDefault, Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	o.mr.Close()
	close(finish) // the ack now fails and is retried
	time.Sleep(300 * time.Millisecond)
	if err := o.mr.Restart(); err != nil {
		t.Fatal(err)
	}
	j := o.waitDone(t, id)
	if j.State != broker.StateDone || runs.Load() != 1 {
		t.Fatalf("state %s after %d runs, want done after 1", j.State, runs.Load())
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// An outage longer than the lease cancels the handler with ErrLeaseExpired
// at the locally measured deadline; once Redis is back the job is given
// back (or reaped) and completed once.
func TestOutageLongerThanLease(t *testing.T) {
	o := newOutage(t)
	started, cause := make(chan struct{}, 1), make(chan error, 1)
	var runs atomic.Int32
	p := o.start(t, func(ctx context.Context, _ *handlers.Job) error {
		if runs.Add(1) > 1 {
			return nil
		}
		started <- struct{}{}
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}, 300*time.Millisecond)
	id, err := o.b.Client().Enqueue(context.Background(), broker.Job{Queue: worker.QueueDefault, Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	o.mr.Close()
	select {
	case c := <-cause:
		if !errors.Is(c, handlers.ErrLeaseExpired) {
			t.Fatalf("cause = %v, want ErrLeaseExpired", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler was not cancelled at its lease deadline")
	}
	if err := o.mr.Restart(); err != nil {
		t.Fatal(err)
	}
	j := o.waitDone(t, id)
	if j.State != broker.StateDone || runs.Load() != 2 {
		t.Fatalf("state %s after %d runs, want done after 2", j.State, runs.Load())
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Shutdown leaves no goroutine behind.
func TestShutdownLeaksNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer c.Close()
	b, _ := broker.New(c, broker.Options{})
	ran := make(chan struct{}, 10)
	p, err := worker.New(b, handlers.HandlerFunc(func(ctx context.Context, _ *handlers.Job) error {
		ran <- struct{}{}
		<-ctx.Done() // still running at Shutdown: cancelled and released
		return ctx.Err()
	}), worker.Config{ShutdownTimeout: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := b.Client().Enqueue(context.Background(), broker.Job{Queue: worker.QueueDefault, Kind: "k"}); err != nil {
			t.Fatal(err)
		}
		<-ran
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Released != 3 || s.Running != 0 {
		t.Fatalf("stats after shutdown: %+v", s)
	}
}

// A pool whose Start failed (no Redis) can be neither shut down nor left
// half-running; Start can be tried again.
func TestStartWithoutRedis(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	b, _ := broker.New(c, broker.Options{})
	p, err := worker.New(b, handlers.NewMux(), worker.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		err = p.Start(context.Background())
		if err == nil || !strings.Contains(err.Error(), "cannot reach Redis") {
			t.Fatalf("Start = %v, want an error saying Redis cannot be reached", err)
		}
	}
	if err := p.Shutdown(context.Background()); err == nil {
		t.Fatal("Shutdown of a pool that never started succeeded")
	}
}

// A Shutdown whose ctx has already ended stops at once; its log blames no
// handler for ignoring its context (they return when cancelled) and tells
// of no lost claim, for none was lost.
func TestShutdownWithEndedContextBlamesNothing(t *testing.T) {
	var logs syncBuffer
	b, p, _ := fusedRig(t, 3, worker.Config{Concurrency: 3, Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		func(ctx context.Context, _ *handlers.Job) error {
			<-ctx.Done()
			return ctx.Err()
		})
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); p.Stats().Running < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: %+v, want 3 running", p.Stats())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown = %v, want context.Canceled", err)
	}
	out := logs.String()
	for _, wrong := range []string{"ignored its cancelled context", "lost claim"} {
		if strings.Contains(out, wrong) {
			t.Errorf("the log says %q:\n%s", wrong, out)
		}
	}
	if c, err := b.Inspector().Counts(context.Background(), worker.QueueDefault); err != nil || c.Running != 0 || c.Pending != 3 {
		t.Fatalf("after Shutdown: %+v, %v; want the 3 jobs pending again", c, err)
	}
}
