package worker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// dispatch is the pool's loop: reap when due, claim into free slots, and
// block on the queues' wake-up keys when nothing is ready.
func (p *Pool) dispatch() {
	defer close(p.dispatchDone)
	var nextReap time.Time
	claimErrors := newThrottle(10 * time.Second)
	delay := 10 * time.Millisecond
	for !p.stopping() {
		// The loop head: the reaper runs here, on its own schedule, whatever
		// the pool is doing, so ready work cannot starve recovery.
		if !time.Now().Before(nextReap) {
			nextReap = time.Now().Add(p.cfg.reapInterval())
			if p.reap() {
				nextReap = time.Now() // a full batch: more may be waiting
			}
		}
		// Retention keeps pace with the pool's own settlements, not only
		// with the reaper's clock: a busy pool finishes tens of thousands
		// of jobs between two reaps, which the index would hold past its
		// bound until then.
		if n := p.stats.finished(); n-p.trimMark.Load() >= int64(p.cfg.ReapBatch) || p.trimBehind {
			p.trimMark.Store(n)
			p.trimBehind = false
			for _, q := range p.cfg.Queues {
				p.trimBehind = p.trim(q.Name) || p.trimBehind
			}
		}
		free := cap(p.slots) - len(p.slots)
		if free == 0 {
			p.waitSlot(time.Until(nextReap))
			continue
		}
		claimed, nextDue, err := p.claim(free)
		if err != nil {
			if claimErrors.ok() {
				p.log.Warn("fenceq could not claim jobs; retrying", slog.Any("error", err), slog.Duration("retry_in", delay))
			}
			p.sleep(delay, p.stop)
			delay = min(delay*2, p.cfg.PollInterval)
			continue
		}
		delay = 10 * time.Millisecond
		if claimed > 0 {
			continue
		}
		wait := min(p.cfg.PollInterval, time.Until(nextReap))
		if nextDue >= 0 {
			wait = min(wait, nextDue)
		}
		p.waitWork(wait)
	}
}

func (p *Pool) stopping() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

