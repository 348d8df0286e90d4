package broker

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"
)

// maxErrorBytes bounds the last_error a failure stores; a longer text (a
// deep stack, a huge response body) is cut, with a note saying so.
const maxErrorBytes = 32 << 10

// Failure describes a failed attempt.
type Failure struct {
	// Error is stored as the job's last_error (at most 32 KiB are kept).
	Error string
	// Backoff is how long to wait before the retry; 0 retries at once.
	Backoff time.Duration
	// Dead ends the job now, whatever attempts remain (a permanent error).
	Dead bool
}

// Ack settles a lease as done and stores result. It answers Stale, changing
// nothing, when the claim is no longer valid.
func (b *Leases) Ack(ctx context.Context, l Lease, result []byte) (Outcome, error) {
	if err := validID(l.Queue, l.ID); err != nil {
		return Stale, err
	}
	os, err := b.AckMany(ctx, []Ack{{Lease: l, Result: result}})
	if err != nil {
		return Stale, err
	}
	return os[0], nil
}

// Ack is one success for AckMany.
type Ack struct {
	Lease  Lease  // the claim settled
	Result []byte // stored as the job's result
}

// AckMany settles many leases as done, each with its result: one script
// call per queue, all in one pipeline. It answers, in order, OK or Stale for
// each (as Ack does). It follows the batch rule of the package doc: on an
// error it answers no outcomes, and the caller should try again (an ack is
// idempotent for its claim).
func (b *Leases) AckMany(ctx context.Context, acks []Ack) ([]Outcome, error) {
	out, _, err := b.fusedAck(ctx, acks, ClaimSpec{})
	return out, err
}

// ClaimSpec is a claim that FusedAck makes after its acks.
type ClaimSpec struct {
	RequestID string        // from NewRequestID; the same when the call is sent again
	Queue     string        // the queue to claim from
	N         int           // at most this many jobs; 0 claims nothing
	Lease     time.Duration // the claimed leases' duration
}

// FusedAck settles acks as AckMany does and, in the same round trip, claims
// up to c.N jobs of c.Queue under c.RequestID as ClaimRequest does: a pool
// that finishes a job and runs the next pays one round trip for both. The
// acks come first (a dependent they release can be claimed at once), and
// the claim in the same script call as the acks of its queue. Every ack
// keeps its guard and the claim its limits.
//
// A call whose reply is lost is sent again by the broker itself. On an
// error (the batch rule of the package doc) neither part's outcome is
// known, and both are safe to send again: the acks with AckMany (or
// FusedAck), the claim with ClaimRequest (or FusedAck) under the same
// request id, which answers the leases this call took if it ran, so a
// lost reply costs no job an attempt.
func (b *Leases) FusedAck(ctx context.Context, acks []Ack, c ClaimSpec) (FusedAcks, error) {
	if err := validClaim(c.RequestID, c.Queue, c.N, c.Lease); err != nil {
		return FusedAcks{}, err
	}
	out, res, err := b.fusedAck(ctx, acks, c)
	return FusedAcks{out, res}, err
}

// FusedAcks is how a FusedAck call ended: each ack's outcome, in the acks'
// order, and the claim made after them.
type FusedAcks struct {
	Outcomes []Outcome
	Claim    ClaimResult
}

// args are the arguments a settling script takes for the claim after it
// (ack.lua's and fail.lua's: n, lease_ms, promote_limit, request id,
// cascade budget); n = 0 claims nothing.
func (c ClaimSpec) args() []any {
	if c.N <= 0 {
		return []any{0, 0, 0, "", 0}
	}
	return []any{c.N, c.Lease.Milliseconds(), promoteLimit, c.RequestID, cascadeBudget}
}

func (b *core) fusedAck(ctx context.Context, acks []Ack, c ClaimSpec) ([]Outcome, ClaimResult, error) {
	out := make([]Outcome, len(acks))
	res := ClaimResult{NextDue: -1}
	calls, err := b.byQueue(len(acks), func(i int) string { return acks[i].Lease.Queue },
		func(args []any, i int) []any {
			l := &acks[i].Lease
			return append(args, l.ID, l.Generation, l.token, acks[i].Result)
		})
	if err != nil {
		return nil, res, err
	}
	var claiming *queueCall // the call that claims, when one does
	if c.N > 0 {
		for _, call := range calls {
			if call.k.name == c.Queue {
				claiming = call
			}
		}
		if claiming == nil {
			claiming = &queueCall{k: b.queueKeys(c.Queue)}
			calls = append(calls, claiming)
		}
	}
	if len(calls) == 0 {
		return out, res, nil
	}
	b.pipeline(ctx, "ack", b.scripts.ack, calls, func(call *queueCall) []any {
		if call == claiming {
			return c.args()
		}
		return ClaimSpec{}.args()
	}, func(call *queueCall) (string, string) {
		if call == claiming {
			return "ack and claim", c.RequestID
		}
		return "ack", ""
	})
	for _, call := range calls {
		r := call.reply
		for _, pos := range call.idx {
			switch s := r.status(); s {
			case statusOK:
				out[pos] = OK
			case statusStale:
				out[pos] = Stale
			default:
				r.unexpected(s)
			}
		}
		if call == claiming {
			if v := r.next(); r.err == nil {
				if res, err = readClaim(newQueueReply("claim", c.Queue, v, nil), c.Queue, c.Lease, call.sent); err != nil {
					return nil, ClaimResult{}, err
				}
			}
		}
		if r.err != nil {
			return nil, ClaimResult{}, r.err
		}
	}
	return out, res, nil
}

