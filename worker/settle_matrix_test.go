package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/middleware"
)

// settleCase is one handler run: what it returned and why its context
// ended, read against the job in Redis afterwards.
type settleCase struct {
	ret, cause string
}

// settleReturns are what a handler may return, by name; "panic" is what
// the pool's Recover middleware makes of a panic.
var settleReturns = []string{"nil", "error", "permanent", "snooze", "panic"}

// settleCauses are why a handler's context may have ended, by name:
// "replaced" is no cause at all, but the lease taken over in Redis
// (release_unowned) while the handler ran; "cancelled" sets the job's
// cancel flag in Redis as the heartbeat would have found it.
var settleCauses = []string{"none", "shutdown", "expired", "lost", "cancelled", "replaced"}

// Every (return × cause) pair of a handler run settles with its broker
// call: the job's state, attempt, generation and error in Redis
// afterwards, and the pool's counters, are those settleWant lists.
func TestSettleMatrix(t *testing.T) {
	p, b := settleRig(t)
	i := 0
	for _, r := range settleReturns {
		for _, c := range settleCauses {
			i++
			queue := fmt.Sprintf("m%d", i)
			t.Run(r+"/"+c, func(t *testing.T) {
				got := settleOnce(t, p, b, queue, r, c)
				if w := settleWant[settleCase{r, c}]; got != w {
					t.Errorf("got  %s\nwant %s", got, w)
				}
			})
		}
	}
}

// settleWant is each pair's settlement: a lost lease
// sends nothing; an error the pool interrupted (shutdown, the lease's local
// deadline) is released uncharged; success is acked, also when interrupted
// or cancelled; a snooze is scheduled uncharged; a permanent error is dead;
// any other error, a panic too, is retried; a cancel flag turns a fail or a
// snooze into cancelled; a lease replaced in Redis makes every call stale.
var settleWant = map[settleCase]string{
	{"nil", "none"}:            "done a1 g+0 - last_error=false stats=succeeded",
	{"nil", "shutdown"}:        "done a1 g+0 - last_error=false stats=succeeded",
	{"nil", "expired"}:         "done a1 g+0 - last_error=false stats=succeeded",
	{"nil", "lost"}:            "running a1 g+0 token last_error=false stats=-",
	{"nil", "cancelled"}:       "done a1 g+0 - last_error=false stats=succeeded",
	{"nil", "replaced"}:        "pending a0 g+1 - last_error=false stats=stale",
	{"error", "none"}:          "scheduled a1 g+0 - last_error=true stats=retried",
	{"error", "shutdown"}:      "pending a0 g+1 - last_error=false stats=released",
	{"error", "expired"}:       "pending a0 g+1 - last_error=false stats=released",
	{"error", "lost"}:          "running a1 g+0 token last_error=false stats=-",
	{"error", "cancelled"}:     "cancelled a1 g+0 - last_error=true stats=cancelled",
	{"error", "replaced"}:      "pending a0 g+1 - last_error=false stats=stale",
	{"permanent", "none"}:      "dead a1 g+0 - last_error=true stats=dead",
	{"permanent", "shutdown"}:  "pending a0 g+1 - last_error=false stats=released",
	{"permanent", "expired"}:   "pending a0 g+1 - last_error=false stats=released",
	{"permanent", "lost"}:      "running a1 g+0 token last_error=false stats=-",
	{"permanent", "cancelled"}: "cancelled a1 g+0 - last_error=true stats=cancelled",
	{"permanent", "replaced"}:  "pending a0 g+1 - last_error=false stats=stale",
	{"snooze", "none"}:         "scheduled a0 g+0 - last_error=false stats=snoozed",
	{"snooze", "shutdown"}:     "pending a0 g+1 - last_error=false stats=released",
	{"snooze", "expired"}:      "pending a0 g+1 - last_error=false stats=released",
	{"snooze", "lost"}:         "running a1 g+0 token last_error=false stats=-",
	{"snooze", "cancelled"}:    "cancelled a1 g+0 - last_error=false stats=cancelled",
	{"snooze", "replaced"}:     "pending a0 g+1 - last_error=false stats=stale",
	{"panic", "none"}:          "scheduled a1 g+0 - last_error=true stats=retried",
	{"panic", "shutdown"}:      "pending a0 g+1 - last_error=false stats=released",
	{"panic", "expired"}:       "pending a0 g+1 - last_error=false stats=released",
	{"panic", "lost"}:          "running a1 g+0 token last_error=false stats=-",
	{"panic", "cancelled"}:     "cancelled a1 g+0 - last_error=true stats=cancelled",
	{"panic", "replaced"}:      "pending a0 g+1 - last_error=false stats=stale",
}

