package worker

import (
	"cmp"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/middleware"
)

// Defaults of Config's fields.
const (
	QueueDefault           = "default"
	ConcurrencyDefault     = 10
	LeaseDurationDefault   = 30 * time.Second
	PollIntervalDefault    = time.Second
	ShutdownTimeoutDefault = 30 * time.Second
	ReapBatchDefault       = 100

	// Retention defaults: how long finished jobs are kept when
	// Config.Retention is nil.
	RetainDoneDefault      = 24 * time.Hour
	RetainCancelledDefault = 24 * time.Hour
	RetainDeadDefault      = 7 * 24 * time.Hour

	// MinLeaseDuration is the shortest lease the pool accepts: the heartbeat
	// renews every lease/3.
	MinLeaseDuration = 30 * time.Millisecond
)

// Queue is one queue a pool serves.
type Queue struct {
	Name string
	// Weight sets the queue's share of claims when Config.StrictPriority is
	// off: a queue of weight 3 is tried first three times as often as one of
	// weight 1. 0 means 1.
	Weight int
}

// BackoffFunc answers how long to wait before retrying a job whose attempt
// (1 for the first run) failed.
type BackoffFunc func(attempt int) time.Duration

// Config configures a Pool. The zero value is sane: it serves the queue
// "default" with 10 slots and 30-second leases.
type Config struct {
	// Queues the pool claims from. Default: one queue, QueueDefault.
	Queues []Queue
	// StrictPriority claims from Queues in the order given, from a later
	// queue only when the earlier ones have nothing ready. Default false:
	// queues are tried in a weighted random order on every claim.
	StrictPriority bool
	// Concurrency is how many jobs run at once. Default 10.
	Concurrency int
	// LeaseDuration is how long a claim lasts without renewal; the heartbeat
	// renews every LeaseDuration/3, and an orphaned job is recovered about
	// LeaseDuration after its worker died. Default 30s; at least 30ms.
	LeaseDuration time.Duration
	// PollInterval is the longest an idle pool blocks before it looks again.
	// Enqueues wake it at once, so this only bounds how late it notices a
	// scheduled job without a wake-up. Default 1s.
	PollInterval time.Duration
	// ShutdownTimeout is how long Shutdown lets running handlers finish
	// before it cancels their contexts and releases their leases. Default 30s.
	ShutdownTimeout time.Duration
	// ReapBatch bounds how many expired leases one reaper run recovers per
	// queue. Default 100.
	ReapBatch int
	// Backoff is the retry delay after a failed attempt. Default
	// ExponentialBackoff(time.Second, time.Hour).
	Backoff BackoffFunc
	// KindBackoff overrides Backoff for some job kinds.
	KindBackoff map[string]BackoffFunc
	// Retention says how long finished jobs of the pool's queues are kept;
	// the reaper deletes older ones in its bounded upkeep. nil means done
	// and cancelled jobs for a day, dead ones for a week; &broker.Retention{}
	// keeps everything. Pools of one queue should agree: the strictest wins.
	Retention *broker.Retention
	// Periodic jobs this pool enqueues on their schedules (see Periodic).
	Periodic []Periodic
	// Outbox, when set, is relayed by the pool: jobs enqueued inside SQL
	// transactions reach Redis (see package outbox).
	Outbox Relayer
	// Middleware wraps every handler, the first outermost. The pool always
	// adds middleware.Recover outside them all.
	Middleware []middleware.Middleware
	// Logger receives the pool's logs. Default slog.Default().
	Logger *slog.Logger
	// OnRenew, when set, is called after every heartbeat round that had
	// leases to renew, with its duration: a hook for metrics. It must not
	// block.
	OnRenew func(took time.Duration, leases int, err error)
}

func (c Config) withDefaults() Config {
	if len(c.Queues) == 0 {
		c.Queues = []Queue{{Name: QueueDefault}}
	}
	qs := make([]Queue, len(c.Queues))
	for i, q := range c.Queues {
		qs[i] = Queue{Name: q.Name, Weight: cmp.Or(q.Weight, 1)}
	}
	c.Queues = qs
	c.Concurrency = cmp.Or(c.Concurrency, ConcurrencyDefault)
	c.LeaseDuration = cmp.Or(c.LeaseDuration, LeaseDurationDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, ShutdownTimeoutDefault)
	c.ReapBatch = cmp.Or(c.ReapBatch, ReapBatchDefault)
	if c.Backoff == nil {
		c.Backoff = ExponentialBackoff(time.Second, time.Hour)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Retention == nil {
		c.Retention = &broker.Retention{Done: RetainDoneDefault, Cancelled: RetainCancelledDefault, Dead: RetainDeadDefault}
	}
	return c
}

func (c Config) validate() error {
	seen := map[string]bool{}
	for _, q := range c.Queues {
		if q.Weight < 0 {
			return fmt.Errorf("fenceq: worker config: queue %q has weight %d; weights must be positive (0 means 1)", q.Name, q.Weight)
		}
		if seen[q.Name] {
			return fmt.Errorf("fenceq: worker config: queue %q is listed twice", q.Name)
		}
		seen[q.Name] = true
	}
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("fenceq: worker config: Concurrency is %d; it must be at least 1 (0 means %d)", c.Concurrency, ConcurrencyDefault)
	case c.LeaseDuration < MinLeaseDuration:
		return fmt.Errorf("fenceq: worker config: LeaseDuration is %v; it must be at least %v, since the heartbeat renews every LeaseDuration/3", c.LeaseDuration, MinLeaseDuration)
	case c.PollInterval < time.Millisecond:
		return fmt.Errorf("fenceq: worker config: PollInterval is %v; it must be at least 1ms (0 means %v)", c.PollInterval, PollIntervalDefault)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("fenceq: worker config: ShutdownTimeout is %v; it must not be negative", c.ShutdownTimeout)
	case c.ReapBatch < 1:
		return fmt.Errorf("fenceq: worker config: ReapBatch is %d; it must be at least 1 (0 means %d)", c.ReapBatch, ReapBatchDefault)
	}
	return nil
}

// reapInterval is how often the dispatch loop reaps (invariant 5).
func (c Config) reapInterval() time.Duration { return max(c.LeaseDuration/3, c.PollInterval) }

func (c Config) backoff(kind string, attempt int) time.Duration {
	if f := c.KindBackoff[kind]; f != nil {
		return max(f(attempt), 0)
	}
	return max(c.Backoff(attempt), 0)
}

// ExponentialBackoff doubles the delay from base with every attempt, up to
// limit, and spreads it with ±25% jitter so that jobs failing together do
// not retry together.
func ExponentialBackoff(base, limit time.Duration) BackoffFunc {
	return func(attempt int) time.Duration {
		d := base
		for i := 1; i < attempt && d < limit; i++ {
			d *= 2
		}
		d = min(d, limit)
		jitter := time.Duration(rand.Int64N(int64(d)/2+1)) - d/4
		return max(d+jitter, 0)
	}
}
