package worker_test

import (
	"context"
	"errors"
	"io"
	"slices"
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

// Redis goes away while a handler's ack is out with a claim for its slot.
// The pool asks for that claim again under its id (the claim may have run
// and taken a job that must not be charged an attempt), for up to a lease —
// but Shutdown's deadline ends the asking: Shutdown returns at its
// deadline, not a lease later, and leaves no goroutine behind. (The acker
// once did the asking itself, so every ack of the pool waited behind it.)
func TestShutdownDeadlineEndsFusedClaimReask(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	worker.SetAbandonAfter(t, 200*time.Millisecond)
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer c.Close()
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 {
		if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: worker.QueueDefault, Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	started, finish := make(chan struct{}, 3), make(chan struct{})
	p, err := worker.New(b, handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		started <- struct{}{}
		<-finish
		return nil
	}), worker.Config{Concurrency: 1, LeaseDuration: 20 * time.Second, ShutdownTimeout: 50 * time.Millisecond,
		PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-started
	mr.Close()    // Redis is gone
	close(finish) // the handler succeeds: its ack goes out with a claim
	time.Sleep(100 * time.Millisecond)
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	began := time.Now()
	err = p.Shutdown(sctx)
	if took := time.Since(began); !errors.Is(err, context.DeadlineExceeded) || took > 10*time.Second {
		t.Fatalf("Shutdown with a 1s deadline, Redis down: %v after %v; want the deadline's error, at the deadline (the lease is 20s)", err, took)
	}
}

// stallReask loses the reply of the first ack batch that claimed a job and
// fails every re-ask of that claim (its request id) until release closes.
type stallReask struct {
	req     atomic.Value // string: the lost claim's request id
	release chan struct{}
}

func (s *stallReask) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s *stallReask) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if req, _ := s.req.Load().(string); req != "" && slices.Contains(cmd.Args(), any(req)) {
			select {
			case <-s.release:
			default:
				cmd.SetErr(io.EOF)
				return io.EOF
			}
		}
		return next(ctx, cmd)
	}
}
func (s *stallReask) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if err == nil && tookOne(cmd) && s.req.CompareAndSwap(nil, cmd.Args()[3+toInt(cmd.Args()[2])+3]) { // past the KEYS
				for _, c := range cmds {
					c.SetErr(io.ErrUnexpectedEOF)
				}
				return io.ErrUnexpectedEOF
			}
		}
		return err
	}
}

// While the pool asks again for a claim whose answer was lost, and Redis
// keeps failing that one request, the acks of other jobs go through: the
// asking runs beside the acker, not in it. (The acker did it itself, and
// every ack of the pool waited behind it, up to a lease.)
func TestAcksGoOnWhileAClaimIsAskedAgain(t *testing.T) {
	s := &stallReask{release: make(chan struct{})}
	slow := make(chan struct{})
	var first atomic.Bool
	slowID := make(chan string, 1)
	b, p, _ := fusedRig(t, 3, worker.Config{Concurrency: 2, LeaseDuration: time.Minute}, func(_ context.Context, j *handlers.Job) error {
		if first.CompareAndSwap(false, true) {
			return nil // the first job's ack claims the third job, and loses the answer
		}
		select {
		case slowID <- j.ID:
			<-slow
		default:
		}
		return nil
	}, s)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for s.req.Load() == nil {
		time.Sleep(time.Millisecond)
	}
	id := <-slowID
	close(slow) // the other running job succeeds while the claim is asked for again
	for {
		j, err := b.Inspector().Job(context.Background(), worker.QueueDefault, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == broker.StateDone {
			break
		}
		select {
		case <-time.After(10 * time.Second):
			t.Fatalf("10s on, the second job is %s: its ack waits behind a claim being asked for again", j.State)
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(s.release)
	waitFinished(t, b, 3)
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
