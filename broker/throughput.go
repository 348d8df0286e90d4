package broker

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// ThroughputKept is how far back a queue's per-minute counters go: the
// settling scripts delete a minute once it is this old (lib.lua's
// STATS_MINUTES), and Trim deletes an idle queue's.
const ThroughputKept = 6 * time.Hour

// Minute is one minute of a queue's settlements, on Redis's clock.
type Minute struct {
	Start time.Time // the minute's first instant
	// Done counts jobs acked in the minute. Failed counts attempts that
	// ended in failure: a Fail that retries or kills the job, and an
	// expired lease the reaper charged an attempt for. A Snooze, a
	// cancellation, a stale settlement and a re-send of one already
	// applied count nothing.
	Done, Failed int64
}

// Throughput reads the last n minutes of queue (the current one last),
// oldest first; minutes without settlements are zeros. n is
// 1..ThroughputKept/time.Minute. One round trip.
//
// A counter that is not an integer (a hand edit of the queue's stats hash)
// reads as zero rather than failing the whole read; the settling scripts
// leave such a minute uncounted, and it falls out of the window in time.
func (b *Inspector) Throughput(ctx context.Context, queue string, n int) ([]Minute, error) {
	if err := validName("queue", queue); err != nil {
		return nil, err
	}
	if kept := int(ThroughputKept / time.Minute); n < 1 || n > kept {
		return nil, &ValidationError{Field: "minutes", Value: fmt.Sprint(n), Reason: fmt.Sprintf("must be from 1 to %d (ThroughputKept)", kept)}
	}
	v, err := b.run(ctx, b.scripts.throughput, b.queueKeys(queue), n).Result()
	r := newReply("throughput "+queue, v, err)
	current := r.int()
	out := make([]Minute, n)
	for i := range out {
		start := current - int64(n-1-i)
		out[i] = Minute{Start: time.UnixMilli(start * time.Minute.Milliseconds()), Done: counter(r.str()), Failed: counter(r.str())}
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}

// counter reads one counter of the stats hash: missing and garbage are 0.
func counter(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
