package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/middleware"
)

// outcome is what one run of a handler came to. outcomeOf decides it, in
// one place, from what the handler returned and why its context ended;
// settleAs maps it, in one place, to what the pool asks of Redis.
type outcome uint8

const (
	// outcomeDone: the handler returned nil. Acked, in a batch (acker).
	outcomeDone outcome = iota + 1
	// outcomeRetry: the handler returned an error. Failed: scheduled again
	// after a backoff, or dead when its attempts are spent. A job whose
	// cancel was requested (handlers.ErrJobCancelled) comes here too: the
	// fail script finds its cancel flag and settles it cancelled.
	outcomeRetry
	// outcomeDead: the handler returned a permanent error. Failed for good.
	outcomeDead
	// outcomeSnooze: the handler returned a snooze. Scheduled again after
	// its delay.
	outcomeSnooze
	// outcomeInterrupted: the pool cancelled the handler — Shutdown
	// (handlers.ErrShutdown) or the lease's local deadline
	// (handlers.ErrLeaseExpired) — and it returned an error: interrupted by
	// us, not failed. Released: pending again, no attempt charged.
	outcomeInterrupted
	// outcomeLeaseLost: another claim replaced the lease while the handler
	// ran. Nothing is sent: the result would be stale anyway.
	outcomeLeaseLost
	// outcomeNotRun: claimed as the pool stopped, and never run. Given back
	// (released, uncharged).
	outcomeNotRun
	// outcomeUnhandled: the handler has no handler for the job's kind
	// (handlers.NoHandler: an UnknownKindError naming it, and no Mux ran a
	// handler for it). Given back uncharged to wait
	// for a pool that has the kind (broker.GiveBack), or dead once it has
	// waited Config.UnknownKind.For.
	outcomeUnhandled
)

// String is the operation the outcome settles with, as the logs name it.
func (o outcome) String() string {
	switch o {
	case outcomeDone:
		return "ack"
	case outcomeRetry, outcomeDead:
		return "fail"
	case outcomeSnooze:
		return "snooze"
	case outcomeInterrupted, outcomeNotRun:
		return "release"
	case outcomeLeaseLost:
		return "discard"
	case outcomeUnhandled:
		return "give back"
	}
	return "unknown"
}

// outcomeOf is what a handler's run came to: herr is what it returned for
// job, cause why its context was cancelled (nil while it was not). A lost
// lease overrides everything; a handler the pool interrupted that returned
// anyway with success is acked. An UnknownKindError is a give-back only
// when handlers.NoHandler says no handler was there for the job: one for
// another kind (a handler's own routing), or from a handler a Mux ran, is
// an error like any other.
func outcomeOf(herr, cause error, job *handlers.Job) outcome {
	switch {
	case errors.Is(cause, handlers.ErrLeaseLost):
		return outcomeLeaseLost
	case herr != nil && (errors.Is(cause, handlers.ErrShutdown) || errors.Is(cause, handlers.ErrLeaseExpired)):
		return outcomeInterrupted
	case herr == nil:
		return outcomeDone
	}
	return failedOutcome(herr, job)
}

// failedOutcome is outcomeOf for a handler that returned herr. Apart, so
// that the targets errors.As fills (which live on the heap) are made only
// for a failure, not for every success.
func failedOutcome(herr error, job *handlers.Job) outcome {
	var snooze *handlers.SnoozeError
	var permanent *handlers.PermanentError
	switch {
	case handlers.NoHandler(job, herr):
		return outcomeUnhandled
	case errors.As(herr, &snooze):
		return outcomeSnooze
	case errors.As(herr, &permanent):
		return outcomeDead
	default:
		return outcomeRetry
	}
}

// settle stores what a's handler returned (herr), unless its lease was
// lost, in which case the result would be stale anyway.
func (p *Pool) settle(a *active, herr error) {
	// Set before the cause is read: from here a renew that finds the lease
	// gone leaves the handler's context alone, and the settlement reports
	// for itself whether it was stale.
	a.settling.Store(true)
	p.settleAs(a, outcomeOf(herr, context.Cause(a.ctx), a.job), herr)
}

