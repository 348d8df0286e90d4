package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/middleware"
)

// errNotRenewed is logged when the watchdog finds a lease past its deadline.
var errNotRenewed = errors.New("no renewal reached Redis before the lease's deadline")

// run runs a claimed job in a slot its caller holds for it: one the
// dispatcher took, or one a finished job passed on (the acker's fused
// claim), in a goroutine of its own. A claim that lands after Shutdown began is given straight
// back.
func (p *Pool) run(l broker.Lease) {
	if a := p.adopt(l); a != nil {
		go p.execute(a)
	}
}

// adopt makes a claimed job one the pool holds, in a slot its caller holds
// for it, and answers it for execute to run; nil when Shutdown is past
// waiting for handlers: the job was then given straight back and its slot
// freed.
func (p *Pool) adopt(l broker.Lease) *active {
	p.stats.claimed.Add(1)
	ctx, cancel := context.WithCancelCause(p.sig.jobs)
	var span trace.Span
	if p.tracer != nil {
		ctx, span = p.startAttempt(ctx, l)
	}
	a := &active{lease: l, ctx: ctx, cancel: cancel, span: span, localDeadline: l.LocalDeadline}
	a.job = handlers.NewJob(handlers.JobSpec{Row: l.Row, Progress: p.progress(a)})
	// The watchdog cancels the handler at its local deadline even while a
	// renew is stuck in Redis (go-redis may not honour context deadlines).
	a.mu.Lock()
	a.expiry = time.AfterFunc(time.Until(l.LocalDeadline), func() { expire(a, errNotRenewed, p.log, &p.stats) })
	a.mu.Unlock()
	if !p.held.add(a) {
		// Shutdown is past waiting for handlers: give the job straight back.
		p.settleAs(a, outcomeNotRun, nil)
		a.expiry.Stop()
		a.cancel(context.Canceled)
		p.slots.free()
		return nil
	}
	return a
}

// execute runs the handler of a job adopt answered, and settles it; then,
// in the same goroutine, the job its settlement claimed into its slot
// (a.next: an ack sent by the handler's own goroutine, see acker.ack), and
// so on. A job that comes after the dispatcher stopped is given back unrun.
func (p *Pool) execute(a *active) {
	for a != nil {
		if p.dispatcher.stopping() {
			p.finishWith(a, func() { p.settleAs(a, outcomeNotRun, nil) })
		} else {
			p.finishWith(a, func() {
				err := p.handler.ProcessJob(handlers.WithJob(a.ctx, a.job), a.job)
				p.settle(a, err)
			})
		}
		a = a.next
	}
}

// giveBack releases a job the pool claimed and will not run, as it stops
// (outcomeNotRun).
// Like a lost claim's answer, the release is sent until Redis answers —
// also once Shutdown has halted the pool's other retries — for up to the
// lease, or until Shutdown's deadline (abort): a job that never ran
// is not left running under nobody, for a reaper to charge an attempt.
func (p *Pool) giveBack(a *active) {
	delay := 10 * time.Millisecond
	for {
		// Background on purpose: the give-back runs as the pool stops, and
		// its own loop bounds it (the lease, abort).
		s, err := p.b.Leases().Release(context.Background(), a.lease)
		o, st := s.Outcome, s.State
		left := time.Until(a.deadline())
		if err == nil || !broker.IsTransient(err) || left < 10*time.Millisecond {
			attrs := middleware.JobAttrs(a.job)
			switch {
			case err != nil:
				p.log.Error("fenceq could not give back a job it claimed while stopping; its lease will expire and a reaper will recover it",
					attrs, slog.Any("error", err))
			case o == broker.Stale:
				p.stats.stale.Add(1)
			default:
				p.count(outcomeNotRun, st)
				p.log.Debug("fenceq gave back a job it claimed while stopping", attrs, slog.String("state", string(st)))
			}
			return
		}
		t := time.NewTimer(min(delay, left/2))
		select {
		case <-t.C:
		case <-p.sig.abort.Done():
			t.Stop()
			p.log.Warn("fenceq stopped before a job it claimed while stopping was given back; the reaper recovers it when its lease expires",
				middleware.JobAttrs(a.job), slog.Any("error", err))
			return
		}
		delay = min(delay*2, time.Second)
	}
}

// finishWith runs fn, then frees a's slot, unless a passed it on to the
// next job.
func (p *Pool) finishWith(a *active, fn func()) {
	defer func() {
		a.expiry.Stop()
		a.cancel(context.Canceled)
		if !a.passed.Load() {
			p.slots.free()
		}
		p.held.done(a)
	}()
	fn()
}

// progress is a job's fenced Progress call.
func (p *Pool) progress(a *active) func(context.Context, []byte) error {
	return func(ctx context.Context, data []byte) error {
		o, err := p.b.Leases().Progress(ctx, a.lease, data)
		if err != nil {
			return fmt.Errorf("fenceq: report progress: %w", err)
		}
		if o == broker.Stale {
			if a.span != nil && !gone(a) {
				a.span.AddEvent(eventLeaseLost)
			}
			a.cancel(handlers.ErrLeaseLost)
			return handlers.ErrLeaseLost
		}
		return nil
	}
}
