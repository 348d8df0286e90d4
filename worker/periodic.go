package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/robfig/cron/v3"

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

// tickID is the job id of a schedule's tick.
func tickID(name string, t time.Time) string {
	return fmt.Sprintf("periodic:%s:%d", name, t.Unix())
}

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// schedule is a parsed Periodic.
type schedule struct {
	Periodic
	next func(time.Time) time.Time // the first tick strictly after t
	prev func(time.Time) time.Time // the latest tick at or before t (for catch-up)
}

func parseSchedule(p Periodic) (*schedule, error) {
	if p.Name == "" {
		return nil, errors.New("a periodic job needs a Name")
	}
	if (p.Cron == "") == (p.Every <= 0) {
		return nil, fmt.Errorf("periodic %q: set Cron or Every (a positive interval), not both", p.Name)
	}
	s := &schedule{Periodic: p}
	if p.Every > 0 {
		if p.Every < time.Second {
			return nil, fmt.Errorf("periodic %q: Every is %v; use at least 1s", p.Name, p.Every)
		}
		s.next = func(t time.Time) time.Time { return t.Truncate(p.Every).Add(p.Every) }
		s.prev = func(t time.Time) time.Time { return t.Truncate(p.Every) }
		return s, nil
	}
	sched, err := cronParser.Parse(p.Cron)
	if err != nil {
		return nil, fmt.Errorf("periodic %q: cron expression %q: %w", p.Name, p.Cron, err)
	}
	s.next = func(t time.Time) time.Time { return sched.Next(t.UTC()) }
	// The latest tick at or before t: step back from a day before (or a
	// year for rarer schedules) to the last tick not after t.
	s.prev = func(t time.Time) time.Time {
		for _, back := range []time.Duration{24 * time.Hour, 366 * 24 * time.Hour} {
			var last time.Time
			for x := sched.Next(t.UTC().Add(-back)); !x.After(t); x = sched.Next(x) {
				last = x
			}
			if !last.IsZero() {
				return last
			}
		}
		return time.Time{}
	}
	return s, nil
}

// scheduler is the service that enqueues the pool's periodic jobs at
// their ticks (Config.Periodic). Without schedules it has nothing to run.
type scheduler struct {
	loop
	schedulerParams
	scheds []*schedule
}

// enqueuer is what the scheduler asks of broker.Client.
type enqueuer interface {
	ValidateJob(j broker.Job) error
	Enqueue(ctx context.Context, j broker.Job) (string, error)
}

// schedulerParams is what the scheduler uses.
type schedulerParams struct {
	log      *slog.Logger
	periodic []Periodic // Config.Periodic
	client   enqueuer
	retries  retrier // a tick's enqueue is retried until the pool halts
}

// newScheduler parses and checks the schedules; a bad one is a
// *ConfigError.
func newScheduler(parent context.Context, params schedulerParams) (*scheduler, error) {
	s := &scheduler{loop: loopUnder(parent), schedulerParams: params}
	for _, pc := range params.periodic {
		sc, err := parseSchedule(pc)
		if err != nil {
			return nil, &ConfigError{Field: "Periodic", Err: err}
		}
		if err := params.client.ValidateJob(pc.Job); err != nil {
			return nil, &ConfigError{Field: "Periodic", Reason: fmt.Sprintf("periodic %q", pc.Name), Err: err}
		}
		s.scheds = append(s.scheds, sc)
	}
	return s, nil
}

func (s *scheduler) start() {
	if len(s.scheds) > 0 {
		s.run(s.tick)
	}
}

// tick is the loop: catch up once if asked to, then enqueue each
// schedule's job at its next tick.
func (s *scheduler) tick() {
	scheds := s.scheds
	next := make([]time.Time, len(scheds))
	now := time.Now()
	for i, sc := range scheds {
		if sc.CatchUp {
			if t := sc.prev(now); !t.IsZero() {
				s.enqueueTick(sc, t)
			}
		}
		next[i] = sc.next(now)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		soonest := next[0]
		for _, t := range next[1:] {
			soonest = minTime(soonest, t)
		}
		timer.Reset(time.Until(soonest))
		select {
		case <-s.ctx.Done():
			return
		case <-timer.C:
		}
		now := time.Now()
		for i, sc := range scheds {
			if !next[i].After(now) {
				s.enqueueTick(sc, next[i])
				next[i] = sc.next(now)
			}
		}
	}
}

// enqueueTick enqueues one tick's job; a duplicate means another pool was
// first, which is the point, and a held unique key is the schedule's own
// choice to skip a tick while the last one runs.
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
	case errors.Is(err, broker.ErrJobExists), errors.Is(err, broker.ErrUniqueHeld):
	default:
		sr.log.Error("fenceq could not enqueue a periodic job", slog.String("periodic", s.Name), slog.Time("tick", tick), slog.Any("error", err))
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
