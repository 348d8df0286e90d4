package brokertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

func testLifecycle(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	payload := []byte("\x00\xffnot utf-8 \x01")
	id := s.enqueue(t, broker.Job{Kind: "email", Payload: payload, MaxAttempts: 3})
	want(t, "state after enqueue", s.job(t, id).State, broker.StatePending)
	s.consistent(t)

	l := s.claimOne(t, long)
	want(t, "lease id", l.ID, id)
	want(t, "lease kind", l.Kind, "email")
	want(t, "lease queue", l.Queue, s.q)
	want(t, "lease attempt", l.Attempt, 1)
	want(t, "lease max attempts", l.MaxAttempts, 3)
	want(t, "lease generation", l.Generation, int64(1))
	if !bytes.Equal(l.Payload, payload) {
		t.Fatalf("payload = %q, want %q", l.Payload, payload)
	}
	if l.ClaimID() == "" || l.Deadline.IsZero() || time.Until(l.LocalDeadline) < 59*time.Minute {
		t.Fatalf("lease lacks token or deadlines: %+v", l)
	}
	j := s.job(t, id)
	want(t, "state after claim", j.State, broker.StateRunning)
	want(t, "stored token", j.ClaimID, l.ClaimID())
	want(t, "stored lease_until", j.LeaseUntil, l.Deadline)
	s.consistent(t)

	o, err := s.b.Leases().Progress(s.ctx, l, []byte(`{"pct":50}`))
	noErr(t, "Progress", err)
	want(t, "progress outcome", o, broker.OK)

	o, err = s.b.Leases().Ack(s.ctx, l, []byte("result"))
	noErr(t, "Ack", err)
	want(t, "ack outcome", o, broker.OK)
	j = s.job(t, id)
	want(t, "state after ack", j.State, broker.StateDone)
	want(t, "result", string(j.Result), "result")
	want(t, "progress", string(j.Progress), `{"pct":50}`)
	want(t, "token after ack", j.ClaimID, "")
	if j.FinishedAt.IsZero() {
		t.Fatal("finished_at not set")
	}
	s.consistent(t)

	if ls := s.claim(t, 5, long); len(ls) != 0 {
		t.Fatalf("claimed %d jobs from an empty queue", len(ls))
	}
}

// Every claim, release, release_unowned and reap of one job moves its
// generation strictly up (invariant 3).
func testGenerationStrictlyIncreases(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{})
	last := s.job(t, id).Generation
	step := func(what string) {
		t.Helper()
		g := s.job(t, id).Generation
		if g <= last {
			t.Fatalf("after %s: generation %d, not above %d", what, g, last)
		}
		last = g
		s.consistent(t)
	}

	l := s.claimOne(t, long)
	step("claim")
	_, err := s.b.Leases().Release(s.ctx, l)
	noErr(t, "Release", err)
	step("release")
	s.claimOne(t, long)
	step("claim")
	_, err = s.b.Inspector().ReleaseUnowned(s.ctx, s.q, id)
	noErr(t, "ReleaseUnowned", err)
	step("release_unowned of a running job")
	_, err = s.b.Inspector().ReleaseUnowned(s.ctx, s.q, id)
	noErr(t, "ReleaseUnowned", err)
	step("release_unowned of a pending job")
	s.claimOne(t, short)
	step("claim")
	s.Advance(past)
	if r := s.reap(t, 10); len(r.Reaped) != 1 || r.Reaped[0].Generation != s.job(t, id).Generation {
		t.Fatalf("reap = %+v", r)
	}
	step("reap")
	s.claimOne(t, long)
	step("claim")
}

// staleOps runs every guarded operation with a dead claim and checks each
// answers Stale and leaves the job exactly as it was (invariant 2).
func staleOps(t *testing.T, s *bundle, stale broker.Lease) {
	t.Helper()
	before := s.job(t, stale.ID)
	rs, err := s.b.Leases().Renew(s.ctx, []broker.Lease{stale}, long)
	noErr(t, "stale Renew", err)
	want(t, "stale renew outcome", rs[0].Outcome, broker.Stale)
	o, err := s.b.Leases().Progress(s.ctx, stale, []byte("stale progress"))
	noErr(t, "stale Progress", err)
	want(t, "stale progress outcome", o, broker.Stale)
	o, err = s.b.Leases().Ack(s.ctx, stale, []byte("stale result"))
	noErr(t, "stale Ack", err)
	want(t, "stale ack outcome", o, broker.Stale)
	for _, f := range []broker.Failure{{Error: "stale failure"}, {Error: "stale", Dead: true}, {Error: "stale", Backoff: time.Minute}} {
		got, err := s.b.Leases().Fail(s.ctx, stale, f)
		o = got.Outcome
		noErr(t, "stale Fail", err)
		want(t, "stale fail outcome", o, broker.Stale)
	}
	got, err := s.b.Leases().Snooze(s.ctx, stale, time.Minute)
	o = got.Outcome
	noErr(t, "stale Snooze", err)
	want(t, "stale snooze outcome", o, broker.Stale)
	got, err = s.b.Leases().Release(s.ctx, stale)
	o = got.Outcome
	noErr(t, "stale Release", err)
	want(t, "stale release outcome", o, broker.Stale)
	sameJob(t, "after the stale claim's operations", s.job(t, stale.ID), before)
	s.consistent(t)
}

