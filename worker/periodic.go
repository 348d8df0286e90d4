package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// Periodic is a job enqueued on a schedule. Any number of pools may carry
// the same schedule: each tick's job id is derived from the schedule's name
// and the tick's time, so the first pool to fire enqueues it and the others
// are refused as duplicates. There is no leader and no state but the jobs.
type Periodic struct {
	// Name identifies the schedule; it is part of every tick's job id, so
	// keep it stable across deploys.
	Name string
	// Cron is a cron expression (five fields, or six with seconds first;
	// also "@hourly", "@daily", "@every 90s"), in UTC. Set Cron or Every.
	Cron string
	// Every is a fixed interval; ticks fall on multiples of it since the
	// Unix epoch, so every process computes the same ticks.
	Every time.Duration
	// Job is the template of each tick's job: any field of a broker.Job
	// (queue, kind, payload, max attempts, priority, delay, unique key,
	// dependencies …). Its ID is set per tick.
	Job broker.Job
	// CatchUp enqueues, when the pool starts, the latest tick missed while
	// no pool ran (once, however many were missed). Default false: missed
	// ticks are skipped. A missed tick whose job still exists is not
	// enqueued again; keep retention longer than the interval.
	CatchUp bool
}

func (p Periodic) schedule() broker.Schedule {
	return broker.Schedule{Name: p.Name, Cron: p.Cron, Every: p.Every, Job: p.Job, CatchUp: p.CatchUp}
}

// tickID is the job id of a schedule's tick.
func tickID(name string, t time.Time) string { return broker.TickID(name, t) }

// schedule is a parsed schedule, of the pool's config or stored in Redis.
type schedule struct {
	Periodic
	source broker.ScheduleSource
	rev    int64                     // a stored one's revision: kept while the same
	since  time.Time                 // a stored one's ticks are those after since
	next   func(time.Time) time.Time // the first tick strictly after t
	prev   func(time.Time) time.Time // the latest tick at or before t (for catch-up)
}

func parseSchedule(p Periodic) (*schedule, error) {
	k, err := p.schedule().Ticks()
	if err != nil {
		return nil, err
	}
	return &schedule{Periodic: p, source: broker.SourceConfig, next: k.Next, prev: k.Prev}, nil
}

func parseStored(st broker.StoredSchedule) (*schedule, error) {
	s, err := parseSchedule(Periodic{Name: st.Name, Cron: st.Cron, Every: st.Every, Job: st.Job, CatchUp: st.CatchUp})
	if err != nil {
		return nil, err
	}
	s.source, s.rev, s.since = broker.SourceRedis, st.Rev, st.Since
	return s, nil
}

// scheduler is the service that enqueues periodic jobs at their ticks:
// the pool's own (Config.Periodic) and those stored in Redis, which it
// reloads when their version changes. Without either it has nothing to
// run.
type scheduler struct {
	loop
	schedulerParams
	config []*schedule

	// The loop's state, used by its goroutine alone.
	active  map[string]*entry // by name: config schedules and the stored ones in use
	version int64             // of the stored schedules in active; 0, none was ever stored, before the first read
	checked time.Time         // when the version was last read; zero before the first read
	warned  map[string]string // a stored schedule's last logged problem, by name
	// readFailed lets the warning of a failed read through once a minute.
	readFailed *throttle
}

// entry is an active schedule and its next tick.
type entry struct {
	*schedule
	next time.Time
}

// enqueuer is what the scheduler asks of broker.Client.
type enqueuer interface {
	ValidateJob(j broker.Job) error
	Enqueue(ctx context.Context, j broker.Job) (string, error)
}

// scheduleStore is what the scheduler asks of broker.Schedules.
type scheduleStore interface {
	Version(ctx context.Context) (int64, error)
	Stored(ctx context.Context) (int64, []broker.StoredSchedule, []broker.ScheduleInfo, error)
	RecordRun(ctx context.Context, name string, tick time.Time) error
	PublishConfig(ctx context.Context, scheds []broker.Schedule) error
}

// schedulerParams is what the scheduler uses.
type schedulerParams struct {
	log      *slog.Logger
	periodic []Periodic    // Config.Periodic
	poll     time.Duration // Config.SchedulePoll; -1: no stored schedules
	client   enqueuer
	store    scheduleStore
	retries  retrier // a tick's enqueue is retried until the pool halts
}