func settleRig(t *testing.T) (*Pool, *broker.Broker) {
	t.Helper()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(b, handlers.HandlerFunc(func(context.Context, *handlers.Job) error { return nil }), Config{
		LeaseDuration: time.Minute,
		Backoff:       func(int) time.Duration { return time.Hour },
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Only the acker runs (acks go through it); the dispatcher is stopped,
	// so no settlement carries a claim.
	p.dispatcher.stop()
	p.acker.start()
	t.Cleanup(func() { p.acker.stop(); p.acker.wait() })
	return p, b
}

// settleOnce claims one job of queue, ends its handler's context with
// cause, settles what the handler returned, and describes the job and the
// counter that moved.
func settleOnce(t *testing.T, p *Pool, b *broker.Broker, queue, ret, cause string) string {
	t.Helper()
	ctx := context.Background()
	id, err := b.Client().Enqueue(ctx, broker.Job{Queue: queue, Kind: "k", MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Leases().Claim(ctx, queue, 1, time.Minute)
	if err != nil || len(res.Leases) != 1 {
		t.Fatalf("claim: %v %d", err, len(res.Leases))
	}
	l := res.Leases[0]
	hctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	a := &active{lease: l, ctx: hctx, cancel: cancel, localDeadline: l.LocalDeadline}
	a.job = handlers.NewJob(handlers.JobSpec{Row: l.Row})
	a.expiry = time.AfterFunc(time.Hour, func() {})
	defer a.expiry.Stop()

	switch cause {
	case "shutdown":
		cancel(handlers.ErrShutdown)
	case "expired":
		cancel(handlers.ErrLeaseExpired)
	case "lost":
		cancel(handlers.ErrLeaseLost)
	case "cancelled":
		if _, err := b.Inspector().Cancel(ctx, queue, id); err != nil {
			t.Fatal(err)
		}
		cancel(handlers.ErrJobCancelled)
	case "replaced":
		if _, err := b.Inspector().ReleaseUnowned(ctx, queue, id); err != nil {
			t.Fatal(err)
		}
	}
	var herr error
	switch ret {
	case "error":
		herr = errors.New("boom")
	case "permanent":
		herr = handlers.Permanent(errors.New("boom"))
	case "snooze":
		herr = handlers.Snooze(time.Hour)
	case "panic":
		herr = middleware.Recover()(handlers.HandlerFunc(func(context.Context, *handlers.Job) error { panic("boom") })).ProcessJob(ctx, a.job)
	}
	before := p.Stats()
	p.settle(a, herr)
	after := p.Stats()

	j, err := b.Inspector().Job(ctx, queue, id)
	if err != nil {
		t.Fatal(err)
	}
	tok := "-"
	if j.ClaimID != "" {
		tok = "token"
	}
	return fmt.Sprintf("%s a%d g%+d %s last_error=%v stats=%s", j.State, j.Attempt, j.Generation-l.Generation, tok,
		j.LastError != "", statsMoved(before, after))
}

// statsMoved names the counters that changed between two readings.
func statsMoved(before, after Stats) string {
	s := ""
	add := func(name string, b, a int64) {
		if a != b {
			if s != "" {
				s += ","
			}
			s += name
		}
	}
	add("succeeded", before.Succeeded, after.Succeeded)
	add("retried", before.Retried, after.Retried)
	add("dead", before.Dead, after.Dead)
	add("cancelled", before.Cancelled, after.Cancelled)
	add("snoozed", before.Snoozed, after.Snoozed)
	add("released", before.Released, after.Released)
	add("stale", before.Stale, after.Stale)
	if s == "" {
		return "-"
	}
	return s
}