// The seed's race: worker A's lease is taken by an operator, B claims the
// job, and A comes back late. Nothing A does may touch B's running job.
func testStaleAfterReleaseUnowned(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{})
	a := s.claimOne(t, long)
	r, err := s.b.Inspector().ReleaseUnowned(s.ctx, s.q, id)
	noErr(t, "ReleaseUnowned", err)
	want(t, "released from", r.Previous, broker.StateRunning)
	want(t, "released to", r.State, broker.StatePending)
	b := s.claimOne(t, long)
	if b.Generation <= a.Generation || b.ClaimID() == a.ClaimID() {
		t.Fatalf("B's claim (gen %d, %s) does not supersede A's (gen %d, %s)", b.Generation, b.ClaimID(), a.Generation, a.ClaimID())
	}
	staleOps(t, s, a)

	// B's claim is intact and settles normally.
	o, err := s.b.Leases().Ack(s.ctx, b, []byte("B"))
	noErr(t, "B's Ack", err)
	want(t, "B's ack outcome", o, broker.OK)
	want(t, "stored result", string(s.job(t, id).Result), "B")
}

func testStaleAfterReap(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{})
	a := s.claimOne(t, short)
	s.Advance(past)
	if r := s.reap(t, 10); len(r.Reaped) != 1 || r.Reaped[0].State != broker.StatePending {
		t.Fatalf("reap = %+v, want the job back to pending", r)
	}
	staleOps(t, s, a) // reaped, not yet claimed again
	b := s.claimOne(t, long)
	want(t, "attempt of the second claim", b.Attempt, 2)
	staleOps(t, s, a) // and with B holding it
	o, err := s.b.Leases().Ack(s.ctx, b, []byte("B"))
	noErr(t, "B's Ack", err)
	want(t, "B's ack outcome", o, broker.OK)
	want(t, "stored result", string(s.job(t, id).Result), "B")
}

// Invariant 4: an expired lease that no reaper took still belongs to its token.
func testExpiredButUnreaped(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	s.enqueue(t, broker.Job{})
	s.enqueue(t, broker.Job{})
	ls := s.claim(t, 2, short)
	s.Advance(past)

	expired, err := s.b.Inspector().ExpiredLeases(s.ctx, s.q, 10)
	noErr(t, "ExpiredLeases", err)
	want(t, "expired leases listed", len(expired), 2)
	if !expired[0].Expired() || expired[0].Kind != "k" || expired[0].Generation != 1 {
		t.Fatalf("expired lease = %+v", expired[0])
	}

	rs, err := s.b.Leases().Renew(s.ctx, ls[:1], long)
	noErr(t, "Renew after expiry", err)
	want(t, "renew after expiry", rs[0].Outcome, broker.OK)
	o, err := s.b.Leases().Ack(s.ctx, ls[1], nil)
	noErr(t, "Ack after expiry", err)
	want(t, "ack after expiry", o, broker.OK)
	want(t, "state after late ack", s.job(t, ls[1].ID).State, broker.StateDone)

	// The renewed lease is no longer expired, so the reaper leaves it.
	if r := s.reap(t, 10); len(r.Reaped) != 0 {
		t.Fatalf("reaped %+v after renew and ack", r.Reaped)
	}
	expired, err = s.b.Inspector().ExpiredLeases(s.ctx, s.q, 10)
	noErr(t, "ExpiredLeases", err)
	want(t, "expired leases after renew and ack", len(expired), 0)
	want(t, "renewed job state", s.job(t, ls[0].ID).State, broker.StateRunning)
	s.consistent(t)
}

func testReap(t *testing.T, nb NewBackend) {
	t.Run("BoundedByLimit", func(t *testing.T) {
		s := setup(t, nb)
		for range 5 {
			s.enqueue(t, broker.Job{})
		}
		s.claim(t, 5, short)
		s.Advance(past)
		want(t, "first reap", len(s.reap(t, 2).Reaped), 2)
		c, _ := s.b.Inspector().Counts(s.ctx, s.q)
		want(t, "running after first reap", c.Running, int64(3))
		want(t, "pending after first reap", c.Pending, int64(2))
		want(t, "second reap", len(s.reap(t, 10).Reaped), 3)
		want(t, "third reap", len(s.reap(t, 10).Reaped), 0)
		s.consistent(t)
	})
	t.Run("LeavesLiveLeases", func(t *testing.T) {
		s := setup(t, nb)
		s.enqueue(t, broker.Job{})
		s.claimOne(t, long)
		want(t, "reaped", len(s.reap(t, 10).Reaped), 0)
	})
	t.Run("DeadWhenAttemptsSpent", func(t *testing.T) {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{MaxAttempts: 1})
		s.claimOne(t, short)
		s.Advance(past)
		r := s.reap(t, 10)
		if len(r.Reaped) != 1 || r.Reaped[0].State != broker.StateDead {
			t.Fatalf("reap = %+v, want the job dead", r)
		}
		j := s.job(t, id)
		want(t, "state", j.State, broker.StateDead)
		if j.LastError == "" {
			t.Fatal("dead job has no last_error")
		}
		s.consistent(t)
	})
	t.Run("HonoursCancel", func(t *testing.T) {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{})
		s.claimOne(t, short)
		st, err := s.b.Inspector().Cancel(s.ctx, s.q, id)
		noErr(t, "Cancel", err)
		want(t, "state after cancel of a running job", st, broker.StateRunning)
		s.Advance(past)
		r := s.reap(t, 10)
		if len(r.Reaped) != 1 || r.Reaped[0].State != broker.StateCancelled {
			t.Fatalf("reap = %+v, want the job cancelled", r)
		}
		s.consistent(t)
	})
}

