package brokertest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// deadJob enqueues a job and fails it dead.
func (s *bundle) deadJob(t failer, j broker.Job) string {
	t.Helper()
	j.MaxAttempts = 1
	id := s.enqueue(t, j)
	l := s.claimOne(t, long)
	want(t, "claimed", l.ID, id)
	_, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "boom", Dead: true})
	noErr(t, "Fail", err)
	return id
}

func (s *bundle) gone(t failer, id string) {
	t.Helper()
	_, err := s.b.Inspector().Job(s.ctx, s.q, id)
	wantErr(t, "Job of a deleted job", err, broker.ErrJobNotFound)
}

func testDelete(t *testing.T, nb NewBackend) {
	t.Run("EveryStateNoWorkerHolds", func(t *testing.T) {
		s := setup(t, nb)
		cancelled := s.enqueue(t, broker.Job{})
		_, err := s.b.Inspector().Cancel(s.ctx, s.q, cancelled)
		noErr(t, "Cancel", err)
		dead := s.deadJob(t, broker.Job{})
		done := s.enqueue(t, broker.Job{})
		_, err = s.b.Leases().Ack(s.ctx, s.claimOne(t, long), nil)
		noErr(t, "Ack", err)
		parent := s.enqueue(t, broker.Job{Delay: time.Hour}) // kept: a blocked job waits for it
		ids := map[string]broker.State{
			s.enqueue(t, broker.Job{}):                            broker.StatePending,
			s.enqueue(t, broker.Job{Priority: 5}):                 broker.StatePending,
			s.enqueue(t, broker.Job{Priority: -5}):                broker.StatePending,
			s.enqueue(t, broker.Job{Group: "g"}):                  broker.StatePending,
			s.enqueue(t, broker.Job{Delay: time.Hour}):            broker.StateScheduled,
			s.enqueue(t, broker.Job{DependsOn: []string{parent}}): broker.StateBlocked,
			cancelled: broker.StateCancelled, dead: broker.StateDead, done: broker.StateDone,
		}
		for id, st := range ids {
			got, err := s.b.Inspector().Delete(s.ctx, s.q, id, "")
			noErr(t, "Delete of a "+string(st)+" job", err)
			want(t, "state deleted", got, st)
			s.gone(t, id)
			s.consistent(t)
		}
		c, err := s.b.Inspector().Counts(s.ctx, s.q)
		noErr(t, "Counts", err)
		want(t, "pending left", c.Pending, int64(0))
		want(t, "scheduled left", c.Scheduled, int64(1))
		want(t, "done left", c.Done+c.Dead+c.Cancelled, int64(0))
		if ls := s.claim(t, 10, long); len(ls) != 0 {
			t.Fatalf("claimed deleted jobs: %+v", ls)
		}
	})

	t.Run("RunningRefused", func(t *testing.T) {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{})
		l := s.claimOne(t, long)
		st, err := s.b.Inspector().Delete(s.ctx, s.q, id, "")
		wantErr(t, "Delete of a running job", err, broker.ErrWrongState)
		want(t, "state answered", st, broker.StateRunning)
		if !strings.Contains(err.Error(), "cancel it") {
			t.Fatalf("Delete of a running job says %q; want it to say to cancel it first", err)
		}
		_, err = s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "Ack after the refused delete", err)
		_, err = s.b.Inspector().Delete(s.ctx, s.q, id, "")
		noErr(t, "Delete once done", err)
		_, err = s.b.Inspector().Delete(s.ctx, s.q, id, "")
		wantErr(t, "Delete again", err, broker.ErrJobNotFound)
		s.consistent(t)
	})

	t.Run("FencedOnTheStateSeen", func(t *testing.T) {
		s := setup(t, nb)
		id := s.deadJob(t, broker.Job{})
		_, err := s.b.Inspector().Retry(s.ctx, s.q, id)
		noErr(t, "Retry", err)
		st, err := s.b.Inspector().Delete(s.ctx, s.q, id, broker.StateDead)
		wantErr(t, "Delete of a job no longer dead", err, broker.ErrWrongState)
		want(t, "state answered", st, broker.StatePending)
		if !strings.Contains(err.Error(), "not dead as seen") {
			t.Fatalf("refusal %q does not say what changed", err)
		}
		want(t, "job kept", s.job(t, id).State, broker.StatePending)
		_, err = s.b.Inspector().Delete(s.ctx, s.q, id, broker.StatePending)
		noErr(t, "Delete of the state seen", err)
		_, err = s.b.Inspector().Delete(s.ctx, s.q, id, "bogus")
		wantErr(t, "Delete with a bad state", err, broker.ErrInvalid)
		s.consistent(t)
	})

	t.Run("DependentsDoNotHang", func(t *testing.T) {
		s := setup(t, nb)
		parent := s.enqueue(t, broker.Job{Delay: time.Hour})
		child := s.enqueue(t, broker.Job{DependsOn: []string{parent}})
		anyway := s.enqueue(t, broker.Job{DependsOn: []string{parent}, RunIfDependencyFails: true})
		grandchild := s.enqueue(t, broker.Job{DependsOn: []string{child}})
		want(t, "child", s.job(t, child).State, broker.StateBlocked)
		_, err := s.b.Inspector().Delete(s.ctx, s.q, parent, "")
		noErr(t, "Delete of a parent", err)
		j := s.job(t, child)
		want(t, "dependent of a deleted job", j.State, broker.StateCancelled)
		want(t, "why", j.LastError, "dependency "+parent+" was deleted")
		want(t, "its own dependent", s.job(t, grandchild).State, broker.StateCancelled)
		want(t, "a dependent that runs anyway", s.job(t, anyway).State, broker.StatePending)
		s.consistent(t)

		// A blocked job deleted: its parent finishing later settles nothing.
		p2 := s.enqueue(t, broker.Job{})
		c2 := s.enqueue(t, broker.Job{DependsOn: []string{p2}})
		_, err = s.b.Inspector().Delete(s.ctx, s.q, c2, broker.StateBlocked)
		noErr(t, "Delete of a blocked job", err)
		for _, l := range s.claim(t, 10, long) {
			_, err := s.b.Leases().Ack(s.ctx, l, nil)
			noErr(t, "Ack", err)
		}
		s.settleCascade(t)
		s.gone(t, c2)
		s.consistent(t)
	})

	t.Run("ManyDependentsInBoundedSteps", func(t *testing.T) {
		s := setup(t, nb)
		parent := s.enqueue(t, broker.Job{Delay: time.Hour})
		const n = 180 // more than the 50 a script settles inline
		jobs := make([]broker.Job, n)
		for i := range jobs {
			jobs[i] = broker.Job{Queue: s.q, Kind: "k", DependsOn: []string{parent}}
		}
		for i, e := range s.b.Client().EnqueueMany(s.ctx, jobs) {
			noErr(t, fmt.Sprintf("EnqueueMany job %d", i), e.Err)
		}
		_, err := s.b.Inspector().Delete(s.ctx, s.q, parent, broker.StateScheduled)
		noErr(t, "Delete of a parent of many", err)
		c, err := s.b.Inspector().Counts(s.ctx, s.q)
		noErr(t, "Counts", err)
		if c.Cancelled == 0 || c.Cancelled >= n {
			t.Fatalf("%d of %d dependents cancelled by the delete itself; want some, in a bounded step", c.Cancelled, n)
		}
		s.settleCascade(t)
		c, err = s.b.Inspector().Counts(s.ctx, s.q)
		noErr(t, "Counts", err)
		want(t, "dependents cancelled once the cascade ran", c.Cancelled, int64(n))
		want(t, "blocked left", c.Blocked, int64(0))
		s.consistent(t)
	})

	t.Run("FreesUniqueKeyAndGroup", func(t *testing.T) {
		s := setup(t, nb)
		id := s.enqueue(t, broker.Job{UniqueKey: "u"})
		_, err := s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "k", UniqueKey: "u"})
		wantErr(t, "Enqueue while the key is held", err, broker.ErrUniqueHeld)
		_, err = s.b.Inspector().Delete(s.ctx, s.q, id, "")
		noErr(t, "Delete", err)
		s.enqueue(t, broker.Job{UniqueKey: "u"})

		// An ordered group held for a retry goes on without it.
		s.groupDefaults(t, "g_ordered", "1")
		a1 := s.enqueue(t, broker.Job{Group: "acct", MaxAttempts: 3})
		a2 := s.enqueue(t, broker.Job{Group: "acct"})
		for _, l := range s.claim(t, 10, long) {
			if l.ID == a1 {
				_, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "boom", Backoff: time.Hour})
				noErr(t, "Fail", err)
			} else {
				_, err := s.b.Leases().Ack(s.ctx, l, nil)
				noErr(t, "Ack", err)
			}
		}
		want(t, "held for the retry", s.group(t, "acct").held, a1)
		_, err = s.b.Inspector().Delete(s.ctx, s.q, a1, broker.StateScheduled)
		noErr(t, "Delete of a held retry", err)
		want(t, "hold let go", s.group(t, "acct").held, "")
		want(t, "the next runs", s.claimOne(t, long).ID, a2)
		s.consistent(t)
		// A pending grouped job leaves its group's count.
		g := s.enqueue(t, broker.Job{Group: "other"})
		want(t, "counted", s.group(t, "other").pendingCount, int64(1))
		_, err = s.b.Inspector().Delete(s.ctx, s.q, g, "")
		noErr(t, "Delete of a grouped pending job", err)
		want(t, "count", s.group(t, "other").pendingCount, int64(0))
		want(t, "out of the rotation", s.group(t, "other").rotation, false)
		s.consistent(t)
	})

	t.Run("ReusedIDGetsAGreaterGeneration", func(t *testing.T) {
		s := setup(t, nb)
		s.enqueue(t, broker.Job{ID: "x"})
		l := s.claimOne(t, long)
		_, err := s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "Ack", err)
		_, err = s.b.Inspector().Delete(s.ctx, s.q, "x", broker.StateDone)
		noErr(t, "Delete", err)
		s.enqueue(t, broker.Job{ID: "x"})
		again := s.claimOne(t, long)
		if again.Generation <= l.Generation {
			t.Fatalf("generation after delete and re-enqueue %d, want above %d (invariant 10)", again.Generation, l.Generation)
		}
		o, err := s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "stale Ack", err)
		want(t, "the deleted job's claim", o, broker.Stale)
	})

	t.Run("LostReply", func(t *testing.T) {
		be := nb(t)
		be.Client.AddHook(dropReplies{})
		var fn func()
		h := newMeanwhile(func() { fn() })
		be.Client.AddHook(h)
		s, cleanup := on(t, be)
		t.Cleanup(cleanup)
		id := s.deadJob(t, broker.Job{})
		st, err := s.b.Inspector().Delete(dropping(s.ctx, 2), s.q, id, broker.StateDead)
		noErr(t, "Delete whose replies were lost", err)
		want(t, "state", st, broker.StateDead)
		s.gone(t, id)

		// The id enqueued again between the lost reply and its re-send:
		// the re-send answers the first call's outcome and leaves it.
		s.enqueue(t, broker.Job{ID: "r", Delay: time.Hour})
		fn = func() { s.enqueue(t, broker.Job{ID: "r"}) }
		st, err = s.b.Inspector().Delete(h.lose(s.ctx, 1), s.q, "r", "")
		noErr(t, "Delete whose reply was lost", err)
		want(t, "state of the first", st, broker.StateScheduled)
		want(t, "the new job under the id", s.job(t, "r").State, broker.StatePending)
		s.consistent(t)
	})
}

