package worker_test

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// stallClaim lets Redis run the first claim that takes a job, then holds
// its reply until release is closed and loses it (a connection error).
type stallClaim struct {
	once    sync.Once
	ran     chan struct{}
	release chan struct{}
}

func (s *stallClaim) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *stallClaim) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (s *stallClaim) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && scriptReply(cmd, func(v []any) bool { return len(v) > 3 && v[2] == int64(1) }) {
			hit := false
			s.once.Do(func() { hit = true })
			if hit {
				close(s.ran)
				<-s.release
				cmd.SetErr(io.ErrUnexpectedEOF)
				return io.ErrUnexpectedEOF
			}
		}
		return err
	}
}

// Shutdown while a claim's reply is lost: the pool stops re-sending the
// claim the moment Shutdown halts (at once, as no handler runs), though
// Redis is up again. The job is left running under a lease nobody holds;
// its attempt is charged and, with one attempt, the reaper makes it dead
// without its handler ever running. Expected: the re-send gets its leases
// back (Redis answers) and Shutdown releases them, uncharged (invariant 9;
// Shutdown's "releases their leases so another pool takes their jobs at
// once without charging an attempt"). Deterministic.
func TestRedteam3ShutdownDuringClaimResendLosesJob(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	s := &stallClaim{ran: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(s)
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := b.Enqueue(ctx, broker.Job{Queue: worker.QueueDefault, Kind: "k", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	lease := 3 * time.Second
	p, err := worker.New(b, handlers.HandlerFunc(func(context.Context, *handlers.Job) error { ran.Add(1); return nil }),
		worker.Config{LeaseDuration: lease, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-s.ran // Redis has run the claim; its reply is on its way
	done := make(chan error, 1)
	go func() { done <- p.Shutdown(ctx) }()
	<-worker.Halted(p) // Shutdown has given up on Redis
	close(s.release)   // the reply is lost; Redis answers from now on
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	j, err := b.Job(ctx, worker.QueueDefault, id)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != broker.StatePending || j.Attempt != 0 {
		// Show what it costs: the lease expires, the reaper charges it.
		mr.SetTime(time.Now().Add(2 * lease))
		if _, err := b.Reap(ctx, worker.QueueDefault, 10); err != nil {
			t.Fatal(err)
		}
		after, _ := b.Job(ctx, worker.QueueDefault, id)
		t.Fatalf("after Shutdown the job is %s on attempt %d (no pool holds it); once its lease expires the reaper makes it %s, handler runs %d; want pending, attempt 0",
			j.State, j.Attempt, after.State, ran.Load())
	}
}

// outageAfterClaim loses the reply of the first claim that takes a job
// (Redis ran it) and then fails every re-send of that request id, as a
// node that stays unreachable would; the first claim under another id
// means the pool gave up the re-sends: gaveUp closes and Redis answers
// from then on.
type outageAfterClaim struct {
	mu      sync.Mutex
	sha     string
	req     string
	gaveUp  chan struct{}
	closed  bool
	resends int
}

func (o *outageAfterClaim) DialHook(next redis.DialHook) redis.DialHook { return next }
func (o *outageAfterClaim) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (o *outageAfterClaim) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		o.mu.Lock()
		if o.sha != "" && !o.closed && len(args) > 3 && args[1] == o.sha {
			if args[len(args)-2] == o.req {
				o.resends++
				o.mu.Unlock()
				cmd.SetErr(io.EOF)
				return io.EOF
			}
			o.closed = true
			close(o.gaveUp)
		}
		o.mu.Unlock()
		err := next(ctx, cmd)
		if err == nil && scriptReply(cmd, func(v []any) bool { return len(v) > 3 && v[2] == int64(1) }) {
			o.mu.Lock()
			defer o.mu.Unlock()
			if o.sha == "" {
				o.sha, o.req = args[1].(string), args[len(args)-2].(string)
				cmd.SetErr(io.ErrUnexpectedEOF)
				return io.ErrUnexpectedEOF
			}
		}
		return err
	}
}

// A claim's reply is lost and the re-sends fail for more than half a
// lease (a short outage, a CLIENT PAUSE): claimQueue gives the request id
// up and claims under new ids. The job the first send took stays running
// under a lease nobody holds, is charged an attempt, and with one attempt
// the reaper makes it dead without its handler ever running. Invariant 9:
// "A lost reply never costs a job an attempt". The request id is still
// good until the lease ends (ClaimRequest's doc), so the pool could keep
// asking under it. Deterministic (the outage ends when the pool uses a
// new request id).
func TestRedteam3ClaimResendGivesUpAndOrphansJob(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	o := &outageAfterClaim{gaveUp: make(chan struct{})}
	c.AddHook(o)
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id, err := b.Enqueue(ctx, broker.Job{Queue: worker.QueueDefault, Kind: "k", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	lease := 600 * time.Millisecond
	p, err := worker.New(b, handlers.HandlerFunc(func(context.Context, *handlers.Job) error { ran.Add(1); return nil }),
		worker.Config{LeaseDuration: lease, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-o.gaveUp
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	j, err := b.Job(ctx, worker.QueueDefault, id)
	if err != nil {
		t.Fatal(err)
	}
	if ran.Load() == 0 && (j.State != broker.StatePending || j.Attempt != 0) {
		mr.SetTime(time.Now().Add(10 * lease))
		if _, err := b.Reap(ctx, worker.QueueDefault, 10); err != nil {
			t.Fatal(err)
		}
		after, _ := b.Job(ctx, worker.QueueDefault, id)
		t.Fatalf("after %d failed re-sends the pool gave the claim up: the job is %s on attempt %d, no pool holds it; reaped it is %s, handler runs %d; want it run or pending uncharged",
			o.resends, j.State, j.Attempt, after.State, ran.Load())
	}
}
