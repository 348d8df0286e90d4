package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/middleware"
)

// errNotRenewed is logged when the watchdog finds a lease past its deadline.
var errNotRenewed = errors.New("no renewal reached Redis before the lease's deadline")

// start runs a claimed job in a slot of its own.
func (p *Pool) start(l broker.Lease) {
	p.slots <- struct{}{}
	p.run(l)
}

// run runs a claimed job in a slot its caller holds for it: one start took,
// or one a finished job passed on (the acker's fused claim). A claim that
// lands after Shutdown began is given straight back.
func (p *Pool) run(l broker.Lease) {
	p.stats.claimed.Add(1)
	ctx, cancel := context.WithCancelCause(p.jobsCtx)
	a := &active{lease: l, ctx: ctx, cancel: cancel, localDeadline: l.LocalDeadline}
	a.job = handlers.NewJob(handlers.JobSpec{
		ID: l.ID, Queue: l.Queue, Kind: l.Kind, Payload: l.Payload,
		Attempt: l.Attempt, MaxAttempts: l.MaxAttempts, Generation: l.Generation,
		Progress: p.progress(a),
	})
	// The watchdog cancels the handler at its local deadline even while a
	// renew is stuck in Redis (go-redis may not honour context deadlines).
	a.mu.Lock()
	a.expiry = time.AfterFunc(time.Until(l.LocalDeadline), func() { p.expire(a, errNotRenewed) })
	a.mu.Unlock()
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.active[a] = struct{}{}
		p.handlers.Add(1)
	}
	p.mu.Unlock()
	if closed {
		// Shutdown is past waiting for handlers: give the job straight back.
		p.giveBack(a)
		a.expiry.Stop()
		a.cancel(context.Canceled)
		<-p.slots
		return
	}
	if p.stopping() {
		go p.finishWith(a, func() { p.giveBack(a) })
		return
	}
	go p.finishWith(a, func() {
		err := p.handler.ProcessJob(handlers.WithJob(ctx, a.job), a.job)
		p.settle(a, err, "")
	})
}

// freeSlot gives a slot back and nudges the dispatcher.
func (p *Pool) freeSlot() {
	<-p.slots
	select {
	case p.slotFreed <- struct{}{}:
	default:
	}
}

// giveBack releases a job the pool claimed and will not run, as it stops.
// Like a lost claim's answer, the release is sent until Redis answers —
// also once Shutdown has halted the pool's other retries — for up to the
// lease, or until Shutdown's deadline (claimAbort): a job that never ran
// is not left running under nobody, for a reaper to charge an attempt.
func (p *Pool) giveBack(a *active) {
	delay := 10 * time.Millisecond
	for {
		o, st, err := p.b.Release(context.Background(), a.lease)
		left := time.Until(a.deadline())
		if err == nil || !transient(err) || left < 10*time.Millisecond {
			attrs := middleware.JobAttrs(a.job)
			switch {
			case err != nil:
				p.log.Error("fenceq could not give back a job it claimed while stopping; its lease will expire and a reaper will recover it",
					attrs, slog.Any("error", err))
			case o == broker.Stale:
				p.stats.stale.Add(1)
			default:
				p.count("release", st)
				p.log.Debug("fenceq gave back a job it claimed while stopping", attrs, slog.String("state", string(st)))
			}
			return
		}
		t := time.NewTimer(min(delay, left/2))
		select {
		case <-t.C:
		case <-p.claimAbort:
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
		p.mu.Lock()
		delete(p.active, a)
		p.mu.Unlock()
		if !a.passed.Load() {
			p.freeSlot()
		}
		p.handlers.Done()
	}()
	fn()
}

// progress is a job's fenced Progress call.
func (p *Pool) progress(a *active) func(context.Context, []byte) error {
	return func(ctx context.Context, data []byte) error {
		o, err := p.b.Progress(ctx, a.lease, data)
		if err != nil {
			return fmt.Errorf("fenceq: report progress: %w", err)
		}
		if o == broker.Stale {
			a.cancel(handlers.ErrLeaseLost)
			return handlers.ErrLeaseLost
		}
		return nil
	}
}

// settle stores what the handler returned, unless its lease was lost, in
// which case the result would be stale anyway. op forces an operation.
func (p *Pool) settle(a *active, herr error, op string) {
	a.settling.Store(true)
	cause := context.Cause(a.ctx)
	attrs := middleware.JobAttrs(a.job)
	if errors.Is(cause, handlers.ErrLeaseLost) {
		p.log.Warn("fenceq discarded the result of a handler whose lease was lost", attrs, slog.Any("handler_error", herr))
		return
	}
	var snooze *handlers.SnoozeError
	var permanent *handlers.PermanentError
	var call func(context.Context) (broker.Outcome, broker.State, error)
	switch {
	case op == "release", herr != nil && (errors.Is(cause, handlers.ErrShutdown) || errors.Is(cause, handlers.ErrLeaseExpired)):
		// Interrupted by us, not failed: give it back uncharged.
		op, call = "release", func(ctx context.Context) (broker.Outcome, broker.State, error) { return p.b.Release(ctx, a.lease) }
	case herr == nil:
		op, call = "ack", func(context.Context) (broker.Outcome, broker.State, error) {
			o, err := p.ack(a) // batched with other successes
			return o, broker.StateDone, err
		}
	case errors.As(herr, &snooze):
		op, call = "snooze", func(ctx context.Context) (broker.Outcome, broker.State, error) {
			return p.settleThen(a, func() (broker.Outcome, broker.State, error) { return p.b.Snooze(ctx, a.lease, snooze.Delay) },
				func(c broker.ClaimSpec) (broker.Outcome, broker.State, broker.ClaimResult, error) {
					return p.b.SnoozeClaim(ctx, a.lease, snooze.Delay, c)
				})
		}
	default:
		f := broker.Failure{Error: herr.Error(), Dead: errors.As(herr, &permanent)}
		if !f.Dead {
			f.Backoff = p.cfg.backoff(a.lease.Kind, a.lease.Attempt)
		}
		op, call = "fail", func(ctx context.Context) (broker.Outcome, broker.State, error) {
			return p.settleThen(a, func() (broker.Outcome, broker.State, error) { return p.b.Fail(ctx, a.lease, f) },
				func(c broker.ClaimSpec) (broker.Outcome, broker.State, broker.ClaimResult, error) {
					return p.b.FailClaim(ctx, a.lease, f, c)
				})
		}
	}

	var outcome broker.Outcome
	var state broker.State
	err := p.retry(op, attrs, func(ctx context.Context) (err error) {
		outcome, state, err = call(ctx)
		return err
	})
	switch {
	case err != nil:
		p.log.Error("fenceq could not settle a job; its lease will expire and a reaper will recover it",
			attrs, slog.String("op", op), slog.Any("error", err))
	case outcome == broker.Stale:
		p.stats.stale.Add(1)
		p.log.Warn("fenceq stale settlement rejected: the job was taken over while its handler ran; nothing was stored",
			attrs, slog.String("op", op))
	default:
		p.count(op, state)
		level := slog.LevelDebug
		if op == "fail" {
			level = slog.LevelWarn
		}
		p.log.LogAttrs(context.Background(), level, "fenceq settled a job", attrs,
			slog.String("op", op), slog.String("state", string(state)), slog.Any("error", herr))
	}
}
