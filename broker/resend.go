package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A request whose reply is lost after Redis ran it (a read timeout while
// the server was busy, a connection reset) leaves its caller not knowing
// what happened. Every operation of invariant 9 is safe to send again, so
// the broker sends it again itself, unchanged (a claim under its request
// id, an enqueue under its job id and nonce, a retry under its nonce),
// until an answer comes back: the first send's answer, since a re-send
// changes nothing. Only when none comes within a bound does its caller
// see an error, an *OutcomeUnknownError.
const (
	// ResendHorizon bounds how late any copy of a request reaches Redis
	// after its first send: the broker starts no re-send later. Redis keeps
	// what a re-send needs for at least that long: retention (Trim) deletes
	// no job that finished within the horizon, so a re-send of the ack that
	// settled it, or of the enqueue that stored it, still finds it and
	// answers what the first send did; and a claim that took nothing keeps
	// its empty answer for min(lease, horizon). A caller that sends the
	// same request again itself later than this (the pool asking for its
	// claim's leases, for up to the lease) still gets its answer while the
	// job is there. It holds when the client's own retries of one send
	// (go-redis MaxRetries × its read timeout) end within it too. It is
	// scripts/lua/lib.lua's RESEND_HORIZON_MS.
	ResendHorizon = 5 * time.Second

	// resendSends bounds how many times in all one request is sent, and
	// resendWindow when the last re-send may start: this long after the
	// first send's reply was lost, and never after ResendHorizon from the
	// first send. A client whose read timeout is long
	// (go-redis's default is 3 s, and it may retry a timeout itself) so
	// waits about twice its own bound, not five times.
	resendSends  = 5
	resendWindow = time.Second
	// The first re-send goes at once: the lost send's own timeout has
	// already waited. resendBackoff is the pause before the second; it
	// doubles up to resendBackoffMax, so the re-sends span about 0.2 s of
	// pauses plus the sends' own timeouts.
	resendBackoff    = 25 * time.Millisecond
	resendBackoffMax = 200 * time.Millisecond
)

// OutcomeUnknownError is the error of a request that Redis may have run,
// whose reply the broker could not read however many times it sent it
// (within its bound and the caller's context): Redis unreachable or busy
// for longer. It wraps ErrOutcomeUnknown and the last send's error (so
// IsTransient holds for it). The request is still safe to send again:
// RequestID names what to ask for.
type OutcomeUnknownError struct {
	Op    string // the operation: "claim", "enqueue", "ack", "fail and claim", "retry", ...
	Queue string
	// RequestID names the request to ask about: for a claim (Claim,
	// ClaimRequest, and the claim of FusedAck, FusedFail, FusedSnooze),
	// its request id, which ClaimRequest answers with the leases it took;
	// for an enqueue, the job's id, which Job looks up and an Enqueue
	// with that ID recognises (a *DuplicateError then means it was
	// stored). "" for the others, which the same call sent again answers.
	RequestID string
	Sends     int   // how many times it was sent
	Err       error // the last send's error
}

func (e *OutcomeUnknownError) Error() string {
	var what string
	switch {
	case e.Op == "claim" || strings.HasSuffix(e.Op, " and claim"):
		what = fmt.Sprintf("; ask again with ClaimRequest under request id %q: it answers the leases the claim took", e.RequestID)
	case e.Op == "enqueue" && e.RequestID != "":
		what = fmt.Sprintf("; enqueue it again with ID %q (a DuplicateError then means it was stored), never under a new id", e.RequestID)
	default:
		what = "; the same call sent again answers what Redis did"
	}
	return fmt.Sprintf("fenceq: %s in queue %q: %v after %d sends%s: %v", e.Op, e.Queue, ErrOutcomeUnknown, e.Sends, what, e.Err)
}

func (e *OutcomeUnknownError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.Err} }

// replyLost reports whether err leaves a request's outcome unknown: the
// request may have reached Redis and run, and its reply was not read. That
// is every transient error (IsTransient) and a context that ended
// meanwhile: a timeout or a reset connection plainly, but also a refused
// dial, an exhausted pool or a LOADING reply, since the client may have
// sent the request before (go-redis retries a lost reply itself,
// MaxRetries) and answers only its last attempt's error. Only a refusal
// retrying cannot fix (an error reply such as a script error or NOPERM)
// means that nothing ran — unless an earlier send's reply was lost.
func replyLost(err error) bool {
	return err != nil && (IsTransient(err) || errors.Is(err, context.Canceled) || errors.Is(err, net.ErrClosed))
}

