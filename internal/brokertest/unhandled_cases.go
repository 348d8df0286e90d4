package brokertest

import (
	"errors"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// giveBack gives l back with u and wants state. It answers the job, and
// the Redis time just before and after the call.
func (s *bundle) giveBack(t *testing.T, l broker.Lease, u broker.Unhandled, state broker.State) (broker.JobInfo, span) {
	t.Helper()
	before := s.redisTime(t)
	got, err := s.b.Leases().GiveBack(s.ctx, l, u)
	o, st := got.Outcome, got.State
	noErr(t, "GiveBack", err)
	after := s.redisTime(t)
	want(t, "give-back outcome", o, broker.OK)
	want(t, "state after the give-back", st, state)
	return s.job(t, l.ID), span{before, after}
}

// wantWait checks that a job given back in the span is due between lo and
// hi after the give-back.
func wantWait(t *testing.T, what string, j broker.JobInfo, at span, lo, hi time.Duration) {
	t.Helper()
	due := j.RunAt.UnixMilli()
	if due < at.lo+lo.Milliseconds() || due > at.hi+hi.Milliseconds() {
		t.Fatalf("%s: due at %d, want %v..%v after the give-back at %d..%d", what, due, lo, hi, at.lo, at.hi)
	}
}

// GiveBack: a job whose kind the worker has no handler for waits,
// uncharged, three times as long as it has waited so far, within bounds, until its
// wait passes For; a re-send answers the same; any other settlement in
// between (a reaped or force-released claim too), and an operator's retry
// of the dead job, start the wait again.
func testGiveBack(t *testing.T, nb NewBackend) {
	u := broker.Unhandled{Error: `no pool registered kind "k"`, Delay: 40 * time.Millisecond,
		MaxDelay: 200 * time.Millisecond, For: time.Second}
	t.Run("WaitsGrowThenDead", func(t *testing.T) {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{MaxAttempts: 1})
		l := s.claimOne(t, long)
		j, at := s.giveBack(t, l, u, broker.StateScheduled)
		want(t, "attempt", j.Attempt, 0)
		want(t, "last error", j.LastError, "")
		want(t, "errors", len(j.Errors), 0)
		wantWait(t, "first give-back", j, at, u.Delay, u.Delay)
		s.consistent(t)

		before := s.job(t, id)
		got, err := s.b.Leases().GiveBack(s.ctx, l, u) // its reply was lost
		o, st := got.Outcome, got.State
		noErr(t, "GiveBack again", err)
		want(t, "re-sent outcome", o, broker.OK)
		want(t, "re-sent state", st, broker.StateScheduled)
		sameJob(t, "re-sent give-back", s.job(t, id), before)

		s.Advance(100 * time.Millisecond)
		l = s.claimOne(t, long)
		want(t, "attempt of the next claim", l.Attempt, 1)
		j, at = s.giveBack(t, l, u, broker.StateScheduled)
		wantWait(t, "second give-back", j, at, 100*time.Millisecond, u.MaxDelay)

		s.Advance(300 * time.Millisecond)
		j, at = s.giveBack(t, s.claimOne(t, long), u, broker.StateScheduled)
		wantWait(t, "third give-back", j, at, u.MaxDelay, u.MaxDelay)

		s.Advance(u.For)
		j, _ = s.giveBack(t, s.claimOne(t, long), u, broker.StateDead)
		want(t, "last error", j.LastError, u.Error)
		want(t, "errors", len(j.Errors), 1)
		want(t, "attempt of the dead job", j.Attempt, 1)
		s.consistent(t)

		// The operator deployed a handler and retried it: a pool that
		// still lacks the kind gives it back to wait again.
		_, err = s.b.Inspector().Retry(s.ctx, s.q, id)
		noErr(t, "Retry", err)
		s.giveBack(t, s.claimOne(t, long), u, broker.StateScheduled)
		s.consistent(t)
	})
	t.Run("OtherSettlementRestartsTheWait", func(t *testing.T) {
		s := setup(t, nb)
		s.enqueue(t, broker.Job{MaxAttempts: 3})
		s.giveBack(t, s.claimOne(t, long), u, broker.StateScheduled)
		s.Advance(u.MaxDelay)
		// A pool that has the kind ran it and its handler snoozed.
		_, err := s.b.Leases().Snooze(s.ctx, s.claimOne(t, long), 0)
		noErr(t, "Snooze", err)
		s.Advance(u.For)
		j, at := s.giveBack(t, s.claimOne(t, long), u, broker.StateScheduled)
		wantWait(t, "a fresh wait", j, at, u.Delay, u.Delay)
		s.consistent(t)
	})
	// Each wait is three times what the job has waited so far, so the
	// time it has waited quadruples with every give-back: a backlog of
	// such jobs costs a few claims each before their waits reach MaxDelay.
	t.Run("WaitsThreeTimesTheWaitSoFar", func(t *testing.T) {
		s := setup(t, nb)
		slow := u
		slow.MaxDelay, slow.For = time.Hour, -1
		s.enqueue(t, broker.Job{})
		_, first := s.giveBack(t, s.claimOne(t, long), slow, broker.StateScheduled)
		s.Advance(100 * time.Millisecond)
		j, at := s.giveBack(t, s.claimOne(t, long), slow, broker.StateScheduled)
		ms := func(n int64) time.Duration { return time.Duration(n) * time.Millisecond }
		wantWait(t, "second give-back", j, at, 3*ms(at.lo-first.hi), 3*ms(at.hi-first.lo))
		s.consistent(t)
	})
	// A Redis clock set back after the wait began (unhandled_since is
	// ahead of it) counts no wait, never a negative one: the job waits
	// Delay, and under For 0 it is dead, as at any give-back.
	t.Run("ClockSetBack", func(t *testing.T) {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{MaxAttempts: 3})
		_, at := s.giveBack(t, s.claimOne(t, long), u, broker.StateScheduled)
		noErr(t, "HSET unhandled_since", s.Client.HSet(s.ctx, s.jobKey(id), "unhandled_since", at.hi+time.Hour.Milliseconds()).Err())
		s.Advance(u.Delay + 10*time.Millisecond)
		j, at := s.giveBack(t, s.claimOne(t, long), u, broker.StateScheduled)
		wantWait(t, "a give-back before the clock caught up", j, at, u.Delay, u.Delay)
		s.Advance(u.Delay + 10*time.Millisecond)
		atOnce := u
		atOnce.For = 0
		s.giveBack(t, s.claimOne(t, long), atOnce, broker.StateDead)
		s.consistent(t)
	})
	// A claim that ended with no settlement, reaped or taken away by an
	// operator, was most likely a pool that has the kind running the job
	// (a pool without it gives back at once): the wait starts again, so
	// an old pool's give-back after it does not make the job dead near
	// For although a pool has the kind.
	for _, end := range []string{"Reap", "ReleaseUnowned"} {
		t.Run(end+"RestartsTheWait", func(t *testing.T) {
			s := setup(t, nb)
			id := s.enqueue(t, broker.Job{MaxAttempts: 3})
			s.giveBack(t, s.claimOne(t, long), u, broker.StateScheduled)
			s.Advance(u.MaxDelay)
			s.claimOne(t, short)
			if end == "Reap" {
				s.Advance(past)
				s.reap(t, 10)
			} else {
				_, err := s.b.Inspector().ReleaseUnowned(s.ctx, s.q, id)
				noErr(t, "ReleaseUnowned", err)
			}
			want(t, "state after the claim ended", s.job(t, id).State, broker.StatePending)
			s.Advance(u.For)
			j, at := s.giveBack(t, s.claimOne(t, long), u, broker.StateScheduled)
			wantWait(t, "a fresh wait", j, at, u.Delay, u.Delay)
			s.consistent(t)
		})
	}
	t.Run("WaitsForEver", func(t *testing.T) {
		s := setup(t, nb)
		s.enqueue(t, broker.Job{})
		ever := u
		ever.For = -1
		s.giveBack(t, s.claimOne(t, long), ever, broker.StateScheduled)
		s.Advance(time.Second)
		s.giveBack(t, s.claimOne(t, long), ever, broker.StateScheduled)
	})
	t.Run("CancelRequested", func(t *testing.T) {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{})
		l := s.claimOne(t, long)
		_, err := s.b.Inspector().Cancel(s.ctx, s.q, id)
		noErr(t, "Cancel", err)
		s.giveBack(t, l, u, broker.StateCancelled)
		s.consistent(t)
	})
	t.Run("StaleClaim", func(t *testing.T) {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{})
		l := s.claimOne(t, long)
		_, err := s.b.Inspector().ReleaseUnowned(s.ctx, s.q, id)
		noErr(t, "ReleaseUnowned", err)
		got, err := s.b.Leases().GiveBack(s.ctx, l, u)
		o := got.Outcome
		noErr(t, "GiveBack", err)
		want(t, "outcome of a stale claim", o, broker.Stale)
		want(t, "state", s.job(t, id).State, broker.StatePending)
	})
	t.Run("Invalid", func(t *testing.T) {
		s := setup(t, nb)
		s.enqueue(t, broker.Job{})
		l := s.claimOne(t, long)
		var ve *broker.ValidationError
		for _, bad := range []broker.Unhandled{{Delay: 0, MaxDelay: time.Second}, {Delay: time.Second, MaxDelay: time.Millisecond}} {
			if _, err := s.b.Leases().GiveBack(s.ctx, l, bad); !errors.As(err, &ve) {
				t.Fatalf("GiveBack(%+v): error %v, want a *broker.ValidationError", bad, err)
			}
		}
		want(t, "state", s.job(t, l.ID).State, broker.StateRunning)
	})
}
