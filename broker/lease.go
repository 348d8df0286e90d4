package broker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/fenceq/fenceq/jobrow"
)

// Lease is one claim on one job: the right to run it, renew it and settle it
// for as long as the claim is valid (see the package doc, invariant 1).
// Its [jobrow.Row] (l.ID, l.Kind, l.Attempt …) is the job as claimed:
// Attempt counts this claim, and Generation
// with ID is the fencing token to hand to external systems (a later claim
// of the same job always carries a larger generation). Metadata is the
// job's Job.Metadata as enqueued, in a map of each Lease's own: changing it
// changes nothing stored.
type Lease struct {
	jobrow.Row
	// token is this claim's capability: whoever holds it may renew and
	// settle the job. Only the broker reads it; ClaimID names the claim
	// without giving it away.
	token string
	// Deadline is when the lease expires on the Redis server's clock. It is
	// for display: do not compare it with the local clock.
	Deadline time.Time
	// LocalDeadline is the local time before which the lease is certainly
	// still held: the moment the claim (or last renew) was sent, plus the
	// lease duration, on this process's monotonic clock.
	LocalDeadline time.Time
}

// ClaimID names this claim without handing out its capability: a short
// one-way fingerprint of its token, the same as JobInfo.ClaimID while the
// claim is valid. Two leases are the same claim iff their ClaimIDs are
// equal.
func (l Lease) ClaimID() string { return claimID(l.token) }