func testRelease(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{MaxAttempts: 1})
	for range 3 { // more releases than attempts: none is charged
		l := s.claimOne(t, long)
		want(t, "attempt", l.Attempt, 1)
		got, err := s.b.Leases().Release(s.ctx, l)
		o, st := got.Outcome, got.State
		noErr(t, "Release", err)
		want(t, "release outcome", o, broker.OK)
		want(t, "state after release", st, broker.StatePending)
		j := s.job(t, id)
		want(t, "attempt after release", j.Attempt, 0)
		want(t, "generation after release", j.Generation, l.Generation+1)
		s.consistent(t)
	}
}

func testReleaseUnowned(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{})
	// A finished job is refused (testReleaseUnownedRefusesFinished).
	for _, st := range []broker.State{broker.StatePending, broker.StateRunning} {
		if st == broker.StateRunning {
			s.claimOne(t, long)
		}
		before := s.job(t, id)
		want(t, "state", before.State, st)
		r, err := s.b.Inspector().ReleaseUnowned(s.ctx, s.q, id)
		noErr(t, "ReleaseUnowned", err)
		want(t, "previous state", r.Previous, st)
		want(t, "new generation", r.Generation, before.Generation+1)
		after := s.job(t, id)
		want(t, "stored generation", after.Generation, before.Generation+1)
		if st == broker.StateRunning {
			want(t, "state after force-release", after.State, broker.StatePending)
			want(t, "attempt after force-release", after.Attempt, before.Attempt-1)
		} else {
			want(t, "state kept", after.State, st)
		}
		s.consistent(t)
	}
	_, err := s.b.Inspector().ReleaseUnowned(s.ctx, s.q, "no-such-job")
	wantErr(t, "ReleaseUnowned of a missing job", err, broker.ErrJobNotFound)
}

func testFail(t *testing.T, nb NewBackend) {
	t.Run("RetryWithBackoffThenDead", func(t *testing.T) {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{MaxAttempts: 2})
		l := s.claimOne(t, long)
		got, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "boom 1", Backoff: past})
		o, st := got.Outcome, got.State
		noErr(t, "Fail", err)
		want(t, "fail outcome", o, broker.OK)
		want(t, "state after first failure", st, broker.StateScheduled)
		j := s.job(t, id)
		want(t, "last error", j.LastError, "boom 1")
		want(t, "token cleared", j.ClaimID, "")
		s.consistent(t)

		res, err := s.b.Leases().Claim(s.ctx, s.q, 1, long)
		noErr(t, "Claim", err)
		if len(res.Leases) != 0 {
			t.Fatal("claimed a job still in backoff")
		}
		if res.NextDue <= 0 || res.NextDue > past {
			t.Fatalf("NextDue = %v, want in (0, %v]", res.NextDue, past)
		}
		s.Advance(past)
		l = s.claimOne(t, long)
		want(t, "second attempt", l.Attempt, 2)
		got, err = s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "boom 2"})
		st = got.State
		noErr(t, "Fail", err)
		want(t, "state when attempts are spent", st, broker.StateDead)
		want(t, "last error", s.job(t, id).LastError, "boom 2")
		s.consistent(t)
	})
	t.Run("ZeroBackoffIsPendingAtOnce", func(t *testing.T) {
		s := setup(t, nb)
		s.enqueue(t, broker.Job{})
		got, err := s.b.Leases().Fail(s.ctx, s.claimOne(t, long), broker.Failure{Error: "x"})
		st := got.State
		noErr(t, "Fail", err)
		want(t, "state", st, broker.StatePending)
		want(t, "attempt of the retry", s.claimOne(t, long).Attempt, 2)
	})
	t.Run("PermanentIsDeadAtOnce", func(t *testing.T) {
		s := setup(t, nb)
		s.enqueue(t, broker.Job{MaxAttempts: 10})
		got, err := s.b.Leases().Fail(s.ctx, s.claimOne(t, long), broker.Failure{Error: "bad input", Dead: true})
		st := got.State
		noErr(t, "Fail", err)
		want(t, "state", st, broker.StateDead)
		s.consistent(t)
	})
	t.Run("SnoozeDoesNotChargeAttempt", func(t *testing.T) {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{MaxAttempts: 1})
		got, err := s.b.Leases().Snooze(s.ctx, s.claimOne(t, long), 0)
		st := got.State
		noErr(t, "Snooze", err)
		want(t, "state", st, broker.StatePending)
		want(t, "attempt", s.job(t, id).Attempt, 0)
		got, err = s.b.Leases().Snooze(s.ctx, s.claimOne(t, long), time.Minute)
		st = got.State
		noErr(t, "Snooze", err)
		want(t, "state", st, broker.StateScheduled)
		s.consistent(t)
	})
	t.Run("LongErrorIsCut", func(t *testing.T) {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{})
		_, err := s.b.Leases().Fail(s.ctx, s.claimOne(t, long), broker.Failure{Error: string(bytes.Repeat([]byte("x"), 100_000)), Dead: true})
		noErr(t, "Fail", err)
		if n := len(s.job(t, id).LastError); n > 33_000 {
			t.Fatalf("stored last_error of %d bytes", n)
		}
	})
}

