package brokertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

func testCancel(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	pending := s.enqueue(t, broker.Job{})
	scheduled := s.enqueue(t, broker.Job{Delay: time.Hour})
	for _, id := range []string{pending, scheduled} {
		st, err := s.b.Inspector().Cancel(s.ctx, s.q, id)
		noErr(t, "Cancel", err)
		want(t, "state after cancel", st, broker.StateCancelled)
		want(t, "stored state", s.job(t, id).State, broker.StateCancelled)
	}
	s.consistent(t)
	if ls := s.claim(t, 5, long); len(ls) != 0 {
		t.Fatalf("claimed cancelled jobs: %+v", ls)
	}

	// A running job is flagged; the worker's next failure settles it as
	// cancelled, while an ack that beats it still stores done.
	failing := s.enqueue(t, broker.Job{})
	acking := s.enqueue(t, broker.Job{})
	ls := s.claim(t, 2, long)
	for _, l := range ls {
		st, err := s.b.Inspector().Cancel(s.ctx, s.q, l.ID)
		noErr(t, "Cancel", err)
		want(t, "state of a running job after cancel", st, broker.StateRunning)
		if !s.job(t, l.ID).CancelRequested {
			t.Fatal("cancel flag not stored")
		}
	}
	got, err := s.b.Leases().Fail(s.ctx, ls[0], broker.Failure{Error: "context canceled"})
	st := got.State
	noErr(t, "Fail", err)
	want(t, "first claim", ls[0].ID, failing)
	want(t, "state of a cancelled job after failure", st, broker.StateCancelled)
	_, err = s.b.Leases().Ack(s.ctx, ls[1], nil)
	noErr(t, "Ack", err)
	want(t, "state of a cancelled job after ack", s.job(t, acking).State, broker.StateDone)

	st, err = s.b.Inspector().Cancel(s.ctx, s.q, acking)
	noErr(t, "Cancel of a done job", err)
	want(t, "done job stays done", st, broker.StateDone)
	_, err = s.b.Inspector().Cancel(s.ctx, s.q, "missing")
	wantErr(t, "Cancel of a missing job", err, broker.ErrJobNotFound)
	s.consistent(t)
}

func testPriority(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	var order []string
	for i, p := range []int{0, 5, -3, 5, 100, -100, 0} {
		id := s.enqueue(t, broker.Job{ID: string(rune('a' + i)), Priority: p})
		order = append(order, id)
	}
	// Highest priority first, FIFO within one.
	wantOrder := []string{"e", "b", "d", "a", "g", "c", "f"}
	var got []string
	for _, l := range s.claim(t, 3, long) {
		got = append(got, l.ID)
	}
	for _, l := range s.claim(t, 10, long) {
		got = append(got, l.ID)
	}
	if !slices.Equal(got, wantOrder) {
		t.Fatalf("claim order %v, want %v (enqueued %v)", got, wantOrder, order)
	}
}

func testDelay(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{Delay: past})
	want(t, "state", s.job(t, id).State, broker.StateScheduled)
	at := s.enqueue(t, broker.Job{RunAt: time.Now().Add(time.Hour)})
	now := s.enqueue(t, broker.Job{RunAt: time.Now().Add(-time.Hour)})
	want(t, "state of a job due in the past", s.job(t, now).State, broker.StatePending)
	s.consistent(t)

	res, err := s.b.Leases().Claim(s.ctx, s.q, 10, long)
	noErr(t, "Claim", err)
	if len(res.Leases) != 1 || res.Leases[0].ID != now {
		t.Fatalf("claimed %+v, want only %s", res.Leases, now)
	}
	if res.NextDue <= 0 || res.NextDue > past {
		t.Fatalf("NextDue = %v, want in (0, %v]", res.NextDue, past)
	}
	o, err := s.b.Inspector().Overview(s.ctx, s.q)
	noErr(t, "Overview", err)
	want(t, "due before its time", o.Due, int64(0))
	s.Advance(past)
	o, err = s.b.Inspector().Overview(s.ctx, s.q)
	noErr(t, "Overview", err)
	want(t, "due once its time came", o.Due, int64(1))
	l := s.claimOne(t, long)
	want(t, "delayed job", l.ID, id)
	want(t, "job due in an hour", s.job(t, at).State, broker.StateScheduled)
	s.consistent(t)
}

func testDuplicate(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{ID: "order-42", Payload: []byte("first")})
	before := s.job(t, id)
	_, err := s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "other", ID: "order-42", Payload: []byte("second")})
	wantErr(t, "second enqueue", err, broker.ErrJobExists)
	var dup *broker.DuplicateError
	if !errors.As(err, &dup) || dup.State != broker.StatePending || dup.ID != "order-42" {
		t.Fatalf("error %v, want a *DuplicateError naming the pending job", err)
	}
	sameJob(t, "after a duplicate enqueue", s.job(t, id), before)
	s.consistent(t)
}

func testInvalid(t *testing.T, nb NewBackend) {
	s := setup(t, nb, func(o *broker.Options) { o.MaxPayloadBytes = 10 })
	cases := []struct {
		name string
		job  broker.Job
		msg  string
	}{
		{"EmptyQueue", broker.Job{Kind: "k"}, "queue"},
		{"EmptyKind", broker.Job{Queue: "q"}, "kind"},
		{"BraceInQueue", broker.Job{Queue: "a{b}", Kind: "k"}, "hash tag"},
		{"NonUTF8Kind", broker.Job{Queue: "q", Kind: "\xff"}, "UTF-8"},
		{"ControlInID", broker.Job{Queue: "q", Kind: "k", ID: "a\nb"}, "control"},
		{"HugeID", broker.Job{Queue: "q", Kind: "k", ID: strings.Repeat("x", 2000)}, "at most"},
		{"PayloadTooLarge", broker.Job{Queue: "q", Kind: "k", Payload: make([]byte, 11)}, "limit is 10"},
		{"NegativeDelay", broker.Job{Queue: "q", Kind: "k", Delay: -time.Second}, "negative"},
		{"DelayAndRunAt", broker.Job{Queue: "q", Kind: "k", Delay: time.Second, RunAt: time.Now()}, "not both"},
		{"NegativeMaxAttempts", broker.Job{Queue: "q", Kind: "k", MaxAttempts: -1}, "at least 1"},
		{"PriorityOutOfRange", broker.Job{Queue: "q", Kind: "k", Priority: 101}, "between -100 and 100"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.b.Client().Enqueue(s.ctx, tc.job)
			wantErr(t, "Enqueue", err, broker.ErrInvalid)
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not mention %q", err, tc.msg)
			}
		})
	}
	c, err := s.b.Inspector().Counts(s.ctx, "q")
	noErr(t, "Counts", err)
	want(t, "jobs written by invalid enqueues", c, broker.Counts{})

	_, err = s.b.Leases().Claim(s.ctx, s.q, 1, 0)
	wantErr(t, "Claim with a zero lease", err, broker.ErrInvalid)
	_, err = s.b.Leases().Claim(s.ctx, s.q, -1, long)
	wantErr(t, "Claim of a negative count", err, broker.ErrInvalid)
	_, err = s.b.Leases().Reap(s.ctx, s.q, 0)
	wantErr(t, "Reap with a zero limit", err, broker.ErrInvalid)
	_, err = broker.New(s.Client, broker.Options{Prefix: "a{b"})
	wantErr(t, "New with a braced prefix", err, broker.ErrInvalid)
}

