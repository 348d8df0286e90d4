package worker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// claimBroker is what the dispatcher asks of broker.Leases: claims, and
// waiting for work when nothing is ready.
type claimBroker interface {
	ClaimRequest(ctx context.Context, requestID, queue string, n int, lease time.Duration) (broker.ClaimResult, error)
	WaitForWork(ctx context.Context, queues []string, limit time.Duration) (string, error)
}

// jobRunner runs a claimed job in a slot its caller holds for it (the
// pool's run).
type jobRunner interface {
	run(l broker.Lease)
}

// dispatcherParams is what the dispatcher uses.
type dispatcherParams struct {
	log            *slog.Logger
	queues         []Queue // Config.Queues
	strictPriority bool
	pollInterval   time.Duration
	lease          time.Duration
	broker         claimBroker
	slots          *slots
	jobs           jobRunner
	// abort ends the asking again for a lost claim's answer (Shutdown's
	// ctx).
	abort  <-chan struct{}
	health *redisHealth // where a claim that Redis did not answer is reported
}

// dispatcher is the service that fills the pool's free slots: it claims as
// many jobs as there are free slots, and blocks on the queues' wake-up keys
// when nothing is ready. It also decides which queue a claim goes to, for
// its own claims and for those sent with settlements (fusedClaims).
type dispatcher struct {
	loop
	dispatcherParams
	wakeFrom []string                // the queues it waits on (broker.WaitForWork); dispatcher goroutine only
	drained  map[string]*atomic.Bool // per queue: its last claim found too little ready
}

func newDispatcher(parent context.Context, params dispatcherParams) *dispatcher {
	d := &dispatcher{loop: loopUnder(parent), dispatcherParams: params, drained: map[string]*atomic.Bool{}}
	for _, q := range params.queues {
		d.wakeFrom = append(d.wakeFrom, q.Name)
		d.drained[q.Name] = &atomic.Bool{}
	}
	return d
}

func (d *dispatcher) start() { d.run(d.dispatch) }

// dispatch is the loop: claim into free slots, and block on the queues'
// wake-up keys when nothing is ready.
func (d *dispatcher) dispatch() {
	claimErrors := newThrottle(10 * time.Second)
	delay := 10 * time.Millisecond
	for !d.stopping() {
		free := d.slots.idle()
		if free == 0 {
			d.waitSlot(d.pollInterval)
			continue
		}
		claimed, nextDue, err := d.claim(free)
		if err != nil {
			switch {
			case broker.IsTransient(err):
				d.health.failed("claim", err)
			case claimErrors.ok():
				d.log.Warn("fenceq could not claim jobs; retrying", slog.Any("error", err), slog.Duration("retry_in", delay))
			}
			sleep(delay, d.ctx.Done())
			delay = min(delay*2, d.pollInterval)
			continue
		}
		d.health.answered()
		delay = 10 * time.Millisecond
		if claimed > 0 {
			continue
		}
		wait := d.pollInterval
		if nextDue >= 0 {
			wait = min(wait, nextDue)
		}
		d.waitWork(wait)
	}
}

// claim fills up to free slots from the pool's queues, in one round trip
// per queue it has to try. It answers how many jobs it started and how soon
// a scheduled job falls due (-1: none).
func (d *dispatcher) claim(free int) (claimed int, nextDue time.Duration, err error) {
	nextDue = -1
	for _, q := range d.order() {
		res, err := d.claimQueue(q, free-claimed)
		if err != nil {
			return claimed, nextDue, err
		}
		logProblems(d.log, q, "claim", res.Problems)
		for _, l := range res.Leases {
			d.slots.take()
			d.jobs.run(l)
		}
		claimed += len(res.Leases)
		if res.NextDue >= 0 && (nextDue < 0 || res.NextDue < nextDue) {
			nextDue = res.NextDue
		}
		if claimed == free {
			break
		}
	}
	return claimed, nextDue, nil
}

// claimQueue claims up to n jobs of queue, under a request id of its own.
func (d *dispatcher) claimQueue(queue string, n int) (broker.ClaimResult, error) {
	res, err := d.claimRequest(broker.NewRequestID(), queue, n, time.Now())
	d.claimedFrom(queue, n, res)
	return res, err
}

// claimRequest sends claim request req (first sent at first, perhaps with
// a settlement) for up to n jobs of queue. When the answer does not come
// back (a timeout, a dropped connection), Redis may have run the claim: it
// asks again under the same request id, which answers the leases the first
// took, for as long as Redis keeps them (a lease) — also while the pool
// shuts down, which then releases what comes back. A lost reply so costs no
// job an attempt (invariant 9). Only Shutdown's own deadline (abort) ends
// the asking sooner; the reaper then recovers the jobs. The claim runs on
// context.Background(), not the dispatcher's context: stopping the
// dispatcher must not leave a claim's answer unknown.
func (d *dispatcher) claimRequest(req, queue string, n int, first time.Time) (broker.ClaimResult, error) {
	delay := 10 * time.Millisecond
	for {
		res, err := d.broker.ClaimRequest(context.Background(), req, queue, n, d.lease)
		left := d.lease - time.Since(first)
		if err == nil || !broker.IsTransient(err) || left < 10*time.Millisecond {
			return res, err
		}
		t := time.NewTimer(min(delay, left/2)) // the last tries fall inside the lease
		select {
		case <-t.C:
		case <-d.abort:
			t.Stop()
			d.log.Warn("fenceq pool stopped before a lost claim's answer came back; the reaper recovers its jobs when their lease expires",
				slog.String("queue", queue), slog.String("request", req), slog.Any("error", err))
			return res, err
		}
		delay = min(delay*2, time.Second)
	}
}

