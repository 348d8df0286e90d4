package pooltest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

type greetArgs struct {
	Name string `json:"name"`
}

// What a handler returns decides the job's fate.
func testResults(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	var flaky, snoozes atomic.Int32
	mux := handlers.NewMux()
	mux.HandleFunc("ok", func(_ context.Context, j *handlers.Job) error {
		j.SetResult([]byte("fine"))
		return nil
	})
	mux.HandleFunc("flaky", func(context.Context, *handlers.Job) error {
		if flaky.Add(1) < 3 {
			return errors.New("try again")
		}
		return nil
	})
	mux.HandleFunc("always", func(context.Context, *handlers.Job) error { return errors.New("always fails") })
	mux.HandleFunc("permanent", func(context.Context, *handlers.Job) error {
		return handlers.Permanent(errors.New("bad input"))
	})
	mux.HandleFunc("snooze", func(context.Context, *handlers.Job) error {
		if snoozes.Add(1) < 3 {
			return handlers.Snooze(10 * time.Millisecond)
		}
		return nil
	})
	mux.HandleFunc("panic", func(context.Context, *handlers.Job) error { panic("kaboom") })
	mux.Handle("greet", handlers.JSON(func(_ context.Context, j *handlers.Job, a greetArgs) error {
		j.SetResult([]byte("hello " + a.Name))
		return nil
	}))
	s.pool(t, mux)

	payload, _ := json.Marshal(greetArgs{Name: "ada"})
	cases := []struct {
		kind, payload string
		max           int
		state         broker.State
		attempt       int
		result, err   string
	}{
		{kind: "ok", state: broker.StateDone, attempt: 1, result: "fine"},
		{kind: "flaky", max: 5, state: broker.StateDone, attempt: 3},
		{kind: "always", max: 3, state: broker.StateDead, attempt: 3, err: "always fails"},
		{kind: "permanent", max: 5, state: broker.StateDead, attempt: 1, err: "bad input"},
		{kind: "snooze", max: 1, state: broker.StateDone, attempt: 1},
		{kind: "panic", max: 1, state: broker.StateDead, attempt: 1, err: "panic: kaboom"},
		{kind: "greet", payload: string(payload), state: broker.StateDone, attempt: 1, result: "hello ada"},
		{kind: "greet", payload: "{not json", max: 5, state: broker.StateDead, attempt: 1, err: "decode greet payload"},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			id := s.enqueue(t, broker.Job{Kind: tc.kind, Payload: []byte(tc.payload), MaxAttempts: tc.max})
			j := s.waitFinal(t, id, 10*time.Second)
			want(t, "state", j.State, tc.state)
			want(t, "attempt", j.Attempt, tc.attempt)
			want(t, "result", string(j.Result), tc.result)
			if !strings.Contains(j.LastError, tc.err) {
				t.Fatalf("last error %q does not contain %q", j.LastError, tc.err)
			}
			if tc.kind == "panic" && !strings.Contains(j.LastError, "goroutine") {
				t.Fatalf("a panic's last error lacks the stack: %q", j.LastError)
			}
		})
	}
	s.consistent(t)
}

// Cancelling a running job cancels its handler's context with
// ErrJobCancelled at the next heartbeat, and the job ends cancelled.
func testCancelRunning(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	started, cause := make(chan struct{}, 1), make(chan error, 1)
	s.pool(t, handlers.HandlerFunc(func(ctx context.Context, _ *handlers.Job) error {
		started <- struct{}{}
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}), func(c *worker.Config) { c.LeaseDuration = 300 * time.Millisecond })
	id := s.enqueue(t, broker.Job{})
	recv(t, "handler start", started, 10*time.Second)
	if _, err := s.b.Inspector().Cancel(s.ctx, s.q, id); err != nil {
		t.Fatal(err)
	}
	if c := recv(t, "the handler's cancellation", cause, 10*time.Second); !errors.Is(c, handlers.ErrJobCancelled) {
		t.Fatalf("cause = %v, want ErrJobCancelled", c)
	}
	want(t, "state", s.waitFinal(t, id, 10*time.Second).State, broker.StateCancelled)
}

// Progress is stored while the claim is valid, and refused after.
func testProgress(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	proceed, results := make(chan struct{}), make(chan error, 2)
	s.pool(t, handlers.HandlerFunc(func(ctx context.Context, j *handlers.Job) error {
		if j.Generation > 1 {
			return nil // the re-run after the operator's release
		}
		results <- j.Progress(ctx, []byte(`{"pct":10}`))
		<-proceed
		results <- j.Progress(ctx, []byte(`{"pct":90}`))
		return nil
	}), func(c *worker.Config) { c.LeaseDuration = time.Minute }) // the heartbeat stays out of it
	id := s.enqueue(t, broker.Job{})
	if err := recv(t, "first progress", results, 10*time.Second); err != nil {
		t.Fatalf("progress: %v", err)
	}
	j, _ := s.b.Inspector().Job(s.ctx, s.q, id)
	want(t, "stored progress", string(j.Progress), `{"pct":10}`)
	if _, err := s.b.Inspector().ReleaseUnowned(s.ctx, s.q, id); err != nil {
		t.Fatal(err)
	}
	close(proceed)
	if err := recv(t, "second progress", results, 10*time.Second); !errors.Is(err, handlers.ErrLeaseLost) {
		t.Fatalf("stale progress answered %v, want ErrLeaseLost", err)
	}
	j, _ = s.b.Inspector().Job(s.ctx, s.q, id)
	if string(j.Progress) == `{"pct":90}` {
		t.Fatal("a stale claim's progress was stored")
	}
}