// A job hash edited into garbage is marked dead with the reason when a
// script meets it; its neighbours are unaffected and nothing is dropped.
func testCorrupt(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	key := func(id string) string { return s.b.Prefix() + ":{" + s.q + "}:job:" + id }
	garbage := s.enqueue(t, broker.Job{ID: "garbage"})
	noKind := s.enqueue(t, broker.Job{ID: "no-kind"})
	noState := s.enqueue(t, broker.Job{ID: "no-state"})
	wrongType := s.enqueue(t, broker.Job{ID: "wrong-type"})
	good := s.enqueue(t, broker.Job{ID: "good"})
	c := s.Client
	noErr(t, "corrupt", c.HSet(s.ctx, key(garbage), "attempt", "many").Err())
	noErr(t, "corrupt", c.HDel(s.ctx, key(noKind), "kind").Err())
	noErr(t, "corrupt", c.HDel(s.ctx, key(noState), "state").Err())
	noErr(t, "corrupt", c.Del(s.ctx, key(wrongType)).Err())
	noErr(t, "corrupt", c.Set(s.ctx, key(wrongType), "not a hash", 0).Err())
	// An entry of a sorted set of the ready index without a hash is
	// reported; one of ready0 is skipped as a tombstone would be.
	noErr(t, "orphan", c.ZAdd(s.ctx, s.b.Prefix()+":{"+s.q+"}:ready_hi", redisZ(0, "ghost")).Err())
	noErr(t, "orphan", c.HSet(s.ctx, s.b.Prefix()+":{"+s.q+"}:limits", "hi", "1").Err())
	noErr(t, "orphan", c.RPush(s.ctx, s.b.Prefix()+":{"+s.q+"}:ready0", "list-ghost").Err())

	_, err := s.b.Inspector().Job(s.ctx, s.q, garbage)
	wantErr(t, "Job of a garbage hash", err, broker.ErrCorruptJob)
	if !strings.Contains(err.Error(), `field attempt is "many"`) {
		t.Fatalf("error %q does not name the bad field", err)
	}
	_, err = s.b.Inspector().Job(s.ctx, s.q, wrongType)
	wantErr(t, "Job of a non-hash key", err, broker.ErrCorruptJob)

	res, err := s.b.Leases().Claim(s.ctx, s.q, 10, long)
	noErr(t, "Claim", err)
	if len(res.Leases) != 1 || res.Leases[0].ID != good {
		t.Fatalf("claimed %+v, want only the good job", res.Leases)
	}
	reasons := map[string]string{}
	for _, p := range res.Problems {
		reasons[p.ID] = p.Reason
	}
	if r, ok := reasons["list-ghost"]; ok {
		t.Errorf("an entry of ready0 without a hash reported as %q; want it skipped", r)
	}
	for id, part := range map[string]string{
		garbage: "attempt", noKind: "kind", noState: "no state field", wrongType: "not a hash", "ghost": "does not exist",
	} {
		if !strings.Contains(reasons[id], part) {
			t.Errorf("problem for %s = %q, want it to mention %q", id, reasons[id], part)
		}
	}
	for _, id := range []string{garbage, noKind, noState} {
		j, _ := s.b.Inspector().Job(s.ctx, s.q, id)
		if j.State != broker.StateDead || !strings.Contains(j.LastError, "corrupt job hash") {
			t.Errorf("job %s: state %s, last error %q; want dead with the reason", id, j.State, j.LastError)
		}
	}
	dead, err := c.ZRange(s.ctx, s.b.Prefix()+":{"+s.q+"}:dead", 0, -1).Result()
	noErr(t, "read dead", err)
	if !slices.Contains(dead, wrongType) {
		t.Errorf("non-hash job key not listed in dead: %v", dead)
	}
	_, err = s.b.Inspector().Cancel(s.ctx, s.q, wrongType)
	wantErr(t, "Cancel of a non-hash key", err, broker.ErrCorruptJob)
	_, err = s.b.Inspector().ReleaseUnowned(s.ctx, s.q, wrongType)
	wantErr(t, "ReleaseUnowned of a non-hash key", err, broker.ErrCorruptJob)

	// The good job settles as usual.
	o, err := s.b.Leases().Ack(s.ctx, res.Leases[0], nil)
	noErr(t, "Ack", err)
	want(t, "ack of the neighbour", o, broker.OK)
}

func testScriptFlush(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	flush := func() { noErr(t, "SCRIPT FLUSH", s.Client.ScriptFlush(s.ctx).Err()) }
	flush()
	id := s.enqueue(t, broker.Job{})
	flush()
	l := s.claimOne(t, long)
	flush()
	rs, err := s.b.Leases().Renew(s.ctx, []broker.Lease{l}, long)
	noErr(t, "Renew after SCRIPT FLUSH", err)
	want(t, "renew outcome", rs[0].Outcome, broker.OK)
	flush()
	o, err := s.b.Leases().Ack(s.ctx, l, nil)
	noErr(t, "Ack after SCRIPT FLUSH", err)
	want(t, "ack outcome", o, broker.OK)
	want(t, "state", s.job(t, id).State, broker.StateDone)
}

func testInspection(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	s.enqueue(t, broker.Job{})
	s.enqueue(t, broker.Job{})
	s.enqueue(t, broker.Job{Delay: time.Hour})
	s.enqueue(t, broker.Job{Queue: "second"})
	_, err := s.b.Leases().Ack(s.ctx, s.claimOne(t, long), nil)
	noErr(t, "Ack", err)
	c, err := s.b.Inspector().Counts(s.ctx, s.q)
	noErr(t, "Counts", err)
	want(t, "counts", c, broker.Counts{Scheduled: 1, Pending: 1, Done: 1})
	qs, err := s.b.Inspector().Queues(s.ctx)
	noErr(t, "Queues", err)
	if !slices.Equal(qs, []string{s.q, "second"}) {
		t.Fatalf("queues = %v", qs)
	}
	_, err = s.b.Inspector().Job(s.ctx, s.q, "missing")
	wantErr(t, "Job of a missing id", err, broker.ErrJobNotFound)

	o, err := s.b.Inspector().Overview(s.ctx, s.q)
	noErr(t, "Overview", err)
	want(t, "overview counts", o.Counts, c)
	want(t, "done in the last minute", o.DoneLastMinute, int64(1))
	s.Advance(past)
	if o, _ = s.b.Inspector().Overview(s.ctx, s.q); o.HeadAge < past {
		t.Fatalf("head age %v, want at least %v", o.HeadAge, past)
	}
	ls, err := s.b.Inspector().Leases(s.ctx, s.q, 10)
	noErr(t, "Leases", err)
	want(t, "leases", len(ls), 0)
	l := s.claimOne(t, long)
	ls, err = s.b.Inspector().Leases(s.ctx, s.q, 10)
	noErr(t, "Leases", err)
	if len(ls) != 1 || ls[0].ID != l.ID || ls[0].Expired() || ls[0].Left < 59*time.Minute {
		t.Fatalf("leases = %+v", ls)
	}
	// Another test may SCRIPT FLUSH the shared server in between: try again.
	loaded := false
	for i := 0; i < 5 && !loaded; i++ {
		noErr(t, "LoadScripts", s.b.LoadScripts(s.ctx))
		loaded, err = s.b.ScriptsLoaded(s.ctx)
		noErr(t, "ScriptsLoaded", err)
	}
	want(t, "scripts loaded", loaded, true)
}

