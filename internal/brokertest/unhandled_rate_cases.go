package brokertest

import (
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// GiveBackFreesItsStart: a job given back because no handler took it did
// not run, yet its claim keeps its place among the queue's rate-limited
// starts. Under Rate 1 per hour, one claim of a job of a kind the pool
// lacks, given back, leaves the known job behind it unclaimable for the
// hour; a backlog of such jobs, each claimed again every MaxDelay for a
// day, spends the queue's whole rate on work no pool runs.
func testGiveBackFreesItsStart(t *testing.T, nb NewBackend) {
	u := broker.Unhandled{Error: `no pool registered kind "new"`, Delay: time.Minute, MaxDelay: time.Minute, For: time.Hour}
	s := setup(t, nb)
	s.enqueue(t, broker.Job{Kind: "new"})
	known := s.enqueue(t, broker.Job{Kind: "old"})
	noErr(t, "SetLimits", s.b.Inspector().SetLimits(s.ctx, s.q, broker.Limits{Rate: 1, Per: time.Hour}))
	l := s.claimOne(t, long)
	want(t, "kind of the first claim", l.Kind, "new")
	s.giveBack(t, l, u, broker.StateScheduled)
	ls := s.claim(t, 1, long)
	want(t, "jobs claimed after the give-back, under a rate of 1 an hour", len(ls), 1)
	want(t, "job claimed", ls[0].ID, known)
	s.consistent(t)
}
