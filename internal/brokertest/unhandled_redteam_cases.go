package brokertest

import (
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// GiveBackRetryStartsAFreshWait: an operator's retry gives a job a fresh
// start (attempt 0), and the docs promise "the retried job starts a new
// wait": the first give-back after a retry waits Delay, not the wait of
// the job's earlier life. Two ways the earlier give-back's record is the
// last one the claim before the new give-back set aside: the job was
// cancelled while it waited (cancel leaves its settlement record, retry
// moves it aside), or its next claim was reaped dead (reap leaves no
// record, so the earlier one stays first). Either way the job's first
// give-back after the retry finds its old unhandled_since and makes it
// dead at once.
func testGiveBackRetryStartsAFreshWait(t *testing.T, nb NewBackend) {
	u := broker.Unhandled{Error: `no pool registered kind "k"`, Delay: 40 * time.Millisecond,
		MaxDelay: 200 * time.Millisecond, For: time.Second}
	t.Run("AfterCancel", func(t *testing.T) {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{MaxAttempts: 3})
		s.giveBack(t, s.claimOne(t, long), u, broker.StateScheduled)
		// Nobody handles it yet: the operator cancels it, and later,
		// past For, sends it back to run.
		_, err := s.b.Inspector().Cancel(s.ctx, s.q, id)
		noErr(t, "Cancel", err)
		s.Advance(u.For + 100*time.Millisecond)
		_, err = s.b.Inspector().Retry(s.ctx, s.q, id)
		noErr(t, "Retry", err)
		j, at := s.giveBack(t, s.claimOne(t, long), u, broker.StateScheduled)
		wantWait(t, "the first give-back after the retry", j, at, u.Delay, u.Delay)
		s.consistent(t)
	})
	t.Run("AfterReapedDead", func(t *testing.T) {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{MaxAttempts: 1})
		s.giveBack(t, s.claimOne(t, long), u, broker.StateScheduled)
		// A pool that has the kind claims it and dies: the reaper
		// charges the one attempt and the job is dead.
		s.Advance(u.Delay + 10*time.Millisecond)
		s.claimOne(t, short)
		s.Advance(past)
		s.reap(t, 10)
		want(t, "state after the reap", s.job(t, id).State, broker.StateDead)
		s.Advance(u.For)
		_, err := s.b.Inspector().Retry(s.ctx, s.q, id)
		noErr(t, "Retry", err)
		j, at := s.giveBack(t, s.claimOne(t, long), u, broker.StateScheduled)
		wantWait(t, "the first give-back after the retry", j, at, u.Delay, u.Delay)
		s.consistent(t)
	})
}