func testRenewMany(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	for range 3 {
		s.enqueue(t, broker.Job{})
	}
	s.enqueue(t, broker.Job{Queue: "other"})
	ls := s.claim(t, 3, short)
	other, err := s.b.Leases().Claim(s.ctx, "other", 1, short)
	noErr(t, "Claim other", err)
	ls = append(ls, other.Leases...)
	want(t, "leases", len(ls), 4)
	_, err = s.b.Inspector().ReleaseUnowned(s.ctx, s.q, ls[1].ID) // ls[1] is now stale
	noErr(t, "ReleaseUnowned", err)
	_, err = s.b.Inspector().Cancel(s.ctx, s.q, ls[2].ID)
	noErr(t, "Cancel", err)

	rs, err := s.b.Leases().Renew(s.ctx, ls, long)
	noErr(t, "Renew", err)
	for i, w := range []broker.Outcome{broker.OK, broker.Stale, broker.CancelRequested, broker.OK} {
		want(t, "renewal outcome", rs[i].Outcome, w)
	}
	if time.Until(rs[0].LocalDeadline) < 59*time.Minute || !rs[0].Deadline.After(ls[0].Deadline) {
		t.Fatalf("renewal did not extend: %+v (lease %+v)", rs[0], ls[0])
	}
	s.Advance(past)
	want(t, "reaped after renew", len(s.reap(t, 10).Reaped), 0)
	s.consistent(t)
}

// A job deleted (by retention or an operator) and enqueued again under the
// same id gets generations above every one its predecessor had (invariant
// 10), so a fence keyed by the id stays right; and the token tells the old
// claim from the new one whatever the generations.
func testStaleAfterRecreate(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{ID: "reused"})
	a := s.claimOne(t, long)
	s.purge(t, id)
	s.enqueue(t, broker.Job{ID: "reused"})
	b := s.claimOne(t, long)
	if b.Generation <= a.Generation {
		t.Fatalf("the re-created job's claim has generation %d, not above its predecessor's %d", b.Generation, a.Generation)
	}
	staleOps(t, s, a)
	o, err := s.b.Leases().Ack(s.ctx, b, []byte("B"))
	noErr(t, "B's Ack", err)
	want(t, "B's ack outcome", o, broker.OK)
}

func testAckMany(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	for range 3 {
		s.enqueue(t, broker.Job{})
	}
	s.enqueue(t, broker.Job{Queue: "other"})
	ls := s.claim(t, 3, long)
	other, err := s.b.Leases().Claim(s.ctx, "other", 1, long)
	noErr(t, "Claim other", err)
	ls = append(ls, other.Leases...)
	_, err = s.b.Inspector().ReleaseUnowned(s.ctx, s.q, ls[1].ID) // ls[1] is now stale
	noErr(t, "ReleaseUnowned", err)
	noErr(t, "SCRIPT FLUSH", s.Client.ScriptFlush(s.ctx).Err())

	acks := make([]broker.Ack, len(ls))
	for i, l := range ls {
		acks[i] = broker.Ack{Lease: l, Result: []byte("r" + l.ID)}
	}
	os, err := s.b.Leases().AckMany(s.ctx, acks)
	noErr(t, "AckMany", err)
	for i, w := range []broker.Outcome{broker.OK, broker.Stale, broker.OK, broker.OK} {
		want(t, "ack outcome", os[i], w)
	}
	want(t, "result", string(s.job(t, ls[0].ID).Result), "r"+ls[0].ID)
	want(t, "stale job's state", s.job(t, ls[1].ID).State, broker.StatePending)
	j, err := s.b.Inspector().Job(s.ctx, "other", ls[3].ID)
	noErr(t, "Job other", err)
	want(t, "other queue's job", j.State, broker.StateDone)
	s.consistent(t)
}