// An idle pool blocks on the wake-up key: with a poll interval of a minute,
// only the enqueue's wake-up can make it pick the job up in time.
func testWake(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	ran := make(chan struct{}, 4)
	slow := func(c *worker.Config) { c.PollInterval = time.Minute; c.LeaseDuration = 3 * time.Minute }
	s.pool(t, handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		ran <- struct{}{}
		return nil
	}), slow)
	time.Sleep(100 * time.Millisecond) // let it go idle
	for range 3 {
		s.enqueue(t, broker.Job{})
		recv(t, "the woken pool to run the job", ran, 20*time.Second)
	}
}

// A retry in backoff wakes the idle pool too, which then blocks only until
// the retry falls due: with a minute's poll interval, nothing else would
// run the second attempt in time.
func testRetryWakes(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	var runs atomic.Int32
	ran := make(chan int32, 2)
	s.pool(t, handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		n := runs.Add(1)
		ran <- n
		if n == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}), func(c *worker.Config) {
		c.PollInterval, c.LeaseDuration = time.Minute, 3*time.Minute
		c.Backoff = func(int) time.Duration { return 200 * time.Millisecond }
	})
	time.Sleep(100 * time.Millisecond)
	id := s.enqueue(t, broker.Job{})
	recv(t, "the first attempt", ran, 20*time.Second)
	want(t, "second attempt", recv(t, "the retry", ran, 20*time.Second), int32(2))
	want(t, "state", s.waitFinal(t, id, 10*time.Second).State, broker.StateDone)
}

// A delayed job runs when due even though nothing wakes the pool: the claim
// tells it when the next scheduled job falls due.
func testScheduled(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	ran := make(chan time.Time, 1)
	s.pool(t, handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		ran <- time.Now()
		return nil
	}), func(c *worker.Config) { c.PollInterval = time.Minute; c.LeaseDuration = 3 * time.Minute })
	time.Sleep(100 * time.Millisecond)
	begin := time.Now()
	s.enqueue(t, broker.Job{Delay: 300 * time.Millisecond})
	at := recv(t, "the delayed job to run", ran, 20*time.Second)
	if at.Sub(begin) < 300*time.Millisecond {
		t.Fatalf("ran after %v, before its delay", at.Sub(begin))
	}
}

func testStrictPriority(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	for _, q := range []string{"low", "high"} {
		for range 3 {
			if _, err := s.b.Client().Enqueue(s.ctx, broker.Job{Queue: q, Kind: "k"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	order := make(chan string, 6)
	s.pool(t, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		order <- j.Queue
		return nil
	}), func(c *worker.Config) {
		c.Queues = []worker.Queue{{Name: "high"}, {Name: "low"}}
		c.StrictPriority, c.Concurrency = true, 1
	})
	var got []string
	for range 6 {
		got = append(got, recv(t, "a job", order, 10*time.Second))
	}
	if strings.Join(got, ",") != "high,high,high,low,low,low" {
		t.Fatalf("order %v, want every high job first", got)
	}
}

func testWeighted(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	done := make(chan string, 40)
	s.pool(t, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		done <- j.Queue
		return nil
	}), func(c *worker.Config) {
		c.Queues = []worker.Queue{{Name: "a", Weight: 3}, {Name: "b", Weight: 1}}
	})
	for i := range 40 {
		q := "a"
		if i%2 == 1 {
			q = "b"
		}
		if _, err := s.b.Client().Enqueue(s.ctx, broker.Job{Queue: q, Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	for range 40 {
		seen[recv(t, "a job", done, 10*time.Second)]++
	}
	if seen["a"] != 20 || seen["b"] != 20 {
		t.Fatalf("processed %v, want 20 of each", seen)
	}
}

// A paused queue's jobs wait, and Resume wakes the idle pool at once: with
// a minute's poll interval, nothing else would run them in time.
func testPauseResume(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	ran := make(chan string, 4)
	s.pool(t, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		ran <- j.ID
		return nil
	}), func(c *worker.Config) { c.PollInterval, c.LeaseDuration = time.Minute, 3*time.Minute })
	if err := s.b.Inspector().Pause(s.ctx, s.q); err != nil {
		t.Fatal(err)
	}
	id := s.enqueue(t, broker.Job{})
	select {
	case got := <-ran:
		t.Fatalf("ran %s while the queue was paused", got)
	case <-time.After(300 * time.Millisecond):
	}
	if err := s.b.Inspector().Resume(s.ctx, s.q); err != nil {
		t.Fatal(err)
	}
	want(t, "job run after resume", recv(t, "the job after Resume", ran, 20*time.Second), id)
}

// The reaper's upkeep deletes finished jobs past their retention.
func testRetentionUpkeep(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	ran := make(chan struct{}, 1)
	s.pool(t, handlers.HandlerFunc(func(context.Context, *handlers.Job) error { ran <- struct{}{}; return nil }),
		func(c *worker.Config) {
			c.LeaseDuration = 300 * time.Millisecond // reaps every 100ms
			c.Retention = &broker.Retention{Done: 50 * time.Millisecond}
		})
	id := s.enqueue(t, broker.Job{})
	recv(t, "the job to run", ran, 10*time.Second)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, err := s.b.Inspector().Job(s.ctx, s.q, id)
		if errors.Is(err, broker.ErrJobNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("done job still stored 10s later: %v", err)
		}
	}
	s.consistent(t)
}