// settleAs sends the broker call that settles a's job with outcome o,
// retrying transient errors, and logs and counts what came of it. herr is
// what the handler returned (nil for outcomeNotRun).
func (p *Pool) settleAs(a *active, o outcome, herr error) {
	// The job's attributes are built only for a line that is logged: a
	// success logs at debug, which is usually off.
	attrs := func() slog.Attr { return middleware.JobAttrs(a.job) }
	var call func(context.Context) (broker.Settled, error)
	switch o {
	case outcomeLeaseLost:
		p.log.Warn("fenceq discarded the result of a handler whose lease was lost", attrs(), slog.Any("handler_error", herr))
		if a.span != nil {
			endAttempt(a.span, o, herr, broker.OK, "", nil)
		}
		return
	case outcomeNotRun:
		p.giveBack(a) // retried on a schedule of its own
		if a.span != nil {
			endAttempt(a.span, o, herr, broker.OK, "", nil)
		}
		return
	case outcomeInterrupted:
		call = func(ctx context.Context) (broker.Settled, error) {
			return p.b.Leases().Release(ctx, a.lease)
		}
	case outcomeDone:
		call = func(context.Context) (broker.Settled, error) {
			o, err := p.acker.ack(a) // batched with other successes
			return broker.Settled{Outcome: o, State: broker.StateDone}, err
		}
	case outcomeSnooze:
		delay := snoozeDelay(herr)
		call = func(ctx context.Context) (broker.Settled, error) {
			return p.fusedSettle(a, func() (broker.Settled, error) { return p.b.Leases().Snooze(ctx, a.lease, delay) },
				func(c broker.ClaimSpec) (broker.Fused, error) {
					return p.b.Leases().FusedSnooze(ctx, a.lease, delay, c)
				})
		}
	case outcomeUnhandled:
		u := p.cfg.unhandled(a.lease)
		call = func(ctx context.Context) (broker.Settled, error) {
			return p.b.Leases().GiveBack(ctx, a.lease, u)
		}
	case outcomeRetry, outcomeDead:
		f := broker.Failure{Error: herr.Error(), Dead: o == outcomeDead}
		if !f.Dead {
			f.Backoff = p.cfg.backoff(a.lease.Kind, a.lease.Attempt)
		}
		call = func(ctx context.Context) (broker.Settled, error) {
			return p.fusedSettle(a, func() (broker.Settled, error) { return p.b.Leases().Fail(ctx, a.lease, f) },
				func(c broker.ClaimSpec) (broker.Fused, error) {
					return p.b.Leases().FusedFail(ctx, a.lease, f, c)
				})
		}
	}

	var settled broker.Settled
	err := p.retries.retry(o.String(), attrs, func(ctx context.Context) (err error) {
		settled, err = call(ctx)
		return err
	})
	res, state := settled.Outcome, settled.State
	if a.span != nil { // the answer is known: for an ack, the acker's batch has just been answered
		endAttempt(a.span, o, herr, res, state, err)
	}
	switch {
	case err != nil:
		p.log.Error("fenceq could not settle a job; its lease will expire and a reaper will recover it",
			attrs(), slog.String("op", o.String()), slog.Any("error", err))
	case res == broker.Stale:
		p.stats.stale.Add(1)
		p.log.Warn("fenceq stale settlement rejected: the job was taken over while its handler ran; nothing was stored",
			attrs(), slog.String("op", o.String()))
	case o == outcomeUnhandled && state == broker.StateScheduled:
		p.count(o, state)
		p.log.Debug("fenceq gave back a job its handler has no handler for", attrs())
		if held, ok := p.unknownKinds.ok(a.lease.Kind); ok {
			p.log.Warn("fenceq has no handler for a job's kind: it gave the job back, uncharged, to wait for a pool that has the kind; deploy one, or stop enqueueing the kind",
				slog.String("kind", a.lease.Kind), slog.String("queue", a.lease.Queue), slog.String("id", a.lease.ID),
				slog.Int("more_given_back", held), slog.String("dead_after", deadAfter(p.cfg.UnknownKind.For)))
		}
	default:
		p.count(o, state)
		level := slog.LevelDebug
		if o == outcomeRetry || o == outcomeDead || o == outcomeUnhandled {
			level = slog.LevelWarn
		}
		if ctx := context.Background(); p.log.Enabled(ctx, level) {
			p.log.LogAttrs(ctx, level, "fenceq settled a job", attrs(),
				slog.String("op", o.String()), slog.String("state", string(state)), slog.Any("error", herr))
		}
	}
}

// deadAfter is UnknownKind.For as the warning shows it.
func deadAfter(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return d.String()
}

// snoozeDelay is how long a snoozing handler asked to wait.
func snoozeDelay(herr error) time.Duration {
	var snooze *handlers.SnoozeError
	if errors.As(herr, &snooze) {
		return snooze.Delay
	}
	return 0
}

// fusedSettle runs a failure's settlement with a claim for a's slot after
// it (fused), when the slot can be passed on to a job of a's queue, and
// adopts the job it took in that slot, for a's goroutine to run next
// (a.next); else the settlement alone (plain).
// When the fused call fails the claim is asked for again under its id,
// as the acker does.
func (p *Pool) fusedSettle(a *active, plain func() (broker.Settled, error),
	fused func(broker.ClaimSpec) (broker.Fused, error)) (broker.Settled, error) {
	spec := broker.ClaimSpec{}
	if !a.passed.Load() {
		spec = p.dispatcher.claimSpec(1)
	}
	if spec.N == 0 || spec.Queue != a.lease.Queue || !p.held.fusedBegin() {
		return plain()
	}
	defer p.held.fused.Done()
	sent := time.Now()
	f, err := fused(spec)
	claimed := f.Claim
	if err != nil {
		claimed = p.dispatcher.reask(spec, sent)
	} else {
		p.dispatcher.took(spec, claimed)
	}
	for i, l := range claimed.Leases {
		a.passed.Store(true)
		if i == 0 && a.next == nil {
			a.next = p.adopt(l) // run next by this goroutine (execute)
		} else {
			p.run(l)
		}
	}
	return f.Settled, err
}