// Settled is how a settlement ended: Outcome is OK, or Stale when the claim
// was no longer valid (then State is empty), and State is what the job became.
type Settled struct {
	Outcome Outcome
	State   State
}

// Fused is how a fused call ended: its settlement, and the claim made in
// the same script call.
type Fused struct {
	Settled
	Claim ClaimResult
}

// Progress stores a progress report for a running job (any bytes; a JSON
// object is a good choice). It answers Stale, changing nothing, when the
// claim is no longer valid.
func (b *Leases) Progress(ctx context.Context, l Lease, progress []byte) (Outcome, error) {
	o, _, err := b.settle(ctx, "progress", b.scripts.progress, l, progress)
	return o, err
}

// Fail settles a lease as failed. The job is scheduled for a retry after
// f.Backoff (pending at once when it is 0), or dead when f.Dead is set or
// its attempts are spent, or cancelled when its cancellation was requested.
// It answers the job's new state, or Stale when the claim is no longer valid.
func (b *Leases) Fail(ctx context.Context, l Lease, f Failure) (Settled, error) {
	o, st, _, err := b.fail(ctx, l, f, ClaimSpec{})
	return Settled{o, st}, err
}

// FusedFail is Fail, then a claim of c in the same script call, as
// FusedAck is for acks (and safe to send again the same way).
func (b *Leases) FusedFail(ctx context.Context, l Lease, f Failure, c ClaimSpec) (Fused, error) {
	if err := validClaim(c.RequestID, c.Queue, c.N, c.Lease); err != nil {
		return Fused{Settled: Settled{Outcome: Stale}}, err
	}
	o, st, res, err := b.fail(ctx, l, f, c)
	return Fused{Settled{o, st}, res}, err
}

func (b *core) fail(ctx context.Context, l Lease, f Failure, c ClaimSpec) (Outcome, State, ClaimResult, error) {
	if f.Backoff < 0 {
		return Stale, "", ClaimResult{}, &ValidationError{Field: "backoff", Value: f.Backoff.String(), Reason: "must not be negative"}
	}
	msg := f.Error
	if len(msg) > maxErrorBytes {
		msg = msg[:maxErrorBytes] + fmt.Sprintf("\n[cut: %d bytes in all]", len(f.Error))
	}
	mode := "retry"
	if f.Dead {
		mode = "dead"
	}
	return b.failScript(ctx, l, mode, msg, f.Backoff, c)
}

// Snooze gives a running job back to run again after d, without charging
// the attempt: the handler was not ready, nothing failed. It answers the
// job's new state (scheduled, pending when d is 0, or cancelled when its
// cancellation was requested), or Stale when the claim is no longer valid.
func (b *Leases) Snooze(ctx context.Context, l Lease, d time.Duration) (Settled, error) {
	o, st, _, err := b.snooze(ctx, l, d, ClaimSpec{})
	return Settled{o, st}, err
}

// FusedSnooze is Snooze, then a claim of c in the same script call, as
// FusedAck is for acks (and safe to send again the same way).
func (b *Leases) FusedSnooze(ctx context.Context, l Lease, d time.Duration, c ClaimSpec) (Fused, error) {
	if err := validClaim(c.RequestID, c.Queue, c.N, c.Lease); err != nil {
		return Fused{Settled: Settled{Outcome: Stale}}, err
	}
	o, st, res, err := b.snooze(ctx, l, d, c)
	return Fused{Settled{o, st}, res}, err
}

func (b *core) snooze(ctx context.Context, l Lease, d time.Duration, c ClaimSpec) (Outcome, State, ClaimResult, error) {
	if d < 0 {
		return Stale, "", ClaimResult{}, &ValidationError{Field: "snooze duration", Value: d.String(), Reason: "must not be negative"}
	}
	return b.failScript(ctx, l, "snooze", "", d, c)
}

// Unhandled says how [Leases.GiveBack] gives back a job whose kind the
// worker has no handler for.
type Unhandled struct {
	// Error is stored as the job's last error when the give-back makes it
	// dead; it should name the kind and say what to do.
	Error string
	// Delay is the shortest wait, at least 1ms, and MaxDelay the longest:
	// each give-back waits three times as long as the job has waited so
	// far, between the two, so that the time it has waited quadruples:
	// Delay, 3×, 12×, 48× Delay, … up to MaxDelay.
	Delay, MaxDelay time.Duration
	// For is how long a job may wait for a handler: the first give-back
	// after that makes it dead (with 0, the first give-back does).
	// Negative: it waits for ever.
	For time.Duration
}

