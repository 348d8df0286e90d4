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
		st, err := s.b.Cancel(s.ctx, s.q, id)
		noErr(t, "Cancel", err)
		want(t, "state after Cancel of "+id, st, broker.StateCancelled)
	}
	cancel("b")
	cancel("low")
	pending := func(what string, n int64) {
		t.Helper()
		c, err := s.b.Counts(s.ctx, s.q)
		noErr(t, "Counts", err)
		want(t, "pending "+what, c.Pending, n)
		o, err := s.b.Overview(s.ctx, s.q)
		noErr(t, "Overview", err)
		want(t, "Overview pending "+what, o.Pending, n)
		p, err := s.b.JobPage(s.ctx, s.q, broker.JobQuery{State: broker.StatePending})
		noErr(t, "JobPage", err)
		want(t, "JobPage total "+what, p.Total, n)
		want(t, "JobPage jobs "+what, int64(len(p.Jobs)), n)
		s.consistent(t)
	}
	pending("after two cancels", 4)
	st, err := s.b.Retry(s.ctx, s.q, "low")
	noErr(t, "Retry", err)
	want(t, "state before Retry", st, broker.StateCancelled)
	st, err = s.b.Retry(s.ctx, s.q, "c") // pending: not retryable
	if err == nil {
		t.Fatalf("Retry of a pending job answered %s, want an error", st)
	}
	cancel("c")
	_, err = s.b.Retry(s.ctx, s.q, "c") // its tombstone and a new entry
	noErr(t, "Retry", err)
	pending("after a retry of each", 5)

	var order []string
	for range 6 {
		res, err := s.b.Claim(s.ctx, s.q, 1, long)
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
