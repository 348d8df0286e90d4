package broker

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pause stops every pool from claiming jobs of queue until Resume. Enqueues
// are still accepted, and jobs already running go on to settle.
func (b *Inspector) Pause(ctx context.Context, queue string) error {
	if err := validName("queue", queue); err != nil {
		return err
	}
	k := b.queueKeys(queue)
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, k.paused(), "1", 0)
		// The flag a claim reads with its settings (lib.lua's set_flag),
		// so that an unpaused queue's claims do not read the key.
		p.HSet(ctx, k.limits(), "paused", "1")
		return nil
	})
	if err != nil {
		return fmt.Errorf("fenceq: pause queue %q: %w", queue, err)
	}
	return nil
}

// Resume lets pools claim jobs of queue again, and wakes one that is
// blocked so that the queue's backlog starts at once.
func (b *Inspector) Resume(ctx context.Context, queue string) error {
	if err := validName("queue", queue); err != nil {
		return err
	}
	k := b.queueKeys(queue)
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, k.paused())
		p.HSet(ctx, k.limits(), "paused", "0")
		p.RPush(ctx, k.wake(), "1")
		p.LTrim(ctx, k.wake(), 0, 0) // one token is enough; see lib.lua's wake
		return nil
	})
	if err != nil {
		return fmt.Errorf("fenceq: resume queue %q: %w", queue, err)
	}
	return nil
}

// Paused reports whether queue is paused.
func (b *Inspector) Paused(ctx context.Context, queue string) (bool, error) {
	if err := validName("queue", queue); err != nil {
		return false, err
	}
	n, err := b.rdb.Exists(ctx, b.queueKeys(queue).paused()).Result()
	if err != nil {
		return false, fmt.Errorf("fenceq: read whether queue %q is paused: %w", queue, err)
	}
	return n == 1, nil
}

// Retention says how long finished jobs are kept. A zero field keeps them
// forever (as far as that field goes): the zero Retention trims nothing.
// Trim refuses a negative field. (worker.Config.Retention reads the same
// fields otherwise: 0 there is the pool's default, and worker.KeepForever,
// -1, no limit.)
type Retention struct {
	Done, Cancelled, Dead          time.Duration // maximum age, from finished_at; 0: no limit
	MaxDone, MaxCancelled, MaxDead int           // maximum count, the oldest going first; 0: no limit
}

// Trim deletes up to limit finished jobs of queue that retention no longer
// keeps, oldest first, and answers how many it deleted. It never deletes a
// job that finished within ResendHorizon, whatever r says (a re-send of
// the request that finished or stored it must still find it): a count is
// exceeded by at most the jobs finished in the last ResendHorizon, which a
// Trim after that deletes. A deleted job's id
// is free again: an Enqueue with it creates a new job. It goes in steps of
// at most scriptStep (100) jobs, one script call each, while a step uses its
// whole budget (an entry without its job, dropped, uses it too): no limit
// blocks Redis for longer than one step. On an error it answers how many
// the steps before deleted, with the error.
func (b *Leases) Trim(ctx context.Context, queue string, r Retention, limit int) (int, error) {
	if err := validName("queue", queue); err != nil {
		return 0, err
	}
	if limit < 1 {
		return 0, &ValidationError{Field: "limit", Value: fmt.Sprint(limit), Reason: "must be at least 1"}
	}
	if r.Done < 0 || r.Cancelled < 0 || r.Dead < 0 || r.MaxDone < 0 || r.MaxCancelled < 0 || r.MaxDead < 0 {
		return 0, &ValidationError{Field: "retention", Value: fmt.Sprintf("%+v", r), Reason: "ages and counts must not be negative (0 means no limit)"}
	}
	deleted := 0
	for left := limit; left > 0; {
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
		step := min(left, scriptStep)
		left -= step
		v, err := b.run(ctx, b.scripts.trim, b.queueKeys(queue), step,
			r.Done.Milliseconds(), r.MaxDone, r.Cancelled.Milliseconds(), r.MaxCancelled, r.Dead.Milliseconds(), r.MaxDead).Result()
		rep := newReply(fmt.Sprintf("trim queue %q", queue), v, err)
		n, more := int(rep.int()), rep.int() == 1
		if rep.err != nil {
			return deleted, rep.err
		}
		deleted += n
		if !more {
			break
		}
	}
	return deleted, nil
}

// Limits is a queue's flow control, enforced inside the claim script and so
// shared by every pool of every process. Zero fields mean no limit.
type Limits struct {
	// MaxRunning: at most this many jobs of the queue run at once.
	MaxRunning int
	// Rate and Per: at most Rate jobs start in any window of Per.
	Rate int
	Per  time.Duration // the window of Rate; 0 with Rate 0: no rate limit
}

// String describes the limits as an operator reads them: "at most 5
// running, at most 100 starts per 1m0s", or "no limits".
func (l Limits) String() string {
	var parts []string
	if l.MaxRunning > 0 {
		parts = append(parts, fmt.Sprintf("at most %d running", l.MaxRunning))
	}
	if l.Rate > 0 {
		parts = append(parts, fmt.Sprintf("at most %d starts per %v", l.Rate, l.Per))
	}
	if len(parts) == 0 {
		return "no limits"
	}
	return strings.Join(parts, ", ")
}

// SetLimits sets queue's limits: each zero field removes its limit, so the
// zero Limits removes them all. To change some limits and keep the others,
// use ChangeLimits (not Limits, then SetLimits: a change made in between
// would be lost). The queue's other settings (its events)
// are left alone. The limits hold from the next claim on, for every pool.
func (b *Inspector) SetLimits(ctx context.Context, queue string, l Limits) error {
	return b.setLimits(ctx, queue, l, true, true)
}

