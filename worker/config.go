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
	QueueDefault           = broker.QueueDefault
	ConcurrencyDefault     = 10
	LeaseDurationDefault   = 30 * time.Second
	PollIntervalDefault    = time.Second
	ShutdownTimeoutDefault = 30 * time.Second
	ReapBatchDefault       = 100
	// SchedulePollDefault is how often a pool looks for changed schedules
	// in Redis (Config.SchedulePoll).
	SchedulePollDefault = 5 * time.Second

	// Retention defaults: how long, and how many, finished jobs of each
	// queue are kept when Config.Retention leaves a field 0. Whichever limit
	// is reached first deletes a job. The counts bound Redis memory whatever
	// the throughput: a done job of a no-op handler takes about 600 bytes
	// (its hash plus its entry in the done index), so 10,000 of them about
	// 6 MB per queue, where keeping a day of them at 13,000 jobs/s would
	// take hundreds of gigabytes. Dead jobs wait for an operator, who wants
	// the newest (a week of them, or 10,000), but they are far larger: a
	// dead job keeps its last 10 errors (up to 2 KiB each) and its last
	// error whole (up to 32 KiB), measured 1.7 KB after 3 short errors,
	// 4 KB after 10 errors of 200 bytes, 67 KB at the most. A failure storm
	// (a dependency down, every job dead) must not fill Redis and stop
	// every queue with it: 10,000 dead jobs are 17-40 MB in the usual case.
	RetainDoneDefault         = 24 * time.Hour
	RetainCancelledDefault    = 24 * time.Hour
	RetainDeadDefault         = 7 * 24 * time.Hour
	RetainMaxDoneDefault      = 10_000
	RetainMaxCancelledDefault = 10_000
	RetainMaxDeadDefault      = 10_000

	// KeepForever, as a field of Config.Retention (an age or a count),
	// lifts that limit. Memory then grows with the rate of finished jobs:
	// about 600 bytes per done job, so 1,000 jobs/s kept for a day is about
	// 52 GB. Redis refuses every write once it reaches maxmemory (under the
	// noeviction policy a queue needs), so choose it with a bound of the
	// other kind, or with Redis room to spare.
	KeepForever = -1

	// MinLeaseDuration is the shortest lease the pool accepts: the heartbeat
	// renews every lease/3.
	MinLeaseDuration = 30 * time.Millisecond

	// Defaults of Config.UnknownKind: a job of a kind the pool has no
	// handler for waits 5s, then three times as long as it has waited so
	// far (15s, 1m, 4m) up to 5 minutes, and is dead after a day of it.
	UnknownKindDelayDefault    = 5 * time.Second
	UnknownKindMaxDelayDefault = 5 * time.Minute
	UnknownKindForDefault      = 24 * time.Hour

	// WaitForever, as UnknownKindPolicy.For, lets a job wait for a pool
	// that has its kind with no end.
	WaitForever = -1

	// RegistryIntervalDefault is how often a pool refreshes its entry in
	// the live worker registry; the entry expires RegistryTTLFactor
	// intervals after its last refresh (30s by default).
	RegistryIntervalDefault = 10 * time.Second
	RegistryTTLFactor       = 3
	// NoRegistry, as Config.RegistryInterval, keeps the pool out of the
	// live worker registry.
	NoRegistry = -1
)

// UnknownKindPolicy says how a pool treats a job whose kind its handler
// has no handler for (the handler returned a handlers.UnknownKindError
// naming the job's kind, as a Mux does for a kind never registered): in a
// rolling deploy, a pool of the old version claims the new kinds' jobs.
// It gives such a job back, uncharged, to wait for a pool that has the
// kind (broker.Leases.GiveBack). The wait is the job's, whichever pools gave it
// back: it starts with the first give-back, and each give-back waits
// three times as long as the job has waited so far, so a pool whose queue
// holds only such jobs claims each of them four times in its first five
// minutes, then once per MaxDelay, not in a loop. Only a job that no
// handler ran is given back (handlers.NoHandler): an UnknownKindError
// from a handler a Mux ran fails the job like any error.
type UnknownKindPolicy struct {
	// Delay is the wait after the first give-back. Default 5s
	// (UnknownKindDelayDefault); 0 means the default; at least 1ms.
	Delay time.Duration
	// MaxDelay is the longest wait between two claims of such a job, and
	// so the longest a pool that has the kind may wait for it after it
	// comes up. Default 5m (UnknownKindMaxDelayDefault); 0 means the
	// default; at least Delay.
	MaxDelay time.Duration
	// For is how long a job may wait: the first give-back after it makes
	// the job dead, with an error that names the kind and says to deploy
	// a runner that handles it, then retry the job. Default 24h
	// (UnknownKindForDefault); 0 means the default; WaitForever (-1)
	// waits for ever.
	For time.Duration
}

