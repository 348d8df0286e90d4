package worker

import (
	"context"
	"errors"
	"sync"
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

// acker is the service that settles successes. It sends acks in batches:
// it takes whatever successes are waiting when it is free, so an idle
// pool's ack goes out at once and a busy pool's acks share round trips (a
// batch forms while the previous one is in flight). In the same call it
// claims a job for each slot the batch frees (fusedClaim), so a pool
// working through a backlog spends one round trip per batch, not two.
// Retrying a failed ack is each handler's own settle loop; a failed claim
// is asked for again under its id (recoverClaim), so a lost reply costs no
// job an attempt, and the acks of other batches meanwhile go on.
type acker struct {
	loop
	ackerParams
	reqs chan *ackReq // successes to batch
	// sending is held (full) while an ack call is in flight, the acker's
	// batch or one handler's own (ack's direct path): a success that finds
	// it free sends its ack itself, one that finds it held joins the next
	// batch.
	sending chan struct{}
	// recovering counts the claims sent with acks whose answer is asked for
	// again (recoverClaim); Shutdown waits for them with the dispatcher.
	recovering sync.WaitGroup
}

// ackBroker is what the acker asks of broker.Leases.
type ackBroker interface {
	AckMany(ctx context.Context, acks []broker.Ack) ([]broker.Outcome, error)
	FusedAck(ctx context.Context, acks []broker.Ack, c broker.ClaimSpec) (broker.FusedAcks, error)
}

// fusedClaims is what a settlement that claims for the slots it frees asks
// of the dispatcher, which decides where claims go: the claim to send, what
// to note of its answer, and asking again for an answer that was lost.
type fusedClaims interface {
	claimSpec(n int) broker.ClaimSpec
	took(spec broker.ClaimSpec, claimed broker.ClaimResult)
	reask(spec broker.ClaimSpec, sent time.Time) broker.ClaimResult
}

// jobAdopter holds claimed jobs in slots their caller holds for them (the
// pool): adopt for the caller's goroutine to run next, run in a goroutine
// of its own.
type jobAdopter interface {
	jobRunner
	adopt(l broker.Lease) *active
}

// ackerParams is what the acker uses.
type ackerParams struct {
	concurrency int // Config.Concurrency: at most that many successes wait
	broker      ackBroker
	claims      fusedClaims // the dispatcher
	held        *heldJobs   // its gate: no fused call once Shutdown is past the handlers
	slots       *slots      // the slots a lost claim held, freed
	jobs        jobAdopter
}

func newAcker(parent context.Context, params ackerParams) *acker {
	return &acker{loop: loopUnder(parent), ackerParams: params,
		reqs: make(chan *ackReq, params.concurrency), sending: make(chan struct{}, 1)}
}

func (k *acker) start() { k.run(k.batches) }

// ack settles a's job as done, and waits for the answer. When no ack call
// is in flight it sends its own at once, from the handler's goroutine, with
// the claim of the next job for a's slot, which that goroutine then runs
// (a.next): at concurrency 1 a job's ack and the next claim go to Redis
// and back with no hop to another goroutine. Else it goes through the
// acker, in the batch that forms while the call in flight is out. The
// acker may have passed a's slot to a job it claimed meanwhile (a.passed).
// A handler that Shutdown abandoned may get here after the acker has
// exited: it gets errHalted, not a wait that never ends. The acker runs
// under the pool's halt, so its context's end is halt.
func (k *acker) ack(a *active) (broker.Outcome, error) {
	select {
	case <-k.ctx.Done():
		return broker.Stale, errHalted
	default:
	}
	r := &ackReq{a: a, slot: !a.passed.Load()}
	select {
	case k.sending <- struct{}{}:
		return k.direct(r)
	default:
	}
	r.out = make(chan ackResult, 1)
	select {
	case k.reqs <- r:
	case <-k.ctx.Done():
		return broker.Stale, errHalted
	}
	select {
	case res := <-r.out:
		return res.outcome, res.err
	case <-k.done:
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

// direct sends r's ack as a batch of one, holding sending, and adopts
// into r's slot the job it claims, for the caller's goroutine to run next.
func (k *acker) direct(r *ackReq) (broker.Outcome, error) {
	defer func() { <-k.sending }()
	batch := [1]*ackReq{r}
	acks := [1]broker.Ack{{Lease: r.a.lease, Result: r.a.job.Result()}}
	outcomes, err := k.send(batch[:], acks[:], func(leases []broker.Lease) {
		if len(leases) > 0 { // at most one: the claim was for r's slot alone
			r.a.passed.Store(true)
			r.a.next = k.jobs.adopt(leases[0])
			for _, l := range leases[1:] {
				k.jobs.run(l)
			}
		}
	})
	if err != nil {
		return broker.Stale, err
	}
	return outcomes[0], nil
}

// batches is the loop: one batch of acks, perhaps with a claim, per round
// trip.
func (k *acker) batches() {
	batch := make([]*ackReq, 0, maxAckBatch)
	acks := make([]broker.Ack, 0, maxAckBatch)
	for {
		select {
		case r := <-k.reqs:
			batch = append(batch[:0], r)
		case <-k.ctx.Done():
			return
		}
		// Wait for the call in flight (a handler's own), while the batch
		// grows.
		k.sending <- struct{}{}
	collect:
		for len(batch) < maxAckBatch {
			select {
			case r := <-k.reqs:
				batch = append(batch, r)
			default:
				break collect
			}
		}
		acks = acks[:0]
		for _, r := range batch {
			acks = append(acks, broker.Ack{Lease: r.a.lease, Result: r.a.job.Result()})
		}
		outcomes, err := k.send(batch, acks, func(leases []broker.Lease) { k.pass(batch, leases) })
		<-k.sending
		for i, r := range batch {
			if err != nil {
				r.out <- ackResult{err: err}
			} else {
				r.out <- ackResult{outcome: outcomes[i]}
			}
		}
	}
}

// send sends a batch's acks, with a claim for the slots it frees
// (fusedClaim), and gives what the claim took to pass. When the call fails
// the claim may have run: its leases are asked for under its id, in the
// slots it was for (recoverClaim), while the caller goes on.
func (k *acker) send(batch []*ackReq, acks []broker.Ack, pass func([]broker.Lease)) ([]broker.Outcome, error) {
	spec := k.fusedClaim(batch)
	if spec.N > 0 && !k.held.fusedBegin() {
		spec = broker.ClaimSpec{}
	}
	// Settlements run on Background, not the acker's context: a handler's
	// result is sent also while the pool stops, and halt ends its retries.
	if spec.N == 0 {
		return k.broker.AckMany(context.Background(), acks)
	}
	defer k.held.fused.Done()
	sent := time.Now()
	fa, err := k.broker.FusedAck(context.Background(), acks, spec)
	outcomes, claimed := fa.Outcomes, fa.Claim
	if err != nil {
		k.recovering.Add(1)
		go k.recoverClaim(spec, sent, hold(batch))
		return nil, err
	}
	k.claims.took(spec, claimed)
	pass(claimed.Leases)
	return outcomes, nil
}

// fusedClaim is the claim to send with a batch of acks: one job for each
// slot the batch can pass on (see dispatcher.claimSpec).
func (k *acker) fusedClaim(batch []*ackReq) broker.ClaimSpec {
	n := 0
	for _, r := range batch {
		if r.slot {
			n++
		}
	}
	return k.claims.claimSpec(n)
}

// hold takes the slots of the batch's acked jobs that can pass theirs on,
// for a claim whose answer is still to come; it answers how many.
func hold(batch []*ackReq) int {
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
func (k *acker) recoverClaim(spec broker.ClaimSpec, sent time.Time, slots int) {
	defer k.recovering.Done()
	claimed := k.claims.reask(spec, sent)
	for _, l := range claimed.Leases {
		k.jobs.run(l)
		slots--
	}
	for ; slots > 0; slots-- {
		k.slots.free()
	}
}

// pass starts each claimed job in the slot of one acked job, which keeps
// it (a.passed) instead of freeing it.
func (k *acker) pass(batch []*ackReq, leases []broker.Lease) {
	i := 0
	for _, r := range batch {
		if i == len(leases) {
			return
		}
		if r.slot {
			r.a.passed.Store(true)
			k.jobs.run(leases[i])
			i++
		}
	}
}
