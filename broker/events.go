package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Event is one lifecycle event of a queue's stream: enqueued, started,
// done, retried, snoozed, unhandled (given back by a worker without a
// handler for its kind), dead, cancelled, cancel_requested, released,
// force_released, reaped, lease_lost, stale_rejected, deleted (Detail: the
// state it was in; by Delete or Purge) and promoted.
type Event struct {
	StreamID   string    // the stream entry's id: pass it as after to read on
	Time       time.Time // Redis time of the event
	Event      string    // its name: one of those listed above
	JobID      string    // the job it is about
	Generation int64     // the job's generation when it happened; 0 when the event carries none
	Detail     string    // e.g. "attempt 2", the error of a retry, the state after a reap
}

// SetEvents turns a queue's event stream on, keeping about the last keep
// events, or off when keep is 0 (the stream is then deleted). Each event is
// one XADD in the script that causes it: a cost on the hot path, so it is
// off by default.
func (b *Inspector) SetEvents(ctx context.Context, queue string, keep int) error {
	if err := validName("queue", queue); err != nil {
		return err
	}
	if keep < 0 {
		return &ValidationError{Field: "events", Value: fmt.Sprint(keep), Reason: "must not be negative (0 turns events off)"}
	}
	k := b.queueKeys(queue)
	var err error
	if keep == 0 {
		_, err = b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HDel(ctx, k.limits(), "events")
			p.Del(ctx, k.events())
			return nil
		})
	} else {
		err = b.rdb.HSet(ctx, k.limits(), "events", keep).Err()
	}
	if err != nil {
		return fmt.Errorf("fenceq: set events of queue %q: %w", queue, err)
	}
	return nil
}

// EventsKept is how many events the queue keeps, 0 when events are off.
func (b *Inspector) EventsKept(ctx context.Context, queue string) (int, error) {
	if err := validName("queue", queue); err != nil {
		return 0, err
	}
	n, err := b.rdb.HGet(ctx, b.queueKeys(queue).limits(), "events").Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// Events reads up to count events after the stream id after ("0" for the
// oldest kept, "$" for only new ones), waiting up to wait for one to come
// (0: do not wait). It answers no events, and no error, when none came.
// To follow the stream, pass the StreamID of the last event read: "$"
// again would skip every event that came between two calls.
func (b *Inspector) Events(ctx context.Context, queue, after string, count int, wait time.Duration) ([]Event, error) {
	if err := validName("queue", queue); err != nil {
		return nil, err
	}
	args := &redis.XReadArgs{Streams: []string{b.queueKeys(queue).events(), after}, Count: int64(max(count, 1)), Block: -1}
	if wait > 0 {
		args.Block = min(wait, b.maxBlock())
	}
	streams, err := b.rdb.XRead(ctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fenceq: read events of queue %q: %w", queue, err)
	}
	var out []Event
	for _, s := range streams {
		for _, m := range s.Messages {
			out = append(out, toEvent(m))
		}
	}
	return out, nil
}

// RecentEvents answers the last n events of queue, oldest first.
func (b *Inspector) RecentEvents(ctx context.Context, queue string, n int) ([]Event, error) {
	if err := validName("queue", queue); err != nil {
		return nil, err
	}
	ms, err := b.rdb.XRevRangeN(ctx, b.queueKeys(queue).events(), "+", "-", int64(max(n, 1))).Result()
	if err != nil {
		return nil, fmt.Errorf("fenceq: read events of queue %q: %w", queue, err)
	}
	out := make([]Event, len(ms))
	for i, m := range ms {
		out[len(ms)-1-i] = toEvent(m)
	}
	return out, nil
}

func toEvent(m redis.XMessage) Event {
	e := Event{StreamID: m.ID}
	if ms, err := strconv.ParseInt(strings.SplitN(m.ID, "-", 2)[0], 10, 64); err == nil {
		e.Time = time.UnixMilli(ms)
	}
	e.Event, _ = m.Values["event"].(string)
	e.JobID, _ = m.Values["id"].(string)
	g, _ := m.Values["gen"].(string)
	e.Generation, _ = strconv.ParseInt(g, 10, 64)
	e.Detail, _ = m.Values["detail"].(string)
	return e
}
