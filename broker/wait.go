package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// waitRecheck is how often a caller of Wait reads the job's state even
// without a wake-up: a safety net should a wake-up be lost (a Redis restart
// without persistence), never the way a settlement is normally seen.
const waitRecheck = 30 * time.Second

// waiterKeep bounds the life of the token that ends a cancelled caller's
// blocking pop (popWake), should the pop have ended without taking it.
const waiterKeep = 10 * time.Second

// Wait blocks until the job is done, dead or cancelled, and returns it with
// its result. It does not poll: the job's settlement wakes it (a blocking
// pop on a list that only waited-on jobs get). A wake-up is only a reason
// to look: Wait returns a job only when it has read it finished. It returns
// ctx's error when ctx ends first (nothing is left behind to undo), and
// ErrJobNotFound for an unknown id. A cancelled ctx ends the wait at once,
// also while Wait is blocked in Redis.
//
// However short the retention, a caller that was waiting when the job
// finished gets it: trimming keeps a waited-on job for Wait for a minute
// after it finished (the caller must read it within that). A new job
// enqueued under the same id after the old one was trimmed is not the one
// a caller registered on: it gets the old job, or ErrJobNotFound once the
// minute has passed. Each job under the id is kept for its own callers,
// the last four of them at most: a caller whose job was followed within
// its minute by four more under the same id, each waited on and trimmed,
// gets ErrJobNotFound.
func (b *Client) Wait(ctx context.Context, queue, id string) (JobInfo, error) {
	if err := validID(queue, id); err != nil {
		return JobInfo{}, err
	}
	k := b.queueKeys(queue)
	finished := k.derived(kindFinished, id)
	own := k.derived(kindWaiter, NewRequestID())
	woken := "0"
	mine := "" // the wait_tag of the job this caller registered on (wait.lua)
	for {
		// A caller that took a wake-up passes it on (wait.lua) even when
		// its own context has ended meanwhile: the other callers must not
		// sleep until their recheck because this one gave up.
		runCtx := ctx
		if woken == "1" && ctx.Err() != nil {
			var cancel context.CancelFunc
			runCtx, cancel = context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
		}
		v, err := b.run(runCtx, b.scripts.wait, k, id, woken, mine).Result()
		if ctx.Err() != nil {
			return JobInfo{}, ctx.Err()
		}
		if err != nil {
			return JobInfo{}, fmt.Errorf("fenceq: wait for job %q in queue %q: %w", id, queue, err)
		}
		r := newReply("wait "+queue, v, nil)
		s := r.status()
		if s != statusWaiting {
			if err := r.job(s, queue, id); err != nil {
				return JobInfo{}, err
			}
			h := make(map[string]string, len(r.vals)/2)
			for r.more() {
				h[r.str()] = r.str()
			}
			if r.err != nil {
				return JobInfo{}, r.err
			}
			return parseJob(queue, id, h)
		}
		mine = r.str()
		if r.err != nil {
			return JobInfo{}, r.err
		}
		woken = "0"
		recheck := time.Now().Add(waitRecheck)
		for woken == "0" && time.Now().Before(recheck) {
			if err := ctx.Err(); err != nil {
				return JobInfo{}, err
			}
			slice := min(b.maxBlock(), time.Until(recheck))
			if deadline, ok := ctx.Deadline(); ok {
				slice = min(slice, time.Until(deadline))
			}
			took, err := b.popWake(ctx, finished, own, slice)
			if took {
				woken = "1"
			}
			if err != nil && ctx.Err() == nil {
				return JobInfo{}, fmt.Errorf("fenceq: wait for job %q in queue %q: %w", id, queue, err)
			}
		}
	}
}

// popWake blocks for at most slice on the job's wake-up list, finished,
// and answers whether it took the wake-up. Redis never sees ctx, so a
// cancelled ctx ends the pop by a token pushed to own, a list of this call
// only that the pop watches too: the connection stays usable and no client
// is left blocked in Redis. A ctx that ends by its deadline needs none (the
// slice ends then). A token the pop did not take is deleted (and expires in
// waiterKeep anyway), so it never ends a later pop.
func (b *core) popWake(ctx context.Context, finished, own string, slice time.Duration) (bool, error) {
	pushed := make(chan bool, 1)
	stop := context.AfterFunc(ctx, func() {
		if _, ok := ctx.Deadline(); ok && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			pushed <- false
			return
		}
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_, _ = b.rdb.TxPipelined(c, func(p redis.Pipeliner) error {
			p.RPush(c, own, "1")
			p.PExpire(c, own, waiterKeep)
			return nil
		})
		pushed <- true
	})
	v, err := b.rdb.Do(ctx, "BLPOP", finished, own, blockSeconds(slice)).StringSlice()
	took := err == nil && len(v) == 2
	if !stop() && <-pushed && !(took && v[0] == own) {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = b.rdb.Del(c, own).Err()
	}
	if err == redis.Nil {
		err = nil
	}
	return took && v[0] == finished, err
}

// blockSeconds formats a blocking command's timeout, in seconds with
// millisecond precision, rounded up and at least one millisecond: Redis
// reads a timeout of 0 as "block forever", which a short slice must never
// become.
func blockSeconds(d time.Duration) string {
	ms := max((d+time.Millisecond-1)/time.Millisecond, 1)
	return strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64)
}

// maxBlock is the longest single blocking call the client's read timeout
// lets through: half of it, at most a second (so that a caller is never
// stuck in Redis for long).
func (b *core) maxBlock() time.Duration {
	var rt time.Duration
	switch c := b.rdb.(type) {
	case *redis.Client:
		rt = c.Options().ReadTimeout
	case *redis.ClusterClient:
		rt = c.Options().ReadTimeout
	case *redis.Ring:
		rt = c.Options().ReadTimeout
	}
	switch {
	case rt == 0:
		rt = 3 * time.Second // go-redis's default
	case rt < 0:
		return time.Second // no read deadline
	}
	return max(min(time.Second, rt/2), time.Millisecond)
}
