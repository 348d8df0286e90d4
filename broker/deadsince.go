package broker

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// DeadSince counts the jobs of queue that became dead after the instant
// after (ms of Redis time, the dead index's score) and are still dead,
// and answers the score of the newest dead job (0 when none is), the
// instant to pass as after next time. A reader that calls it at intervals
// (a metrics scrape) counts each death once: a job that dies and is
// retried or trimmed between two calls is not counted. One round trip of
// two O(log n) commands, whatever the size of the index.
func (b *Inspector) DeadSince(ctx context.Context, queue string, after int64) (n, newest int64, err error) {
	if err := validName("queue", queue); err != nil {
		return 0, 0, err
	}
	k := b.queueKeys(queue)
	var count *redis.IntCmd
	var last *redis.ZSliceCmd
	_, err = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		count = p.ZCount(ctx, k.dead(), "("+strconv.FormatInt(after, 10), "+inf")
		last = p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: k.dead(), Start: 0, Stop: 0, Rev: true})
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("fenceq: count the dead jobs of queue %q: %w", queue, err)
	}
	if z := last.Val(); len(z) == 1 {
		newest = int64(z[0].Score)
	}
	return count.Val(), newest, nil
}