// Enqueue leaves one wake-up token, never a growing list.
func testWake(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	key := s.queueKey("wake")
	for range 5 {
		s.enqueue(t, broker.Job{})
	}
	n, err := s.Client.LLen(s.ctx, key).Result()
	noErr(t, "LLEN", err)
	want(t, "wake tokens", n, int64(1))
}

// An enqueue behind pending jobs pushes no wake-up (their pushes woke the
// workers); one behind nothing but tombstones does, as does one to an
// empty queue.
func testWakeBehindTombstones(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	key := s.queueKey("wake")
	tokens := func(what string, n int64) {
		t.Helper()
		got, err := s.Client.LLen(s.ctx, key).Result()
		noErr(t, "LLEN", err)
		want(t, "wake tokens "+what, got, n)
	}
	s.enqueue(t, broker.Job{ID: "a"})
	tokens("after the first enqueue", 1)
	noErr(t, "DEL wake", s.Client.Del(s.ctx, key).Err())
	s.enqueue(t, broker.Job{ID: "b"})
	tokens("behind a pending job", 0)
	for _, id := range []string{"a", "b"} {
		_, err := s.b.Inspector().Cancel(s.ctx, s.q, id)
		noErr(t, "Cancel "+id, err)
	}
	s.enqueue(t, broker.Job{ID: "c"})
	tokens("behind two tombstones", 1)
}

// WaitForWork answers the queue a wake-up came from, at once when one is
// waiting and as soon as one comes while it blocks; it answers "" when
// nothing came within its limit, and never outlasts an ended context.
func testWaitForWork(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	one := []string{s.q}
	woken, err := s.b.Leases().WaitForWork(s.ctx, one, 20*time.Millisecond)
	noErr(t, "WaitForWork on an idle queue", err)
	want(t, "woken on an idle queue", woken, "")

	s.enqueue(t, broker.Job{})
	woken, err = s.b.Leases().WaitForWork(s.ctx, one, 5*time.Second)
	noErr(t, "WaitForWork after an enqueue", err)
	want(t, "woken after an enqueue", woken, s.q)

	start := time.Now()
	woken, err = s.b.Leases().WaitForWork(s.ctx, one, 50*time.Millisecond)
	noErr(t, "WaitForWork after the wake-up was taken", err)
	want(t, "woken after the wake-up was taken", woken, "")
	if took := time.Since(start); took < 40*time.Millisecond || took > 2*time.Second {
		t.Fatalf("a wait of 50ms took %v", took)
	}

	// A worker blocks once its claim found nothing: the enqueue below then
	// finds an empty queue and wakes it (one behind pending jobs does not;
	// see testWakeBehindTombstones).
	_, err = s.b.Leases().Claim(s.ctx, s.q, 10, long)
	noErr(t, "Claim", err)
	enqueued := make(chan error, 1)
	time.AfterFunc(30*time.Millisecond, func() {
		_, err := s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "k"})
		enqueued <- err
	})
	start = time.Now()
	woken, err = s.b.Leases().WaitForWork(s.ctx, one, 5*time.Second)
	noErr(t, "WaitForWork while an enqueue comes", err)
	noErr(t, "Enqueue", <-enqueued)
	want(t, "woken while blocked", woken, s.q)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("woken after %v, want at once after the enqueue", took)
	}

	// Several queues: one call waits on all of them where they share a
	// node's slot space; a Redis Cluster refuses keys of several slots.
	_, err = s.b.Leases().Claim(s.ctx, s.q, 10, long)
	noErr(t, "Claim", err)
	s.enqueue(t, broker.Job{})
	woken, err = s.b.Leases().WaitForWork(s.ctx, []string{s.q + "-other", s.q}, time.Second)
	if !errors.Is(err, broker.ErrCrossSlot) {
		noErr(t, "WaitForWork on two queues", err)
		want(t, "woken of two queues", woken, s.q)
	}

	ctx, cancel := context.WithCancel(s.ctx)
	cancel()
	woken, err = s.b.Leases().WaitForWork(ctx, one, time.Second)
	wantErr(t, "WaitForWork with an ended context", err, context.Canceled)
	want(t, "woken with an ended context", woken, "")
	_, err = s.b.Leases().WaitForWork(s.ctx, []string{"a{b"}, time.Second)
	wantErr(t, "WaitForWork on a braced queue name", err, broker.ErrInvalid)
	_, err = s.b.Leases().WaitForWork(s.ctx, nil, time.Second)
	wantErr(t, "WaitForWork on no queue", err, broker.ErrInvalid)
}

func testRetry(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	dead := s.enqueue(t, broker.Job{MaxAttempts: 1})
	_, err := s.b.Leases().Fail(s.ctx, s.claimOne(t, long), broker.Failure{Error: "boom"})
	noErr(t, "Fail", err)
	cancelled := s.enqueue(t, broker.Job{})
	_, err = s.b.Inspector().Cancel(s.ctx, s.q, cancelled)
	noErr(t, "Cancel", err)
	pending := s.enqueue(t, broker.Job{})
	before := s.job(t, dead)

	prev, err := s.b.Inspector().Retry(s.ctx, s.q, dead)
	noErr(t, "Retry of a dead job", err)
	want(t, "previous state", prev, broker.StateDead)
	j := s.job(t, dead)
	want(t, "state", j.State, broker.StatePending)
	want(t, "attempt", j.Attempt, 0)
	want(t, "generation", j.Generation, before.Generation+1)
	want(t, "last error kept", j.LastError, "boom")
	_, err = s.b.Inspector().Retry(s.ctx, s.q, cancelled)
	noErr(t, "Retry of a cancelled job", err)
	_, err = s.b.Inspector().Retry(s.ctx, s.q, pending)
	if err == nil || !strings.Contains(err.Error(), "only dead or cancelled") {
		t.Fatalf("Retry of a pending job: %v", err)
	}
	_, err = s.b.Inspector().Retry(s.ctx, s.q, "missing")
	wantErr(t, "Retry of a missing job", err, broker.ErrJobNotFound)
	s.consistent(t)
	// The retried job runs again with its first attempt.
	ls := s.claim(t, 10, long)
	want(t, "claimed", len(ls), 3)

	for range 5 {
		s.enqueue(t, broker.Job{MaxAttempts: 1})
	}
	for _, l := range s.claim(t, 10, long) {
		_, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "x", Dead: true})
		noErr(t, "Fail", err)
	}
	n, err := s.b.Inspector().RetryDead(s.ctx, s.q, 3)
	noErr(t, "RetryDead", err)
	want(t, "retried", n, 3)
	n, err = s.b.Inspector().RetryDead(s.ctx, s.q, 100)
	noErr(t, "RetryDead", err)
	want(t, "retried", n, 2)
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "dead left", c.Dead, int64(0))
	s.consistent(t)
}

func testEnqueueMany(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	s.enqueue(t, broker.Job{ID: "taken"})
	noErr(t, "SCRIPT FLUSH", s.Client.ScriptFlush(s.ctx).Err()) // the pipeline reloads
	res := s.b.Client().EnqueueMany(s.ctx, []broker.Job{
		{Queue: s.q, Kind: "a"},
		{Queue: s.q, Kind: "b", ID: "taken"},
		{Queue: s.q, Kind: ""},
		{Queue: "other", Kind: "c", Delay: time.Hour},
		{Queue: s.q, Kind: "d", ID: "chosen"},
	})
	want(t, "answers", len(res), 5)
	noErr(t, "first job", res[0].Err)
	wantErr(t, "duplicate", res[1].Err, broker.ErrJobExists)
	wantErr(t, "invalid", res[2].Err, broker.ErrInvalid)
	noErr(t, "other queue", res[3].Err)
	noErr(t, "chosen id", res[4].Err)
	want(t, "chosen id", res[4].ID, "chosen")
	want(t, "state", s.job(t, res[0].ID).State, broker.StatePending)
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "pending", c.Pending, int64(3))
	s.consistent(t)
}

