package pooltest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// The seed's restart case: pool A holds a lease and dies without releasing
// it (its trace is a bare claim that nobody renews); pool B, started before
// A's lease expires, completes the job within lease + reap interval while
// it keeps running.
func testRestartCase(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	const lease = 600 * time.Millisecond
	id := s.enqueue(t, broker.Job{})
	res, err := s.b.Leases().Claim(s.ctx, s.q, 1, lease)
	if err != nil || len(res.Leases) != 1 {
		t.Fatalf("A's claim: %v %+v", err, res)
	}
	start := time.Now()
	ran := make(chan int, 1)
	pb := s.pool(t, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		ran <- j.Attempt
		return nil
	}), func(c *worker.Config) { c.LeaseDuration = lease })

	want(t, "attempt that B ran", recv(t, "B to run the orphaned job", ran, 10*time.Second), 2)
	j := s.waitFinal(t, id, 5*time.Second)
	want(t, "state", j.State, broker.StateDone)
	reapInterval := max(lease/3, 50*time.Millisecond)
	if took := time.Since(start); took > lease+reapInterval+2*time.Second {
		t.Fatalf("recovery took %v; the bound is lease %v + reap interval %v (+2s slack)", took, lease, reapInterval)
	}
	want(t, "B's reaped count", pb.Stats().Reaped, int64(1))
	s.consistent(t)
}

// A handler that runs far past its lease but keeps renewing is never
// stolen, even with a second pool hungry for work: it runs exactly once.
func testSlowHandler(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	var runs atomic.Int32
	slow := handlers.HandlerFunc(func(ctx context.Context, _ *handlers.Job) error {
		runs.Add(1)
		select {
		case <-time.After(2 * time.Second):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	short := func(c *worker.Config) { c.LeaseDuration = 300 * time.Millisecond }
	pa := s.pool(t, slow, short)
	pb := s.pool(t, slow, short)
	id := s.enqueue(t, broker.Job{})
	j := s.waitFinal(t, id, 15*time.Second)
	want(t, "state", j.State, broker.StateDone)
	want(t, "runs", runs.Load(), int32(1))
	want(t, "attempt", j.Attempt, 1)
	want(t, "leases lost", pa.Stats().LeasesLost+pb.Stats().LeasesLost, int64(0))
	want(t, "stale settlements", pa.Stats().Stale+pb.Stats().Stale, int64(0))
}

// A stolen job's late completion is ignored: pool A's handler ignores its
// context and returns after pool B finished; B's result is stored and A's
// settlement is rejected as stale, and logged.
func testLateAck(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	aStarted, bDone := make(chan *handlers.Job, 1), make(chan struct{})
	pa := s.pool(t, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		aStarted <- j
		<-bDone // ignores its context on purpose
		j.SetResult([]byte("A"))
		return nil
	}), func(c *worker.Config) {
		c.LeaseDuration = time.Minute // heartbeat every 20s: A acks before it notices, on a loaded machine too
		c.Concurrency = 1             // and A cannot take the job back itself
	})
	id := s.enqueue(t, broker.Job{})
	ja := recv(t, "A to start", aStarted, 10*time.Second)

	// An operator takes the job from A; B claims it and finishes.
	if _, err := s.b.Inspector().ReleaseUnowned(s.ctx, s.q, id); err != nil {
		t.Fatal(err)
	}
	bRan := make(chan int64, 1)
	s.pool(t, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		j.SetResult([]byte("B"))
		bRan <- j.Generation
		return nil
	}))
	genB := recv(t, "B to run", bRan, 10*time.Second)
	if genB <= ja.Generation {
		t.Fatalf("B's generation %d is not above A's %d", genB, ja.Generation)
	}
	j := s.waitFinal(t, id, 5*time.Second)
	close(bDone)
	pa.shutdown(t) // waits for A's settlement
	want(t, "A's stale settlements", pa.Stats().Stale, int64(1))
	j2, _ := s.b.Inspector().Job(s.ctx, s.q, id)
	want(t, "stored result", string(j2.Result), "B")
	want(t, "state", j.State, broker.StateDone)
	if s.logs.count("stale settlement rejected") != 1 {
		t.Fatalf("A's stale settlement was not logged:\n%s", s.logs)
	}
}