// newScheduler parses and checks the schedules; a bad one is a
// *ConfigError.
func newScheduler(parent context.Context, params schedulerParams) (*scheduler, error) {
	s := &scheduler{loop: loopUnder(parent), schedulerParams: params,
		active: map[string]*entry{}, warned: map[string]string{}, readFailed: newThrottle(time.Minute)}
	names := map[string]bool{}
	for _, pc := range params.periodic {
		if names[pc.Name] {
			return nil, invalid("Periodic", "periodic %q is listed twice; a name identifies one schedule (it is part of each tick's job id): rename one", pc.Name)
		}
		names[pc.Name] = true
		sc, err := parseSchedule(pc)
		if err != nil {
			return nil, &ConfigError{Field: "Periodic", Err: err}
		}
		if err := params.client.ValidateJob(pc.Job); err != nil {
			return nil, &ConfigError{Field: "Periodic", Reason: fmt.Sprintf("periodic %q", pc.Name), Err: err}
		}
		s.config = append(s.config, sc)
	}
	return s, nil
}

func (s *scheduler) start() {
	if len(s.config) > 0 || s.stored() {
		s.run(s.tick)
	}
}

// stored reports whether the pool fires the schedules stored in Redis.
func (s *scheduler) stored() bool { return s.poll > 0 && s.store != nil }

// tick is the loop: catch up once if asked to, then enqueue each
// schedule's job at its next tick, looking for changed stored schedules
// every poll and before each tick of a stored one.
func (s *scheduler) tick() {
	now := time.Now()
	for _, sc := range s.config {
		if sc.CatchUp {
			if t := sc.prev(now); !t.IsZero() {
				s.enqueueTick(sc, t)
			}
		}
		s.active[sc.Name] = &entry{schedule: sc, next: sc.next(now)}
	}
	s.publish()
	nextPublish := now.Add(broker.ConfigPublishEvery)
	var nextPoll time.Time
	if s.stored() {
		s.refresh(false)
		nextPoll = time.Now().Add(s.poll)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		soonest := nextPublish
		if s.stored() {
			soonest = minTime(soonest, nextPoll)
		}
		for _, e := range s.active {
			soonest = minTime(soonest, e.next)
		}
		timer.Reset(time.Until(soonest))
		select {
		case <-s.ctx.Done():
			return
		case <-timer.C:
		}
		now := time.Now()
		if !now.Before(nextPublish) {
			s.publish()
			nextPublish = now.Add(broker.ConfigPublishEvery)
		}
		if s.stored() {
			tickDue := false
			for _, e := range s.active {
				tickDue = tickDue || e.source == broker.SourceRedis && !e.next.After(now)
			}
			if tickDue || !now.Before(nextPoll) {
				// Before a stored schedule's tick, the check retries until
				// it answers: a pause or a removal that Redis holds is
				// never missed for an outage. The poll alone tries once.
				s.refresh(tickDue)
				nextPoll = time.Now().Add(s.poll)
			}
		}
		for _, e := range s.active {
			if !e.next.After(now) {
				s.enqueueTick(e.schedule, e.next)
				e.next = e.schedule.next(now)
			}
		}
	}
}

// refresh reads the stored schedules' version and, when it changed, the
// schedules, and applies them (refreshAt). hard retries a transient
// error until the pool halts; otherwise an error is logged and the next
// poll tries again.
func (s *scheduler) refresh(hard bool) {
	read := func(ctx context.Context) error { return s.refreshAt(ctx, time.Now()) }
	var err error
	if hard {
		err = s.retries.retry("read the stored schedules", func() slog.Attr { return slog.String("schedules", "stored in Redis") }, read)
	} else {
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		err = read(ctx)
		cancel()
	}
	switch {
	case err == nil:
		s.retries.health.answered()
	case s.stopping():
	case broker.IsTransient(err):
		// An outage: the pool's one line says so, not this service.
		s.retries.health.failed("read the stored schedules", err)
	case s.readFailed.ok():
		s.log.Warn("fenceq could not read the schedules stored in Redis; the pool fires those it knows, and tries again every poll (this is logged once a minute)", slog.Any("error", err))
	}
}

// refreshAt is refresh's work at now: read the version, and the
// schedules when it changed (apply).
func (s *scheduler) refreshAt(ctx context.Context, now time.Time) error {
	v, err := s.store.Version(ctx)
	if err != nil {
		return err
	}
	if v != s.version {
		v, defs, bad, err := s.store.Stored(ctx)
		if err != nil {
			return err
		}
		s.apply(v, defs, bad, now)
	}
	s.checked = now
	return nil
}