// A paused queue takes enqueues but hands out nothing until resumed.
func testPause(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	noErr(t, "Pause", s.b.Inspector().Pause(s.ctx, s.q))
	paused, err := s.b.Inspector().Paused(s.ctx, s.q)
	noErr(t, "Paused", err)
	want(t, "paused", paused, true)
	id := s.enqueue(t, broker.Job{})
	if ls := s.claim(t, 5, long); len(ls) != 0 {
		t.Fatalf("claimed %d jobs from a paused queue", len(ls))
	}
	if o, _ := s.b.Inspector().Overview(s.ctx, s.q); !o.Paused || o.Pending != 1 {
		t.Fatalf("overview of a paused queue: %+v", o)
	}
	key := s.queueKey("wake")
	noErr(t, "DEL wake", s.Client.Del(s.ctx, key).Err())
	noErr(t, "Resume", s.b.Inspector().Resume(s.ctx, s.q))
	n, err := s.Client.LLen(s.ctx, key).Result()
	noErr(t, "LLEN", err)
	want(t, "wake token after resume", n, int64(1))
	o, err := s.b.Inspector().Overview(s.ctx, s.q)
	noErr(t, "Overview", err)
	want(t, "overview after resume", o.Paused, false)
	want(t, "claimed after resume", s.claimOne(t, long).ID, id)
	paused, _ = s.b.Inspector().Paused(s.ctx, s.q)
	want(t, "paused after resume", paused, false)
	s.consistent(t)
}

// Trim deletes finished jobs past their retention, oldest first, and
// leaves everything else alone.
func testRetention(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	finish := func(n int, how string) []string {
		var ids []string
		for range n {
			ids = append(ids, s.enqueue(t, broker.Job{MaxAttempts: 1}))
		}
		for _, l := range s.claim(t, n, long) {
			var err error
			switch how {
			case "done":
				_, err = s.b.Leases().Ack(s.ctx, l, nil)
			case "dead":
				_, err = s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "x"})
			}
			noErr(t, how, err)
		}
		return ids
	}
	oldDone := finish(3, "done")
	oldDead := finish(2, "dead")
	s.pastHorizon()
	newDone := finish(4, "done")
	pending := s.enqueue(t, broker.Job{})

	// Age: done jobs older than 30ms go; dead ones are kept longer.
	n, err := s.b.Leases().Trim(s.ctx, s.q, broker.Retention{Done: short, Dead: time.Hour}, 100)
	noErr(t, "Trim", err)
	want(t, "trimmed by age", n, 3)
	for _, id := range oldDone {
		_, err := s.b.Inspector().Job(s.ctx, s.q, id)
		wantErr(t, "old done job", err, broker.ErrJobNotFound)
	}
	for _, id := range append(append(oldDead, newDone...), pending) {
		s.job(t, id)
	}
	// Count: at most 2 done jobs, oldest go first; bounded by the limit.
	s.pastHorizon()
	n, err = s.b.Leases().Trim(s.ctx, s.q, broker.Retention{MaxDone: 2}, 1)
	noErr(t, "Trim", err)
	want(t, "trimmed within the limit", n, 1)
	n, err = s.b.Leases().Trim(s.ctx, s.q, broker.Retention{MaxDone: 2}, 100)
	noErr(t, "Trim", err)
	want(t, "trimmed by count", n, 1)
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "counts", c, broker.Counts{Pending: 1, Done: 2, Dead: 2})
	n, err = s.b.Leases().Trim(s.ctx, s.q, broker.Retention{}, 100)
	noErr(t, "Trim", err)
	want(t, "the zero Retention trims", n, 0)
	_, err = s.b.Leases().Trim(s.ctx, s.q, broker.Retention{Done: -time.Second}, 100)
	wantErr(t, "negative retention", err, broker.ErrInvalid)
	s.consistent(t)
	// A trimmed id is free again.
	s.enqueue(t, broker.Job{ID: oldDone[0]})
}

// A unique key admits one job at a time: until it finishes, or for a TTL.
func testUnique(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	first := s.enqueue(t, broker.Job{UniqueKey: "report-42"})
	s.wantHeld(t, "report-42", first)
	res := s.b.Client().EnqueueMany(s.ctx, []broker.Job{{Queue: s.q, Kind: "k", UniqueKey: "report-42"}, {Queue: s.q, Kind: "k", UniqueKey: "report-43"}})
	wantErr(t, "EnqueueMany of a held key", res[0].Err, broker.ErrUniqueHeld)
	noErr(t, "EnqueueMany of a free key", res[1].Err)
	if !res[0].Existing || res[0].ID != first || res[1].Existing {
		t.Fatalf("EnqueueMany answers %+v", res)
	}
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "pending", c.Pending, int64(2))

	// Held until the job finishes; free after.
	var l broker.Lease
	for _, x := range s.claim(t, 2, long) {
		if x.ID == first {
			l = x
		}
	}
	s.wantHeld(t, "report-42", first)
	_, err := s.b.Leases().Ack(s.ctx, l, nil)
	noErr(t, "Ack", err)
	if next := s.enqueue(t, broker.Job{UniqueKey: "report-42"}); next == first {
		t.Fatal("the unique key is still held after its job was done")
	}

	// Held for a TTL, whatever the job does.
	ttl := s.enqueue(t, broker.Job{UniqueKey: "daily", UniqueFor: short})
	s.wantHeld(t, "daily", ttl)
	s.Advance(past)
	if after := s.enqueue(t, broker.Job{UniqueKey: "daily"}); after == ttl {
		t.Fatal("the unique key is still held after its TTL")
	}

	// Concurrent enqueues of one key make one job.
	ids := make(chan string, 10)
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "k", UniqueKey: "race"})
			if err != nil && !errors.Is(err, broker.ErrUniqueHeld) {
				t.Error(err)
			}
			ids <- id
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		seen[id] = true
	}
	want(t, "jobs made by 10 concurrent enqueues of one key", len(seen), 1)
	_, err = s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "k", UniqueFor: time.Minute})
	wantErr(t, "UniqueFor without a key", err, broker.ErrInvalid)
	s.consistent(t)
}

