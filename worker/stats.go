package worker

import (
	"sync/atomic"

	"github.com/fenceq/fenceq/broker"
)

// Stats counts what a pool has done since it started.
type Stats struct {
	Running    int   // handlers running now
	Claimed    int64 // jobs claimed
	Succeeded  int64 // settled done
	Retried    int64 // failed and scheduled (or pending) again
	Dead       int64 // failed for good
	Cancelled  int64 // settled as cancelled
	Snoozed    int64 // snoozed by their handler
	GivenBack  int64 // given back uncharged: the handler has no handler for their kind (Config.UnknownKind)
	Released   int64 // given back (shutdown, or a lease that expired locally)
	Stale      int64 // settlements rejected because the claim was no longer valid
	LeasesLost int64 // handlers cancelled because their lease was lost or expired
	Reaped     int64 // expired leases this pool recovered
}

type stats struct {
	claimed, succeeded, retried, dead, cancelled, snoozed, givenBack, released, stale, leasesLost, reaped atomic.Int64
}

// Stats returns the pool's counters.
func (p *Pool) Stats() Stats {
	s := &p.stats
	return Stats{
		Running: p.running(), Claimed: s.claimed.Load(), Succeeded: s.succeeded.Load(),
		Retried: s.retried.Load(), Dead: s.dead.Load(), Cancelled: s.cancelled.Load(),
		Snoozed: s.snoozed.Load(), GivenBack: s.givenBack.Load(), Released: s.released.Load(), Stale: s.stale.Load(),
		LeasesLost: s.leasesLost.Load(), Reaped: s.reaped.Load(),
	}
}

// count records a settlement that went through.
func (p *Pool) count(o outcome, state broker.State) {
	s := &p.stats
	switch {
	case state.Final():
		switch state {
		case broker.StateDone:
			s.succeeded.Add(1)
		case broker.StateDead:
			s.dead.Add(1)
		default:
			s.cancelled.Add(1)
		}
		// Maintenance waits up to a reap interval between rounds, while
		// a busy pool finishes far more than one trim's batch: a trim
		// falls due every ReapBatch jobs.
		p.maintenance.finished(s.finished())
	case o == outcomeSnooze:
		s.snoozed.Add(1)
	case o == outcomeUnhandled:
		s.givenBack.Add(1)
	case o == outcomeInterrupted, o == outcomeNotRun:
		s.released.Add(1)
	default:
		s.retried.Add(1)
	}
}

// finished is how many jobs the pool has taken to a final state.
func (s *stats) finished() int64 {
	return s.succeeded.Load() + s.dead.Load() + s.cancelled.Load()
}