// Wait returns once the job finishes, woken by its settlement.
func testWait(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	_, err := s.b.Client().Wait(s.ctx, s.q, "missing")
	wantErr(t, "Wait of a missing job", err, broker.ErrJobNotFound)

	id := s.enqueue(t, broker.Job{})
	got := make(chan broker.JobInfo, 3)
	for range 3 {
		go func() {
			j, err := s.b.Client().Wait(s.ctx, s.q, id)
			if err != nil {
				t.Error(err)
			}
			got <- j
		}()
	}
	// A caller that gives up changes nothing for the others.
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Millisecond)
	_, err = s.b.Client().Wait(ctx, s.q, id)
	cancel()
	wantErr(t, "Wait past its context", err, context.DeadlineExceeded)
	s.waitedOn(t, id)
	time.Sleep(20 * time.Millisecond) // let the waiters reach their blocking pop
	_, err = s.b.Leases().Ack(s.ctx, s.claimOne(t, long), []byte("answer"))
	noErr(t, "Ack", err)
	for range 3 {
		select {
		case j := <-got:
			if j.State != broker.StateDone || string(j.Result) != "answer" {
				t.Fatalf("Wait returned %+v", j)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Wait did not return after the ack")
		}
	}
	// A finished job answers at once.
	j, err := s.b.Client().Wait(s.ctx, s.q, id)
	noErr(t, "Wait of a done job", err)
	want(t, "state", j.State, broker.StateDone)
	s.consistent(t)
}

// A wake-up left from an earlier end of the job (its waiter gave up, then
// the job was retried) never makes Wait return a job that has not finished.
func testWaitAfterRetry(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{MaxAttempts: 1})
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Millisecond)
	_, err := s.b.Client().Wait(ctx, s.q, id) // registers, then gives up
	cancel()
	wantErr(t, "Wait past its context", err, context.DeadlineExceeded)
	_, err = s.b.Leases().Fail(s.ctx, s.claimOne(t, long), broker.Failure{Error: "boom", Dead: true})
	noErr(t, "Fail", err)
	_, err = s.b.Inspector().Retry(s.ctx, s.q, id)
	noErr(t, "Retry", err)

	ctx, cancel = context.WithTimeout(s.ctx, 200*time.Millisecond)
	defer cancel()
	j, err := s.b.Client().Wait(ctx, s.q, id)
	if err == nil {
		t.Fatalf("Wait returned the job %s in state %s: it has not finished since the retry", id, j.State)
	}
	wantErr(t, "Wait of a retried job", err, context.DeadlineExceeded)

	// It does return once the retried job finishes.
	done := make(chan error, 1)
	go func() {
		j, err := s.b.Client().Wait(s.ctx, s.q, id)
		if err == nil && j.State != broker.StateDone {
			err = fmt.Errorf("broker.Wait returned state %s", j.State)
		}
		done <- err
	}()
	_, err = s.b.Leases().Ack(s.ctx, s.claimOne(t, long), nil)
	noErr(t, "Ack", err)
	select {
	case err := <-done:
		noErr(t, "Wait after the retried job's ack", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the retried job's ack")
	}

	// A deadline a fraction of a millisecond away is a short block, never
	// Redis's "block forever" (a timeout formatted as 0).
	other := s.enqueue(t, broker.Job{})
	for _, d := range []time.Duration{100 * time.Microsecond, 400 * time.Microsecond, 900 * time.Microsecond} {
		ctx, cancel := context.WithTimeout(s.ctx, d)
		start := time.Now()
		_, err := s.b.Client().Wait(ctx, s.q, other)
		cancel()
		if err == nil || time.Since(start) > 5*time.Second {
			t.Fatalf("Wait with a %v deadline: %v after %v", d, err, time.Since(start))
		}
	}
}

// waitedOn waits until a Wait caller has registered for job id.
func (s *bundle) waitedOn(t failer, id string) {
	t.Helper()
	key := s.b.Prefix() + ":{" + s.q + "}:job:" + id
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if ok, _ := s.Client.HExists(s.ctx, key, "waited").Result(); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Wait caller registered for job %s", id)
		}
	}
}