// GiveBack gives back a running job whose kind the worker has no handler
// for, to wait for one that has, without charging the attempt. Its wait
// starts with the first of an unbroken run of such give-backs, whichever
// workers sent them (another settlement, a reap, a force release or an
// operator's retry between two give-backs starts a new one); each waits
// three times as long as the job has waited so far, between u.Delay and
// u.MaxDelay. Its claim's start no longer counts against the queue's rate
// limit (Inspector.SetLimits): the job did not run. The give-back after u.For makes the job
// dead with u.Error, a failed attempt. It answers the job's new state
// (scheduled, dead, or cancelled when its cancellation was requested), or
// Stale when the claim is no longer valid; a re-send after a lost reply
// answers the same (invariant 9).
func (b *Leases) GiveBack(ctx context.Context, l Lease, u Unhandled) (Settled, error) {
	switch {
	case u.Delay < time.Millisecond:
		return Settled{Outcome: Stale}, &ValidationError{Field: "unhandled delay", Value: u.Delay.String(), Reason: "must be at least 1ms, or the job is claimed again at once"}
	case u.MaxDelay < u.Delay:
		return Settled{Outcome: Stale}, &ValidationError{Field: "unhandled max delay", Value: u.MaxDelay.String(), Reason: "must be at least the delay, " + u.Delay.String()}
	}
	limit := int64(-1)
	if u.For >= 0 {
		limit = u.For.Milliseconds()
	}
	msg := u.Error
	if len(msg) > maxErrorBytes {
		msg = msg[:maxErrorBytes]
	}
	o, st, _, err := b.failScript(ctx, l, "unhandled", msg, u.Delay, ClaimSpec{}, u.MaxDelay.Milliseconds(), limit)
	return Settled{o, st}, err
}

// failScript runs fail.lua in mode, with a claim of c after it when c.N > 0;
// extra are the arguments after the claim's.
func (b *core) failScript(ctx context.Context, l Lease, mode, msg string, after time.Duration, c ClaimSpec, extra ...any) (Outcome, State, ClaimResult, error) {
	res := ClaimResult{NextDue: -1}
	if err := validID(l.Queue, l.ID); err != nil {
		return Stale, "", res, err
	}
	if c.N > 0 && c.Queue != l.Queue {
		// One script call touches one queue's keys (one Cluster slot).
		return Stale, "", res, &ValidationError{Field: "claim queue", Value: c.Queue, Reason: "must be the failed job's queue, " + l.Queue}
	}
	args := append(append([]any{l.ID, strconv.FormatInt(l.Generation, 10), l.token, mode, msg, after.Milliseconds()}, c.args()...), extra...)
	op, req := mode, ""
	if c.N > 0 {
		op, req = mode+" and claim", c.RequestID
	}
	call := b.runResend(ctx, op, req, b.scripts.fail, b.queueKeys(l.Queue), args...)
	v, err := call.cmd.Result()
	if err != nil {
		return Stale, "", res, fmt.Errorf("fenceq: %s job %q in queue %q: %w", mode, l.ID, l.Queue, err)
	}
	r := newQueueReply(mode, l.Queue, v, nil)
	o, st := r.settled()
	if c.N > 0 {
		if cv := r.next(); r.err == nil {
			res, err = readClaim(newQueueReply("claim", l.Queue, cv, nil), l.Queue, c.Lease, call.sent)
		}
	}
	if err = cmp.Or(r.err, err); err != nil {
		return Stale, "", ClaimResult{}, err
	}
	return o, st, res, nil
}

// Release gives a lease back, as a worker shutting down does: the job is
// pending again at once (or cancelled, when that was requested), its
// attempt is not charged, and its generation moves on so this claim is dead.
// It answers Stale, changing nothing, when the claim is no longer valid.
func (b *Leases) Release(ctx context.Context, l Lease) (Settled, error) {
	o, st, err := b.settle(ctx, "release", b.scripts.release, l)
	return Settled{o, st}, err
}

// settle runs one guarded script that takes (id, gen, token) first and
// answers {status, the job's state after the call}.
func (b *core) settle(ctx context.Context, op string, script *script, l Lease, extra ...any) (Outcome, State, error) {
	if err := validID(l.Queue, l.ID); err != nil {
		return Stale, "", err
	}
	k := b.queueKeys(l.Queue)
	args := append([]any{l.ID, strconv.FormatInt(l.Generation, 10), l.token}, extra...)
	v, err := b.runResend(ctx, op, "", script, k, args...).cmd.Result()
	if err != nil {
		return Stale, "", fmt.Errorf("fenceq: %s job %q in queue %q: %w", op, l.ID, l.Queue, err)
	}
	r := newQueueReply(op, l.Queue, v, nil)
	o, st := r.settled()
	if r.err != nil {
		return Stale, "", r.err
	}
	return o, st, nil
}
