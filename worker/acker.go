package worker

import (
	"context"
	"errors"

	"github.com/fenceq/fenceq/broker"
)

// maxAckBatch bounds how many acks go in one round trip.
const maxAckBatch = 256

// ackReq is one handler's success, waiting for its ack.
type ackReq struct {
	a   *active
	out chan ackResult // buffered: the acker never blocks on it
}

type ackResult struct {
	outcome broker.Outcome
	err     error
}

var errHalted = errors.New("pool stopped")

// ack settles a's job as done through the acker, and waits for the answer.
// A handler that Shutdown abandoned may get here after the acker has
// exited: it gets errHalted, not a wait that never ends.
func (p *Pool) ack(a *active) (broker.Outcome, error) {
	r := &ackReq{a: a, out: make(chan ackResult, 1)}
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
// flight). Retrying a failed batch is each handler's own settle loop.
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
		outcomes, err := p.b.AckMany(context.Background(), acks)
		for i, r := range batch {
			if err != nil {
				r.out <- ackResult{err: err}
			} else {
				r.out <- ackResult{outcome: outcomes[i]}
			}
		}
	}
}
