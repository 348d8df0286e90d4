package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrCrossSlot answers a WaitForWork on queues that live in different
// Redis Cluster slots: one blocking call cannot wait on them all. Wait on
// one of them (a single queue always works) and poll the others.
var ErrCrossSlot = errors.New("queues are in different cluster slots")

// WaitForWork blocks until an enqueue, a release or a reap in one of queues
// pushes a wake-up, and answers that queue; or until limit passes or ctx
// ends, and answers "" (with ctx's error in the second case). It is how an
// idle worker waits without polling: it picks up a new job in about a
// millisecond.
//
// One call never blocks for longer than half the client's read timeout, at
// most a second, whatever limit says, and never asks Redis to block
// forever: a caller that means to wait longer calls again, and so stays
// responsive to its own stop signal. A limit of 0 or less answers at once.
// A wake-up is a reason to claim, not a promise: another worker may have
// taken the job first.
func (b *Leases) WaitForWork(ctx context.Context, queues []string, limit time.Duration) (woken string, err error) {
	if len(queues) == 0 {
		return "", &ValidationError{Field: "queues", Reason: "must name at least one queue"}
	}
	args := make([]any, 0, len(queues)+2)
	args = append(args, "BLPOP")
	for _, q := range queues {
		if err := validName("queue", q); err != nil {
			return "", err
		}
		args = append(args, b.queueKeys(q).wake())
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	d := min(limit, b.maxBlock())
	if deadline, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(deadline))
	}
	if d <= 0 {
		return "", nil
	}
	// go-redis's BLPop would round a timeout under a second up to a whole
	// second; Redis itself takes a fraction, so this sends the raw command.
	args = append(args, blockSeconds(d))
	popped, err := b.rdb.Do(ctx, args...).StringSlice()
	switch {
	case err == nil:
		return queueOfWakeKey(queues, args, popped[0]), nil
	case errors.Is(err, redis.Nil):
		return "", nil
	case ctx.Err() != nil:
		return "", ctx.Err()
	case redis.HasErrorPrefix(err, "CROSSSLOT"):
		return "", fmt.Errorf("fenceq: wait for work on queues %q: %w (%w)", queues, ErrCrossSlot, err)
	}
	return "", fmt.Errorf("fenceq: wait for work on queues %q: %w", queues, err)
}

// queueOfWakeKey is the queue whose wake key BLPOP popped from; args are
// BLPOP's, the keys in queues' order after the command's name.
func queueOfWakeKey(queues []string, args []any, key string) string {
	for i, q := range queues {
		if args[i+1] == key {
			return q
		}
	}
	return queues[0] // not reached: Redis pops from a key it was given
}
