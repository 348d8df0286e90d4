package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// maxAckBatch bounds how many acks go in one round trip.
const maxAckBatch = 256

// ackReq is one handler's success, waiting for its ack.
type ackReq struct {
	a *active
	// slot: a's slot is still its own, so the acker may give it to a job
	// it claims with the ack.
	slot bool
	out  chan ackResult // buffered: the acker never blocks on it
}

type ackResult struct {
	outcome broker.Outcome
	err     error
}

var errHalted = errors.New("pool stopped")

// ack settles a's job as done through the acker, and waits for the answer.
// The acker may have passed a's slot to a job it claimed meanwhile
// (a.passed). A handler that Shutdown abandoned may get here after the
// acker has exited: it gets errHalted, not a wait that never ends.
func (p *Pool) ack(a *active) (broker.Outcome, error) {
	r := &ackReq{a: a, slot: !a.passed.Load(), out: make(chan ackResult, 1)}
	select {
	case p.acks <- r:
	case <-p.halt:
		return broker.Stale, errHalted
	}
	select {
	case res := <-r.out:
		return res.outcome, res.err
	case <-p.ackerDone:
		// The acker answers before it takes the next request, so an answer
		// is here by now unless the request was never taken.
		select {
		case res := <-r.out:
			return res.outcome, res.err
		default:
			return broker.Stale, errHalted
		}
	}
}

// acker sends acks in batches: it takes whatever successes are waiting
// when it is free, so an idle pool's ack goes out at once and a busy pool's
// acks share round trips (a batch forms while the previous one is in
// flight). In the same call it claims a job for each slot the batch frees
// (fusedClaim), so a pool working through a backlog spends one round trip
// per batch, not two. Retrying a failed ack is each handler's own settle
// loop; a failed claim is asked for again under its id (recoverClaim), so
// a lost reply costs no job an attempt, and the acks of other batches
// meanwhile go on.
func (p *Pool) acker() {
	defer close(p.ackerDone)
	batch := make([]*ackReq, 0, maxAckBatch)
	acks := make([]broker.Ack, 0, maxAckBatch)
	for {
		select {
		case r := <-p.acks:
			batch = append(batch[:0], r)
		case <-p.hbStop:
			return
		}
	collect:
		for len(batch) < maxAckBatch {
			select {
			case r := <-p.acks:
				batch = append(batch, r)
			default:
				break collect
			}
		}
		acks = acks[:0]
		for _, r := range batch {
			acks = append(acks, broker.Ack{Lease: r.a.lease, Result: r.a.job.Result()})
		}
		spec := p.fusedClaim(batch)
		var outcomes []broker.Outcome
		var claimed broker.ClaimResult
		var err error
		if spec.N == 0 {
			outcomes, err = p.b.AckMany(context.Background(), acks)
		} else {
			sent := time.Now()
			outcomes, claimed, err = p.b.AckClaim(context.Background(), acks, spec)
			if err != nil {
				// The claim may have run: its leases are asked for under its
				// id, in the slots it was for, while the acker goes on.
				p.recovering.Add(1)
				go p.recoverClaim(spec, sent, p.hold(batch))
			} else {
				p.took(spec, claimed)
				p.pass(batch, claimed.Leases)
			}
		}
		for i, r := range batch {
			if err != nil {
				r.out <- ackResult{err: err}
			} else {
				r.out <- ackResult{outcome: outcomes[i]}
			}
		}
	}
}

// fusedClaim is the claim to send with a batch of acks: one job for each
// slot the batch can pass on (see claimSpec).
func (p *Pool) fusedClaim(batch []*ackReq) broker.ClaimSpec {
	n := 0
	for _, r := range batch {
		if r.slot {
			n++
		}
	}
	return p.claimSpec(n)
}

// claimSpec is the claim of n jobs to send with a settlement, for the slots
// it frees: from the queue the dispatcher would try first this round (its
// order: weights or strict priority), unless that queue was found drained.
// Then it claims nothing, and the freed slots go to the dispatcher, which
// tries every queue in order: a later queue's backlog never keeps a first
// one's new jobs waiting. Nothing while the pool stops.
func (p *Pool) claimSpec(n int) broker.ClaimSpec {
	if n == 0 || p.stopping() {
		return broker.ClaimSpec{}
	}
	q := p.first()
	if p.drained[q].Load() {
		return broker.ClaimSpec{}
	}
	return broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: q, N: n, Lease: p.cfg.LeaseDuration}
}

// hold takes the slots of the batch's acked jobs that can pass theirs on,
// for a claim whose answer is still to come; it answers how many.
func (p *Pool) hold(batch []*ackReq) int {
	n := 0
	for _, r := range batch {
		if r.slot {
			r.a.passed.Store(true)
			n++
		}
	}
	return n
}

// recoverClaim asks again for a claim sent with acks whose answer was lost
// (claimRequest) and runs what it took in the slots held for it, freeing
// the rest. Shutdown waits for it as it waits for the dispatcher.
func (p *Pool) recoverClaim(spec broker.ClaimSpec, sent time.Time, slots int) {
	defer p.recovering.Done()
	claimed := p.reask(spec, sent)
	for _, l := range claimed.Leases {
		p.run(l)
		slots--
	}
	for ; slots > 0; slots-- {
		p.freeSlot()
	}
}

// reask asks again, under its id, for a claim sent with a settlement whose
// answer was lost (claimRequest), and answers what it took.
func (p *Pool) reask(spec broker.ClaimSpec, sent time.Time) broker.ClaimResult {
	claimed, err := p.claimRequest(spec.RequestID, spec.Queue, spec.N, sent)
	if err != nil {
		p.log.Warn("fenceq could not learn what a claim sent with a settlement took; the reaper recovers its jobs when their lease expires",
			slog.String("queue", spec.Queue), slog.Any("error", err))
	}
	p.took(spec, claimed)
	return claimed
}

// took notes what a claim sent with a settlement answered: its problems
// logged, its queue's drained flag.
func (p *Pool) took(spec broker.ClaimSpec, claimed broker.ClaimResult) {
	p.logProblems(spec.Queue, "claim", claimed.Problems)
	p.claimedFrom(spec.Queue, spec.N, claimed)
}

// pass starts each claimed job in the slot of one acked job, which keeps
// it (a.passed) instead of freeing it.
func (p *Pool) pass(batch []*ackReq, leases []broker.Lease) {
	i := 0
	for _, r := range batch {
		if i == len(leases) {
			return
		}
		if r.slot {
			r.a.passed.Store(true)
			p.run(leases[i])
			i++
		}
	}
}
