package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptStep is the most items one script call handles for an operation
// that takes a count from its caller (RetryDead, Reap, Trim, the lease
// listings): the operation loops over steps of this size, so a count of
// 100,000 never makes one script that blocks Redis (invariant 8). A step
// of retries or reaps takes about a millisecond.
const scriptStep = 100

// Released is ReleaseUnowned's answer.
type Released struct {
	Previous, State State // the job's state before and after
	Generation      int64 // the job's new generation
}

// ReleaseUnowned takes a job's lease away without holding it: the operator's
// force-release. The job's generation is bumped, so a worker's ack or renew
// racing this call is stale from now on. A running job becomes pending
// again with its attempt refunded (or cancelled when that was requested); a
// blocked, scheduled or pending job keeps its state. A finished job (done,
// dead, cancelled) holds no lease: it is refused with a *StateError and
// left as it is, its generation and result untouched.
func (b *Inspector) ReleaseUnowned(ctx context.Context, queue, id string) (Released, error) {
	if err := validID(queue, id); err != nil {
		return Released{}, err
	}
	v, err := b.run(ctx, b.scripts.releaseUnowned, b.queueKeys(queue), id).Result()
	r := newReply("release_unowned "+queue, v, err)
	s := r.status()
	if s == statusWrongState {
		st := State(r.str())
		if r.err != nil {
			return Released{}, r.err
		}
		return Released{Previous: st, State: st}, &StateError{Op: "release", Queue: queue, ID: id, State: st,
			Hint: "a finished job holds no lease, so there is nothing to release (retry it to run it again)"}
	}
	if err := r.job(s, queue, id); err != nil {
		return Released{}, err
	}
	out := Released{Previous: State(r.str()), State: State(r.str()), Generation: r.int()}
	return out, r.err
}

// Cancel stops a job. A scheduled or pending job is cancelled at once. A
// running job is flagged: its worker learns it at the next renew (its
// handler's context is cancelled) and settles it as cancelled; until then
// the state stays running. A finished job is left as it is. Cancel answers
// the job's state after the call.
func (b *Inspector) Cancel(ctx context.Context, queue, id string) (State, error) {
	if err := validID(queue, id); err != nil {
		return "", err
	}
	v, err := b.runResend(ctx, "cancel", "", b.scripts.cancel, b.queueKeys(queue), id).cmd.Result()
	r := newReply("cancel "+queue, v, err)
	if err := r.job(r.status(), queue, id); err != nil {
		return "", err
	}
	st := State(r.str())
	return st, r.err
}

// Retry sends a dead or cancelled job back to pending with a fresh attempt
// budget (and a new generation). A job that was cancelled while it waited
// for its dependencies waits for them again (blocked). It answers the job's
// previous state. A job in any other state is left alone, and so is one
// that could not go back as enqueue would let it in (a dependency missing
// or failed, its unique key held by another job): both answer an error
// saying why. Retry is safe to re-send: Redis recognises the request.
func (b *Inspector) Retry(ctx context.Context, queue, id string) (State, error) {
	if err := validID(queue, id); err != nil {
		return "", err
	}
	res, err := b.retry(ctx, queue, []string{id})
	if err != nil {
		return "", err
	}
	r := res[0]
	switch r.status {
	case statusMissing:
		return "", notFound(queue, id)
	case statusCorrupt:
		return "", &CorruptJobError{Queue: queue, ID: id, Reason: r.detail}
	case statusRefused:
		return r.prev, fmt.Errorf("fenceq: job %q in queue %q stays %s: %s", id, queue, r.prev, r.detail)
	case statusNotRetryable:
		return r.prev, fmt.Errorf("fenceq: job %q in queue %q is %s; only dead or cancelled jobs can be retried", id, queue, r.prev)
	default:
		return r.prev, nil
	}
}

// RetryDead sends up to limit dead jobs of queue (oldest deaths first) back
// to pending, as Retry does, and answers how many it sent. A dead job that
// cannot go back (Retry would say why), or an entry of the dead index that
// is no job, is passed over, so it never holds back the ones behind it. It
// goes in steps of at most scriptStep (100) jobs, one script call each, and
// stops between steps when ctx ends: any limit keeps Redis free for others.
// It sends only jobs that were dead when it began (none that died later),
// each at most once: each step goes on just after the entry the one before
// read last (see rangeAfter), up to the newest death the first step found,
// so a job sent back that dies again meanwhile is not sent back again by
// this call. On an error it answers how many the steps before sent;
// calling it again goes on, since a retried job is no longer dead.
func (b *Inspector) RetryDead(ctx context.Context, queue string, limit int) (int, error) {
	if err := validName("queue", queue); err != nil {
		return 0, err
	}
	if limit < 1 {
		return 0, &ValidationError{Field: "limit", Value: fmt.Sprint(limit), Reason: "must be at least 1"}
	}
	newest, err := b.rdb.ZRangeWithScores(ctx, b.queueKeys(queue).index(StateDead), -1, -1).Result()
	if err != nil || len(newest) == 0 {
		return 0, err
	}
	bound := score(newest[0].Score)
	sent := 0
	var last *redis.Z
	for sent < limit {
		if err := ctx.Err(); err != nil {
			return sent, err
		}
		want := min(limit-sent, scriptStep)
		entries, err := b.rangeAfter(ctx, queue, StateDead, last, bound, want)
		if err != nil || len(entries) == 0 {
			return sent, err
		}
		ids := make([]string, len(entries))
		for i, e := range entries {
			ids[i] = e.Member.(string)
		}
		res, err := b.retry(ctx, queue, ids)
		if err != nil {
			return sent, err
		}
		for _, r := range res {
			if r.prev == StateDead && r.status == statusOK {
				sent++
			}
		}
		if len(entries) < want {
			return sent, nil
		}
		last = &entries[len(entries)-1]
	}
	return sent, nil
}

