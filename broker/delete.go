package broker

import (
	"context"
	"fmt"
	"time"
)

// PurgeStep is the most jobs one Purge step examines, in one script call
// (purge.lua), so a purge of any size never blocks Redis for more than a
// few milliseconds (invariant 8): a step of 1,000 took 12 ms of Redis time
// on a loaded 2-core machine, one of 250 takes about 3.
const PurgeStep = 250

// Delete deletes one job that no worker holds: a finished job (done, dead,
// cancelled), or a pending, scheduled or blocked one. Its hash goes with
// every entry that names it: its state's index (or its group's), its unique
// key, an ordered group's hold. A job deleted before it finished is to its
// dependents as a cancelled one: each is cancelled ("dependency X was
// deleted") unless it runs anyway (Job.RunIfDependencyFails), and its
// Broker.Wait callers get ErrJobNotFound. A running job is refused with a
// *StateError: Cancel it (its worker stops and settles it), then delete
// it. When seen is not "", the job is deleted only if it is still in that
// state (a dashboard passes the state it showed); a job that moved on is
// refused with a *StateError, unchanged. The queue's generation counter
// stays, so a job enqueued again under the id gets a greater generation
// (invariant 10). Delete answers the state the job was in. It is safe to
// re-send: a re-send answers what the first call did, and never deletes a
// job enqueued under the id since.
func (b *Inspector) Delete(ctx context.Context, queue, id string, seen State) (State, error) {
	if err := validID(queue, id); err != nil {
		return "", err
	}
	if seen != "" && !seen.valid() {
		return "", &ValidationError{Field: "state", Value: string(seen), Reason: "is not a job state; use one of blocked, scheduled, pending, done, dead, cancelled, or none"}
	}
	v, err := b.runResend(ctx, "delete", "", b.scripts.del, b.queueKeys(queue), NewRequestID(), id, string(seen)).cmd.Result()
	r := newReply("delete "+queue, v, err)
	s := r.status()
	if s == statusWrongState {
		st := State(r.str())
		if r.err != nil {
			return "", r.err
		}
		return st, &StateError{Op: "delete", Queue: queue, ID: id, State: st, Seen: seen,
			Hint: "a running job is deleted only once it has stopped: cancel it (workerd cancel), then delete it"}
	}
	if err := r.job(s, queue, id); err != nil {
		return "", err
	}
	st := State(r.str())
	return st, r.err
}

// PurgeProgress is what a Purge has done so far, after each step.
type PurgeProgress struct {
	Deleted int // jobs deleted
	// Skipped counts entries of the state's index whose job was no longer
	// in the state when its step looked (retried, or enqueued again under
	// its id) or was unreadable: they stay. Each counts once, unless the
	// last one kept leaves the index meanwhile: the next step then reads
	// again from its score, and counts those kept there again.
	Skipped int
	// Recent counts the jobs left because they finished within
	// ResendHorizon (a re-send of the request that finished or stored
	// one may still come): a Purge a few seconds later takes them. The
	// last step counts them.
	Recent int
	Steps  int  // script calls so far
	Done   bool // the last step: nothing is left that the purge takes
}

// Purge deletes the jobs of queue in a finished state (done, dead or
// cancelled), oldest first, in steps of at most PurgeStep jobs, one script
// call each. It takes the jobs that were in the state when it began: one
// that finishes later (even one retried and finished again meanwhile) is
// left, so a purge of a busy queue ends; so is one that finished within
// ResendHorizon, as retention leaves it, since a re-send of the ack that
// finished it or the enqueue that stored it may still come (invariant 9).
// Each job is deleted only if it is
// still in the state when its step looks; one that left it is skipped. A
// finished job owes nothing more, so only its hash and its entry go; the
// queue's generation counter stays (invariant 10). After each step, when
// progress is not nil, Purge calls it with the counts so far. It stops
// between steps when ctx ends, and answers what the steps before did with
// the error; a Purge called again goes on, since a purged job is gone.
// A step whose reply is lost is sent again and answers as once.
func (b *Inspector) Purge(ctx context.Context, queue string, state State, progress func(PurgeProgress)) (PurgeProgress, error) {
	return b.PurgeThrough(ctx, queue, state, time.Time{}, progress)
}