// Queue is one queue a pool serves.
type Queue struct {
	Name string // the queue's name
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
	// Retention says how long and how many finished jobs of each of the
	// pool's queues are kept; the reaper deletes the others, oldest first,
	// in its upkeep. Each field's 0 (and nil, for all of them) means its
	// default: done and cancelled jobs for a day, dead ones for a week, and
	// at most the newest 10,000 done, 10,000 cancelled and 10,000 dead
	// jobs (RetainDoneDefault ... RetainMaxDeadDefault), whichever comes
	// first. KeepForever (-1) lifts one limit; every field KeepForever keeps
	// everything (mind Redis's memory: see KeepForever). Pools of one queue
	// should agree: each trims by its own, so the strictest wins.
	Retention *broker.Retention
	// Periodic jobs this pool enqueues on their schedules (see Periodic).
	// The pool also fires the schedules stored in Redis (broker.Schedules);
	// one of those with the name of one of these is ignored by this pool.
	Periodic []Periodic
	// SchedulePoll is how often the pool looks for a change of the
	// schedules stored in Redis (one GET of their version; it reads them
	// all only when that changed). It also checks before each tick of a
	// stored schedule, so a paused or removed one does not fire in
	// between. Default SchedulePollDefault; -1: the pool fires only
	// Periodic, never a stored schedule.
	SchedulePoll time.Duration
	// Outbox, when set, is relayed by the pool: jobs enqueued inside SQL
	// transactions reach Redis (see package outbox).
	Outbox Relayer
	// UnknownKind is how the pool gives back a job of a kind its handler
	// has no handler for, instead of failing it. Its zero value is the
	// defaults: waits from 5s, each three times the wait so far, to 5m,
	// dead after 24h.
	UnknownKind UnknownKindPolicy
	// Middleware wraps every handler, the first outermost. The pool always
	// adds middleware.Recover outside them all.
	Middleware []middleware.Middleware
	// Logger receives the pool's logs. Default slog.Default().
	Logger *slog.Logger
	// Name labels the pool in the live worker registry (workerd's pools
	// are "pool 1", "pool 2" …). Default "": the registry shows its
	// queues. At most 200 bytes.
	Name string
	// RegistryInterval is how often the pool refreshes its entry in the
	// live worker registry (broker.Inspector.Workers): its host, pid,
	// version, queues, concurrency and running jobs. The entry expires
	// RegistryTTLFactor (3) intervals after its last refresh, so a pool
	// killed outright leaves the list within that time; Shutdown removes
	// it at once. Default 10s (RegistryIntervalDefault); at least 10ms;
	// NoRegistry (-1) keeps the pool out of the registry. A refresh is
	// four Redis commands per pool, none per job.
	RegistryInterval time.Duration
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
	c.RegistryInterval = cmp.Or(c.RegistryInterval, RegistryIntervalDefault)
	c.SchedulePoll = cmp.Or(c.SchedulePoll, SchedulePollDefault)
	if c.Backoff == nil {
		c.Backoff = ExponentialBackoff(time.Second, time.Hour)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	u := &c.UnknownKind
	u.Delay = cmp.Or(u.Delay, UnknownKindDelayDefault)
	u.MaxDelay = cmp.Or(u.MaxDelay, max(UnknownKindMaxDelayDefault, u.Delay))
	u.For = cmp.Or(u.For, UnknownKindForDefault)
	var r broker.Retention
	if c.Retention != nil {
		r = *c.Retention // the caller's struct is theirs: never written
	}
	c.Retention = &broker.Retention{
		Done: cmp.Or(r.Done, RetainDoneDefault), Cancelled: cmp.Or(r.Cancelled, RetainCancelledDefault),
		Dead: cmp.Or(r.Dead, RetainDeadDefault), MaxDone: cmp.Or(r.MaxDone, RetainMaxDoneDefault),
		MaxCancelled: cmp.Or(r.MaxCancelled, RetainMaxCancelledDefault), MaxDead: cmp.Or(r.MaxDead, RetainMaxDeadDefault),
	}
	return c
}

// validate refuses a Config the pool cannot run with a *ConfigError; it
// sees the Config after withDefaults, so a field's 0 never reaches it.
func (c Config) validate() error {
	seen := map[string]bool{}
	for _, q := range c.Queues {
		if err := broker.ValidateQueue(q.Name); err != nil {
			return &ConfigError{Field: "Queues", Err: err}
		}
		if q.Weight < 0 {
			return invalid("Queues", "queue %q has weight %d; weights must be positive (0 means 1)", q.Name, q.Weight)
		}
		if seen[q.Name] {
			return invalid("Queues", "queue %q is listed twice", q.Name)
		}
		seen[q.Name] = true
	}
	switch {
	case c.Concurrency < 1:
		return invalid("Concurrency", "Concurrency is %d; it must be at least 1 (0 means %d)", c.Concurrency, ConcurrencyDefault)
	case c.LeaseDuration < MinLeaseDuration:
		return invalid("LeaseDuration", "LeaseDuration is %v; it must be at least %v, since the heartbeat renews every LeaseDuration/3", c.LeaseDuration, MinLeaseDuration)
	case c.PollInterval < time.Millisecond:
		return invalid("PollInterval", "PollInterval is %v; it must be at least 1ms (0 means %v)", c.PollInterval, PollIntervalDefault)
	case c.ShutdownTimeout < 0:
		return invalid("ShutdownTimeout", "ShutdownTimeout is %v; it must not be negative", c.ShutdownTimeout)
	case c.SchedulePoll < 100*time.Millisecond && c.SchedulePoll != -1:
		return invalid("SchedulePoll", "SchedulePoll is %v; it must be at least 100ms, 0 for the default (%v), or -1 to fire no schedule stored in Redis", c.SchedulePoll, SchedulePollDefault)
	case c.ReapBatch < 1:
		return invalid("ReapBatch", "ReapBatch is %d; it must be at least 1 (0 means %d)", c.ReapBatch, ReapBatchDefault)
	case c.RegistryInterval < 10*time.Millisecond && c.RegistryInterval != NoRegistry:
		return invalid("RegistryInterval", "RegistryInterval is %v; it must be at least 10ms, 0 for the default (%v), or NoRegistry (-1) to keep the pool out of the worker registry", c.RegistryInterval, RegistryIntervalDefault)
	case c.UnknownKind.Delay < time.Millisecond:
		return invalid("UnknownKind.Delay", "UnknownKind.Delay is %v; it must be at least 1ms (0 means %v)", c.UnknownKind.Delay, UnknownKindDelayDefault)
	case c.UnknownKind.MaxDelay < c.UnknownKind.Delay:
		return invalid("UnknownKind.MaxDelay", "UnknownKind.MaxDelay is %v; it must be at least UnknownKind.Delay, %v (0 means %v)", c.UnknownKind.MaxDelay, c.UnknownKind.Delay, UnknownKindMaxDelayDefault)
	case c.UnknownKind.For < 0 && c.UnknownKind.For != WaitForever:
		return invalid("UnknownKind.For", "UnknownKind.For is %v; it must be positive, 0 for the default (%v), or WaitForever (-1) to wait with no end", c.UnknownKind.For, UnknownKindForDefault)
	}
	if c.Name != "" {
		if err := broker.ValidateWorkerName(c.Name); err != nil {
			return &ConfigError{Field: "Name", Err: err}
		}
	}
	r := c.Retention
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"Done", r.Done}, {"Cancelled", r.Cancelled}, {"Dead", r.Dead}} {
		if f.v < 0 && f.v != KeepForever {
			return invalid("Retention."+f.name, "Retention.%s is %v; an age must be positive, 0 for the default, or KeepForever (-1) for no age limit", f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxDone", r.MaxDone}, {"MaxCancelled", r.MaxCancelled}, {"MaxDead", r.MaxDead}} {
		if f.v < 0 && f.v != KeepForever {
			return invalid("Retention."+f.name, "Retention.%s is %d; a count must be positive, 0 for the default, or KeepForever (-1) for no count limit", f.name, f.v)
		}
	}
	return nil
}

// trimRetention is the Retention the pool passes to broker.Leases.Trim, whose 0
// means no limit: the config's KeepForever.
func (c Config) trimRetention() broker.Retention {
	r := *c.Retention
	r.Done, r.Cancelled, r.Dead = max(r.Done, 0), max(r.Cancelled, 0), max(r.Dead, 0)
	r.MaxDone, r.MaxCancelled, r.MaxDead = max(r.MaxDone, 0), max(r.MaxCancelled, 0), max(r.MaxDead, 0)
	return r
}

// registryTTL is how long the pool's registry entry outlives its last
// refresh.
func (c Config) registryTTL() time.Duration { return RegistryTTLFactor * c.RegistryInterval }

// reapInterval is how often the maintenance loop reaps (invariant 5).
func (c Config) reapInterval() time.Duration { return max(c.LeaseDuration/3, c.PollInterval) }

// unhandled is how the pool gives back l, whose kind its handler lacks.
func (c Config) unhandled(l broker.Lease) broker.Unhandled {
	u := c.UnknownKind
	return broker.Unhandled{
		Error: fmt.Sprintf("no pool registered kind %q: the pools that claimed this job have no handler for it, and it waited %v for one that has; deploy a runner that handles %q, then run: workerd retry %s %s",
			l.Kind, u.For, l.Kind, l.Queue, l.ID),
		Delay: u.Delay, MaxDelay: u.MaxDelay, For: u.For,
	}
}

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