// Delete, Purge and Promote each record their event once, a re-send
// none more.
func testRemoveEvents(t *testing.T, nb NewBackend) {
	be := nb(t)
	be.Client.AddHook(dropReplies{})
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	noErr(t, "SetEvents", s.b.Inspector().SetEvents(s.ctx, s.q, 100))
	d1 := s.deadJob(t, broker.Job{})
	d2 := s.deadJob(t, broker.Job{})
	later := s.enqueue(t, broker.Job{Delay: time.Hour})
	_, err := s.b.Inspector().Delete(dropping(s.ctx, 1), s.q, d1, "")
	noErr(t, "Delete", err)
	noErr(t, "Promote", s.b.Inspector().Promote(dropping(s.ctx, 1), s.q, later))
	s.pastHorizon() // a purge spares jobs finished within it
	_, err = s.b.Inspector().Purge(s.ctx, s.q, broker.StateDead, nil)
	noErr(t, "Purge", err)
	evs, err := s.b.Inspector().RecentEvents(s.ctx, s.q, 100)
	noErr(t, "RecentEvents", err)
	var got []string
	for _, e := range evs {
		if e.Event == "deleted" || e.Event == "promoted" {
			got = append(got, e.Event+" "+e.JobID+" "+e.Detail)
		}
	}
	slices.Sort(got)
	wantList := []string{"deleted " + d1 + " dead", "deleted " + d2 + " dead", "promoted " + later + " "}
	slices.Sort(wantList)
	if !slices.Equal(got, wantList) {
		t.Fatalf("events %q, want %q", got, wantList)
	}
}