// PurgeThrough is Purge of the jobs that entered the state at or before
// through (Redis time, as RedisTime answers it), and not after: a
// confirmation page carries the instant it counted the jobs, so that its
// form, sent again later, purges no job the page did not count. A zero
// through takes every job in the state when the purge begins, as Purge.
func (b *Inspector) PurgeThrough(ctx context.Context, queue string, state State, through time.Time, progress func(PurgeProgress)) (PurgeProgress, error) {
	if err := validName("queue", queue); err != nil {
		return PurgeProgress{}, err
	}
	if !state.Final() {
		return PurgeProgress{}, &ValidationError{Field: "state", Value: string(state), Reason: "cannot be purged; purge takes done, dead or cancelled (delete a pending, scheduled or blocked job one at a time)"}
	}
	k := b.queueKeys(queue)
	newest, err := b.rdb.ZRangeWithScores(ctx, k.index(state), -1, -1).Result()
	if err != nil {
		return PurgeProgress{}, fmt.Errorf("fenceq: purge %s jobs of queue %q: %w", state, queue, err)
	}
	var p PurgeProgress
	if len(newest) == 0 {
		p.Done = true
		if progress != nil {
			progress(p)
		}
		return p, nil
	}
	bound := score(newest[0].Score)
	if ms := float64(through.UnixMilli()); !through.IsZero() && ms < newest[0].Score {
		bound = score(ms)
	}
	lastScore, lastID := "", ""
	for !p.Done {
		if err := ctx.Err(); err != nil {
			return p, err
		}
		v, err := b.runResend(ctx, "purge", "", b.scripts.purge, k, NewRequestID(), string(state), bound, PurgeStep, lastScore, lastID).cmd.Result()
		r := newReply("purge "+queue, v, err)
		deleted, skipped, more := r.int(), r.int(), r.int() == 1
		ls, li := r.str(), r.str()
		recent := r.int()
		if r.err != nil {
			return p, r.err
		}
		p.Steps++
		p.Deleted += int(deleted)
		p.Skipped += int(skipped)
		p.Recent = int(recent)
		// A full step that deleted nothing and kept no entry past the
		// last one kept (it left meanwhile, so the step read from its
		// score again) would read the same entries again.
		p.Done = !more || (deleted == 0 && ls == lastScore && li == lastID)
		lastScore, lastID = ls, li
		if progress != nil {
			progress(p)
		}
	}
	return p, nil
}

// Promote runs a scheduled job now: a delayed job, or a retry waiting out
// its backoff. It becomes pending at once, at the tail of its priority, with
// its attempt and generation kept; a grouped job joins its group's pending
// jobs, where the group's limits apply as to any other (an ordered group
// that holds for it takes it next). A job in any other state is refused
// with a *StateError, unchanged. It is safe to re-send.
func (b *Inspector) Promote(ctx context.Context, queue, id string) error {
	if err := validID(queue, id); err != nil {
		return err
	}
	v, err := b.runResend(ctx, "promote", "", b.scripts.promote, b.queueKeys(queue), NewRequestID(), id).cmd.Result()
	r := newReply("promote "+queue, v, err)
	s := r.status()
	if s == statusWrongState {
		st := State(r.str())
		if r.err != nil {
			return r.err
		}
		return &StateError{Op: "promote", Queue: queue, ID: id, State: st, Hint: promoteHint(st)}
	}
	if err := r.job(s, queue, id); err != nil {
		return err
	}
	r.str()
	return r.err
}

func promoteHint(st State) string {
	switch st {
	case StatePending, StateRunning:
		return "only a scheduled job (delayed, or a retry in backoff) can be promoted; this one runs already or is next"
	case StateBlocked:
		return "only a scheduled job can be promoted; a blocked job waits for its dependencies"
	}
	return "only a scheduled job can be promoted; to run a finished job again, retry it"
}