// Retention bounds a queue by count with the ages left at their defaults,
// and keeps pace with the pool's own settlements: the reaper's clock (20 s
// here) is never waited for, also for the jobs retention spared at first,
// finished within broker.ResendHorizon of the trim after them.
func testRetentionByCount(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	const jobs, kept = 40, 3
	var ran sync.WaitGroup
	ran.Add(jobs)
	s.pool(t, handlers.HandlerFunc(func(context.Context, *handlers.Job) error { ran.Done(); return nil }),
		func(c *worker.Config) {
			c.ReapBatch = 5
			c.LeaseDuration = time.Minute // reaps every 20 s
			c.Retention = &broker.Retention{MaxDone: kept}
		})
	for range jobs {
		s.enqueue(t, broker.Job{})
	}
	ran.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, err := s.b.Inspector().Counts(s.ctx, s.q)
		if err != nil {
			t.Fatal(err)
		}
		if c.Done == kept {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d done jobs kept 10s after the last ran; retention keeps %d", c.Done, kept)
		}
	}
	s.consistent(t)
}

// Two pools carrying one schedule never enqueue a tick twice: each tick's
// job id comes from the schedule's name and the tick's time.
func testPeriodic(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	var runs atomic.Int32
	every := worker.Periodic{Name: "heartbeat-report", Every: time.Second, Job: broker.Job{Queue: s.q, Kind: "report"}}
	catchUp := worker.Periodic{Name: "hourly", Every: time.Hour, CatchUp: true, Job: broker.Job{Queue: s.q, Kind: "report"}}
	h := handlers.HandlerFunc(func(context.Context, *handlers.Job) error { runs.Add(1); return nil })
	withSchedules := func(c *worker.Config) { c.Periodic = []worker.Periodic{every, catchUp} }
	begin := time.Now()
	s.pool(t, h, withSchedules)
	s.pool(t, h, withSchedules)
	time.Sleep(3500 * time.Millisecond)
	ticks := int(time.Since(begin) / time.Second) // whole seconds passed: ticks fired, give or take one
	c, err := s.b.Inspector().Counts(s.ctx, s.q)
	if err != nil {
		t.Fatal(err)
	}
	jobs := int(c.Pending + c.Running + c.Done)
	// The hourly schedule caught up once (not twice); the 1s one fired once
	// per second, not twice per second.
	if jobs < ticks || jobs > ticks+2 {
		t.Fatalf("%d jobs after %d one-second ticks and one catch-up: a tick was enqueued twice or not at all", jobs, ticks)
	}
	hour := time.Now().Truncate(time.Hour)
	if _, err := s.b.Inspector().Job(s.ctx, s.q, fmt.Sprintf("periodic:hourly:%d", hour.Unix())); err != nil {
		t.Fatalf("the caught-up tick: %v", err)
	}
}

// A rate limit and a concurrency limit hold across three pools: they live
// in Redis and are enforced by the claim script.
func testLimitsAcrossPools(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	const rate, per = 5, 500 * time.Millisecond
	if err := s.b.Inspector().SetLimits(s.ctx, s.q, broker.Limits{MaxRunning: 2, Rate: rate, Per: per}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var starts []time.Time
	var running, peak int
	done := make(chan struct{}, 20)
	h := handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		mu.Lock()
		starts = append(starts, time.Now())
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(30 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		done <- struct{}{}
		return nil
	})
	for range 3 {
		s.pool(t, h, func(c *worker.Config) { c.Concurrency = 4 })
	}
	for range 15 {
		s.enqueue(t, broker.Job{})
	}
	for range 15 {
		recv(t, "a job to finish", done, 20*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	if peak > 2 {
		t.Fatalf("%d jobs ran at once across three pools; the limit is 2", peak)
	}
	// Starts are stamped after the claim, so allow a little slack at the
	// window's edge.
	for i, t0 := range starts {
		n := 0
		for _, t1 := range starts[i:] {
			if t1.Sub(t0) < per-150*time.Millisecond {
				n++
			}
		}
		if n > rate {
			t.Fatalf("%d starts within %v of %v; the limit is %d per %v", n, per, t0, rate, per)
		}
	}
}