// claimedFrom notes whether a claim of n from queue found it drained (it
// took fewer: nothing ready, paused, or held back by its limits). No
// settlement carries a claim to a drained queue; a claim that
// takes a job, or a wake-up, makes it worth asking again.
func (d *dispatcher) claimedFrom(queue string, n int, res broker.ClaimResult) {
	if dr := d.drained[queue]; dr != nil {
		dr.Store(len(res.Leases) < n)
	}
}

// claimSpec is the claim of n jobs for a fused call, for the slots
// it frees: from the queue the dispatcher would try first this round (its
// order: weights or strict priority), unless that queue was found drained.
// Then it claims nothing, and the freed slots go to the dispatcher, which
// tries every queue in order: a later queue's backlog never keeps a first
// one's new jobs waiting. Nothing once the dispatcher stops claiming.
func (d *dispatcher) claimSpec(n int) broker.ClaimSpec {
	if n == 0 || d.stopping() {
		return broker.ClaimSpec{}
	}
	q := d.first()
	if d.drained[q].Load() {
		return broker.ClaimSpec{}
	}
	return broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: q, N: n, Lease: d.lease}
}

// took notes what the claim of a fused call answered: its problems
// logged, its queue's drained flag.
func (d *dispatcher) took(spec broker.ClaimSpec, claimed broker.ClaimResult) {
	logProblems(d.log, spec.Queue, "claim", claimed.Problems)
	d.claimedFrom(spec.Queue, spec.N, claimed)
}

// first is the queue order would put first this round.
func (d *dispatcher) first() string {
	if len(d.queues) == 1 || d.strictPriority {
		return d.queues[0].Name
	}
	return d.order()[0]
}

// order is the order to try the queues in this round: as configured under
// strict priority, else a weighted random permutation.
func (d *dispatcher) order() []string {
	qs := d.queues
	out := make([]string, 0, len(qs))
	if d.strictPriority || len(qs) == 1 {
		for _, q := range qs {
			out = append(out, q.Name)
		}
		return out
	}
	left := append([]Queue(nil), qs...)
	for len(left) > 0 {
		total := 0
		for _, q := range left {
			total += q.Weight
		}
		n := rand.IntN(total)
		for i, q := range left {
			if n < q.Weight {
				out = append(out, q.Name)
				left = append(left[:i], left[i+1:]...)
				break
			}
			n -= q.Weight
		}
	}
	return out
}

// waitWork blocks until an enqueue (or a release, or a reap) pushes a
// wake-up token into one of the queues' wake keys, or dur passes.
func (d *dispatcher) waitWork(dur time.Duration) {
	end := time.Now().Add(dur)
	for !d.stopping() {
		left := time.Until(end)
		if left < time.Millisecond {
			return
		}
		woken, err := d.broker.WaitForWork(d.ctx, d.wakeFrom, left)
		switch {
		case woken != "":
			for _, dr := range d.drained {
				dr.Store(false) // new work somewhere
			}
			return
		case err == nil:
		case errors.Is(err, broker.ErrCrossSlot) && len(d.wakeFrom) > 1:
			// A Redis Cluster cannot block on keys of several slots at once:
			// wake on the first queue only and poll the others.
			d.log.Info("fenceq: queues are on different cluster slots; blocking on the first queue's wake-up only, polling the rest", slog.String("queue", d.queues[0].Name))
			d.wakeFrom = d.wakeFrom[:1]
		default:
			sleep(min(left, 100*time.Millisecond), d.ctx.Done()) // Redis unreachable: do not spin
			return
		}
	}
}

// waitSlot blocks until a handler finishes, the dispatcher stops, or dur
// passes.
func (d *dispatcher) waitSlot(dur time.Duration) {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-d.slots.freed:
	case <-d.ctx.Done():
	case <-t.C:
	}
}

// reask asks again, under its id, for the claim of a fused call whose
// answer was lost (claimRequest), and answers what it took.
func (d *dispatcher) reask(spec broker.ClaimSpec, sent time.Time) broker.ClaimResult {
	claimed, err := d.claimRequest(spec.RequestID, spec.Queue, spec.N, sent)
	if err != nil {
		d.log.Warn("fenceq could not learn what the claim of a fused call took; the reaper recovers its jobs when their lease expires",
			slog.String("queue", spec.Queue), slog.Any("error", err))
	}
	d.took(spec, claimed)
	return claimed
}