// Invariant 9: every operation a client may send again after a lost reply
// answers the same the second time, and changes nothing more. Each call
// here runs, loses its reply, and is sent again (the resend hook).
func testLostReplies(t *testing.T, nb NewBackend) {
	be := nb(t)
	be.Client.AddHook(resend{})
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	lost := context.WithValue(s.ctx, resendKey{}, true)

	// Enqueue, one and many, with ids of the caller's and generated ones.
	_, err := s.b.Client().Enqueue(lost, broker.Job{Queue: s.q, Kind: "k", ID: "mine", MaxAttempts: 1})
	noErr(t, "Enqueue sent twice", err)
	_, err = s.b.Client().Enqueue(lost, broker.Job{Queue: s.q, Kind: "k"})
	noErr(t, "Enqueue of a generated id sent twice", err)
	for _, e := range s.b.Client().EnqueueMany(lost, []broker.Job{{Queue: s.q, Kind: "k", ID: "many-1"}, {Queue: s.q, Kind: "k", UniqueKey: "u"}}) {
		noErr(t, "EnqueueMany sent twice", e.Err)
	}
	_, err = s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "k", ID: "mine"})
	wantErr(t, "another request for the same id", err, broker.ErrJobExists)
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "pending after four enqueues sent twice", c.Pending, int64(4))

	// Claim under one request id, twice.
	req := broker.NewRequestID()
	first, err := s.b.Leases().ClaimRequest(s.ctx, req, s.q, 2, long)
	noErr(t, "ClaimRequest", err)
	second, err := s.b.Leases().ClaimRequest(s.ctx, req, s.q, 2, long)
	noErr(t, "ClaimRequest sent again", err)
	if len(first.Leases) != 2 || len(second.Leases) != 2 || first.Leases[0].ClaimID() != second.Leases[0].ClaimID() ||
		first.Leases[1].Generation != second.Leases[1].Generation {
		t.Fatalf("a claim sent twice answered %+v, then %+v", first.Leases, second.Leases)
	}
	c, _ = s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "running after a claim of 2 sent twice", c.Running, int64(2))

	// Ack, fail and release, each sent twice, answer as the first did.
	o, err := s.b.Leases().Ack(lost, first.Leases[0], []byte("result"))
	noErr(t, "Ack sent twice", err)
	want(t, "Ack sent twice", o, broker.OK)
	want(t, "result", string(s.job(t, first.Leases[0].ID).Result), "result")
	got, err := s.b.Leases().Release(lost, first.Leases[1])
	o, st := got.Outcome, got.State
	noErr(t, "Release sent twice", err)
	want(t, "Release sent twice", o, broker.OK)
	want(t, "state after release", st, broker.StatePending)
	var dead string
	for i, l := range s.claim(t, 10, long) {
		f, w := broker.Failure{Error: "boom", Backoff: time.Hour}, broker.StateScheduled
		if i == 0 {
			f.Dead, w, dead = true, broker.StateDead, l.ID
		}
		got, err := s.b.Leases().Fail(lost, l, f)
		o, st := got.Outcome, got.State
		noErr(t, "Fail sent twice", err)
		want(t, "Fail sent twice", o, broker.OK)
		want(t, "state after Fail sent twice", st, w)
	}

	// Retry and cancel.
	prev, err := s.b.Inspector().Retry(lost, s.q, dead)
	noErr(t, "Retry sent twice", err)
	want(t, "Retry's previous state", prev, broker.StateDead)
	st, err = s.b.Inspector().Cancel(lost, s.q, dead)
	noErr(t, "Cancel sent twice", err)
	want(t, "Cancel sent twice", st, broker.StateCancelled)
	s.consistent(t)
}

