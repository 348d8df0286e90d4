package brokertest

import (
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// The settings hash's flags (lib.lua's set_flag) let a claim skip what no
// feature in use needs: the scheduled set, the pause key, the cascade list.
// These tests hold each writer of those structures to its flag: a claim
// first writes the flags of an idle queue (nothing scheduled, no pause, no
// cascade), then a feature comes into use, and the next claims must see
// it, well within the flags' recheck (5 s), which would hide a writer that
// forgot its flag. Delays are 500 ms, so that a loaded machine running
// the suite on a real server does not make a job due before its time.

// flagDelay is how far ahead the tests schedule a job.
const flagDelay = 500 * time.Millisecond

// flagged is a queue whose flags a claim on it has just written.
func flagged(t *testing.T, nb NewBackend) *bundle {
	s := setup(t, nb)
	if ls := s.claim(t, 1, long); len(ls) != 0 {
		t.Fatalf("claimed %d jobs of an empty queue", len(ls))
	}
	f, err := s.Client.HMGet(s.ctx, s.queueKey("limits"), "paused", "sched_min", "cascade", "recheck_at").Result()
	noErr(t, "HMGET limits", err)
	if f[0] != "0" || f[1] != "none" || f[2] != "0" || f[3] == nil {
		t.Fatalf("flags after a claim of an idle queue: %v", f)
	}
	return s
}

// A job enqueued with a delay, a retry in backoff and a dependent released
// ahead of its run_at are each promoted by a claim once due.
func testFlagScheduled(t *testing.T, nb NewBackend) {
	s := flagged(t, nb)
	delayed := s.enqueue(t, broker.Job{Delay: flagDelay})
	res, err := s.b.Leases().Claim(s.ctx, s.q, 1, long)
	noErr(t, "Claim", err)
	if len(res.Leases) != 0 || res.NextDue <= 0 || res.NextDue > flagDelay {
		t.Fatalf("claim before the flagDelay: %d leases, next due %v", len(res.Leases), res.NextDue)
	}
	s.Advance(flagDelay + 100*time.Millisecond)
	want(t, "delayed job claimed once due", s.claimOne(t, long).ID, delayed)

	// A retry in backoff.
	retried := s.enqueue(t, broker.Job{MaxAttempts: 3})
	l := s.claimOne(t, long)
	want(t, "claimed", l.ID, retried)
	got, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "e", Backoff: flagDelay})
	st := got.State
	noErr(t, "Fail", err)
	want(t, "state after a failure with backoff", st, broker.StateScheduled)
	if ls := s.claim(t, 1, long); len(ls) != 0 {
		t.Fatalf("claimed %s during its backoff", ls[0].ID)
	}
	s.Advance(flagDelay + 100*time.Millisecond)
	want(t, "retry claimed once due", s.claimOne(t, long).ID, retried)

	// A dependent whose run_at is still ahead when its dependency is done.
	parent := s.enqueue(t, broker.Job{})
	child := s.enqueue(t, broker.Job{DependsOn: []string{parent}, Delay: flagDelay})
	p := s.claimOne(t, long)
	want(t, "parent claimed", p.ID, parent)
	o, err := s.b.Leases().Ack(s.ctx, p, nil)
	noErr(t, "Ack", err)
	want(t, "ack", o, broker.OK)
	want(t, "dependent released to", s.job(t, child).State, broker.StateScheduled)
	if ls := s.claim(t, 1, long); len(ls) != 0 {
		t.Fatalf("claimed %s before its run_at", ls[0].ID)
	}
	s.Advance(flagDelay + 100*time.Millisecond)
	want(t, "dependent claimed once due", s.claimOne(t, long).ID, child)
	s.consistent(t)
}

// A bound left low by a scheduled job that went elsewhere (cancelled)
// costs a claim a look, never a later job its promotion.
func testFlagScheduledStaleLow(t *testing.T, nb NewBackend) {
	s := flagged(t, nb)
	early := s.enqueue(t, broker.Job{Delay: 100 * time.Millisecond})
	later := s.enqueue(t, broker.Job{Delay: 100*time.Millisecond + flagDelay})
	_, err := s.b.Inspector().Cancel(s.ctx, s.q, early)
	noErr(t, "Cancel", err)
	s.Advance(150 * time.Millisecond)
	res, err := s.b.Leases().Claim(s.ctx, s.q, 1, long)
	noErr(t, "Claim", err)
	if len(res.Leases) != 0 || res.NextDue <= 0 || res.NextDue > flagDelay {
		t.Fatalf("claim after the cancelled job's time: %d leases, next due %v", len(res.Leases), res.NextDue)
	}
	s.Advance(flagDelay)
	want(t, "later job claimed once due", s.claimOne(t, long).ID, later)
	s.consistent(t)
}

// A pause stops claims at once, though the flag said unpaused; resume
// lets them go on.
func testFlagPaused(t *testing.T, nb NewBackend) {
	s := flagged(t, nb)
	id := s.enqueue(t, broker.Job{})
	noErr(t, "Pause", s.b.Inspector().Pause(s.ctx, s.q))
	if ls := s.claim(t, 1, long); len(ls) != 0 {
		t.Fatalf("claimed %s from a paused queue", ls[0].ID)
	}
	noErr(t, "Resume", s.b.Inspector().Resume(s.ctx, s.q))
	want(t, "claimed after resume", s.claimOne(t, long).ID, id)
}