// retried is retry.lua's answer for one job.
type retried struct {
	status status // ok, not_retryable, refused, missing or corrupt
	prev   State  // the state before the call; "" when missing or corrupt
	detail string // the new state (ok), why (refused), or a corrupt hash's reason
}

// retry runs retry.lua for ids of one queue. Its error is the script
// call's; each job's refusal is in its answer.
func (b *core) retry(ctx context.Context, queue string, ids []string) ([]retried, error) {
	args := make([]any, 0, len(ids)+1)
	args = append(args, NewRequestID())
	for _, id := range ids {
		args = append(args, id)
	}
	v, err := b.runResend(ctx, "retry", "", b.scripts.retry, b.queueKeys(queue), args...).cmd.Result()
	if err != nil {
		return nil, fmt.Errorf("fenceq: retry in queue %q: %w", queue, err)
	}
	r := newReply("retry "+queue, v, nil)
	out := make([]retried, len(ids))
	for i := range out {
		out[i] = retried{status: r.status(), prev: State(r.str()), detail: r.str()}
	}
	if r.more() {
		return nil, fmt.Errorf("fenceq: retry in queue %q: %d values in the reply for %d jobs", queue, len(r.vals), len(ids))
	}
	return out, r.err
}

// Reaped is one job that Reap took from an expired lease.
type Reaped struct {
	ID         string // the job's id
	State      State  // pending, dead (attempts spent) or cancelled
	Generation int64  // the job's new generation: the expired claim is dead
}

// ReapResult is what one Reap did.
type ReapResult struct {
	Now    time.Time // Redis time when the reap ran
	Reaped []Reaped  // the jobs taken, at most the limit Reap was given
	// Problems lists leases index entries whose job hash disagreed; they
	// were refiled or marked dead, and should be logged.
	Problems []CorruptJobError
	// CascadeLeft: dependents of finished jobs are still to be released or
	// cancelled after this call's bounded step; call Reap again soon.
	CascadeLeft bool
}

// Reap recovers up to limit jobs whose lease expired (on Redis's clock)
// without being renewed or settled: each becomes pending again, dead when
// its attempts are spent, or cancelled when that was requested; its
// generation is bumped and its token cleared, so the lost worker's late
// settlement is stale. It also settles dependents of finished jobs (the
// cascade; see ReapResult.CascadeLeft): up to limit of them, and never
// fewer than the 50 every script that finishes a job settles inline. It
// goes in steps of at most scriptStep (100) jobs, one script call (and
// round trip) each, while a step examines a full batch of expired leases
// (reaped or not: an entry without its job is dropped) or leaves cascade work
// and limit is not spent: a limit of 100 or less is one round trip, and no
// limit blocks Redis for longer than one step. On an error it answers what
// the steps before did, with the error.
func (b *Leases) Reap(ctx context.Context, queue string, limit int) (ReapResult, error) {
	if err := validName("queue", queue); err != nil {
		return ReapResult{}, err
	}
	if limit < 1 {
		return ReapResult{}, &ValidationError{Field: "reap limit", Value: fmt.Sprint(limit), Reason: "must be at least 1"}
	}
	var res ReapResult
	for left := limit; left > 0; {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		n := min(left, scriptStep)
		left -= n
		step, err := b.reap(ctx, queue, n)
		if err != nil {
			return res, err
		}
		res.Now, res.CascadeLeft = step.Now, step.CascadeLeft
		res.Reaped = append(res.Reaped, step.Reaped...)
		res.Problems = append(res.Problems, step.Problems...)
		if !step.more && !step.CascadeLeft {
			break
		}
	}
	return res, nil
}

// reapStep is one step of Reap.
type reapStep struct {
	ReapResult
	more bool // the step examined n leases: more expired ones may be left
}

// reap runs one step of Reap: reap.lua with limit n.
func (b *core) reap(ctx context.Context, queue string, n int) (reapStep, error) {
	v, err := b.run(ctx, b.scripts.reap, b.queueKeys(queue), n).Result()
	r := newReply("reap "+queue, v, err)
	res := reapStep{ReapResult: ReapResult{Now: r.time()}}
	res.more = r.int() == 1
	count := int(r.int())
	for i := 0; i < count && r.err == nil; i++ {
		res.Reaped = append(res.Reaped, Reaped{ID: r.str(), State: State(r.str()), Generation: r.int()})
	}
	res.CascadeLeft = r.int() == 1
	res.Problems = r.problems(queue)
	if r.err != nil {
		return reapStep{}, r.err
	}
	return res, nil
}