// claimID fingerprints a claim token; "" for none.
func claimID(token string) string {
	if token == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// ClaimResult is what Claim took.
type ClaimResult struct {
	Leases []Lease // the jobs claimed, at most the n asked for; none when nothing is ready
	// NextDue is how long until the earliest scheduled job is due (0 when
	// one is due now), or -1 when none is scheduled. A worker that found
	// nothing can block at most this long.
	NextDue time.Duration
	// Problems lists index entries that disagreed with their job hash. They
	// were repaired (refiled, or marked dead with the reason), or, for a
	// job whose metadata field does not decode, the job was handed out
	// without its metadata: a worker should log them; nothing is lost.
	Problems []CorruptJobError
}

// Claim promotes due scheduled jobs and claims up to n ready jobs of queue,
// highest priority first and FIFO within a priority, each with a lease of
// the given duration. It is one round trip. It is ClaimRequest under a
// request id of its own: a claim whose reply is lost is sent again under
// it, and when no reply comes back, the *OutcomeUnknownError names it.
func (b *Leases) Claim(ctx context.Context, queue string, n int, lease time.Duration) (ClaimResult, error) {
	return b.ClaimRequest(ctx, NewRequestID(), queue, n, lease)
}

// ClaimRequest is Claim under a request id of the caller's (see
// NewRequestID). Sent again with the same id within the lease duration —
// after a timeout or a dropped connection, when the caller cannot know
// whether Redis ran the first — it answers the leases the first took (those
// still held) and claims nothing more, so a lost reply costs no job an
// attempt (invariant 9). A request that took nothing leaves that answer
// too, so a first send that reaches Redis after its re-send takes nothing.
// Each id must serve one request.
//
// The broker sends it again itself while its reply is lost (a timeout, a
// connection reset), a few times within ctx; when no reply comes back, the
// error is an *OutcomeUnknownError (errors.Is ErrOutcomeUnknown) naming
// the request id: ask again under it once Redis answers.
func (b *Leases) ClaimRequest(ctx context.Context, requestID, queue string, n int, lease time.Duration) (ClaimResult, error) {
	if err := validClaim(requestID, queue, n, lease); err != nil {
		return ClaimResult{}, err
	}
	c := b.runResend(ctx, "claim", requestID, b.scripts.claim, b.queueKeys(queue), lease.Milliseconds(), n, promoteLimit, requestID, cascadeBudget)
	v, err := c.cmd.Result()
	return readClaim(newQueueReply("claim", queue, v, err), queue, lease, c.sent)
}

// readClaim reads take.lua's reply for a claim of the given lease duration
// sent at sent (the send that answered, when it was sent again: Redis ran
// it after that, with the lease's remainder the reply says).
func readClaim(r *reply, queue string, lease time.Duration, sent time.Time) (ClaimResult, error) {
	now := r.int() // Redis time
	res := ClaimResult{NextDue: -1}
	if due := r.int(); due >= 0 {
		res.NextDue = time.Duration(due) * time.Millisecond
	}
	count := int(r.int())
	if count > 0 {
		res.Leases = make([]Lease, 0, count)
	}
	for i := 0; i < count && r.err == nil; i++ {
		// Each job's values are at the positions claimReplyFields names.
		e := r.entry(claimReplyWidth)
		var l Lease
		l.Queue = queue
		l.ID = e.str(claimReplyID)
		l.Kind = e.str(claimReplyKind)
		l.Payload = []byte(e.str(claimReplyPayload))
		l.Attempt = int(e.int(claimReplyAttempt))
		l.MaxAttempts = int(e.int(claimReplyMaxAttempts))
		l.Generation = e.int(claimReplyGen)
		l.token = e.str(claimReplyToken)
		l.Group = e.str(claimReplyGroup)
		until, meta := e.int(claimReplyLeaseUntil), e.str(claimReplyMeta)
		if m, err := decodeMetadata(meta); err != nil {
			// take.lua's bad_meta makes a job whose meta it cannot read dead,
			// but Lua's cjson reads a little more than encoding/json does (a
			// key given twice, the first time not as a string). Such a job
			// is claimed already: it is handed out without its metadata and
			// reported, so one hand-edited field never fails the claim of
			// the others.
			res.Problems = append(res.Problems, CorruptJobError{Queue: queue, ID: l.ID,
				Reason: fmt.Sprintf("field meta does not decode (%v); handed out without its metadata", err)})
		} else {
			l.Metadata = m
		}
		l.Deadline = msTime(until)
		// What is left of the lease on Redis's clock, which is less than a
		// whole lease when this answers a re-sent request: the local
		// deadline must never promise more than Redis will keep.
		l.LocalDeadline = sent.Add(min(lease, time.Duration(until-now)*time.Millisecond))
		res.Leases = append(res.Leases, l)
	}
	res.Problems = append(res.Problems, r.problems(queue)...)
	if r.err != nil {
		return ClaimResult{}, r.err
	}
	return res, nil
}

// NewRequestID returns a fresh id for a request that may be sent again
// (ClaimRequest).
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

func validClaim(requestID, queue string, n int, lease time.Duration) error {
	if err := validName("queue", queue); err != nil {
		return err
	}
	if err := validLease(lease); err != nil {
		return err
	}
	if n < 0 {
		return &ValidationError{Field: "n", Value: fmt.Sprint(n), Reason: "must not be negative"}
	}
	if err := validID(queue, requestID); err != nil {
		err.(*ValidationError).Field = "request id"
		return err
	}
	return nil
}

func validLease(d time.Duration) error {
	if d < time.Millisecond {
		return &ValidationError{Field: "lease duration", Value: d.String(), Reason: "must be at least 1ms"}
	}
	return nil
}

// Renewal is Renew's answer for one lease.
type Renewal struct {
	// Outcome is OK, Stale (the lease is gone: stop the handler) or
	// CancelRequested (extended, but the job was cancelled: stop the handler).
	Outcome       Outcome
	Deadline      time.Time // new Redis-clock deadline when not Stale
	LocalDeadline time.Time // new local deadline when not Stale
	// Err is set when this lease's queue could not be reached; Outcome is
	// then meaningless and the lease keeps its previous deadline.
	Err error
}

// Renew extends many leases by the given duration. Leases of one queue go in
// one script call, and all calls in one pipeline: one round trip on a single
// Redis. The answers are in the order of leases. It follows the batch rule
// of the package doc: the error is non-nil when any queue's call failed (it
// joins their errors), and each Renewal of such a queue carries it in Err.
func (b *Leases) Renew(ctx context.Context, leases []Lease, lease time.Duration) ([]Renewal, error) {
	if err := validLease(lease); err != nil {
		return nil, err
	}
	out := make([]Renewal, len(leases))
	if len(leases) == 0 {
		return out, nil
	}
	sent := time.Now()
	calls, err := b.perQueue(ctx, "renew", b.scripts.renew, len(leases),
		func(i int) string { return leases[i].Queue }, []any{lease.Milliseconds()},
		func(args []any, i int) []any {
			return append(args, leases[i].ID, leases[i].Generation, leases[i].token)
		})
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, c := range calls {
		r := c.reply
		r.int() // Redis time
		for _, pos := range c.idx {
			s, until := r.status(), r.time()
			switch s {
			case statusOK:
				out[pos] = Renewal{Outcome: OK, Deadline: until, LocalDeadline: sent.Add(lease)}
			case statusCancel:
				out[pos] = Renewal{Outcome: CancelRequested, Deadline: until, LocalDeadline: sent.Add(lease)}
			case statusStale:
				out[pos] = Renewal{Outcome: Stale}
			default:
				r.unexpected(s)
			}
		}
		if r.err != nil {
			errs = append(errs, r.err)
			for _, pos := range c.idx {
				out[pos] = Renewal{Err: r.err}
			}
		}
	}
	return out, errors.Join(errs...)
}