// A cascade too large to settle inline is stepped on by the next claims
// until every dependent is released.
func testFlagCascade(t *testing.T, nb NewBackend) {
	s := flagged(t, nb)
	parent := s.enqueue(t, broker.Job{})
	const n = 60 // more than the inline step (CASCADE_INLINE, 50) settles
	for range n {
		s.enqueue(t, broker.Job{DependsOn: []string{parent}})
	}
	p := s.claimOne(t, long)
	want(t, "parent claimed", p.ID, parent)
	_, err := s.b.Leases().Ack(s.ctx, p, nil)
	noErr(t, "Ack", err)
	got := len(s.claim(t, 2*n, long)) // the claim's step comes before its pop
	want(t, "dependents claimed", got, n)
	left, err := s.Client.LLen(s.ctx, s.queueKey("cascade")).Result()
	noErr(t, "LLEN cascade", err)
	want(t, "cascade entries left", left, int64(0))
	s.consistent(t)
}

// Events turned on after the flags were written are recorded, and a limit
// set then limits.
func testFlagEventsAndLimits(t *testing.T, nb NewBackend) {
	s := flagged(t, nb)
	noErr(t, "SetEvents", s.b.Inspector().SetEvents(s.ctx, s.q, 100))
	noErr(t, "SetLimits", s.b.Inspector().SetLimits(s.ctx, s.q, broker.Limits{MaxRunning: 1}))
	s.enqueue(t, broker.Job{})
	s.enqueue(t, broker.Job{})
	if ls := s.claim(t, 2, long); len(ls) != 1 {
		t.Fatalf("claimed %d jobs under a running limit of 1", len(ls))
	}
	evs, err := s.b.Inspector().RecentEvents(s.ctx, s.q, 10)
	noErr(t, "RecentEvents", err)
	kinds := map[string]int{}
	for _, e := range evs {
		kinds[e.Event]++
	}
	if kinds["enqueued"] != 2 || kinds["started"] != 1 {
		t.Fatalf("events %v", kinds)
	}
}

// A queue written before the flags existed (a paused key, a scheduled
// set, a cascade, and no flags) is read as before, and its first claim
// writes the flags.
func testFlagUpgrade(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	limits := s.queueKey("limits")
	old := func() {
		noErr(t, "HDEL flags", s.Client.HDel(s.ctx, limits, "paused", "sched_min", "cascade", "recheck_at").Err())
	}
	// A paused key and no paused flag (the others written, and the
	// recheck not due: the absent flag alone makes the claim look).
	if ls := s.claim(t, 1, long); len(ls) != 0 {
		t.Fatalf("claimed %d jobs of an empty queue", len(ls))
	}
	id := s.enqueue(t, broker.Job{})
	noErr(t, "SET paused", s.Client.Set(s.ctx, s.queueKey("paused"), "1", 0).Err())
	noErr(t, "HDEL paused", s.Client.HDel(s.ctx, limits, "paused").Err())
	if ls := s.claim(t, 1, long); len(ls) != 0 {
		t.Fatalf("claimed %s from a queue paused by its key alone", ls[0].ID)
	}
	paused, err := s.Client.HGet(s.ctx, limits, "paused").Result()
	noErr(t, "HGET paused", err)
	want(t, "paused flag written by the claim", paused, "1")
	noErr(t, "Resume", s.b.Inspector().Resume(s.ctx, s.q))
	want(t, "claimed after resume", s.claimOne(t, long).ID, id)

	// A scheduled job and no flag.
	delayed := s.enqueue(t, broker.Job{Delay: 100 * time.Millisecond})
	old()
	s.Advance(150 * time.Millisecond)
	want(t, "scheduled job of an old tree claimed once due", s.claimOne(t, long).ID, delayed)

	// A cascade entry and no flag: the old layout's finish wrote none.
	parent := s.enqueue(t, broker.Job{})
	const n = 60
	for range n {
		s.enqueue(t, broker.Job{DependsOn: []string{parent}})
	}
	p := s.claimOne(t, long)
	_, err = s.b.Leases().Ack(s.ctx, p, nil)
	noErr(t, "Ack", err)
	old()
	want(t, "dependents claimed", len(s.claim(t, 2*n, long)), n)
	s.consistent(t)
}

// A writer that does not keep the flags (an older fenceq during a rolling
// upgrade, a hand edit) is seen within the recheck: a pause set by the key
// alone stops claims once a claim rechecks.
func testFlagRecheck(t *testing.T, nb NewBackend) {
	s := flagged(t, nb)
	id := s.enqueue(t, broker.Job{})
	noErr(t, "SET paused", s.Client.Set(s.ctx, s.queueKey("paused"), "1", 0).Err())
	s.Advance(5*time.Second + past)
	if ls := s.claim(t, 1, long); len(ls) != 0 {
		t.Fatalf("claimed %s after the recheck from a queue paused by its key", ls[0].ID)
	}
	noErr(t, "Resume", s.b.Inspector().Resume(s.ctx, s.q))
	want(t, "claimed after resume", s.claimOne(t, long).ID, id)
}
