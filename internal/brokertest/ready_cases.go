package brokertest

import (
	"fmt"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// The ready index is a list for priority 0 and sorted sets for the others:
// a claim takes the higher priorities first, then priority 0 in FIFO
// order, then the lower ones. A pending job cancelled leaves a tombstone in
// the list, which the claim skips without a problem and which the counts
// leave out; a job retried after it has two entries, and is claimed once.
func testReadyIndex(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	for _, j := range []broker.Job{{ID: "a"}, {ID: "low", Priority: -5}, {ID: "b"}, {ID: "c"}, {ID: "high", Priority: 5}, {ID: "d"}} {
		s.enqueue(t, j)
	}
	cancel := func(id string) {
		st, err := s.b.Inspector().Cancel(s.ctx, s.q, id)
		noErr(t, "Cancel", err)
		want(t, "state after Cancel of "+id, st, broker.StateCancelled)
	}
	cancel("b")
	cancel("low")
	pending := func(what string, n int64) {
		t.Helper()
		c, err := s.b.Inspector().Counts(s.ctx, s.q)
		noErr(t, "Counts", err)
		want(t, "pending "+what, c.Pending, n)
		o, err := s.b.Inspector().Overview(s.ctx, s.q)
		noErr(t, "Overview", err)
		want(t, "Overview pending "+what, o.Pending, n)
		p, err := s.b.Inspector().JobPage(s.ctx, s.q, broker.JobQuery{State: broker.StatePending})
		noErr(t, "JobPage", err)
		want(t, "JobPage total "+what, p.Total, n)
		want(t, "JobPage jobs "+what, int64(len(p.Jobs)), n)
		s.consistent(t)
	}
	pending("after two cancels", 4)
	st, err := s.b.Inspector().Retry(s.ctx, s.q, "low")
	noErr(t, "Retry", err)
	want(t, "state before Retry", st, broker.StateCancelled)
	st, err = s.b.Inspector().Retry(s.ctx, s.q, "c") // pending: not retryable
	if err == nil {
		t.Fatalf("Retry of a pending job answered %s, want an error", st)
	}
	cancel("c")
	_, err = s.b.Inspector().Retry(s.ctx, s.q, "c") // its tombstone and a new entry
	noErr(t, "Retry", err)
	pending("after a retry of each", 5)

	var order []string
	for range 6 {
		res, err := s.b.Leases().Claim(s.ctx, s.q, 1, long)
		noErr(t, "Claim", err)
		if len(res.Problems) > 0 {
			t.Fatalf("claim reported %v; a tombstone is no problem", res.Problems)
		}
		for _, l := range res.Leases {
			order = append(order, l.ID)
		}
	}
	// c is claimed from its older entry, where it was when cancelled.
	want(t, "claim order", fmt.Sprint(order), "[high a c d low]")
	pending("after claiming all", 0)
}

// A claim skips at most a bounded number of tombstones (lib.lua's
// TOMB_SKIP, 1000) beyond the n it asks for. A claim that popped only
// tombstones and stopped before the list's end leaves pending jobs behind
// them; like a claim that leaves work behind, it must leave a wake-up for
// the next worker, or an idle pool, blocked since its claim took nothing,
// finds the job only at its next poll, one step of tombstones per poll.
func testWakePastTombSkip(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	const tombs = 1100 // more than one claim skips
	jobs := make([]broker.Job, tombs)
	for i := range jobs {
		jobs[i] = broker.Job{Queue: s.q, Kind: "k", ID: fmt.Sprintf("t%d", i)}
	}
	for _, e := range s.b.Client().EnqueueMany(s.ctx, jobs) {
		noErr(t, "EnqueueMany", e.Err)
	}
	for _, j := range jobs {
		_, err := s.b.Inspector().Cancel(s.ctx, s.q, j.ID)
		noErr(t, "Cancel", err)
	}
	wake := s.queueKey("wake")
	noErr(t, "DEL wake", s.Client.Del(s.ctx, wake).Err())
	s.enqueue(t, broker.Job{ID: "live"})
	// A worker: it claims when woken, and blocks when its claim took
	// nothing and no wake-up is waiting.
	for round := 0; ; round++ {
		woken, err := s.Client.LPop(s.ctx, wake).Result()
		if err != nil || woken == "" {
			c, cerr := s.b.Inspector().Counts(s.ctx, s.q)
			noErr(t, "Counts", cerr)
			t.Fatalf("round %d: no wake-up left, and the pending job behind the tombstones is not claimed (pending: %d)", round, c.Pending)
		}
		ls := s.claim(t, 1, long)
		if len(ls) == 1 {
			want(t, "claimed", ls[0].ID, "live")
			break
		}
		if round > 10 {
			t.Fatalf("no claim found the job in %d rounds", round)
		}
	}
	s.consistent(t)
}
