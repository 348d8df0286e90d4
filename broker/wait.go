package broker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// waitRegistration is how long one registration of a Wait caller lasts in
// Redis; the caller renews it while it waits, so a caller that vanished
// stops costing anything after this.
const waitRegistration = time.Minute

// Wait blocks until the job is done, dead or cancelled, and returns it with
// its result. It does not poll: the job's settlement wakes it (a blocking
// pop on a list that only waited-on jobs get). It returns ctx's error when
// ctx ends first, and ErrJobNotFound for an unknown id.
func (b *Broker) Wait(ctx context.Context, queue, id string) (JobInfo, error) {
	if err := validID(queue, id); err != nil {
		return JobInfo{}, err
	}
	k := b.queueKeys(queue)
	finished := k.base() + "finished:" + id
	for {
		v, err := b.run(ctx, b.scripts.wait, k, id, waitRegistration.Milliseconds()).StringSlice()
		if err != nil {
			return JobInfo{}, corruptOr(queue, id, fmt.Errorf("fenceq: wait for job %q in queue %q: %w", id, queue, err))
		}
		switch v[0] {
		case "missing":
			return JobInfo{}, notFound(queue, id)
		case "final":
			return b.Job(ctx, queue, id)
		}
		// Block in slices, renewing the registration before it lapses.
		renew := time.Now().Add(waitRegistration / 2)
		for time.Now().Before(renew) {
			if err := ctx.Err(); err != nil {
				b.unwait(k, id)
				return JobInfo{}, err
			}
			slice := min(b.MaxBlock(), time.Until(renew))
			if deadline, ok := ctx.Deadline(); ok {
				slice = min(slice, max(time.Until(deadline), time.Millisecond))
			}
			err := b.rdb.Do(ctx, "BLPOP", finished, strconv.FormatFloat(slice.Seconds(), 'f', 3, 64)).Err()
			switch {
			case err == nil:
				return b.Job(ctx, queue, id)
			case err != redis.Nil && ctx.Err() == nil:
				return JobInfo{}, fmt.Errorf("fenceq: wait for job %q in queue %q: %w", id, queue, err)
			}
		}
	}
}

// unwait takes back a registration when its caller gives up.
func (b *Broker) unwait(k *queueKeys, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	key := k.base() + "waiting:" + id
	if n, err := b.rdb.Decr(ctx, key).Result(); err == nil && n <= 0 {
		b.rdb.Del(ctx, key)
	}
}

// MaxBlock is the longest single blocking call the client's read timeout
// lets through: half of it, at most a second (so that a caller is never
// stuck in Redis for long).
func (b *Broker) MaxBlock() time.Duration {
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
