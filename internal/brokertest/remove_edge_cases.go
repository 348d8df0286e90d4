package brokertest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// Delete and Promote at the edges of groups, limits and the ready index:
// each leaves the queue checking clean (Check covers the group counts,
// invariant 11) and every job that should run runs.
func testRemoveEdges(t *testing.T, nb NewBackend) {
	t.Run("DeleteHeldRetryOfOrderedGroup", func(t *testing.T) {
		s := setup(t, nb)
		s.groupDefaults(t, "g_ordered", "1")
		a1 := s.enqueue(t, broker.Job{Group: "acct", MaxAttempts: 3})
		a2 := s.enqueue(t, broker.Job{Group: "acct"})
		_, err := s.b.Leases().Fail(s.ctx, s.claimOne(t, long), broker.Failure{Error: "boom", Backoff: time.Hour})
		noErr(t, "Fail", err)
		want(t, "the next waits for the retry", len(s.claim(t, 10, long)), 0)
		st, err := s.b.Inspector().Delete(s.ctx, s.q, a1, "")
		noErr(t, "Delete of the held retry", err)
		want(t, "state deleted", st, broker.StateScheduled)
		s.consistent(t)
		want(t, "the group goes on with the next", s.claimOne(t, long).ID, a2)
		s.consistent(t)
	})

	t.Run("DeleteHeldPendingOfOrderedGroup", func(t *testing.T) {
		s := setup(t, nb)
		s.groupDefaults(t, "g_ordered", "1")
		a1 := s.enqueue(t, broker.Job{Group: "acct"})
		a2 := s.enqueue(t, broker.Job{Group: "acct"})
		_, err := s.b.Leases().Release(s.ctx, s.claimOne(t, long))
		noErr(t, "Release", err)
		want(t, "released", s.job(t, a1).State, broker.StatePending)
		st, err := s.b.Inspector().Delete(s.ctx, s.q, a1, broker.StatePending)
		noErr(t, "Delete of the held job", err)
		want(t, "state deleted", st, broker.StatePending)
		s.consistent(t)
		want(t, "the group goes on with the next", s.claimOne(t, long).ID, a2)
		s.consistent(t)
	})

	t.Run("PromoteIntoAFullGroup", func(t *testing.T) {
		s := setup(t, nb)
		s.groupDefaults(t, "g_max_running", "1")
		b1 := s.enqueue(t, broker.Job{Group: "g"})
		b2 := s.enqueue(t, broker.Job{Group: "g", Delay: time.Hour})
		l := s.claimOne(t, long)
		want(t, "claimed", l.ID, b1)
		noErr(t, "Promote", s.b.Inspector().Promote(s.ctx, s.q, b2))
		want(t, "pending", s.job(t, b2).State, broker.StatePending)
		want(t, "a full group starts nothing", len(s.claim(t, 10, long)), 0)
		s.consistent(t)
		_, err := s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "Ack", err)
		want(t, "the freed slot takes the promoted job", s.claimOne(t, long).ID, b2)
		s.consistent(t)
	})

	t.Run("PromoteInAPausedQueue", func(t *testing.T) {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{Delay: time.Hour})
		noErr(t, "Pause", s.b.Inspector().Pause(s.ctx, s.q))
		noErr(t, "Promote", s.b.Inspector().Promote(s.ctx, s.q, id))
		want(t, "pending", s.job(t, id).State, broker.StatePending)
		want(t, "a paused queue starts nothing", len(s.claim(t, 10, long)), 0)
		o, err := s.b.Inspector().Overview(s.ctx, s.q)
		noErr(t, "Overview", err)
		want(t, "pending", o.Pending, int64(1))
		want(t, "claimable while paused", o.Claimable, int64(0))
		noErr(t, "Resume", s.b.Inspector().Resume(s.ctx, s.q))
		want(t, "claimed once resumed", s.claimOne(t, long).ID, id)
		s.consistent(t)
	})

	t.Run("PromoteInARateLimitedQueue", func(t *testing.T) {
		s := setup(t, nb)
		noErr(t, "SetLimits", s.b.Inspector().SetLimits(s.ctx, s.q, broker.Limits{Rate: 1, Per: time.Hour}))
		s.enqueue(t, broker.Job{})
		id := s.enqueue(t, broker.Job{Delay: time.Hour})
		s.claimOne(t, long)
		noErr(t, "Promote", s.b.Inspector().Promote(s.ctx, s.q, id))
		want(t, "the rate is used up", len(s.claim(t, 10, long)), 0)
		o, err := s.b.Inspector().Overview(s.ctx, s.q)
		noErr(t, "Overview", err)
		want(t, "pending", o.Pending, int64(1))
		want(t, "claimable under the rate", o.Claimable, int64(0))
		if o.NextStart <= 0 || o.NextStart > time.Hour {
			t.Fatalf("next start in %v; want within the hour", o.NextStart)
		}
		s.consistent(t)
	})

	// A deleted pending job leaves a tombstone in ready0; its id enqueued
	// again files a second entry. The counts stay exact and the new job
	// is claimed once. (It is claimed at the old entry's place, ahead of
	// jobs enqueued before it: ready0 holds bare ids, so the claim cannot
	// tell the old entry from the new one. Not FIFO; not lost.)
	t.Run("DeletedPendingIDEnqueuedAgain", func(t *testing.T) {
		s := setup(t, nb)
		s.enqueue(t, broker.Job{ID: "x"})
		s.enqueue(t, broker.Job{ID: "y"})
		_, err := s.b.Inspector().Delete(s.ctx, s.q, "x", "")
		noErr(t, "Delete", err)
		s.enqueue(t, broker.Job{ID: "x"})
		c, err := s.b.Inspector().Counts(s.ctx, s.q)
		noErr(t, "Counts", err)
		want(t, "pending", c.Pending, int64(2))
		ls := s.claim(t, 10, long)
		want(t, "claimed", len(ls), 2)
		if ls[0].ID == ls[1].ID {
			t.Fatalf("job %s claimed twice", ls[0].ID)
		}
		c, err = s.b.Inspector().Counts(s.ctx, s.q)
		noErr(t, "Counts", err)
		want(t, "pending after the claim", c.Pending, int64(0))
		s.consistent(t)
	})

	// Deletes of grouped pending jobs race a claiming worker under group
	// limits: no job is both claimed and deleted, the group counts stay
	// right, and every job not deleted runs.
	t.Run("GroupedDeletesBesideAClaim", func(t *testing.T) {
		s := setup(t, nb)
		s.groupDefaults(t, "g_max_running", "2")
		const n = 200
		ids := make([]string, n)
		jobs := make([]broker.Job, n)
		for i := range jobs {
			jobs[i] = broker.Job{Queue: s.q, Kind: "k", Group: fmt.Sprint("g", i%5)}
		}
		for i, e := range s.b.Client().EnqueueMany(s.ctx, jobs) {
			noErr(t, fmt.Sprintf("EnqueueMany job %d", i), e.Err)
			ids[i] = e.ID
		}
		var mu sync.Mutex
		claimed := map[string]bool{}
		var claimErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 400 {
				res, err := s.b.Leases().Claim(s.ctx, s.q, 3, long)
				if err != nil {
					claimErr = err
					return
				}
				var acks []broker.Ack
				mu.Lock()
				for _, l := range res.Leases {
					claimed[l.ID] = true
					acks = append(acks, broker.Ack{Lease: l})
				}
				mu.Unlock()
				if _, err := s.b.Leases().AckMany(s.ctx, acks); err != nil {
					claimErr = err
					return
				}
			}
		}()
		deleted := map[string]bool{}
		for i := len(ids) - 1; i >= 0; i -= 2 {
			_, err := s.b.Inspector().Delete(s.ctx, s.q, ids[i], broker.StatePending)
			switch {
			case err == nil:
				deleted[ids[i]] = true
			case errors.Is(err, broker.ErrWrongState):
			default:
				t.Fatalf("Delete: %v", err)
			}
		}
		<-done
		noErr(t, "Claim", claimErr)
		s.consistent(t)
		for {
			ls := s.claim(t, 10, long)
			if len(ls) == 0 {
				break
			}
			for _, l := range ls {
				claimed[l.ID] = true
				_, err := s.b.Leases().Ack(s.ctx, l, nil)
				noErr(t, "Ack", err)
			}
		}
		for id := range deleted {
			if claimed[id] {
				t.Fatalf("job %s was both claimed and deleted", id)
			}
		}
		want(t, "claimed and deleted", len(claimed)+len(deleted), n)
		o, err := s.b.Inspector().Overview(s.ctx, s.q)
		noErr(t, "Overview", err)
		want(t, "pending left", o.Pending, int64(0))
		want(t, "running left", o.Running, int64(0))
		s.consistent(t)
	})
}

// An operator deletes the oldest pending jobs (a page of them ticked on
// the dashboard): their tombstones sit at the head of ready0. The
// overview's age of the oldest pending job still finds the first live
// one behind them, not 0 as if nothing waited.
func testOverviewHeadPastTombstones(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	var ids []string
	for range 40 {
		ids = append(ids, s.enqueue(t, broker.Job{}))
	}
	for _, id := range ids[:30] {
		_, err := s.b.Inspector().Delete(s.ctx, s.q, id, broker.StatePending)
		noErr(t, "Delete", err)
	}
	s.Advance(50 * time.Millisecond)
	o, err := s.b.Inspector().Overview(s.ctx, s.q)
	noErr(t, "Overview", err)
	want(t, "pending", o.Pending, int64(10))
	if o.HeadAge < 50*time.Millisecond {
		t.Fatalf("oldest pending job's age %v with 10 pending behind 30 deleted ones; want at least 50ms", o.HeadAge)
	}
	want(t, "claimed first", s.claimOne(t, long).ID, ids[30])
	s.consistent(t)
}
