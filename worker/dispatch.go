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

// dispatcher is the service that fills the pool's free slots: it claims as
// many jobs as there are free slots, and blocks on the queues' wake-up keys
// when nothing is ready. It also decides which queue a claim goes to, for
// its own claims and for those the acker sends with acks.
type dispatcher struct {
	loop
	p        *Pool
	wakeFrom []string                // the queues it waits on (broker.WaitForWork); dispatcher goroutine only
	drained  map[string]*atomic.Bool // per queue: its last claim found too little ready
}

func newDispatcher(p *Pool) *dispatcher {
	d := &dispatcher{loop: newLoop(), p: p, drained: map[string]*atomic.Bool{}}
	for _, q := range p.cfg.Queues {
		d.wakeFrom = append(d.wakeFrom, q.Name)
		d.drained[q.Name] = &atomic.Bool{}
	}
	return d
}

func (d *dispatcher) start() { d.run(d.dispatch) }

// dispatch is the loop: claim into free slots, and block on the queues'
// wake-up keys when nothing is ready.
func (d *dispatcher) dispatch() {
	p := d.p
	claimErrors := newThrottle(10 * time.Second)
	delay := 10 * time.Millisecond
	for !d.stopping() {
		free := cap(p.slots) - len(p.slots)
		if free == 0 {
			d.waitSlot(p.cfg.PollInterval)
			continue
		}
		claimed, nextDue, err := d.claim(free)
		if err != nil {
			if claimErrors.ok() {
				p.log.Warn("fenceq could not claim jobs; retrying", slog.Any("error", err), slog.Duration("retry_in", delay))
			}
			p.sleep(delay, d.ctx.Done())
			delay = min(delay*2, p.cfg.PollInterval)
			continue
		}
		delay = 10 * time.Millisecond
		if claimed > 0 {
			continue
		}
		wait := p.cfg.PollInterval
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
		d.p.logProblems(q, "claim", res.Problems)
		for _, l := range res.Leases {
			d.p.start(l)
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
	res, err := d.p.claimRequest(broker.NewRequestID(), queue, n, time.Now())
	d.claimedFrom(queue, n, res)
	return res, err
}

// claimRequest sends claim request req (first sent at first, perhaps with
// a settlement) for up to n jobs of queue. When the answer does not come
// back (a timeout, a dropped connection), Redis may have run the claim: it
// asks again under the same request id, which answers the leases the first
// took, for as long as Redis keeps them (a lease) — also while the pool
// shuts down, which then releases what comes back. A lost reply so costs no
// job an attempt (invariant 9). Only Shutdown's own deadline (claimAbort)
// ends the asking sooner; the reaper then recovers the jobs.
func (p *Pool) claimRequest(req, queue string, n int, first time.Time) (broker.ClaimResult, error) {
	delay := 10 * time.Millisecond
	for {
		res, err := p.b.Leases().ClaimRequest(context.Background(), req, queue, n, p.cfg.LeaseDuration)
		left := p.cfg.LeaseDuration - time.Since(first)
		if err == nil || !broker.IsTransient(err) || left < 10*time.Millisecond {
			return res, err
		}
		t := time.NewTimer(min(delay, left/2)) // the last tries fall inside the lease
		select {
		case <-t.C:
		case <-p.claimAbort:
			t.Stop()
			p.log.Warn("fenceq pool stopped before a lost claim's answer came back; the reaper recovers its jobs when their lease expires",
				slog.String("queue", queue), slog.String("request", req), slog.Any("error", err))
			return res, err
		}
		delay = min(delay*2, time.Second)
	}
}

// claimedFrom notes whether a claim of n from queue found it drained (it
// took fewer: nothing ready, paused, or held back by its limits). The
// acker sends no claim with its acks to a drained queue; a claim that
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
	return broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: q, N: n, Lease: d.p.cfg.LeaseDuration}
}

// took notes what the claim of a fused call answered: its problems
// logged, its queue's drained flag.
func (d *dispatcher) took(spec broker.ClaimSpec, claimed broker.ClaimResult) {
	d.p.logProblems(spec.Queue, "claim", claimed.Problems)
	d.claimedFrom(spec.Queue, spec.N, claimed)
}

// first is the queue order would put first this round.
func (d *dispatcher) first() string {
	cfg := &d.p.cfg
	if len(cfg.Queues) == 1 || cfg.StrictPriority {
		return cfg.Queues[0].Name
	}
	return d.order()[0]
}

// order is the order to try the queues in this round: as configured under
// strict priority, else a weighted random permutation.
func (d *dispatcher) order() []string {
	cfg := &d.p.cfg
	qs := cfg.Queues
	out := make([]string, 0, len(qs))
	if cfg.StrictPriority || len(qs) == 1 {
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
// wake-up token into one of the queues' wake keys, or d passes.
func (d *dispatcher) waitWork(dur time.Duration) {
	p := d.p
	end := time.Now().Add(dur)
	for !d.stopping() {
		left := time.Until(end)
		if left < time.Millisecond {
			return
		}
		woken, err := p.b.Leases().WaitForWork(d.ctx, d.wakeFrom, left)
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
			p.log.Info("fenceq: queues are on different cluster slots; blocking on the first queue's wake-up only, polling the rest", slog.String("queue", p.cfg.Queues[0].Name))
			d.wakeFrom = d.wakeFrom[:1]
		default:
			p.sleep(min(left, 100*time.Millisecond), d.ctx.Done()) // Redis unreachable: do not spin
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
	case <-d.p.slotFreed:
	case <-d.ctx.Done():
	case <-t.C:
	}
}