// resending sends n requests with send (the ones at the positions it is
// given; all of them first) and sends again, unchanged, each whose reply
// was lost (replyLost), with a short backoff, within ctx, up to
// resendSends times in all, within resendWindow and ResendHorizon. errOf(i) is request
// i's error after its last send. A request whose re-send fails for a
// reason of its own (Redis unreachable for now, or a refusal) keeps its
// unknown outcome. For each request whose outcome stays unknown,
// unknown(i, sends, err) sets its error. It is the broker's one re-send mechanism: every operation that
// invariant 9 makes safe to send again goes through it, and a request
// answered at its first send costs nothing more.
func resending(ctx context.Context, n int, send func(idx []int), errOf func(i int) error, unknown func(i, sends int, err error)) {
	done := ctx.Err() != nil // then nothing goes out: each answers ctx's error
	first := time.Now()
	send(allOf(n))
	if done {
		return
	}
	var lost []int
	for i := range n {
		if replyLost(errOf(i)) {
			lost = append(lost, i)
		}
	}
	delay, until := time.Duration(0), time.Now().Add(resendWindow)
	if horizon := first.Add(ResendHorizon); horizon.Before(until) {
		until = horizon
	}
	for sends := 1; len(lost) > 0; sends++ {
		if sends == resendSends || time.Now().Add(delay).After(until) || !pause(ctx, delay) {
			for _, i := range lost {
				unknown(i, sends, errOf(i))
			}
			return
		}
		delay = min(max(2*delay, resendBackoff), resendBackoffMax)
		send(lost)
		still := lost[:0]
		for _, i := range lost {
			switch err := errOf(i); {
			case err == nil:
			case replyLost(err):
				still = append(still, i)
			default:
				unknown(i, sends+1, err)
			}
		}
		lost = still
	}
}

// allOfSmall backs allOf's answer for small batches: resending's callers
// only read it.
var allOfSmall = func() (a [64]int) {
	for i := range a {
		a[i] = i
	}
	return a
}()

func allOf(n int) []int {
	if n <= len(allOfSmall) {
		return allOfSmall[:n:n]
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// pause waits d, or answers false when ctx ends first.
func pause(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// eval runs the script calls, one round trip for all of them: in one
// pipeline (evalAll), or, alone, a single call (runScript). It sends again those whose reply was lost (resending), the same
// way. A call whose outcome stays unknown answers an *OutcomeUnknownError.
func (b *core) eval(ctx context.Context, calls []*scriptCall, alone bool) {
	resending(ctx, len(calls),
		func(idx []int) {
			now := time.Now()
			if alone && len(idx) == 1 {
				c := calls[idx[0]]
				c.sent = now
				c.cmd = b.runScript(ctx, c.script, c.keys, c.args)
				return
			}
			some := calls // the first send: all of them
			if len(idx) < len(calls) {
				some = make([]*scriptCall, len(idx))
				for n, i := range idx {
					some[n] = calls[i]
				}
			}
			for _, c := range some {
				c.sent = now
			}
			b.evalAll(ctx, some)
		},
		func(i int) error { return calls[i].cmd.Err() },
		func(i, sends int, err error) {
			c := calls[i]
			c.cmd.SetErr(&OutcomeUnknownError{Op: c.op, Queue: c.queueName, RequestID: c.request, Sends: sends, Err: err})
		})
}

// runResend runs one script call for queue k as op (request: what an
// *OutcomeUnknownError names to ask about), sent again while its reply is
// lost (eval). The call's sent is when the send that answered went out.
func (b *core) runResend(ctx context.Context, op, request string, s *script, k *queueKeys, args ...any) *scriptCall {
	c := newScriptCall(s, k, args)
	c.op, c.request = op, request
	b.eval(ctx, []*scriptCall{c}, true)
	return c
}

// sadd adds member to the set at key, sent again while its reply is lost
// (an SADD is idempotent). When no reply comes back, its error is the last
// send's: the operation it prepares has not been sent.
func (b *core) sadd(ctx context.Context, key, member string) error {
	var cmd *redis.IntCmd
	resending(ctx, 1, func([]int) { cmd = b.rdb.SAdd(ctx, key, member) },
		func(int) error { return cmd.Err() }, func(int, int, error) {})
	return cmd.Err()
}