// The holder's terms decide how long its key is held: not retention, not a
// newcomer's UniqueFor; and a retried job never shares its key with another
// live job.
func testUniqueHolderTerms(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	drain := func() {
		for _, l := range s.claim(t, 100, long) {
			_, err := s.b.Leases().Ack(s.ctx, l, nil)
			noErr(t, "Ack", err)
		}
	}

	// A TTL outlives the job and its retention.
	hourly := s.enqueue(t, broker.Job{UniqueKey: "hourly", UniqueFor: time.Hour})
	drain()
	_, err := s.b.Leases().Trim(s.ctx, s.q, broker.Retention{MaxDone: 1}, 100)
	noErr(t, "Trim", err)
	s.enqueue(t, broker.Job{}) // one more done job pushes the first out
	drain()
	s.pastHorizon()
	_, err = s.b.Leases().Trim(s.ctx, s.q, broker.Retention{MaxDone: 1}, 100)
	noErr(t, "Trim", err)
	if _, err := s.b.Inspector().Job(s.ctx, s.q, hourly); !errors.Is(err, broker.ErrJobNotFound) {
		t.Fatalf("the holder should have been trimmed: %v", err)
	}
	s.wantHeld(t, "hourly", hourly)                                                                            // retention does not end the hour
	_, err = s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "k", UniqueKey: "hourly", UniqueFor: 0}) // nor a newcomer's terms
	wantErr(t, "a newcomer without a TTL", err, broker.ErrUniqueHeld)

	// A key held until done is free once its holder is, whatever the
	// newcomer asks for.
	untilDone := s.enqueue(t, broker.Job{UniqueKey: "until-done"})
	drain()
	if next := s.enqueue(t, broker.Job{UniqueKey: "until-done", UniqueFor: time.Hour}); next == untilDone {
		t.Fatal("a done holder's key is still held")
	}
	drain()

	// Retry takes the key back when it is free, and is refused while
	// another live job holds it.
	a := s.enqueue(t, broker.Job{UniqueKey: "invoice-7", MaxAttempts: 1})
	_, err = s.b.Leases().Fail(s.ctx, s.claimOne(t, long), broker.Failure{Error: "boom", Dead: true})
	noErr(t, "Fail", err)
	b := s.enqueue(t, broker.Job{UniqueKey: "invoice-7"}) // a's death freed the key
	_, err = s.b.Inspector().Retry(s.ctx, s.q, a)
	if err == nil {
		t.Fatalf("Retry of %s succeeded while %s holds its unique key: two live jobs hold one key", a, b)
	}
	want(t, "state of the refused retry", s.job(t, a).State, broker.StateDead)
	// RetryDead passes over a dead job it cannot send back, so the ones
	// behind it go.
	other := s.enqueue(t, broker.Job{MaxAttempts: 1})
	var bLease broker.Lease
	for _, l := range s.claim(t, 10, long) { // b runs on, holding the key
		switch l.ID {
		case other:
			_, err = s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "boom", Dead: true})
			noErr(t, "Fail", err)
		case b:
			bLease = l
		}
	}
	n, err := s.b.Inspector().RetryDead(s.ctx, s.q, 1)
	noErr(t, "RetryDead", err)
	want(t, "jobs RetryDead sent back past a refused one", n, 1)
	want(t, "the refused job", s.job(t, a).State, broker.StateDead)
	want(t, "the job behind it", s.job(t, other).State, broker.StatePending)

	_, err = s.b.Leases().Ack(s.ctx, bLease, nil)
	noErr(t, "Ack", err)
	_, err = s.b.Inspector().Retry(s.ctx, s.q, a)
	noErr(t, "Retry once the key is free", err)
	s.wantHeld(t, "invoice-7", a)
	s.consistent(t)
}

// wantHeld checks that an enqueue with the unique key creates nothing and
// names the holder.
func (s *bundle) wantHeld(t failer, key, holder string) {
	t.Helper()
	id, err := s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "k", UniqueKey: key})
	var held *broker.UniqueHeldError
	if !errors.As(err, &held) {
		t.Fatalf("enqueue with unique key %q: error %v, want a *UniqueHeldError", key, err)
	}
	if id != holder || held.HolderID != holder || held.Key != key {
		t.Fatalf("enqueue with unique key %q: id %q, %+v; want holder %q", key, id, held, holder)
	}
}

// Limits hold inside the claim script: for every claimer at once.
func testLimits(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	for range 6 {
		s.enqueue(t, broker.Job{})
	}
	noErr(t, "SetLimits", s.b.Inspector().SetLimits(s.ctx, s.q, broker.Limits{MaxRunning: 2}))
	l, err := s.b.Inspector().Limits(s.ctx, s.q)
	noErr(t, "Limits", err)
	want(t, "limits", l, broker.Limits{MaxRunning: 2})
	running := s.claim(t, 5, long)
	want(t, "claimed under MaxRunning 2", len(running), 2)
	want(t, "claimed at the limit", len(s.claim(t, 5, long)), 0)
	key := s.queueKey("wake")
	noErr(t, "DEL wake", s.Client.Del(s.ctx, key).Err())
	_, err = s.b.Leases().Ack(s.ctx, running[0], nil)
	noErr(t, "Ack", err)
	if n, _ := s.Client.LLen(s.ctx, key).Result(); n != 1 {
		t.Fatal("a finished job under a concurrency limit did not wake a pool")
	}
	want(t, "claimed after a slot freed", len(s.claim(t, 5, long)), 1)

	// A rate: 2 starts per window, then a wait the claim announces.
	const window = 300 * time.Millisecond // wide enough for two claims on a loaded machine
	noErr(t, "SetLimits", s.b.Inspector().SetLimits(s.ctx, s.q, broker.Limits{Rate: 2, Per: window}))
	got, err := s.b.Leases().Claim(s.ctx, s.q, 5, long)
	noErr(t, "Claim", err)
	want(t, "claimed under the rate", len(got.Leases), 2)
	got, err = s.b.Leases().Claim(s.ctx, s.q, 5, long)
	noErr(t, "Claim", err)
	want(t, "claimed past the rate", len(got.Leases), 0)
	if got.NextDue <= 0 || got.NextDue > window {
		t.Fatalf("NextDue %v, want the rest of the %v window", got.NextDue, window)
	}
	s.Advance(window + 10*time.Millisecond)
	want(t, "claimed in the next window", len(s.claim(t, 5, long)), 1)

	noErr(t, "SetLimits", s.b.Inspector().SetLimits(s.ctx, s.q, broker.Limits{}))
	l, _ = s.b.Inspector().Limits(s.ctx, s.q)
	want(t, "limits removed", l, broker.Limits{})
	for _, bad := range []broker.Limits{{MaxRunning: -1}, {Rate: 5}, {Per: time.Second}} {
		wantErr(t, "bad limits", s.b.Inspector().SetLimits(s.ctx, s.q, bad), broker.ErrInvalid)
	}
	s.consistent(t)
}

// SetLimits changes the queue's limits and nothing else: its events stay
// on, and limits read, changed and written back keep the ones left alone.
func testLimitsKeepOtherSettings(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	noErr(t, "SetEvents", s.b.Inspector().SetEvents(s.ctx, s.q, 1000))
	noErr(t, "SetLimits", s.b.Inspector().SetLimits(s.ctx, s.q, broker.Limits{Rate: 5, Per: time.Second}))
	l, err := s.b.Inspector().Limits(s.ctx, s.q)
	noErr(t, "Limits", err)
	l.MaxRunning = 3
	noErr(t, "SetLimits", s.b.Inspector().SetLimits(s.ctx, s.q, l))
	l, err = s.b.Inspector().Limits(s.ctx, s.q)
	noErr(t, "Limits", err)
	want(t, "a rate, then max running", l, broker.Limits{MaxRunning: 3, Rate: 5, Per: time.Second})
	noErr(t, "SetLimits", s.b.Inspector().SetLimits(s.ctx, s.q, broker.Limits{MaxRunning: 3}))
	l, _ = s.b.Inspector().Limits(s.ctx, s.q)
	want(t, "a zero rate removes the rate only", l, broker.Limits{MaxRunning: 3})
	noErr(t, "SetLimits", s.b.Inspector().SetLimits(s.ctx, s.q, broker.Limits{}))
	l, _ = s.b.Inspector().Limits(s.ctx, s.q)
	want(t, "the zero Limits removes them all", l, broker.Limits{})

	kept, err := s.b.Inspector().EventsKept(s.ctx, s.q)
	noErr(t, "EventsKept", err)
	want(t, "events kept after SetLimits", kept, 1000)
	id := s.enqueue(t, broker.Job{})
	evs, err := s.b.Inspector().RecentEvents(s.ctx, s.q, 1)
	noErr(t, "RecentEvents", err)
	if len(evs) != 1 || evs[0].JobID != id || evs[0].Event != "enqueued" {
		t.Fatalf("after SetLimits, an enqueue recorded %+v; want its enqueued event", evs)
	}
}

