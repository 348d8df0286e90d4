package worker_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
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

// dropReply is a go-redis hook that loses the reply of the first command
// drop picks: Redis runs it, the client gets a connection error, as after
// a network failure past go-redis's own retries.
type dropReply struct {
	drop    func(cmd redis.Cmder) bool
	dropped atomic.Bool
}

func (d *dropReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (d *dropReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && !d.dropped.Load() && d.drop(cmd) && d.dropped.CompareAndSwap(false, true) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
}

func (d *dropReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil && !d.dropped.Load() && len(cmds) > 0 && d.drop(cmds[0]) && d.dropped.CompareAndSwap(false, true) {
			for _, c := range cmds {
				c.SetErr(io.ErrUnexpectedEOF)
			}
			return io.ErrUnexpectedEOF
		}
		return err
	}
}

// script reports whether cmd ran a script whose reply looks like want.
func scriptReply(cmd redis.Cmder, want func([]any) bool) bool {
	name := cmd.Name()
	if name != "evalsha" && name != "eval" && name != "fcall" {
		return false
	}
	v, ok := cmd.(*redis.Cmd).Val().([]any)
	return ok && want(v)
}

// syncBuffer is a log sink the pool's goroutines may write to at once.
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

// lostReplyPool runs one job of one attempt on a pool whose client loses
// the reply of the first command drop picks, and answers the job and the
// pool's log.
func lostReplyPool(t *testing.T, drop func(redis.Cmder) bool) (broker.JobInfo, worker.Stats, string) {
	d := &dropReply{drop: drop}
	var logs syncBuffer
	j, s := runOneJob(t, d, handlers.HandlerFunc(func(context.Context, *handlers.Job) error { return nil }), 1,
		worker.Config{LeaseDuration: 3 * time.Second, PollInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if !d.dropped.Load() {
		t.Fatal("no reply was dropped: the test did not test anything")
	}
	return j, s, logs.String()
}

// runOneJob enqueues one job of maxAttempts on a miniredis whose client has
// hook, runs a pool of cfg with h until the job is final, shuts the pool
// down, and answers the job and the pool's counters.
func runOneJob(t *testing.T, hook redis.Hook, h handlers.Handler, maxAttempts int, cfg worker.Config) (broker.JobInfo, worker.Stats) {
	t.Helper()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(hook)
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := worker.New(b, h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := b.Client().Enqueue(ctx, broker.Job{Queue: worker.QueueDefault, Kind: "k", MaxAttempts: maxAttempts})
	if err != nil {
		t.Fatal(err)
	}
	var j broker.JobInfo
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if j, err = b.Inspector().Job(ctx, worker.QueueDefault, id); err == nil && j.State.Final() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job not finished within 10s (a %v lease): %+v %v", cfg.LeaseDuration, j, err)
		}
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	return j, p.Stats()
}

// A claim whose reply is lost is asked for again under its request id: the
// job runs on its first attempt, and the reaper never has to charge it.
func TestClaimReplyLost(t *testing.T) {
	j, s, _ := lostReplyPool(t, func(cmd redis.Cmder) bool {
		// claim's reply: {now, next_due, njobs, ...}, with a job in it
		return scriptReply(cmd, func(v []any) bool { return len(v) > 3 && v[2] == int64(1) })
	})
	if j.State != broker.StateDone || j.Attempt != 1 || s.Reaped != 0 {
		t.Fatalf("job %s on attempt %d, reaped %d; want done on its one attempt", j.State, j.Attempt, s.Reaped)
	}
}

// An ack whose reply is lost is sent again and answers done: nothing is
// logged as a stale settlement.
func TestAckReplyLost(t *testing.T) {
	j, s, logs := lostReplyPool(t, func(cmd redis.Cmder) bool {
		// ack's reply for one job: {STATUS.ok}, and the claim's reply as
		// one nested array after it when the ack claimed for its slot
		// (renew, reap and take answer Redis's time first, fail and
		// progress a string after the status)
		return scriptReply(cmd, func(v []any) bool {
			if len(v) == 0 || v[0] != int64(0) {
				return false
			}
			if len(v) == 1 {
				return true
			}
			_, nested := v[1].([]any)
			return len(v) == 2 && nested
		})
	})
	if j.State != broker.StateDone || s.Stale != 0 || strings.Contains(logs, "stale") {
		t.Fatalf("job %s, %d stale settlements; log:\n%s", j.State, s.Stale, logs)
	}
}

// failCall is what one call of fail.lua carried: its ARGV's job token
// and claim n (EVALSHA sha numkeys KEYS... ARGV...).
type failCall struct {
	token string
	n     int64
}

// failCalls records each fail.lua call the pool sends (mode "retry") and
// loses the reply of the first one that claims after its failure.
type failCalls struct {
	mu      sync.Mutex
	calls   []failCall
	dropped atomic.Bool
}

func (f *failCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *failCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (f *failCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if n := cmd.Name(); n != "evalsha" && n != "fcall" || len(args) < 3 {
			return err
		}
		argv := args[3+int(toInt(args[2])):] // ARGV[1] is argv[0]
		if len(argv) < 12 || argv[4] != "retry" {
			return err
		}
		c := failCall{token: argv[3].(string), n: toInt(argv[7])}
		f.mu.Lock()
		f.calls = append(f.calls, c)
		f.mu.Unlock()
		if err == nil && c.n > 0 && f.dropped.CompareAndSwap(false, true) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
}

func toInt(v any) int64 {
	switch n := v.(type) {
	case int:
		return int64(n)
	case int64:
		return n
	}
	return -1
}

// A failure sent with a claim whose reply is lost: the broker sends the
// same call again, which answers what the first did, the failure and the
// claim (it took this very job back: it is the queue's only one, and the
// failure made it pending at once); the pool runs the job again. The job
// ends done on its second attempt with no stale settlement.
func TestFusedFailReplyLost(t *testing.T) {
	hook := &failCalls{}
	var runs atomic.Int32
	j, stats := runOneJob(t, hook, handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		if runs.Add(1) == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}), 3, worker.Config{Concurrency: 1, LeaseDuration: 3 * time.Second, PollInterval: 20 * time.Millisecond,
		Backoff: func(int) time.Duration { return 0 }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	hook.mu.Lock()
	calls := slices.Clone(hook.calls)
	hook.mu.Unlock()
	if !hook.dropped.Load() || len(calls) < 2 {
		t.Fatalf("fail.lua calls %+v: want a fused one whose reply was lost, then its re-send", calls)
	}
	first, again := calls[0], calls[1]
	if first.n == 0 || again != first {
		t.Fatalf("fail.lua calls %+v: want the failure with a claim, then the same call again", calls)
	}
	if j.State != broker.StateDone || j.Attempt != 2 || stats.Stale != 0 {
		t.Fatalf("job %s on attempt %d, %d stale settlements; want done on attempt 2, none stale", j.State, j.Attempt, stats.Stale)
	}
}