// apply makes defs, at version v, the stored schedules in use. A schedule
// whose revision is the same keeps its next tick. A new or changed one
// fires the latest of its ticks that came due after its change, which the
// pool would have fired had it known (another pool may have: the ids
// agree), or, at the pool's first read, only its catch-up, as a config
// schedule does; its next tick follows now.
// A schedule no longer stored, or paused, is dropped, and one whose name
// the pool's config has is ignored.
func (s *scheduler) apply(v int64, defs []broker.StoredSchedule, bad []broker.ScheduleInfo, now time.Time) {
	first := s.checked.IsZero()
	keep := map[string]bool{}
	for _, b := range bad {
		s.warnOnce(b.Name, "fenceq ignores a stored schedule it cannot read; remove it and add it again", b.Problem)
	}
	for _, d := range defs {
		if e := s.active[d.Name]; e != nil && e.source == broker.SourceConfig {
			s.warnOnce(d.Name, "fenceq ignores a stored schedule whose name is in this pool's configuration; rename one of them",
				fmt.Sprintf("shadowed at rev %d", d.Rev))
			continue
		}
		if d.Paused {
			continue
		}
		keep[d.Name] = true
		if e := s.active[d.Name]; e != nil && e.rev == d.Rev {
			continue
		}
		if err := s.client.ValidateJob(d.Job); err != nil {
			s.warnOnce(d.Name, "fenceq ignores a stored schedule whose job it refuses; change it", err.Error())
			delete(keep, d.Name)
			continue
		}
		sc, err := parseStored(d)
		if err != nil {
			s.warnOnce(d.Name, "fenceq ignores a stored schedule it cannot read; remove it and add it again", err.Error())
			delete(keep, d.Name)
			continue
		}
		delete(s.warned, d.Name)
		// Its ticks are those after since, even on a clock behind Redis's.
		s.active[d.Name] = &entry{schedule: sc, next: sc.next(maxTime(now, sc.since))}
		if first && !sc.CatchUp {
			continue
		}
		if t := sc.prev(now); !t.IsZero() && t.After(sc.since) {
			s.enqueueTick(sc, t)
		}
	}
	for name, e := range s.active {
		if e.source == broker.SourceRedis && !keep[name] {
			delete(s.active, name)
		}
	}
	s.version = v
}

// warnOnce logs a stored schedule's problem, once while it stays the same.
func (s *scheduler) warnOnce(name, msg, problem string) {
	if s.warned[name] == problem {
		return
	}
	s.warned[name] = problem
	s.log.Warn(msg, slog.String("periodic", name), slog.String("problem", problem))
}

// publish lists the pool's config schedules in Redis, for `workerd
// schedules` and for the store to refuse their names.
func (s *scheduler) publish() {
	if len(s.config) == 0 || s.store == nil {
		return
	}
	scheds := make([]broker.Schedule, len(s.config))
	for i, sc := range s.config {
		scheds[i] = sc.schedule()
	}
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	if err := s.store.PublishConfig(ctx, scheds); err != nil && !s.stopping() {
		s.log.Debug("fenceq could not publish the pool's schedules; it tries again in a minute", slog.Any("error", err))
	}
}

// enqueueTick enqueues one tick's job; a duplicate means another pool was
// first, which is the point, and a held unique key is the schedule's own
// choice to skip a tick while the last one runs. A tick enqueued, or
// found enqueued, is recorded as the schedule's last run.
func (sr *scheduler) enqueueTick(s *schedule, tick time.Time) {
	j := s.Job
	j.ID = tickID(s.Name, tick)
	err := sr.retries.retry("enqueue periodic", func() slog.Attr { return slog.String("periodic", s.Name) }, func(ctx context.Context) error {
		_, err := sr.client.Enqueue(ctx, j)
		return err
	})
	switch {
	case err == nil:
		sr.log.Debug("fenceq enqueued a periodic job", slog.String("periodic", s.Name), slog.Time("tick", tick))
	case errors.Is(err, broker.ErrJobExists):
	case errors.Is(err, broker.ErrUniqueHeld):
		return
	default:
		sr.log.Error("fenceq could not enqueue a periodic job", slog.String("periodic", s.Name), slog.Time("tick", tick), slog.Any("error", err))
		return
	}
	if sr.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(sr.ctx, 5*time.Second)
	defer cancel()
	if err := sr.store.RecordRun(ctx, s.Name, tick); err != nil && !sr.stopping() {
		sr.log.Debug("fenceq could not record a periodic job's run", slog.String("periodic", s.Name), slog.Any("error", err))
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