// With events on, every step of a job's life lands in the queue's stream.
func testEvents(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	s.enqueue(t, broker.Job{}) // before events are on: not recorded
	noErr(t, "SetEvents", s.b.Inspector().SetEvents(s.ctx, s.q, 1000))
	kept, err := s.b.Inspector().EventsKept(s.ctx, s.q)
	noErr(t, "EventsKept", err)
	want(t, "events kept", kept, 1000)
	id := s.enqueue(t, broker.Job{MaxAttempts: 2})
	ls := s.claim(t, 2, long)
	var mine broker.Lease
	for _, l := range ls {
		if l.ID == id {
			mine = l
		}
	}
	_, err = s.b.Leases().Fail(s.ctx, mine, broker.Failure{Error: "boom"})
	noErr(t, "Fail", err)
	_, err = s.b.Leases().Ack(s.ctx, mine, nil) // stale now
	noErr(t, "stale Ack", err)
	second := s.claimOne(t, long)
	_, err = s.b.Leases().Ack(s.ctx, second, nil)
	noErr(t, "Ack", err)

	evs, err := s.b.Inspector().Events(s.ctx, s.q, "0", 100, 0)
	noErr(t, "Events", err)
	var got []string
	for _, e := range evs {
		if e.JobID == id {
			got = append(got, e.Event)
		}
	}
	wantSeq := []string{"enqueued", "started", "retried", "stale_rejected", "started", "done"}
	if !slices.Equal(got, wantSeq) {
		t.Fatalf("events of %s: %v, want %v", id, got, wantSeq)
	}
	if evs[len(evs)-1].Time.IsZero() || evs[len(evs)-1].Generation != second.Generation {
		t.Fatalf("last event %+v", evs[len(evs)-1])
	}
	// Reading after the last one waits, then answers nothing.
	more, err := s.b.Inspector().Events(s.ctx, s.q, evs[len(evs)-1].StreamID, 10, 20*time.Millisecond)
	noErr(t, "Events", err)
	want(t, "events after the last", len(more), 0)
	noErr(t, "SetEvents off", s.b.Inspector().SetEvents(s.ctx, s.q, 0))
	s.enqueue(t, broker.Job{})
	evs, err = s.b.Inspector().Events(s.ctx, s.q, "0", 100, 0)
	noErr(t, "Events", err)
	want(t, "events once off", len(evs), 0)
	s.consistent(t)
}

// A job that depends on others is blocked until they are done; a
// dependency that dies cancels it (and what depends on it), unless it asked
// to run anyway.
func testDependencies(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	p1 := s.enqueue(t, broker.Job{ID: "p1"})
	p2 := s.enqueue(t, broker.Job{ID: "p2", MaxAttempts: 1})
	child := s.enqueue(t, broker.Job{ID: "child", DependsOn: []string{p1, p2}})
	want(t, "child", s.job(t, child).State, broker.StateBlocked)
	grand := s.enqueue(t, broker.Job{ID: "grandchild", DependsOn: []string{child}})
	runAnyway := s.enqueue(t, broker.Job{ID: "stubborn", DependsOn: []string{p2}, RunIfDependencyFails: true})
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "blocked", c.Blocked, int64(3))
	s.consistent(t)

	ls := s.claim(t, 10, long)
	want(t, "claimable (only the parents)", len(ls), 2)
	byID := map[string]broker.Lease{}
	for _, l := range ls {
		byID[l.ID] = l
	}
	_, err := s.b.Leases().Ack(s.ctx, byID[p1], nil)
	noErr(t, "Ack p1", err)
	want(t, "child after one of two", s.job(t, child).State, broker.StateBlocked)
	_, err = s.b.Leases().Fail(s.ctx, byID[p2], broker.Failure{Error: "boom"}) // dies: one attempt
	noErr(t, "Fail p2", err)
	j := s.job(t, child)
	if j.State != broker.StateCancelled || !strings.Contains(j.LastError, "p2 ended dead") {
		t.Fatalf("child after a dead dependency: %s %q", j.State, j.LastError)
	}
	want(t, "grandchild, down the chain", s.job(t, grand).State, broker.StateCancelled)
	want(t, "the one that runs anyway", s.job(t, runAnyway).State, broker.StatePending)
	s.consistent(t)

	// Done dependencies release; dead ones at enqueue cancel at once.
	ok := s.enqueue(t, broker.Job{DependsOn: []string{p1}})
	want(t, "depending on a done job", s.job(t, ok).State, broker.StatePending)
	gone := s.enqueue(t, broker.Job{DependsOn: []string{p2}})
	want(t, "depending on a dead job", s.job(t, gone).State, broker.StateCancelled)

	// Two dependencies done in turn release a delayed dependent as scheduled.
	a := s.enqueue(t, broker.Job{})
	later := s.enqueue(t, broker.Job{DependsOn: []string{a}, Delay: time.Hour})
	for _, l := range s.claim(t, 10, long) {
		_, err := s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "Ack", err)
	}
	want(t, "a delayed dependent once released", s.job(t, later).State, broker.StateScheduled)

	blocked := s.enqueue(t, broker.Job{DependsOn: []string{s.enqueue(t, broker.Job{})}})
	st, err := s.b.Inspector().Cancel(s.ctx, s.q, blocked)
	noErr(t, "Cancel", err)
	want(t, "a cancelled blocked job", st, broker.StateCancelled)
	_, err = s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "k", DependsOn: []string{"no-such-job"}})
	wantErr(t, "a missing dependency", err, broker.ErrInvalid)
	s.consistent(t)
}

