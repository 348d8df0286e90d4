package brokertest

import (
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// An ack whose first send settled its job, and whose reply was lost, is
// sent again by the broker. Were a Purge of done jobs to delete the job in
// between, the re-send would find no job and answer Stale: its caller would
// be told the claim was lost for a job it did settle (invariant 9). Purge,
// like retention, spares a job finished within broker.ResendHorizon.
func testAckResentAfterPurge(t *testing.T, nb NewBackend) {
	be := nb(t)
	var s *bundle
	var purged int
	h := newMeanwhile(func() {
		p, err := s.b.Inspector().Purge(s.ctx, s.q, broker.StateDone, nil)
		noErr(t, "Purge", err)
		want(t, "jobs the purge left for the horizon", p.Recent, 1)
		purged += p.Deleted
	})
	be.Client.AddHook(h)
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	s.enqueue(t, broker.Job{ID: "a"})
	l := s.claimOne(t, long)

	o, err := s.b.Leases().Ack(h.lose(s.ctx, 1), l, []byte("r"))
	noErr(t, "Ack whose reply was lost", err)
	want(t, "jobs purged between the send and its re-send", purged, 0)
	if o != broker.OK {
		t.Fatalf("Ack whose first send settled job a (a purge ran before the re-send) answered %v; want ok, what the first send did", o)
	}
	want(t, "job a", s.job(t, "a").State, broker.StateDone)
	purgeAfterTheHorizon(t, s, "a")
}

// An enqueue whose first send stored its job, and whose reply was lost, is
// sent again by the broker. Were a worker to run the job and a Purge of
// done jobs to delete it in between, the re-send would store it again: the
// job would run twice (invariant 9).
func testEnqueueResentAfterPurge(t *testing.T, nb NewBackend) {
	be := nb(t)
	var s *bundle
	var purged int
	h := newMeanwhile(func() {
		l := s.claimOne(t, long)
		want(t, "claimed", l.ID, "a")
		if o, err := s.b.Leases().Ack(s.ctx, l, nil); err != nil || o != broker.OK {
			t.Errorf("Ack of a: %v %v", o, err)
		}
		p, err := s.b.Inspector().Purge(s.ctx, s.q, broker.StateDone, nil)
		noErr(t, "Purge", err)
		purged += p.Deleted
	})
	be.Client.AddHook(h)
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	s.enqueue(t, broker.Job{Delay: long}) // the queue is registered, the script loaded

	id, err := s.b.Client().Enqueue(h.lose(s.ctx, 1), broker.Job{Queue: s.q, Kind: "k", ID: "a"})
	noErr(t, "Enqueue whose reply was lost", err)
	want(t, "id", id, "a")
	want(t, "jobs purged between the send and its re-send", purged, 0)
	c, err := s.b.Inspector().Counts(s.ctx, s.q)
	noErr(t, "Counts", err)
	if c.Pending != 0 {
		t.Fatalf("job a ran and was purged between the enqueue and the broker's re-send, and %d job is pending again: "+
			"the re-send stored it a second time, so it runs twice", c.Pending)
	}
	want(t, "job a", s.job(t, "a").State, broker.StateDone)
	purgeAfterTheHorizon(t, s, "a")
}

// purgeAfterTheHorizon checks, where the server's clock is the test's,
// that once the re-send horizon has passed, a Purge of done jobs deletes
// job id.
func purgeAfterTheHorizon(t *testing.T, s *bundle, id string) {
	t.Helper()
	if !s.Frozen {
		return // a real server's clock: no waiting out the horizon here
	}
	s.pastHorizon()
	p, err := s.b.Inspector().Purge(s.ctx, s.q, broker.StateDone, nil)
	noErr(t, "Purge after the horizon", err)
	want(t, "jobs purged after the horizon", p.Deleted, 1)
	want(t, "jobs left for the horizon", p.Recent, 0)
	s.gone(t, id)
}

// A Delete whose reply was lost is sent again. Meanwhile its id was
// enqueued again, deleted by another operator, and enqueued a third time:
// the re-send must answer the first call's outcome and leave the third
// job, as it leaves the second when nothing else came between.
func testDeleteResentAfterAnotherDelete(t *testing.T, nb NewBackend) {
	be := nb(t)
	var fn func()
	h := newMeanwhile(func() { fn() })
	be.Client.AddHook(h)
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	s.enqueue(t, broker.Job{ID: "r", Delay: time.Hour})
	fn = func() {
		s.enqueue(t, broker.Job{ID: "r", Delay: time.Hour})
		st, err := s.b.Inspector().Delete(s.ctx, s.q, "r", "")
		noErr(t, "the other operator's Delete", err)
		want(t, "state the other Delete found", st, broker.StateScheduled)
		s.enqueue(t, broker.Job{ID: "r"})
	}
	st, err := s.b.Inspector().Delete(h.lose(s.ctx, 1), s.q, "r", "")
	noErr(t, "Delete whose reply was lost", err)
	want(t, "state of the first", st, broker.StateScheduled)
	want(t, "the third job under the id", s.job(t, "r").State, broker.StatePending)
	s.consistent(t)
}

// A Promote whose reply was lost is sent again. Meanwhile its job ran and
// failed back to its backoff, another operator promoted it, and it ran
// and failed back again: the re-send must answer ok and leave the retry
// waiting out its backoff, not run it early a second time.
func testPromoteResentAfterAnotherPromote(t *testing.T, nb NewBackend) {
	be := nb(t)
	var fn func()
	h := newMeanwhile(func() { fn() })
	be.Client.AddHook(h)
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	id := s.enqueue(t, broker.Job{Delay: time.Hour, MaxAttempts: 5})
	runAndFail := func() {
		l := s.claimOne(t, long)
		want(t, "claimed", l.ID, id)
		_, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "boom", Backoff: time.Hour})
		noErr(t, "Fail", err)
	}
	fn = func() {
		runAndFail()
		noErr(t, "the other operator's Promote", s.b.Inspector().Promote(s.ctx, s.q, id))
		runAndFail()
	}
	noErr(t, "Promote whose reply was lost", s.b.Inspector().Promote(h.lose(s.ctx, 1), s.q, id))
	want(t, "the retry still waits out its backoff", s.job(t, id).State, broker.StateScheduled)
	s.consistent(t)
}

// A Retry whose reply was lost is sent again. Meanwhile the job ran and
// died again, another operator retried it, and it died once more: the
// re-send must answer what the first call did and leave the job dead,
// not run it a third time.
func testRetryResentAfterAnotherRetry(t *testing.T, nb NewBackend) {
	be := nb(t)
	var fn func()
	h := newMeanwhile(func() { fn() })
	be.Client.AddHook(h)
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	id := s.deadJob(t, broker.Job{})
	die := func() {
		l := s.claimOne(t, long)
		want(t, "claimed", l.ID, id)
		_, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "boom", Dead: true})
		noErr(t, "Fail", err)
	}
	fn = func() {
		die()
		_, err := s.b.Inspector().Retry(s.ctx, s.q, id)
		noErr(t, "the other operator's Retry", err)
		die()
	}
	st, err := s.b.Inspector().Retry(h.lose(s.ctx, 1), s.q, id)
	noErr(t, "Retry whose reply was lost", err)
	want(t, "state the first Retry found", st, broker.StateDead)
	want(t, "the job, dead again", s.job(t, id).State, broker.StateDead)
	s.consistent(t)
}