func testPromote(t *testing.T, nb NewBackend) {
	t.Run("DelayedAndRetrying", func(t *testing.T) {
		s := setup(t, nb)
		delayed := s.enqueue(t, broker.Job{Delay: time.Hour, Priority: 3})
		before := s.job(t, delayed)
		noErr(t, "Promote", s.b.Inspector().Promote(s.ctx, s.q, delayed))
		j := s.job(t, delayed)
		want(t, "state", j.State, broker.StatePending)
		want(t, "priority kept", j.Priority, 3)
		want(t, "generation kept", j.Generation, before.Generation)
		if !j.RunAt.Before(before.RunAt) {
			t.Fatalf("run_at %v after promote, want now, before %v", j.RunAt, before.RunAt)
		}
		s.consistent(t)
		l := s.claimOne(t, long)
		want(t, "claimed at once", l.ID, delayed)

		_, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "boom", Backoff: time.Hour})
		noErr(t, "Fail", err)
		want(t, "retrying", s.job(t, delayed).State, broker.StateScheduled)
		noErr(t, "Promote of a retry", s.b.Inspector().Promote(s.ctx, s.q, delayed))
		l = s.claimOne(t, long)
		want(t, "the retry runs now", l.ID, delayed)
		want(t, "its second attempt", l.Attempt, 2)

		err = s.b.Inspector().Promote(s.ctx, s.q, delayed)
		wantErr(t, "Promote of a running job", err, broker.ErrWrongState)
		_, err = s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "Ack", err)
		err = s.b.Inspector().Promote(s.ctx, s.q, delayed)
		wantErr(t, "Promote of a done job", err, broker.ErrWrongState)
		if !strings.Contains(err.Error(), "retry it") {
			t.Fatalf("Promote of a done job says %q", err)
		}
		wantErr(t, "Promote of a missing job", s.b.Inspector().Promote(s.ctx, s.q, "nope"), broker.ErrJobNotFound)
		s.consistent(t)
	})

	t.Run("GroupRespected", func(t *testing.T) {
		s := setup(t, nb)
		s.groupDefaults(t, "g_max_running", 1)
		s.enqueue(t, broker.Job{Group: "g"})
		later := s.enqueue(t, broker.Job{Group: "g", Delay: time.Hour})
		l := s.claimOne(t, long)
		noErr(t, "Promote", s.b.Inspector().Promote(s.ctx, s.q, later))
		want(t, "pending in its group", s.group(t, "g").ready, int64(1))
		want(t, "the group is full", len(s.claim(t, 10, long)), 0)
		_, err := s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "Ack", err)
		want(t, "then it runs", s.claimOne(t, long).ID, later)
		s.consistent(t)
	})

	t.Run("OrderedHoldComesBack", func(t *testing.T) {
		s := setup(t, nb)
		s.groupDefaults(t, "g_ordered", "1")
		a1 := s.enqueue(t, broker.Job{Group: "acct", MaxAttempts: 3})
		a2 := s.enqueue(t, broker.Job{Group: "acct"})
		_, err := s.b.Leases().Fail(s.ctx, s.claimOne(t, long), broker.Failure{Error: "boom", Backoff: time.Hour})
		noErr(t, "Fail", err)
		want(t, "the next waits for the retry", len(s.claim(t, 10, long)), 0)
		noErr(t, "Promote of the held retry", s.b.Inspector().Promote(s.ctx, s.q, a1))
		l := s.claimOne(t, long)
		want(t, "the retry runs first", l.ID, a1)
		_, err = s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "Ack", err)
		want(t, "then the next", s.claimOne(t, long).ID, a2)
		s.consistent(t)
	})

	t.Run("LostReply", func(t *testing.T) {
		be := nb(t)
		be.Client.AddHook(dropReplies{})
		var fn func()
		h := newMeanwhile(func() { fn() })
		be.Client.AddHook(h)
		s, cleanup := on(t, be)
		t.Cleanup(cleanup)
		id := s.enqueue(t, broker.Job{Delay: time.Hour})
		noErr(t, "Promote whose replies were lost", s.b.Inspector().Promote(dropping(s.ctx, 2), s.q, id))
		want(t, "state", s.job(t, id).State, broker.StatePending)
		// Claimed between the lost reply and its re-send: the re-send
		// answers ok and changes nothing.
		id2 := s.enqueue(t, broker.Job{Delay: time.Hour})
		var l broker.Lease
		fn = func() {
			for _, c := range s.claim(t, 10, long) {
				if c.ID == id2 {
					l = c
				}
			}
		}
		noErr(t, "Promote whose reply was lost", s.b.Inspector().Promote(h.lose(s.ctx, 1), s.q, id2))
		want(t, "claimed meanwhile", l.ID, id2)
		want(t, "still running", s.job(t, id2).State, broker.StateRunning)
		s.consistent(t)

		// Deleted, and its id enqueued again as another scheduled job,
		// between the lost reply and its re-send: the re-send leaves the
		// new job scheduled.
		s.enqueue(t, broker.Job{ID: "again", Delay: time.Hour})
		fn = func() {
			_, err := s.b.Inspector().Delete(s.ctx, s.q, "again", "")
			noErr(t, "Delete meanwhile", err)
			s.enqueue(t, broker.Job{ID: "again", Delay: time.Hour})
		}
		noErr(t, "Promote whose reply was lost", s.b.Inspector().Promote(h.lose(s.ctx, 1), s.q, "again"))
		want(t, "the new job under the id", s.job(t, "again").State, broker.StateScheduled)
		s.consistent(t)
	})
}