// FusedAck settles and claims in one call: the acks first, so a dependent
// an ack releases is taken at once; each ack keeps its guard; the call is
// safe to send again, whole or its claim alone.
func testFusedAck(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	p := s.enqueue(t, broker.Job{})
	x := s.enqueue(t, broker.Job{})
	d := s.enqueue(t, broker.Job{DependsOn: []string{p}})
	lp := s.claimOne(t, long)
	want(t, "first claim", lp.ID, p)

	spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: s.q, N: 3, Lease: long}
	fa, err := s.b.Leases().FusedAck(s.ctx, []broker.Ack{{Lease: lp, Result: []byte("r")}}, spec)
	os, res := fa.Outcomes, fa.Claim
	noErr(t, "FusedAck", err)
	want(t, "ack outcome", os[0], broker.OK)
	want(t, "acked job", s.job(t, p).State, broker.StateDone)
	if len(res.Leases) != 2 || res.Leases[0].ID != x || res.Leases[1].ID != d {
		t.Fatalf("FusedAck took %+v; want %s, then %s (released by the ack)", res.Leases, x, d)
	}
	for _, l := range res.Leases {
		want(t, "claimed job", s.job(t, l.ID).State, broker.StateRunning)
		if l.ClaimID() == "" || l.Attempt != 1 || time.Until(l.LocalDeadline) < 59*time.Minute {
			t.Fatalf("lease %+v", l)
		}
	}

	// Sent again (its reply was lost): the same answers, nothing more taken.
	s.enqueue(t, broker.Job{})
	fa, err = s.b.Leases().FusedAck(s.ctx, []broker.Ack{{Lease: lp, Result: []byte("r")}}, spec)
	os2, res2 := fa.Outcomes, fa.Claim
	noErr(t, "FusedAck sent again", err)
	want(t, "re-sent ack outcome", os2[0], broker.OK)
	sameLeases(t, "FusedAck sent again", res2.Leases, res.Leases)
	// Its claim alone, sent again as a ClaimRequest, answers the same.
	res3, err := s.b.Leases().ClaimRequest(s.ctx, spec.RequestID, s.q, spec.N, long)
	noErr(t, "ClaimRequest under the FusedAck's id", err)
	sameLeases(t, "ClaimRequest under the FusedAck's id", res3.Leases, res.Leases)
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "pending after the re-sends", c.Pending, int64(1))

	// A stale ack is refused, and the claim still runs; the claim may be of
	// another queue than the acks.
	s.enqueue(t, broker.Job{Queue: "other"})
	fa, err = s.b.Leases().FusedAck(s.ctx, []broker.Ack{{Lease: lp}, {Lease: res.Leases[0]}},
		broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: "other", N: 5, Lease: long})
	os, res = fa.Outcomes, fa.Claim
	noErr(t, "FusedAck across queues", err)
	want(t, "the first ack again, under a spent claim", os[0], broker.OK)
	want(t, "ack of x", os[1], broker.OK)
	want(t, "claimed from the other queue", len(res.Leases), 1)
	want(t, "its queue", res.Leases[0].Queue, "other")
	// A stale lease is a real earlier claim of a job that a later claim
	// holds now (of a queue of its own, so the claim below does not see it).
	s.enqueue(t, broker.Job{Queue: "superseded"})
	first, err := s.b.Leases().Claim(s.ctx, "superseded", 1, long)
	noErr(t, "Claim the superseded job", err)
	_, err = s.b.Leases().Release(s.ctx, first.Leases[0])
	noErr(t, "Release it", err)
	now, err := s.b.Leases().Claim(s.ctx, "superseded", 1, long)
	noErr(t, "Claim it again", err)
	stale := first.Leases[0]
	fa, err = s.b.Leases().FusedAck(s.ctx, []broker.Ack{{Lease: stale}}, broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: s.q, N: 5, Lease: long})
	os, res = fa.Outcomes, fa.Claim
	noErr(t, "FusedAck with a stale ack", err)
	want(t, "stale ack", os[0], broker.Stale)
	want(t, "claimed beside a stale ack", len(res.Leases), 1)
	want(t, "the dependent, still running", s.job(t, d).State, broker.StateRunning)
	j, err := s.b.Inspector().Job(s.ctx, "superseded", stale.ID)
	noErr(t, "Job", err)
	want(t, "the superseded job, still running", j.State, broker.StateRunning)
	want(t, "under the later claim", j.ClaimID, now.Leases[0].ClaimID())

	// No claim: N = 0 answers no leases and takes nothing.
	fa, err = s.b.Leases().FusedAck(s.ctx, nil, broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: s.q, N: 0, Lease: long})
	res = fa.Claim
	noErr(t, "FusedAck of nothing", err)
	want(t, "leases of a claim of 0", len(res.Leases), 0)

	for _, bad := range []broker.ClaimSpec{
		{RequestID: "", Queue: s.q, N: 1, Lease: long},
		{RequestID: "r", Queue: s.q, N: -1, Lease: long},
		{RequestID: "r", Queue: s.q, N: 1, Lease: 0},
		{RequestID: "r", Queue: "", N: 1, Lease: long},
	} {
		_, err := s.b.Leases().FusedAck(s.ctx, nil, bad)
		var ve *broker.ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("FusedAck(%+v): %v, want a ValidationError", bad, err)
		}
	}
	s.consistent(t)
}

func sameLeases(t failer, what string, got, want []broker.Lease) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d leases, want %d", what, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Generation != w.Generation || g.ClaimID() != w.ClaimID() || g.Attempt != w.Attempt || !g.Deadline.Equal(w.Deadline) {
			t.Fatalf("%s: lease %+v, want %+v", what, g, w)
		}
	}
}

// FusedFail and FusedSnooze settle first and claim after, in one call, and
// are safe to send again; the claim must be of the settled job's queue.
func testFusedFail(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	a := s.enqueue(t, broker.Job{MaxAttempts: 3})
	b := s.enqueue(t, broker.Job{})
	la := s.claimOne(t, long)
	spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: s.q, N: 2, Lease: long}
	fused, err := s.b.Leases().FusedFail(s.ctx, la, broker.Failure{Error: "boom"}, spec)
	o, st, res := fused.Outcome, fused.State, fused.Claim
	noErr(t, "FusedFail", err)
	want(t, "fail outcome", o, broker.OK)
	want(t, "failed job's state", st, broker.StatePending)
	if len(res.Leases) != 2 || res.Leases[0].ID != b || res.Leases[1].ID != a || res.Leases[1].Attempt != 2 {
		t.Fatalf("FusedFail took %+v; want %s, then %s on its second attempt", res.Leases, b, a)
	}
	fused, err = s.b.Leases().FusedFail(s.ctx, la, broker.Failure{Error: "boom"}, spec)
	o, st, again := fused.Outcome, fused.State, fused.Claim
	noErr(t, "FusedFail sent again", err)
	want(t, "re-sent fail outcome", o, broker.OK)
	want(t, "re-sent fail state", st, broker.StatePending)
	sameLeases(t, "FusedFail sent again", again.Leases, res.Leases)

	c := s.enqueue(t, broker.Job{})
	fused, err = s.b.Leases().FusedSnooze(s.ctx, res.Leases[0], 0, broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: s.q, N: 1, Lease: long})
	o, st, res = fused.Outcome, fused.State, fused.Claim
	noErr(t, "FusedSnooze", err)
	want(t, "snooze outcome", o, broker.OK)
	want(t, "snoozed job's state", st, broker.StatePending)
	if len(res.Leases) != 1 || res.Leases[0].ID != c {
		t.Fatalf("FusedSnooze took %+v; want %s", res.Leases, c)
	}
	want(t, "snoozed job's attempt", s.job(t, b).Attempt, 0)

	_, err = s.b.Leases().FusedFail(s.ctx, res.Leases[0], broker.Failure{}, broker.ClaimSpec{RequestID: "r", Queue: "other", N: 1, Lease: long})
	var ve *broker.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("FusedFail with a claim of another queue: %v, want a ValidationError", err)
	}
	want(t, "job after the refused FusedFail", s.job(t, c).State, broker.StateRunning)
	s.consistent(t)
}