// When the heartbeat finds the lease gone, the handler's context is
// cancelled with ErrLeaseLost, and whatever it returns is not settled.
func testLostLease(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	started, cause := make(chan struct{}, 1), make(chan error, 1)
	var once sync.Once
	p := s.pool(t, handlers.HandlerFunc(func(ctx context.Context, j *handlers.Job) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil // the re-run after the operator's release
		}
		started <- struct{}{}
		<-ctx.Done()
		cause <- context.Cause(ctx)
		j.SetResult([]byte("stale"))
		return nil // pretends it succeeded: must not be stored
	}), func(c *worker.Config) { c.LeaseDuration = 300 * time.Millisecond })
	id := s.enqueue(t, broker.Job{})
	recv(t, "handler start", started, 10*time.Second)
	if _, err := s.b.Inspector().ReleaseUnowned(s.ctx, s.q, id); err != nil {
		t.Fatal(err)
	}
	if c := recv(t, "the handler's cancellation", cause, 10*time.Second); !errors.Is(c, handlers.ErrLeaseLost) {
		t.Fatalf("cause = %v, want ErrLeaseLost", c)
	}
	j := s.waitFinal(t, id, 10*time.Second) // the re-run completes it
	if string(j.Result) == "stale" {
		t.Fatal("the lost lease's result was stored")
	}
	// The first handler logs its discarded result after it returns, which
	// the re-run's completion does not wait for: give it a moment.
	for deadline := time.Now().Add(5 * time.Second); s.logs.count("discarded the result") == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if s.logs.count("discarded the result") != 1 {
		t.Fatalf("discarded result not logged:\n%s", s.logs)
	}
	if p.Stats().LeasesLost < 1 {
		t.Fatalf("stats: %+v", p.Stats())
	}
}

// Continuous ready work does not starve recovery: the reaper runs on the
// pool's maintenance loop, on its own schedule, so an orphan is recovered
// while the pool never runs out of ready jobs.
func testNoStarvation(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	const lease = 300 * time.Millisecond
	orphan := s.enqueue(t, broker.Job{Kind: "orphan"})
	if res, err := s.b.Leases().Claim(s.ctx, s.q, 1, lease); err != nil || len(res.Leases) != 1 {
		t.Fatalf("orphan claim: %v", err)
	}
	for range 50 {
		s.enqueue(t, broker.Job{Kind: "busy"})
	}
	orphanRan := make(chan struct{}, 1)
	stop := make(chan struct{})
	var producing sync.WaitGroup
	producing.Add(1)
	go func() { // keeps the ready index from ever emptying
		defer producing.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "busy"}); err != nil {
				t.Errorf("producer: %v", err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	defer func() { close(stop); producing.Wait() }()
	s.pool(t, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		if j.Kind == "orphan" {
			orphanRan <- struct{}{}
			return nil
		}
		time.Sleep(2 * time.Millisecond)
		return nil
	}), func(c *worker.Config) { c.LeaseDuration = lease; c.Concurrency = 2 })
	recv(t, "the orphan to be recovered and run", orphanRan, 10*time.Second)
	c, err := s.b.Inspector().Counts(s.ctx, s.q)
	if err != nil {
		t.Fatal(err)
	}
	if c.Pending == 0 {
		t.Fatal("the queue ran dry, so this did not test starvation")
	}
	want(t, "orphan state", s.waitFinal(t, orphan, 5*time.Second).State, broker.StateDone)
}

// Graceful shutdown mid-job releases the lease: another pool finishes the
// job long before the lease would have expired, and the attempt is not
// charged.
func testGracefulShutdown(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	started := make(chan struct{}, 1)
	pa := s.pool(t, handlers.HandlerFunc(func(ctx context.Context, _ *handlers.Job) error {
		started <- struct{}{}
		<-ctx.Done()
		return context.Cause(ctx)
	}), func(c *worker.Config) { c.LeaseDuration = time.Minute; c.ShutdownTimeout = 50 * time.Millisecond })
	id := s.enqueue(t, broker.Job{})
	recv(t, "A to start", started, 10*time.Second)
	ran := make(chan int, 1)
	s.pool(t, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		ran <- j.Attempt
		return nil
	}))
	begin := time.Now()
	pa.shutdown(t)
	want(t, "attempt on B", recv(t, "B to run the released job", ran, 10*time.Second), 1)
	if took := time.Since(begin); took > 30*time.Second {
		t.Fatalf("took %v, as long as the lease", took)
	}
	want(t, "released by A", pa.Stats().Released, int64(1))
	want(t, "state", s.waitFinal(t, id, 5*time.Second).State, broker.StateDone)
	s.consistent(t)
}