func testReleaseUnownedRefusesFinished(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	for _, st := range []broker.State{broker.StateDone, broker.StateDead, broker.StateCancelled} {
		id := s.enqueue(t, broker.Job{MaxAttempts: 1})
		switch st {
		case broker.StateDone:
			_, err := s.b.Leases().Ack(s.ctx, s.claimOne(t, long), []byte("result"))
			noErr(t, "Ack", err)
		case broker.StateDead:
			_, err := s.b.Leases().Fail(s.ctx, s.claimOne(t, long), broker.Failure{Error: "x", Dead: true})
			noErr(t, "Fail", err)
		case broker.StateCancelled:
			_, err := s.b.Inspector().Cancel(s.ctx, s.q, id)
			noErr(t, "Cancel", err)
		}
		before := s.job(t, id)
		r, err := s.b.Inspector().ReleaseUnowned(s.ctx, s.q, id)
		wantErr(t, "ReleaseUnowned of a "+string(st)+" job", err, broker.ErrWrongState)
		want(t, "state answered", r.Previous, st)
		if !strings.Contains(err.Error(), "nothing to release") {
			t.Fatalf("refusal %q does not say why", err)
		}
		sameJob(t, "ReleaseUnowned of a "+string(st)+" job", s.job(t, id), before)
	}
	s.consistent(t)
}