// The dependency bugs the audit found, one case each.
func testDependencyEdges(t *testing.T, nb NewBackend) {
	t.Run("DuplicateDependencyCountsOnce", func(t *testing.T) {
		s := setup(t, nb)
		p := s.enqueue(t, broker.Job{})
		child := s.enqueue(t, broker.Job{DependsOn: []string{p, p, p}})
		s.ackAll(t)
		want(t, "child of a dependency listed three times", s.job(t, child).State, broker.StatePending)
		s.consistent(t)
	})
	t.Run("CancelledDependentIsNotReleasedUnderItsReusedID", func(t *testing.T) {
		s := setup(t, nb)
		p := s.enqueue(t, broker.Job{ID: "p"})
		other := s.enqueue(t, broker.Job{ID: "other"})
		parents := s.claim(t, 2, long)
		s.enqueue(t, broker.Job{ID: "c", DependsOn: []string{p}})
		_, err := s.b.Inspector().Cancel(s.ctx, s.q, "c")
		noErr(t, "Cancel", err)
		_, err = s.b.Leases().Trim(s.ctx, s.q, broker.Retention{MaxCancelled: 0, Cancelled: time.Millisecond}, 100)
		noErr(t, "Trim", err)
		s.pastHorizon()
		_, err = s.b.Leases().Trim(s.ctx, s.q, broker.Retention{Cancelled: time.Millisecond}, 100)
		noErr(t, "Trim", err)
		if _, err := s.b.Inspector().Job(s.ctx, s.q, "c"); !errors.Is(err, broker.ErrJobNotFound) {
			t.Fatalf("c should have been trimmed: %v", err)
		}
		// The id again, waiting for another job only.
		s.enqueue(t, broker.Job{ID: "c", DependsOn: []string{other}})
		for _, l := range parents {
			if l.ID == p {
				_, err := s.b.Leases().Ack(s.ctx, l, nil)
				noErr(t, "Ack p", err)
			}
		}
		s.settleCascade(t)
		want(t, "the new c after p, which it never named, was done", s.job(t, "c").State, broker.StateBlocked)
		s.consistent(t)
	})
	t.Run("CheckFindsADependentNobodyWillRelease", func(t *testing.T) {
		s := setup(t, nb)
		p := s.enqueue(t, broker.Job{})
		c := s.enqueue(t, broker.Job{DependsOn: []string{p}})
		s.consistent(t)
		// Lose the record of c as p's dependent, as a bug or a hand edit would.
		noErr(t, "DEL", s.Client.Del(s.ctx, s.b.Prefix()+":{"+s.q+"}:children:"+p).Err())
		s.ackAll(t)
		bad, err := s.b.Inspector().Check(s.ctx, s.q)
		noErr(t, "Check", err)
		if len(bad) != 1 || bad[0].ID != c || !strings.Contains(bad[0].Problem, "blocked") {
			t.Fatalf("Check found %v; want %s reported as blocked for ever", bad, c)
		}
	})
	t.Run("RetriedDependentWaitsAgain", func(t *testing.T) {
		s := setup(t, nb)
		p := s.enqueue(t, broker.Job{})
		c := s.enqueue(t, broker.Job{DependsOn: []string{p}})
		_, err := s.b.Inspector().Cancel(s.ctx, s.q, c)
		noErr(t, "Cancel", err)
		_, err = s.b.Inspector().Retry(s.ctx, s.q, c)
		noErr(t, "Retry", err)
		want(t, "a retried dependent whose dependency has not run", s.job(t, c).State, broker.StateBlocked)
		ls := s.claim(t, 10, long)
		want(t, "claimable", len(ls), 1)
		want(t, "claimed", ls[0].ID, p)
		_, err = s.b.Leases().Ack(s.ctx, ls[0], nil)
		noErr(t, "Ack", err)
		want(t, "the dependent after its dependency", s.job(t, c).State, broker.StatePending)

		// A dependency that is dead refuses the retry, clearly.
		s.ackAll(t)
		q := s.enqueue(t, broker.Job{MaxAttempts: 1})
		d := s.enqueue(t, broker.Job{DependsOn: []string{q}})
		_, err = s.b.Leases().Fail(s.ctx, s.claimOne(t, long), broker.Failure{Error: "boom", Dead: true})
		noErr(t, "Fail", err)
		s.settleCascade(t)
		want(t, "dependent of a dead job", s.job(t, d).State, broker.StateCancelled)
		_, err = s.b.Inspector().Retry(s.ctx, s.q, d)
		if err == nil || !strings.Contains(err.Error(), q) {
			t.Fatalf("Retry of a dependent of a dead job: %v, want an error naming %s", err, q)
		}
		want(t, "the refused retry", s.job(t, d).State, broker.StateCancelled)
		s.consistent(t)
	})
}

// Invariant 8: a job's fan-out and a chain of dependents are settled in
// bounded steps, each of at most the budget its caller passes.
func testBoundedCascades(t *testing.T, nb NewBackend) {
	const n = 1000
	t.Run("FanOut", func(t *testing.T) {
		s := setup(t, nb)
		p := s.enqueue(t, broker.Job{})
		jobs := make([]broker.Job, n)
		for i := range jobs {
			jobs[i] = broker.Job{Queue: s.q, Kind: "k", DependsOn: []string{p}}
		}
		for _, e := range s.b.Client().EnqueueMany(s.ctx, jobs) {
			noErr(t, "EnqueueMany", e.Err)
		}
		_, err := s.b.Leases().Ack(s.ctx, s.claimOne(t, long), nil)
		noErr(t, "Ack", err)
		c, _ := s.b.Inspector().Counts(s.ctx, s.q)
		if c.Pending == 0 || c.Pending > 50 {
			t.Fatalf("the ack released %d of %d dependents itself; want some, and at most its budget of 50", c.Pending, n)
		}
		o, err := s.b.Inspector().Overview(s.ctx, s.q)
		noErr(t, "Overview", err)
		want(t, "finished jobs with dependents left", o.Cascading, int64(1))
		steps := s.settleCascade(t)
		c, _ = s.b.Inspector().Counts(s.ctx, s.q)
		want(t, "dependents released", c.Pending, int64(n))
		o, err = s.b.Inspector().Overview(s.ctx, s.q)
		noErr(t, "Overview", err)
		want(t, "finished jobs with dependents left", o.Cascading, int64(0))
		if steps < (n-50)/50 {
			t.Fatalf("%d steps of at most 50 settled %d dependents", steps, n-50)
		}
		s.consistent(t)
	})
	// A reaper that recovers a handful of leases still settles a dead
	// job's dependents inline, as every script that finishes a job does:
	// its limit bounds the leases it takes, not the settling of each.
	t.Run("ReapedParent", func(t *testing.T) {
		s := setup(t, nb)
		p := s.enqueue(t, broker.Job{MaxAttempts: 1})
		var deps []string
		for range 3 {
			deps = append(deps, s.enqueue(t, broker.Job{DependsOn: []string{p}}))
		}
		s.claimOne(t, short)
		s.Advance(past)
		r := s.reap(t, 1)
		want(t, "reaped", len(r.Reaped), 1)
		want(t, "cascade left after reaping one lease", r.CascadeLeft, false)
		for _, d := range deps {
			want(t, "a dependent of the dead job", s.job(t, d).State, broker.StateCancelled)
		}
		s.consistent(t)
	})
	t.Run("Chain", func(t *testing.T) {
		s := setup(t, nb)
		root := s.enqueue(t, broker.Job{ID: "link-0"})
		jobs := make([]broker.Job, n)
		for i := range jobs {
			jobs[i] = broker.Job{Queue: s.q, Kind: "k", ID: fmt.Sprintf("link-%d", i+1), DependsOn: []string{fmt.Sprintf("link-%d", i)}}
		}
		for _, e := range s.b.Client().EnqueueMany(s.ctx, jobs) {
			noErr(t, "EnqueueMany", e.Err)
		}
		_, err := s.b.Inspector().Cancel(s.ctx, s.q, root)
		noErr(t, "Cancel", err)
		// The cancel settles one bounded step of the chain itself, never
		// the whole of it (it once recursed down the chain in one script).
		c, _ := s.b.Inspector().Counts(s.ctx, s.q)
		if c.Cancelled > 1+50 || c.Blocked == 0 {
			t.Fatalf("the cancel of the root cancelled %d of %d links itself; want at most its budget of 50", c.Cancelled-1, n)
		}
		s.settleCascade(t)
		c, _ = s.b.Inspector().Counts(s.ctx, s.q)
		want(t, "cancelled down the chain", c.Cancelled, int64(n+1))
		want(t, "still blocked", c.Blocked, int64(0))
		s.consistent(t)
	})
}