// claim fills up to free slots from the pool's queues, in one round trip
// per queue it has to try. It answers how many jobs it started and how soon
// a scheduled job falls due (-1: none).
func (p *Pool) claim(free int) (claimed int, nextDue time.Duration, err error) {
	nextDue = -1
	for _, q := range p.order() {
		res, err := p.claimQueue(q, free-claimed)
		if err != nil {
			return claimed, nextDue, err
		}
		p.logProblems(q, "claim", res.Problems)
		for _, l := range res.Leases {
			p.start(l)
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
func (p *Pool) claimQueue(queue string, n int) (broker.ClaimResult, error) {
	res, err := p.claimRequest(broker.NewRequestID(), queue, n, time.Now())
	p.claimedFrom(queue, n, res)
	return res, err
}

// claimRequest sends claim request req (first sent at first, perhaps with
// acks) for up to n jobs of queue. When the answer does not come back (a
// timeout, a dropped connection), Redis may have run the claim: it asks
// again under the same request id, which answers the leases the first took,
// for as long as Redis keeps them (a lease) — also while the pool shuts
// down, which then releases what comes back. A lost reply so costs no job
// an attempt (invariant 9). Only Shutdown's own deadline (claimAbort) ends
// the asking sooner; the reaper then recovers the jobs.
func (p *Pool) claimRequest(req, queue string, n int, first time.Time) (broker.ClaimResult, error) {
	delay := 10 * time.Millisecond
	for {
		res, err := p.b.ClaimRequest(context.Background(), req, queue, n, p.cfg.LeaseDuration)
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
func (p *Pool) claimedFrom(queue string, n int, res broker.ClaimResult) {
	if d := p.drained[queue]; d != nil {
		d.Store(len(res.Leases) < n)
	}
}

// first is the queue order would put first this round.
func (p *Pool) first() string {
	if len(p.cfg.Queues) == 1 || p.cfg.StrictPriority {
		return p.cfg.Queues[0].Name
	}
	return p.order()[0]
}

// order is the order to try the queues in this round: as configured under
// strict priority, else a weighted random permutation.
func (p *Pool) order() []string {
	qs := p.cfg.Queues
	out := make([]string, 0, len(qs))
	if p.cfg.StrictPriority || len(qs) == 1 {
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
func (p *Pool) waitWork(d time.Duration) {
	end := time.Now().Add(d)
	for !p.stopping() {
		left := time.Until(end)
		if left < time.Millisecond {
			return
		}
		woken, err := p.b.WaitForWork(context.Background(), p.wakeFrom, left)
		switch {
		case woken != "":
			for _, d := range p.drained {
				d.Store(false) // new work somewhere
			}
			return
		case err == nil:
		case errors.Is(err, broker.ErrCrossSlot) && len(p.wakeFrom) > 1:
			// A Redis Cluster cannot block on keys of several slots at once:
			// wake on the first queue only and poll the others.
			p.log.Info("fenceq: queues are on different cluster slots; blocking on the first queue's wake-up only, polling the rest", slog.String("queue", p.cfg.Queues[0].Name))
			p.wakeFrom = p.wakeFrom[:1]
		default:
			p.sleep(min(left, 100*time.Millisecond), p.stop) // Redis unreachable: do not spin
			return
		}
	}
}

// waitSlot blocks until a handler finishes, a trim is due, the pool
// stops, or d passes.
func (p *Pool) waitSlot(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.slotFreed:
	case <-p.trimDue:
	case <-p.stop:
	case <-t.C:
	}
}

// reap recovers expired leases of every queue, one bounded batch each,
// settles a bounded step of the dependents of finished jobs, and trims
// finished jobs past their retention. It reports whether a batch was full
// or dependents are left, so more may be waiting.
func (p *Pool) reap() (more bool) {
	for _, q := range p.cfg.Queues {
		res, err := p.b.Reap(context.Background(), q.Name, p.cfg.ReapBatch)
		if err != nil {
			p.log.Warn("fenceq could not reap expired leases", slog.String("queue", q.Name), slog.Any("error", err))
			continue
		}
		p.logProblems(q.Name, "reap", res.Problems)
		for _, r := range res.Reaped {
			p.stats.reaped.Add(1)
			p.log.Warn("fenceq recovered a job whose lease expired (its worker is gone or stalled)",
				slog.String("queue", q.Name), slog.String("id", r.ID), slog.String("now", string(r.State)), slog.Int64("generation", r.Generation))
		}
		more = more || len(res.Reaped) == p.cfg.ReapBatch || res.CascadeLeft
		// Retention is upkeep of the same kind: bounded, on the same clock.
		more = p.trim(q.Name) || more
	}
	return more
}

// trimStepsMax bounds how far a trim's batch grows while retention is
// behind, in ReapBatches: 1,000 jobs by default, a few milliseconds of
// Redis (invariant 8).
const trimStepsMax = 10

// trim deletes one batch of queue's finished jobs past retention, and
// reports whether the batch was full. Jobs finish as fast as the pool runs
// them, which can be far more than one ReapBatch per dispatch round: a full
// batch doubles the next (up to trimStepsMax ReapBatches), so trimming
// catches up with any rate the pool reaches, and one that was not full
// falls back to ReapBatch.
func (p *Pool) trim(queue string) (full bool) {
	step := max(p.trimStep[queue], p.cfg.ReapBatch)
	trimmed, err := p.b.Trim(context.Background(), queue, p.cfg.trimRetention(), step)
	if err != nil {
		p.log.Warn("fenceq could not trim finished jobs", slog.String("queue", queue), slog.Any("error", err))
		return false
	}
	full = trimmed == step
	p.trimStep[queue] = p.cfg.ReapBatch
	if full {
		p.trimStep[queue] = min(2*step, trimStepsMax*p.cfg.ReapBatch)
	}
	return full
}

func (p *Pool) logProblems(queue, op string, problems []broker.CorruptJobError) {
	for _, c := range problems {
		p.log.Error("fenceq found a job whose index and hash disagree; repaired", slog.String("queue", queue),
			slog.String("op", op), slog.String("id", c.ID), slog.String("problem", c.Reason))
	}
}