func testPurge(t *testing.T, nb NewBackend) {
	t.Run("StepsAndProgress", func(t *testing.T) {
		s := setup(t, nb)
		kept := s.deadJob(t, broker.Job{})
		n := broker.PurgeStep*2 + 17
		jobs := make([]broker.Job, n)
		for i := range jobs {
			jobs[i] = broker.Job{Queue: s.q, Kind: "k"}
		}
		for i, e := range s.b.Client().EnqueueMany(s.ctx, jobs) {
			noErr(t, fmt.Sprintf("EnqueueMany job %d", i), e.Err)
			_, err := s.b.Inspector().Cancel(s.ctx, s.q, e.ID)
			noErr(t, "Cancel", err)
		}
		s.pastHorizon() // a purge spares jobs finished within it
		var seen []broker.PurgeProgress
		p, err := s.b.Inspector().Purge(s.ctx, s.q, broker.StateCancelled, func(p broker.PurgeProgress) { seen = append(seen, p) })
		noErr(t, "Purge", err)
		want(t, "deleted", p.Deleted, n)
		want(t, "steps", p.Steps, 3)
		want(t, "progress calls", len(seen), 3)
		want(t, "first step", seen[0].Deleted, broker.PurgeStep)
		want(t, "last step done", seen[2].Done, true)
		c, err := s.b.Inspector().Counts(s.ctx, s.q)
		noErr(t, "Counts", err)
		want(t, "cancelled left", c.Cancelled, int64(0))
		want(t, "dead kept", s.job(t, kept).State, broker.StateDead)
		s.consistent(t)

		p, err = s.b.Inspector().Purge(s.ctx, s.q, broker.StateDone, nil)
		noErr(t, "Purge of an empty state", err)
		want(t, "nothing", p, broker.PurgeProgress{Done: true})
		_, err = s.b.Inspector().Purge(s.ctx, s.q, broker.StatePending, nil)
		wantErr(t, "Purge of pending", err, broker.ErrInvalid)
	})

	// PurgeThrough takes only the jobs that entered the state by its
	// instant: a purge confirmation sent again later deletes no job its
	// page did not count.
	t.Run("Through", func(t *testing.T) {
		s := setup(t, nb)
		old := s.deadJob(t, broker.Job{})
		at, err := s.b.Inspector().RedisTime(s.ctx, s.q)
		noErr(t, "RedisTime", err)
		s.Advance(5 * time.Millisecond) // the index is scored in ms
		later := s.deadJob(t, broker.Job{})
		s.Advance(broker.ResendHorizon + 10*time.Millisecond) // past the re-send horizon a purge may keep jobs for
		p, err := s.b.Inspector().PurgeThrough(s.ctx, s.q, broker.StateDead, at, nil)
		noErr(t, "PurgeThrough", err)
		want(t, "deleted", p.Deleted, 1)
		want(t, "done", p.Done, true)
		_, err = s.b.Inspector().Job(s.ctx, s.q, old)
		wantErr(t, "the job dead before", err, broker.ErrJobNotFound)
		want(t, "the job dead after", s.job(t, later).State, broker.StateDead)
		p, err = s.b.Inspector().PurgeThrough(s.ctx, s.q, broker.StateDead, at, nil)
		noErr(t, "PurgeThrough again", err)
		want(t, "deleted again", p.Deleted, 0)
		want(t, "the job dead after, kept again", s.job(t, later).State, broker.StateDead)
		s.consistent(t)
	})

	t.Run("FencedPerJob", func(t *testing.T) {
		be := nb(t)
		h := newMeanwhile(func() {})
		be.Client.AddHook(h)
		s, cleanup := on(t, be)
		t.Cleanup(cleanup)
		var ids []string
		for range broker.PurgeStep + 5 {
			ids = append(ids, s.deadJob(t, broker.Job{}))
		}
		// A job moved to pending by a hand edit while its entry stays in
		// dead: skipped, and left where it is.
		misfiled := ids[3]
		noErr(t, "HSET", s.Client.HSet(s.ctx, s.queueKey("job:"+misfiled), "state", "pending").Err())
		// An entry with no hash: it goes.
		noErr(t, "ZADD", s.Client.ZAdd(s.ctx, s.queueKey("dead"), redis.Z{Score: 1, Member: "ghost"}).Err())
		s.pastHorizon() // a purge spares jobs finished within it
		var retried, again string
		step := 0
		p, err := s.b.Inspector().Purge(h.lose(s.ctx, 1), s.q, broker.StateDead, func(p broker.PurgeProgress) {
			step++
			if step != 1 {
				return
			}
			// Between steps: a job not yet read is retried (it leaves
			// dead), and another dies after the purge began, then
			// leaves the re-send horizon: the bound alone keeps it.
			s.Advance(2 * time.Millisecond)
			again = s.deadJob(t, broker.Job{})
			s.pastHorizon()
			retried = ids[len(ids)-1]
			_, err := s.b.Inspector().Retry(s.ctx, s.q, retried)
			noErr(t, "Retry between steps", err)
		})
		noErr(t, "Purge whose first reply was lost", err)
		want(t, "deleted", p.Deleted, len(ids)-2)
		want(t, "skipped", p.Skipped, 1)
		want(t, "the misfiled job kept", s.job(t, misfiled).State, broker.StatePending)
		want(t, "the retried job kept", s.job(t, retried).State, broker.StatePending)
		want(t, "a job that died after the purge began kept", s.job(t, again).State, broker.StateDead)
		if s.Client.ZScore(s.ctx, s.queueKey("dead"), "ghost").Err() == nil {
			t.Fatal("an entry without a hash stayed in dead")
		}
	})

	// More entries that stay than a step reads, all at one score (a
	// frozen clock finishes every job in the same millisecond): the steps
	// go on past them, each counted once, and the purge ends.
	t.Run("SkippedBeyondAStep", func(t *testing.T) {
		s := setup(t, nb)
		var kept []string
		for i := range broker.PurgeStep + 30 {
			id := s.deadJob(t, broker.Job{})
			if i < broker.PurgeStep+10 {
				noErr(t, "HSET", s.Client.HSet(s.ctx, s.queueKey("job:"+id), "state", "done").Err())
				kept = append(kept, id)
			}
		}
		s.pastHorizon() // a purge spares jobs finished within it
		p, err := s.b.Inspector().Purge(s.ctx, s.q, broker.StateDead, nil)
		noErr(t, "Purge", err)
		want(t, "deleted", p.Deleted, 20)
		want(t, "skipped", p.Skipped, len(kept))
		want(t, "a job left in dead's index", s.job(t, kept[0]).State, broker.StateDone)
	})
}

