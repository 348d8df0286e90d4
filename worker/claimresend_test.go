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

// Shutdown while a claim's reply is lost and Redis is up again: the pool
// keeps asking under the claim's request id even while it halts, gets its
// leases back and releases them, uncharged (invariant 9; Shutdown
// "releases their leases ... without charging an attempt"). A pool that
// stopped asking the moment Shutdown halted would leave the job running
// under a lease nobody holds, to be charged and, with one attempt, made
// dead by the reaper without its handler ever running.
func TestShutdownDuringClaimResend(t *testing.T) {
	s := &stallClaim{ran: make(chan struct{}), release: make(chan struct{})}
	lease := 3 * time.Second
	r := startOneAttempt(t, s, &redis.Options{}, lease)
	mr, b, id, p, ran, ctx := r.mr, r.b, r.id, r.p, &r.ran, context.Background()
	<-s.ran // Redis has run the claim; its reply is on its way
	done := make(chan error, 1)
	go func() { done <- p.Shutdown(ctx) }()
	<-worker.Halted(p) // Shutdown has given up on Redis
	close(s.release)   // the reply is lost; Redis answers from now on
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	j, err := b.Inspector().Job(ctx, worker.QueueDefault, id)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != broker.StatePending || j.Attempt != 0 {
		// Show what it costs: the lease expires, the reaper charges it.
		mr.SetTime(time.Now().Add(2 * lease))
		if _, err := b.Leases().Reap(ctx, worker.QueueDefault, 10); err != nil {
			t.Fatal(err)
		}
		after, _ := b.Inspector().Job(ctx, worker.QueueDefault, id)
		t.Fatalf("after Shutdown the job is %s on attempt %d (no pool holds it); once its lease expires the reaper makes it %s, handler runs %d; want pending, attempt 0",
			j.State, j.Attempt, after.State, ran.Load())
	}
}

// outageAfterClaim loses the reply of the first claim that takes a job
// (Redis ran it) and then fails every re-send of that request id for
// outage, as a node unreachable that long would; the first claim under
// another id closes next (the pool has moved on).
type outageAfterClaim struct {
	mu      sync.Mutex
	outage  time.Duration
	until   time.Time
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
			if args[len(args)-2] == o.req && time.Now().Before(o.until) {
				o.resends++
				o.mu.Unlock()
				cmd.SetErr(io.EOF)
				return io.EOF
			}
			if args[len(args)-2] != o.req {
				o.closed = true
				close(o.gaveUp)
			}
		}
		o.mu.Unlock()
		err := next(ctx, cmd)
		if err == nil && scriptReply(cmd, func(v []any) bool { return len(v) > 3 && v[2] == int64(1) }) {
			o.mu.Lock()
			defer o.mu.Unlock()
			if o.sha == "" {
				o.sha, o.req = args[1].(string), args[len(args)-2].(string)
				o.until = time.Now().Add(o.outage)
				cmd.SetErr(io.ErrUnexpectedEOF)
				return io.ErrUnexpectedEOF
			}
		}
		return err
	}
}

// A claim's reply is lost and the re-sends fail for more than half a
// lease, less than a whole one (a short outage, a CLIENT PAUSE): the pool
// must keep asking under the same request id, good for the whole lease,
// and run the job on its first attempt. (It gave the id up at half a
// lease: the job stayed running under a lease nobody held and, with one
// attempt, the reaper made it dead without its handler ever running.)
func TestClaimResentThroughAnOutage(t *testing.T) {
	lease := 600 * time.Millisecond
	o := &outageAfterClaim{gaveUp: make(chan struct{}), outage: 2 * lease / 3}
	r := startOneAttempt(t, o, &redis.Options{MaxRetries: -1}, lease)
	mr, b, id, p, ran, ctx := r.mr, r.b, r.id, r.p, &r.ran, context.Background()
	<-o.gaveUp
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	j, err := b.Inspector().Job(ctx, worker.QueueDefault, id)
	if err != nil {
		t.Fatal(err)
	}
	if ran.Load() == 0 && (j.State != broker.StatePending || j.Attempt != 0) {
		mr.SetTime(time.Now().Add(10 * lease))
		if _, err := b.Leases().Reap(ctx, worker.QueueDefault, 10); err != nil {
			t.Fatal(err)
		}
		after, _ := b.Inspector().Job(ctx, worker.QueueDefault, id)
		t.Fatalf("after %d failed re-sends the pool gave the claim up: the job is %s on attempt %d, no pool holds it; reaped it is %s, handler runs %d; want it run or pending uncharged",
			o.resends, j.State, j.Attempt, after.State, ran.Load())
	}
}

// oneAttempt is a job of one attempt and a started pool whose client
// carries hook, counting the runs of its handler.
type oneAttempt struct {
	mr  *miniredis.Miniredis
	b   *broker.Broker
	id  string
	p   *worker.Pool
	ran atomic.Int32
}

func startOneAttempt(t *testing.T, hook redis.Hook, opts *redis.Options, lease time.Duration) *oneAttempt {
	t.Helper()
	r := &oneAttempt{mr: miniredis.RunT(t)}
	opts.Addr = r.mr.Addr()
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(hook)
	var err error
	if r.b, err = broker.New(c, broker.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if r.id, err = r.b.Client().Enqueue(ctx, broker.Job{Queue: worker.QueueDefault, Kind: "k", MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	r.p, err = worker.New(r.b, handlers.HandlerFunc(func(context.Context, *handlers.Job) error { r.ran.Add(1); return nil }),
		worker.Config{LeaseDuration: lease, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}