// ackAll acks every job that can be claimed now.
func (s *bundle) ackAll(t failer) {
	t.Helper()
	for _, l := range s.claim(t, 1000, long) {
		_, err := s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "Ack", err)
	}
}

// settleCascade runs the reaper's upkeep, 50 dependents a step, until no
// dependent is left to settle; it answers how many steps it took.
func (s *bundle) settleCascade(t failer) int {
	t.Helper()
	for steps := 1; ; steps++ {
		r := s.reap(t, 50)
		if !r.CascadeLeft {
			return steps
		}
		if steps > 100000 {
			t.Fatalf("the cascade did not end")
		}
	}
}

// Overview.Claimable counts what a claim could take now: nothing while
// paused, no more than the limits let start.
func testOverviewClaimable(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	claimable := func(w int64) {
		t.Helper()
		o, err := s.b.Inspector().Overview(s.ctx, s.q)
		noErr(t, "Overview", err)
		want(t, "claimable", o.Claimable, w)
	}
	for range 3 {
		s.enqueue(t, broker.Job{})
	}
	claimable(3)
	noErr(t, "Pause", s.b.Inspector().Pause(s.ctx, s.q))
	claimable(0)
	noErr(t, "Resume", s.b.Inspector().Resume(s.ctx, s.q))
	noErr(t, "SetMaxRunning", s.b.Inspector().SetMaxRunning(s.ctx, s.q, 2))
	claimable(2)
	noErr(t, "SetRate", s.b.Inspector().SetRate(s.ctx, s.q, 1, time.Hour))
	claimable(1)
	s.claimOne(t, long)
	claimable(0) // the hour's one start is spent
	noErr(t, "SetLimits", s.b.Inspector().SetLimits(s.ctx, s.q, broker.Limits{}))
	claimable(2)
}

// Overview says what holds a queue's pending jobs back: its limits, the
// starts its rate counts now and, when they use it up, the wait until the
// next start; Throttled says it in words.
func testOverviewThrottle(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	overview := func() broker.Overview {
		t.Helper()
		o, err := s.b.Inspector().Overview(s.ctx, s.q)
		noErr(t, "Overview", err)
		return o
	}
	for range 3 {
		s.enqueue(t, broker.Job{})
	}
	if o := overview(); o.Limits != (broker.Limits{}) || o.Started != 0 || o.NextStart != 0 || o.Throttled() != "" {
		t.Fatalf("no limits: %+v, throttled %q", o, o.Throttled())
	}
	noErr(t, "SetLimits", s.b.Inspector().SetLimits(s.ctx, s.q, broker.Limits{MaxRunning: 1, Rate: 2, Per: time.Hour}))
	if o := overview(); o.Limits != (broker.Limits{MaxRunning: 1, Rate: 2, Per: time.Hour}) || o.Throttled() != "" {
		t.Fatalf("limits, none reached: %+v, throttled %q", o, o.Throttled())
	}
	s.claimOne(t, long)
	o := overview()
	want(t, "starts in the hour", o.Started, 1)
	want(t, "next start with a start left", o.NextStart, 0)
	want(t, "throttled at max running", o.Throttled(), "max running reached (1 of 1)")
	noErr(t, "SetMaxRunning", s.b.Inspector().SetMaxRunning(s.ctx, s.q, 0))
	s.claimOne(t, long)
	o = overview()
	want(t, "starts in the hour", o.Started, 2)
	if o.NextStart <= 59*time.Minute || o.NextStart > time.Hour {
		t.Fatalf("next start in %v; want about an hour", o.NextStart)
	}
	want(t, "throttled by the rate", o.Throttled(), "at most 2 starts per 1h0m0s; next start in 1h0m0s")
	noErr(t, "Pause", s.b.Inspector().Pause(s.ctx, s.q))
	want(t, "throttled, paused", overview().Throttled(), "paused; at most 2 starts per 1h0m0s; next start in 1h0m0s")
}

// A retried job is due from its retry: its run_at, which the dashboard
// shows as "due since" and the oldest pending age counts from, is the
// retry's time, not its first run_at.
func testRetryIsDueFromTheRetry(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{MaxAttempts: 1})
	first := s.job(t, id).RunAt
	_, err := s.b.Leases().Fail(s.ctx, s.claimOne(t, long), broker.Failure{Error: "boom"})
	noErr(t, "Fail", err)
	s.Advance(400 * time.Millisecond)
	at := s.redisTime(t)
	_, err = s.b.Inspector().Retry(s.ctx, s.q, id)
	noErr(t, "Retry", err)
	j := s.job(t, id)
	if j.RunAt.UnixMilli() < at || !j.RunAt.After(first) {
		t.Fatalf("run_at after the retry at %d: %v (first run_at %v)", at, j.RunAt, first)
	}
	o, err := s.b.Inspector().Overview(s.ctx, s.q)
	noErr(t, "Overview", err)
	if o.HeadAge >= 400*time.Millisecond {
		t.Fatalf("oldest pending age %v: counted from the first run_at, not the retry", o.HeadAge)
	}
	// RetryDead too.
	_, err = s.b.Leases().Fail(s.ctx, s.claimOne(t, long), broker.Failure{Error: "boom"})
	noErr(t, "Fail", err)
	s.Advance(400 * time.Millisecond)
	at = s.redisTime(t)
	n, err := s.b.Inspector().RetryDead(s.ctx, s.q, 10)
	noErr(t, "RetryDead", err)
	want(t, "retried", n, 1)
	if j := s.job(t, id); j.RunAt.UnixMilli() < at {
		t.Fatalf("run_at after RetryDead at %d: %v", at, j.RunAt)
	}
}

// A rate lowered under what already started holds starts back until
// enough of them leave the window: NextStart counts to that one, not to
// the oldest.
func testOverviewLoweredRate(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	for range 3 {
		s.enqueue(t, broker.Job{})
	}
	noErr(t, "SetRate", s.b.Inspector().SetRate(s.ctx, s.q, 3, time.Hour))
	for i := range 3 {
		if i > 0 {
			s.Advance(300 * time.Millisecond)
		}
		s.claimOne(t, long)
	}
	noErr(t, "SetRate", s.b.Inspector().SetRate(s.ctx, s.q, 1, time.Hour))
	o, err := s.b.Inspector().Overview(s.ctx, s.q)
	noErr(t, "Overview", err)
	want(t, "starts in the hour", o.Started, 3)
	// Under a rate of 1 all three must leave: the newest, an hour after it
	// (the oldest leaves 600 ms sooner).
	if o.NextStart <= time.Hour-200*time.Millisecond || o.NextStart > time.Hour {
		t.Fatalf("next start in %v; want an hour after the newest start", o.NextStart)
	}
	noErr(t, "SetRate", s.b.Inspector().SetRate(s.ctx, s.q, 2, time.Hour))
	o, err = s.b.Inspector().Overview(s.ctx, s.q)
	noErr(t, "Overview", err)
	// Under 2, two must leave: the middle one, an hour after it.
	if o.NextStart <= time.Hour-500*time.Millisecond || o.NextStart > time.Hour-300*time.Millisecond {
		t.Fatalf("next start in %v with a rate of 2; want an hour after the second start", o.NextStart)
	}
}