// SetMaxRunning sets one of queue's limits, at most n of its jobs running
// at once (0 removes it), and keeps the others: two operators changing
// different limits at the same time both get theirs.
func (b *Inspector) SetMaxRunning(ctx context.Context, queue string, n int) error {
	return b.setLimits(ctx, queue, Limits{MaxRunning: n}, true, false)
}

// SetRate sets one of queue's limits, at most rate jobs starting in any
// window of per (rate 0 removes it), and keeps the others.
func (b *Inspector) SetRate(ctx context.Context, queue string, rate int, per time.Duration) error {
	return b.setLimits(ctx, queue, Limits{Rate: rate, Per: per}, false, true)
}

// LimitsChange names the limits ChangeLimits changes, and their new
// values; the limits it does not name are kept.
type LimitsChange struct {
	To                    Limits // the new values of the limits named; 0 removes one
	MaxRunning, Rate, Per bool   // which limits change: To.MaxRunning, To.Rate, To.Per
}

// ChangeLimits changes the limits c names and keeps the others, in one
// step inside Redis, and answers the queue's limits after it. A rate and
// its period are a pair: a new period alone keeps the queue's rate, a new
// rate alone its period, as they are at that moment, so a rate another
// operator sets while this call is on its way is kept, not overwritten by
// one read earlier. A rate of 0 removes the rate limit. A period when the
// queue has no rate, or a rate when it has no period, is a
// ValidationError, and then nothing changes.
func (b *Inspector) ChangeLimits(ctx context.Context, queue string, c LimitsChange) (Limits, error) {
	if err := validName("queue", queue); err != nil {
		return Limits{}, err
	}
	l := c.To
	if c.MaxRunning && l.MaxRunning < 0 || c.Rate && l.Rate < 0 || c.Per && l.Per < time.Millisecond {
		return Limits{}, &ValidationError{Field: "limits", Value: fmt.Sprintf("%+v", l), Reason: "counts must not be negative, and a period is at least 1ms"}
	}
	arg := func(given bool, v int64) string {
		if !given {
			return ""
		}
		return strconv.FormatInt(v, 10)
	}
	k := b.queueKeys(queue)
	v, err := b.run(ctx, b.scripts.limits, k, arg(c.MaxRunning, int64(l.MaxRunning)), arg(c.Rate, int64(l.Rate)), arg(c.Per, l.Per.Milliseconds())).Slice()
	if err != nil {
		return Limits{}, fmt.Errorf("fenceq: change limits of queue %q: %w", queue, err)
	}
	status, _ := v[0].(string)
	switch {
	case status == "no_rate":
		return Limits{}, &ValidationError{Field: "period", Value: l.Per.String(), Reason: "a period needs a rate, and the queue has none: give both, like a rate of 100 per 1m"}
	case status == "no_period":
		return Limits{}, &ValidationError{Field: "rate", Value: strconv.Itoa(l.Rate), Reason: "a rate needs its period, and the queue has none: give both, like a rate of 100 per 1m"}
	case status != "ok" || len(v) != 4:
		return Limits{}, fmt.Errorf("fenceq: change limits of queue %q: unexpected reply %v", queue, v)
	}
	n := func(x any) int64 { i, _ := x.(int64); return i }
	return Limits{MaxRunning: int(n(v[1])), Rate: int(n(v[2])), Per: time.Duration(n(v[3])) * time.Millisecond}, nil
}

// setLimits writes the running limit, the rate limit or both, field by
// field in one transaction: the hash also holds settings that are not
// limits, and a limit not named is not touched.
func (b *core) setLimits(ctx context.Context, queue string, l Limits, running, rate bool) error {
	if err := validName("queue", queue); err != nil {
		return err
	}
	if l.MaxRunning < 0 || l.Rate < 0 || l.Per < 0 || (l.Rate > 0) != (l.Per > 0) || l.Per > 0 && l.Per < time.Millisecond {
		return &ValidationError{Field: "limits", Value: fmt.Sprintf("%+v", l), Reason: "counts must not be negative, and Rate and Per (at least 1ms) go together"}
	}
	k := b.queueKeys(queue)
	key := k.limits()
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		switch {
		case !running:
		case l.MaxRunning > 0:
			p.HSet(ctx, key, "max_running", l.MaxRunning)
		default:
			p.HDel(ctx, key, "max_running")
		}
		switch {
		case !rate:
		case l.Rate > 0:
			p.HSet(ctx, key, "rate", l.Rate, "period_ms", l.Per.Milliseconds())
		default:
			p.HDel(ctx, key, "rate", "period_ms")
		}
		p.RPush(ctx, k.wake(), "1") // pools blocked by the old limits look again
		p.LTrim(ctx, k.wake(), 0, 0)
		return nil
	})
	if err != nil {
		return fmt.Errorf("fenceq: set limits of queue %q: %w", queue, err)
	}
	return nil
}

// Limits reads queue's limits.
func (b *Inspector) Limits(ctx context.Context, queue string) (Limits, error) {
	if err := validName("queue", queue); err != nil {
		return Limits{}, err
	}
	v, err := b.rdb.HMGet(ctx, b.queueKeys(queue).limits(), "max_running", "rate", "period_ms").Result()
	if err != nil {
		return Limits{}, fmt.Errorf("fenceq: read limits of queue %q: %w", queue, err)
	}
	num := func(x any) int {
		s, _ := x.(string)
		n, _ := strconv.Atoi(s)
		return n
	}
	return Limits{MaxRunning: num(v[0]), Rate: num(v[1]), Per: time.Duration(num(v[2])) * time.Millisecond}, nil
}
