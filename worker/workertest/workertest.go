// Package workertest helps users test their handlers, the way net/http's
// httptest helps test HTTP handlers: an in-memory Redis (miniredis) whose
// clock only moves when the test says so, a broker over it, assertions about
// what was enqueued, and Work, which runs a real worker pool until nothing
// is left to do now.
//
//	env := workertest.New(t)
//	signup(ctx, env.Broker.Client(), "ada@example.com") // code under test enqueues
//	env.RequireEnqueuedArgs(t, WelcomeArgs{To: "ada@example.com"}, nil)
//	env.Work(t, mux)                                    // runs it
//	env.Advance(time.Hour)                              // retries and delays fall due
//
// RequireEnqueuedArgs checks a typed job (broker.Args); RequireEnqueued
// checks one by queue and kind, as an exec or http job is enqueued. The
// Env's Broker serves the rest: its Client for the code under test, its
// Inspector to read or pause a queue, and the Broker itself for a pool of
// your own (worker.New).
package workertest

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// Env is one test's queue: everything in memory, torn down with the test.
type Env struct {
	Broker *broker.Broker       // the broker over Redis: Broker.Client() to enqueue, Broker.Inspector() to look, the Broker for worker.New
	Client *redis.Client        // a go-redis client of Redis, for what the broker does not offer
	Redis  *miniredis.Miniredis // the in-memory server; move its clock with Advance, not SetTime

	mu  sync.Mutex
	now time.Time
}

// New starts an Env whose clock stands at 2030-01-01T00:00:00Z until
// Advance moves it.
func New(t testing.TB) *Env {
	t.Helper()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := &Env{Broker: b, Client: c, Redis: mr, now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	mr.SetTime(e.now)
	return e
}

// Now is the Env's Redis clock.
func (e *Env) Now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

// Advance moves the Redis clock forward: delayed jobs and retries in
// backoff fall due, leases expire, TTLs run out.
func (e *Env) Advance(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.now = e.now.Add(d)
	e.Redis.SetTime(e.now)
	e.Redis.FastForward(d)
}

// Enqueued lists the jobs of kind waiting in queue (pending or scheduled).
func (e *Env) Enqueued(t testing.TB, queue, kind string) []broker.JobInfo {
	t.Helper()
	var out []broker.JobInfo
	for _, st := range []broker.State{broker.StatePending, broker.StateScheduled} {
		js, err := e.Broker.Inspector().Jobs(context.Background(), queue, st, 100000)
		if err != nil {
			t.Fatalf("workertest: list %s jobs: %v", st, err)
		}
		for _, j := range js {
			if j.Kind == kind {
				out = append(out, j)
			}
		}
	}
	return out
}

// RequireEnqueued fails the test unless a job of kind waits in queue with a
// payload that decodes equal to args (compared as JSON values).
func (e *Env) RequireEnqueued(t testing.TB, queue, kind string, args any) broker.JobInfo {
	t.Helper()
	want, err := json.Marshal(args)
	if err != nil {
		t.Fatalf("workertest: encode args: %v", err)
	}
	var wantV any
	_ = json.Unmarshal(want, &wantV)
	jobs := e.Enqueued(t, queue, kind)
	for _, j := range jobs {
		var got any
		if json.Unmarshal(j.Payload, &got) == nil && reflect.DeepEqual(got, wantV) {
			return j
		}
	}
	var payloads []string
	for _, j := range jobs {
		payloads = append(payloads, string(j.Payload))
	}
	t.Fatalf("workertest: no %q job in queue %q with args %s; it holds %d: %v", kind, queue, want, len(jobs), payloads)
	return broker.JobInfo{}
}

// RequireEnqueuedArgs fails the test unless a job of args' kind waits
// (pending or scheduled) in the queue a typed enqueue of args with opts
// goes to, with a payload JSON-equal to args. Queue and kind are resolved
// as broker.JobFor resolves them: opts' queue, else the type's default,
// else broker.QueueDefault. Pass the opts the code under test passes
// (nil for none); only their queue matters here.
func (e *Env) RequireEnqueuedArgs(t testing.TB, args broker.Args, opts *broker.EnqueueOptions) broker.JobInfo {
	t.Helper()
	j, err := broker.JobFor(args, opts)
	if err != nil {
		t.Fatalf("workertest: %v", err)
	}
	return e.RequireEnqueued(t, j.Queue, j.Kind, args)
}

// Work runs a worker pool with h over the queues (default "default") until
// none of them has a job ready or running, then stops it and returns its
// counters. Jobs scheduled for later stay until Advance makes them due;
// jobs of a paused queue, or held back by its limits, stay too.
func (e *Env) Work(t testing.TB, h handlers.Handler, queues ...string) worker.Stats {
	t.Helper()
	if len(queues) == 0 {
		queues = []string{worker.QueueDefault}
	}
	// Every finished job is kept, so that a test can read them all.
	keepAll := broker.Retention{Done: worker.KeepForever, Cancelled: worker.KeepForever, Dead: worker.KeepForever,
		MaxDone: worker.KeepForever, MaxCancelled: worker.KeepForever, MaxDead: worker.KeepForever}
	cfg := worker.Config{PollInterval: 5 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler), Retention: &keepAll}
	for _, q := range queues {
		cfg.Queues = append(cfg.Queues, worker.Queue{Name: q})
	}
	p, err := worker.New(e.Broker, h, cfg)
	if err != nil {
		t.Fatalf("workertest: %v", err)
	}
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatalf("workertest: %v", err)
	}
	defer func() {
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("workertest: shutdown: %v", err)
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		// Each queue is read in one script, atomic with the claim script, so
		// a job is seen as due, claimable or running, whichever it is, even
		// while a claim's reply is still on its way to the pool; dependents
		// still to be released count as work too. Pending jobs a claim
		// cannot take (a paused queue, a limit whose window never moves on
		// the Env's clock) stay, as delayed ones do. A handler whose
		// settlement Redis already has may still be finishing: waiting for
		// Running to reach 0 puts it in the counters Work returns.
		busy := false
		for _, q := range queues {
			o, err := e.Broker.Inspector().Overview(ctx, q)
			if err != nil {
				t.Fatalf("workertest: %v", err)
			}
			if o.Due+o.Claimable+o.Running+o.Cascading > 0 {
				busy = true
			}
		}
		if !busy && p.Stats().Running == 0 {
			return p.Stats()
		}
		if time.Now().After(deadline) {
			t.Fatalf("workertest: jobs still ready or running after 30s")
		}
	}
}