// A caller of Wait registered before the job finished gets it, with its
// result, even when retention deletes the job before the caller reads it:
// trimming keeps a waited-on job for Wait (a final record) for a minute after
// it finished, and only a job somebody waited for.
// A job kept for its Wait callers when it first ended keeps nothing once it
// ends again with none: not even when it has dependents, whose flag took
// the same path in finish (the model found a retried job with dependents
// still kept as a final record after trim, a minute for nobody).
func testWaitKeepsNothingAfterARetry(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{MaxAttempts: 1})
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Millisecond)
	_, err := s.b.Client().Wait(ctx, s.q, id) // registers, then gives up
	cancel()
	wantErr(t, "Wait of an unfinished job", err, context.DeadlineExceeded)
	s.waitedOn(t, id)
	_, err = s.b.Inspector().Cancel(s.ctx, s.q, id) // ends with a caller: kept for Wait
	noErr(t, "Cancel", err)
	_, err = s.b.Inspector().Retry(s.ctx, s.q, id)
	noErr(t, "Retry", err)
	s.enqueue(t, broker.Job{DependsOn: []string{id}}) // a dependent of its second run
	for {
		l := s.claimOne(t, long)
		_, err = s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "Ack", err)
		if l.ID == id {
			break
		}
	}
	s.pastHorizon()
	_, err = s.b.Leases().Trim(s.ctx, s.q, broker.Retention{Done: time.Millisecond, Cancelled: time.Millisecond}, 100)
	noErr(t, "Trim", err)
	_, err = s.b.Client().Wait(s.ctx, s.q, id)
	wantErr(t, "Wait of a job trimmed after it ended again with nobody waiting", err, broker.ErrJobNotFound)
	s.consistent(t)
}

func testWaitAcrossShortRetention(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	register := func(id string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Millisecond)
		defer cancel()
		_, err := s.b.Client().Wait(ctx, s.q, id) // registers, then gives up before the ack
		wantErr(t, "Wait of an unfinished job", err, context.DeadlineExceeded)
		s.waitedOn(t, id)
	}
	ack := func(result string) {
		t.Helper()
		_, err := s.b.Leases().Ack(s.ctx, s.claimOne(t, long), []byte(result))
		noErr(t, "Ack", err)
	}

	waited := s.enqueue(t, broker.Job{})
	register(waited)
	ack("answer")
	unwatched := s.enqueue(t, broker.Job{})
	ack("nobody asks")
	s.enqueue(t, broker.Job{})
	ack("kept by the count")
	s.pastHorizon()
	n, err := s.b.Leases().Trim(s.ctx, s.q, broker.Retention{MaxDone: 1}, 100)
	noErr(t, "Trim", err)
	want(t, "jobs trimmed past a count of 1", n, 2)
	_, err = s.b.Inspector().Job(s.ctx, s.q, waited)
	wantErr(t, "Job of the trimmed job", err, broker.ErrJobNotFound)

	j, err := s.b.Client().Wait(s.ctx, s.q, waited)
	noErr(t, "Wait of a job trimmed after it finished with a caller waiting", err)
	if j.State != broker.StateDone || string(j.Result) != "answer" {
		t.Fatalf("Wait returned %s with result %q; want done with %q", j.State, j.Result, "answer")
	}
	_, err = s.b.Client().Wait(s.ctx, s.q, unwatched)
	wantErr(t, "Wait of a trimmed job nobody waited for", err, broker.ErrJobNotFound)

	// The same by age: retention of 1 ms.
	aged := s.enqueue(t, broker.Job{})
	register(aged)
	ack("old at once")
	s.pastHorizon()
	_, err = s.b.Leases().Trim(s.ctx, s.q, broker.Retention{Done: time.Millisecond}, 100)
	noErr(t, "Trim", err)
	_, err = s.b.Inspector().Job(s.ctx, s.q, aged)
	wantErr(t, "Job of the aged-out job", err, broker.ErrJobNotFound)
	j, err = s.b.Client().Wait(s.ctx, s.q, aged)
	noErr(t, "Wait of a job trimmed by age with a caller waiting", err)
	want(t, "result", string(j.Result), "old at once")

	// Its id is free: an Enqueue makes a new job, which a new Wait waits for.
	s.enqueue(t, broker.Job{ID: waited})
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Millisecond)
	defer cancel()
	_, err = s.b.Client().Wait(ctx, s.q, waited)
	wantErr(t, "Wait of the new, pending job under the id", err, context.DeadlineExceeded)
	s.consistent(t)
}