// Two operators purge one state at once, and deletes race a claiming
// worker: every job goes exactly once, none is both claimed and deleted,
// and the queue checks clean.
func testRemoveRaces(t *testing.T, nb NewBackend) {
	t.Run("TwoPurges", func(t *testing.T) {
		s := setup(t, nb)
		n := broker.PurgeStep*2 + 40
		jobs := make([]broker.Job, n)
		for i := range jobs {
			jobs[i] = broker.Job{Queue: s.q, Kind: "k", Delay: time.Hour}
		}
		for i, e := range s.b.Client().EnqueueMany(s.ctx, jobs) {
			noErr(t, fmt.Sprintf("EnqueueMany job %d", i), e.Err)
			_, err := s.b.Inspector().Cancel(s.ctx, s.q, e.ID)
			noErr(t, "Cancel", err)
		}
		s.pastHorizon() // a purge spares jobs finished within it
		var wg sync.WaitGroup
		got := make([]broker.PurgeProgress, 2)
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = s.b.Inspector().Purge(s.ctx, s.q, broker.StateCancelled, nil)
			}()
		}
		wg.Wait()
		noErr(t, "first Purge", errs[0])
		noErr(t, "second Purge", errs[1])
		want(t, "deleted by the two", got[0].Deleted+got[1].Deleted, n)
		c, err := s.b.Inspector().Counts(s.ctx, s.q)
		noErr(t, "Counts", err)
		want(t, "cancelled left", c.Cancelled, int64(0))
		s.consistent(t)
	})

	t.Run("DeletesBesideAClaim", func(t *testing.T) {
		s := setup(t, nb)
		const n = 300
		ids := make([]string, n)
		jobs := make([]broker.Job, n)
		for i := range jobs {
			jobs[i] = broker.Job{Queue: s.q, Kind: "k"}
		}
		for i, e := range s.b.Client().EnqueueMany(s.ctx, jobs) {
			noErr(t, fmt.Sprintf("EnqueueMany job %d", i), e.Err)
			ids[i] = e.ID
		}
		var claimed []broker.Lease
		var claimErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			for len(claimed) < n {
				res, err := s.b.Leases().Claim(s.ctx, s.q, 7, long)
				if err != nil {
					claimErr = err
					return
				}
				if len(res.Leases) == 0 {
					return
				}
				claimed = append(claimed, res.Leases...)
			}
		}()
		deleted := map[string]bool{}
		for i := len(ids) - 1; i >= 0; i-- {
			st, err := s.b.Inspector().Delete(s.ctx, s.q, ids[i], broker.StatePending)
			switch {
			case err == nil:
				want(t, "state deleted", st, broker.StatePending)
				deleted[ids[i]] = true
			case errors.Is(err, broker.ErrWrongState):
				want(t, "state refused", st, broker.StateRunning)
			default:
				t.Fatalf("Delete: %v", err)
			}
		}
		<-done
		noErr(t, "Claim", claimErr)
		for _, l := range claimed {
			if deleted[l.ID] {
				t.Fatalf("job %s was both claimed and deleted", l.ID)
			}
		}
		want(t, "claimed and deleted", len(claimed)+len(deleted), n)
		t.Logf("%d claimed, %d deleted", len(claimed), len(deleted))
		s.consistent(t)
	})
}
