package broker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"
)

// A schedule enqueues a job at each of its ticks. Schedules come from two
// places: a pool's configuration (worker.Config.Periodic, workerd.yaml's
// periodic list), and Redis, where an operator adds, changes, pauses and
// removes them at runtime through Schedules. Every pool fires the stored
// ones as well as its own, without a leader: each tick's job id is
// TickID(name, tick), so the first pool to enqueue it wins and the others
// are refused as duplicates.
//
// Their keys are catalogued in keys.go (schedDefsKey and the others).

// Bounds on what Redis stores. A pool reads every stored schedule when
// one changes: these keep that read a few megabytes at most.
const (
	// SchedulesMax is the most schedules Redis stores.
	SchedulesMax = 1000
	// ScheduleJobMaxBytes bounds a stored schedule's job template, in
	// its JSON form (Job.MarshalJSON).
	ScheduleJobMaxBytes = 16 << 10
	// ScheduleEveryMin is the shortest Every.
	ScheduleEveryMin = time.Second
)

var (
	// ErrScheduleNotFound answers a change of a schedule Redis does not
	// store.
	ErrScheduleNotFound = errors.New("schedule not found")
	// ErrScheduleExists answers an add of a name Redis already stores.
	ErrScheduleExists = errors.New("schedule already exists")
	// ErrScheduleFromConfig answers a change, in Redis, of a name that a
	// running pool's configuration holds: that pool would ignore it.
	ErrScheduleFromConfig = errors.New("schedule comes from a pool's configuration")
)

// ScheduleError is a refused change of a schedule: Err is
// ErrScheduleNotFound, ErrScheduleExists or ErrScheduleFromConfig, and
// the message says what to do.
type ScheduleError struct {
	Name string
	Err  error
	msg  string
}

func (e *ScheduleError) Error() string { return e.msg }
func (e *ScheduleError) Unwrap() error { return e.Err }

// Schedule is a job enqueued on a schedule.
type Schedule struct {
	// Name identifies the schedule; it is part of every tick's job id.
	// At most 200 bytes of UTF-8, no control characters.
	Name string
	// Cron is a cron expression (five fields, or six with seconds first;
	// also "@hourly", "@daily", "@every 90s"), in UTC. Set Cron or Every.
	Cron string
	// Every is a fixed interval of at least ScheduleEveryMin; ticks fall
	// on multiples of it since the Unix epoch, so every process computes
	// the same ticks.
	Every time.Duration
	// Job is the template of each tick's job. Its ID must be empty: each
	// tick's is TickID's.
	Job Job
	// CatchUp enqueues, when a pool starts, the latest tick missed while
	// no pool ran (once, however many were missed).
	CatchUp bool
}

// Spec is the schedule's timing as a person writes it: the cron
// expression, or "every 5m".
func (s Schedule) Spec() string {
	if s.Cron != "" {
		return s.Cron
	}
	d := s.Every.String()
	if strings.HasSuffix(d, "m0s") {
		d = strings.TrimSuffix(d, "0s")
	}
	if strings.HasSuffix(d, "h0m") {
		d = strings.TrimSuffix(d, "0m")
	}
	return "every " + d
}

// TickID is the job id of a schedule's tick at t.
func TickID(name string, t time.Time) string {
	return fmt.Sprintf("periodic:%s:%d", name, t.Unix())
}

// Ticks computes a schedule's ticks.
type Ticks struct {
	next func(time.Time) time.Time
	prev func(time.Time) time.Time
}

// Next is the first tick strictly after t.
func (k Ticks) Next(t time.Time) time.Time { return k.next(t) }

// Prev is the latest tick at or before t; zero when there is none in the
// year before t.
func (k Ticks) Prev(t time.Time) time.Time { return k.prev(t) }

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Ticks checks the schedule's name and timing (not its job: see
// Client.ValidateJob) and answers its ticks.
func (s Schedule) Ticks() (Ticks, error) {
	if s.Name == "" {
		return Ticks{}, errors.New("a periodic job needs a Name")
	}
	if err := validName("schedule name", s.Name); err != nil {
		return Ticks{}, err
	}
	if (s.Cron == "") == (s.Every <= 0) {
		return Ticks{}, fmt.Errorf("periodic %q: set Cron or Every (a positive interval), not both", s.Name)
	}
	if s.Every > 0 {
		if s.Every < ScheduleEveryMin {
			return Ticks{}, fmt.Errorf("periodic %q: Every is %v; use at least 1s", s.Name, s.Every)
		}
		every := s.Every
		return Ticks{
			next: func(t time.Time) time.Time { return t.Truncate(every).Add(every) },
			prev: func(t time.Time) time.Time { return t.Truncate(every) },
		}, nil
	}
	if len(s.Cron) > maxNameBytes {
		return Ticks{}, fmt.Errorf("periodic %q: the cron expression is %d bytes; at most %d are allowed", s.Name, len(s.Cron), maxNameBytes)
	}
	sched, err := cronParser.Parse(s.Cron)
	if err != nil {
		return Ticks{}, fmt.Errorf("periodic %q: cron expression %q: %w", s.Name, s.Cron, err)
	}
	return Ticks{
		next: func(t time.Time) time.Time { return sched.Next(t.UTC()) },
		// The latest tick at or before t: step on from a day before (or a
		// year, for rarer schedules) to the last tick not after t.
		prev: func(t time.Time) time.Time {
			for _, back := range []time.Duration{24 * time.Hour, 366 * 24 * time.Hour} {
				var last time.Time
				for x := sched.Next(t.UTC().Add(-back)); !x.IsZero() && !x.After(t); x = sched.Next(x) {
					last = x
				}
				if !last.IsZero() {
					return last
				}
			}
			return time.Time{}
		},
	}, nil
}

// ScheduleSource says where a schedule is defined.
type ScheduleSource string

const (
	// SourceRedis is a schedule stored in Redis (Schedules.Add).
	SourceRedis ScheduleSource = "redis"
	// SourceConfig is a schedule of a pool's configuration, as the pools
	// that carry it published it.
	SourceConfig ScheduleSource = "config"
)

// StoredSchedule is a schedule as Redis holds it.
type StoredSchedule struct {
	Schedule
	Source ScheduleSource
	// Paused: no pool fires it until it is resumed.
	Paused bool
	// Rev is the version of the schedules at its last add, change, pause
	// or resume: a pool keeps its next tick while Rev is the same.
	Rev int64
	// Since is when it was added, last changed or resumed (Redis time):
	// its ticks are those after it. For a config schedule, when a pool
	// last published it.
	Since time.Time
}

// ScheduleInfo is a schedule as a listing shows it.
type ScheduleInfo struct {
	StoredSchedule
	// LastRun is the newest tick a pool fired, and LastJob its job's id;
	// zero and "" when none has been.
	LastRun time.Time
	LastJob string
	// Next is its next tick after the listing's time (Redis's), zero when
	// it is paused or shadowed.
	Next time.Time
	// Shadowed marks a stored schedule whose name a running pool's
	// configuration also holds: those pools fire their own, not this one.
	Shadowed bool
	// Problem says why a stored entry cannot be used (edited by hand,
	// written by another version); "" when it can.
	Problem string
}

// Schedules stores the schedules an operator manages at runtime, and is
// what a pool reads to fire them. Reach it as Broker.Schedules or
// Inspector.Schedules. A type of its own because neither a producer nor
// the lease protocol needs it, and a pool needs only its reads.
type Schedules struct{ *core }

// Schedules is the runtime schedules' view.
func (b *Broker) Schedules() *Schedules { return &Schedules{b.core} }

// Schedules is the runtime schedules' view, for an operator's tools.
func (in *Inspector) Schedules() *Schedules { return &Schedules{in.core} }

// configSeenFor is how long a config schedule stays listed after a pool
// last published it; pools publish every ConfigPublishEvery.
const (
	configSeenFor = 5 * time.Minute
	// ConfigPublishEvery is how often a pool publishes its config
	// schedules (and drops those no pool has published for a day).
	ConfigPublishEvery = time.Minute
	configForgetAfter  = 24 * time.Hour
)

// storedJSON is a stored schedule's JSON form in Redis.
type storedJSON struct {
	Cron    string          `json:"cron,omitempty"`
	EveryMS int64           `json:"every_ms,omitempty"`
	Job     json.RawMessage `json:"job"`
	CatchUp bool            `json:"catch_up,omitempty"`
	Paused  bool            `json:"paused,omitempty"`
	Rev     int64           `json:"rev,omitempty"`
	SinceMS int64           `json:"since_ms"`
}

func encodeSchedule(s StoredSchedule) (string, error) {
	job, err := json.Marshal(s.Job)
	if err != nil {
		return "", err
	}
	w := storedJSON{Cron: s.Cron, EveryMS: s.Every.Milliseconds(), Job: job, CatchUp: s.CatchUp,
		Paused: s.Paused, Rev: s.Rev, SinceMS: s.Since.UnixMilli()}
	b, err := json.Marshal(w)
	return string(b), err
}

func decodeSchedule(name, v string, src ScheduleSource) (StoredSchedule, error) {
	var w storedJSON
	if err := json.Unmarshal([]byte(v), &w); err != nil {
		return StoredSchedule{Schedule: Schedule{Name: name}, Source: src}, fmt.Errorf("not a schedule's JSON: %v", err)
	}
	s := StoredSchedule{
		Schedule: Schedule{Name: name, Cron: w.Cron, Every: time.Duration(w.EveryMS) * time.Millisecond, CatchUp: w.CatchUp},
		Source:   src, Paused: w.Paused, Rev: w.Rev, Since: time.UnixMilli(w.SinceMS),
	}
	if len(w.Job) > 0 && string(w.Job) != "null" {
		if err := s.Job.UnmarshalJSON(w.Job); err != nil {
			return s, fmt.Errorf("its job: %v", err)
		}
	}
	return s, nil
}

// check refuses a schedule Redis should not store, with a
// *ValidationError naming the field.
func (b *Schedules) check(s Schedule) error {
	if _, err := s.Ticks(); err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			return err
		}
		field := "schedule"
		switch {
		case s.Name == "":
			field = "schedule name"
		case s.Cron != "" && s.Every <= 0:
			field = "cron"
		case s.Every > 0 && s.Cron == "":
			field = "every"
		}
		return &ValidationError{Field: field, Reason: strings.TrimPrefix(err.Error(), fmt.Sprintf("periodic %q: ", s.Name))}
	}
	if s.Job.ID != "" {
		return &ValidationError{Field: "id", Value: short(s.Job.ID), Reason: "a schedule's job has no id: each tick's job gets its own (periodic:NAME:TIME); remove it"}
	}
	if !s.Job.RunAt.IsZero() {
		return &ValidationError{Field: "run_at", Reason: "a schedule's job cannot have a fixed run time, which every tick would share; give a delay instead"}
	}
	if err := b.validate(&s.Job); err != nil {
		return err
	}
	job, err := json.Marshal(s.Job)
	if err != nil {
		return err
	}
	if len(job) > ScheduleJobMaxBytes {
		return &ValidationError{Field: "job", Reason: fmt.Sprintf("is %d bytes as JSON; a schedule's job is at most %d: store large data elsewhere and put a reference in the payload", len(job), ScheduleJobMaxBytes)}
	}
	return nil
}

// redisNow is the Redis server's time.
func (b *Schedules) redisNow(ctx context.Context) (time.Time, error) {
	t, err := b.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("fenceq: read the Redis time: %w", err)
	}
	return t, nil
}

// current is what a change sees of the stored schedules, under WATCH.
type current struct {
	entry    string    // the stored entry of the name, "" when there is none
	found    bool      // the name is stored
	count    int64     // the schedules stored
	rev      int64     // the version the change makes
	now      time.Time // Redis's time
	inConfig bool      // a running pool's configuration has the name
}

// change runs one change of the stored schedules as a transaction: under
// WATCH of defs, version and the config schedules, edit reads what is
// stored and answers the entry to write ("" deletes it), or errUnchanged;
// the version goes up by one with it. It is tried again when another
// change came between (a pool publishing its config included), a few
// times.
func (b *Schedules) change(ctx context.Context, name string, edit func(c current) (string, error)) error {
	defs, version, config := b.schedDefsKey(), b.schedVersionKey(), b.schedConfigKey()
	now, err := b.redisNow(ctx)
	if err != nil {
		return err
	}
	for range 20 {
		err := b.rdb.Watch(ctx, func(tx *redis.Tx) error {
			c := current{now: now}
			var err error
			c.entry, err = tx.HGet(ctx, defs, name).Result()
			c.found = err == nil
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			if c.count, err = tx.HLen(ctx, defs).Result(); err != nil {
				return err
			}
			v, err := tx.Get(ctx, version).Int64()
			switch {
			case errors.Is(err, redis.Nil):
			case err != nil && errors.Is(err, strconv.ErrSyntax) || errors.Is(err, strconv.ErrRange):
				// Not a number (written by hand): go on from Redis's time in
				// ms, a value no pool can hold as the version it saw.
				v = now.UnixMilli()
			case err != nil:
				return err
			}
			c.rev = v + 1
			cfg, err := tx.HGet(ctx, config, name).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			if err == nil {
				s, derr := decodeSchedule(name, cfg, SourceConfig)
				c.inConfig = derr == nil && now.Sub(s.Since) < configSeenFor
			}
			next, err := edit(c)
			if errors.Is(err, errUnchanged) {
				return nil
			}
			if err != nil {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				if next == "" {
					p.HDel(ctx, defs, name)
				} else {
					p.HSet(ctx, defs, name, next)
				}
				p.Set(ctx, version, c.rev, 0)
				return nil
			})
			return err
		}, defs, version, config)
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
	}
	return fmt.Errorf("fenceq: change schedule %q: other changes kept coming between; try again", name)
}

// errUnchanged is an edit's answer when there is nothing to write: the
// change is made already (a re-sent Add or Set, a second Pause).
var errUnchanged = errors.New("unchanged")

// sameDefinition reports whether the stored entry cur defines s.
func sameDefinition(name, cur string, s Schedule) bool {
	old, err := decodeSchedule(name, cur, SourceRedis)
	if err != nil || old.Cron != s.Cron || old.Every != s.Every || old.CatchUp != s.CatchUp {
		return false
	}
	a, err1 := json.Marshal(old.Job)
	b, err2 := json.Marshal(s.Job)
	return err1 == nil && err2 == nil && string(a) == string(b)
}

func (b *Schedules) fromConfig(name string) error {
	return &ScheduleError{Name: name, Err: ErrScheduleFromConfig,
		msg: fmt.Sprintf("fenceq: schedule %q is in a running pool's configuration (workerd.yaml or worker.Config.Periodic), which Redis cannot change; change it there, or store this one under another name", name)}
}

func (b *Schedules) notFound(name string) error {
	return &ScheduleError{Name: name, Err: ErrScheduleNotFound,
		msg: fmt.Sprintf("fenceq: no schedule named %q is stored in Redis (workerd schedules lists them)", name)}
}

// Add stores a new schedule, active at once: every pool fires its ticks
// after now (Redis time) once it has seen it, within its
// worker.Config.SchedulePoll. Sent again (a lost reply), it answers nil
// and changes nothing. It refuses a name Redis already stores with
// another definition (ErrScheduleExists), a name a running pool's configuration holds
// (ErrScheduleFromConfig), a bad schedule or job (*ValidationError) and a
// schedule past SchedulesMax.
func (b *Schedules) Add(ctx context.Context, s Schedule) error {
	if err := b.check(s); err != nil {
		return err
	}
	return b.store(ctx, s, false)
}

// Set replaces a stored schedule's timing, job and catch-up; it stays
// paused or active as it was. Its ticks after now are the new
// definition's; a pool that has not yet seen the change does not fire the
// old one, since it checks the version before every tick. A Set to the
// definition stored changes nothing (not even when its ticks start).
func (b *Schedules) Set(ctx context.Context, s Schedule) error {
	if err := b.check(s); err != nil {
		return err
	}
	return b.store(ctx, s, true)
}

func (b *Schedules) store(ctx context.Context, s Schedule, replace bool) error {
	return b.change(ctx, s.Name, func(c current) (string, error) {
		cur, found, n := c.entry, c.found, c.count
		st := StoredSchedule{Schedule: s, Source: SourceRedis, Rev: c.rev, Since: c.now}
		switch {
		case c.inConfig:
			return "", b.fromConfig(s.Name)
		case found && sameDefinition(s.Name, cur, s):
			return "", errUnchanged // sent again after a lost reply: the same outcome, nothing more
		case found && !replace:
			return "", &ScheduleError{Name: s.Name, Err: ErrScheduleExists,
				msg: fmt.Sprintf("fenceq: a schedule named %q is already stored with another definition; change it with Set (workerd schedule set), or remove it first", s.Name)}
		case !found && replace:
			return "", b.notFound(s.Name)
		case !found && n >= SchedulesMax:
			return "", &ValidationError{Field: "schedules", Reason: fmt.Sprintf("Redis stores %d, the most it keeps (SchedulesMax); remove one first", n)}
		case found:
			if old, err := decodeSchedule(s.Name, cur, SourceRedis); err == nil {
				st.Paused = old.Paused
			}
		}
		return encodeSchedule(st)
	})
}

// Pause stops a stored schedule: no pool fires a tick of it from the next
// tick it checks on (before every tick), until Resume.
func (b *Schedules) Pause(ctx context.Context, name string) error {
	return b.setPaused(ctx, name, true)
}

// Resume starts a paused schedule again: its ticks after now fire; those
// missed while it was paused do not.
func (b *Schedules) Resume(ctx context.Context, name string) error {
	return b.setPaused(ctx, name, false)
}

func (b *Schedules) setPaused(ctx context.Context, name string, paused bool) error {
	if err := validName("schedule name", name); err != nil {
		return err
	}
	return b.change(ctx, name, func(c current) (string, error) {
		if !c.found {
			return "", b.notFound(name)
		}
		s, err := decodeSchedule(name, c.entry, SourceRedis)
		if err != nil {
			return "", fmt.Errorf("fenceq: schedule %q cannot be read (%v); remove it and add it again", name, err)
		}
		if s.Paused == paused {
			return "", errUnchanged
		}
		s.Paused, s.Rev = paused, c.rev
		if !paused {
			s.Since = c.now
		}
		return encodeSchedule(s)
	})
}

// Remove deletes a stored schedule: no pool fires it from the next tick
// it checks on. Its jobs already enqueued stay.
func (b *Schedules) Remove(ctx context.Context, name string) error {
	if err := validName("schedule name", name); err != nil {
		return err
	}
	err := b.change(ctx, name, func(c current) (string, error) {
		if !c.found {
			return "", b.notFound(name)
		}
		return "", nil
	})
	if err == nil {
		_ = b.rdb.ZRem(ctx, b.schedRunsKey(), name).Err() // only the listing reads it
	}
	return err
}

// Version is the stored schedules' version: it changes with every add,
// change, pause, resume and remove. A pool reads it every few seconds and
// before every tick, and Stored only when it changed.
func (b *Schedules) Version(ctx context.Context) (int64, error) {
	v, err := b.rdb.Get(ctx, b.schedVersionKey()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fenceq: read the schedules' version: %w", err)
	}
	return v, nil
}

// storedReadMax is the most entries Stored reads: SchedulesMax, and room
// for the adds that raced past its count.
const storedReadMax = SchedulesMax + 100

// Stored reads every stored schedule and the version they are at (one
// MULTI, so the two agree), sorted by name. An entry that cannot be read
// is answered with its Problem set, in bad.
func (b *Schedules) Stored(ctx context.Context) (version int64, out []StoredSchedule, bad []ScheduleInfo, err error) {
	// Add keeps SchedulesMax; a hash made larger by hand is not read
	// whole by every pool.
	n, err := b.rdb.HLen(ctx, b.schedDefsKey()).Result()
	if err != nil {
		return 0, nil, nil, fmt.Errorf("fenceq: read the stored schedules: %w", err)
	}
	if n > storedReadMax {
		return 0, nil, nil, fmt.Errorf("fenceq: Redis stores %d schedules under %s, more than the %d Add allows (written there by something else); no pool reads them until they are fewer: remove some with workerd schedule rm", n, b.schedDefsKey(), SchedulesMax)
	}
	var all *redis.MapStringStringCmd
	var ver *redis.StringCmd
	_, err = b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		all = p.HGetAll(ctx, b.schedDefsKey())
		ver = p.Get(ctx, b.schedVersionKey())
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, nil, nil, fmt.Errorf("fenceq: read the stored schedules: %w", err)
	}
	if s, err := ver.Result(); err == nil {
		version, _ = strconv.ParseInt(s, 10, 64)
	}
	for name, v := range all.Val() {
		s, err := decodeSchedule(name, v, SourceRedis)
		if err == nil {
			_, err = s.Ticks()
		}
		if err != nil {
			bad = append(bad, ScheduleInfo{StoredSchedule: s, Problem: err.Error()})
			continue
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b StoredSchedule) int { return cmp.Compare(a.Name, b.Name) })
	return version, out, bad, nil
}

// RecordRun notes that a pool fired (or found fired) a schedule's tick: the
// listing's last run. It keeps the newest tick (ZADD GT), so pools that
// record one tick, or an older one late, change nothing.
func (b *Schedules) RecordRun(ctx context.Context, name string, tick time.Time) error {
	if err := b.rdb.ZAddGT(ctx, b.schedRunsKey(), redis.Z{Score: float64(tick.Unix()), Member: name}).Err(); err != nil {
		return fmt.Errorf("fenceq: record the run of schedule %q: %w", name, err)
	}
	return nil
}

// PublishConfig lists a pool's config schedules in Redis, for the
// listing, and for Add to refuse their names. A pool calls it at start and
// every ConfigPublishEvery; an entry no pool published for a day is
// dropped. A job whose payload is not JSON is listed without its job.
func (b *Schedules) PublishConfig(ctx context.Context, scheds []Schedule) error {
	if len(scheds) == 0 {
		return nil
	}
	now, err := b.redisNow(ctx)
	if err != nil {
		return err
	}
	key := b.schedConfigKey()
	fields := make([]any, 0, 2*len(scheds))
	for _, s := range scheds {
		st := StoredSchedule{Schedule: s, Source: SourceConfig, Since: now}
		v, err := encodeSchedule(st)
		if err != nil {
			st.Job = Job{Queue: s.Job.Queue, Kind: s.Job.Kind}
			if v, err = encodeSchedule(st); err != nil {
				continue
			}
		}
		fields = append(fields, s.Name, v)
	}
	if err := b.rdb.HSet(ctx, key, fields...).Err(); err != nil {
		return fmt.Errorf("fenceq: publish the config schedules: %w", err)
	}
	all, err := b.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil // the forgetting waits for the next time
	}
	var old []string
	for name, v := range all {
		if s, err := decodeSchedule(name, v, SourceConfig); err != nil || now.Sub(s.Since) > configForgetAfter {
			old = append(old, name)
		}
	}
	if len(old) > 0 {
		_ = b.rdb.HDel(ctx, key, old...).Err()
		stored, _ := b.rdb.HMGet(ctx, b.schedDefsKey(), old...).Result()
		var runs []any
		for i, v := range stored {
			if v == nil { // a stored one of the name keeps its last run
				runs = append(runs, old[i])
			}
		}
		if len(runs) > 0 {
			_ = b.rdb.ZRem(ctx, b.schedRunsKey(), runs...).Err()
		}
	}
	return nil
}

// List answers every schedule: those stored in Redis, and those of the
// pools' configurations published in the last few minutes, sorted by name
// (a name in both is listed twice, the stored one Shadowed), with its last
// run and next tick.
func (b *Schedules) List(ctx context.Context) ([]ScheduleInfo, error) {
	now, err := b.redisNow(ctx)
	if err != nil {
		return nil, err
	}
	_, stored, bad, err := b.Stored(ctx)
	if err != nil {
		return nil, err
	}
	var cfgCmd *redis.MapStringStringCmd
	var runsCmd *redis.ZSliceCmd
	if _, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		cfgCmd = p.HGetAll(ctx, b.schedConfigKey())
		runsCmd = p.ZRangeWithScores(ctx, b.schedRunsKey(), 0, -1)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("fenceq: read the config schedules and the last runs: %w", err)
	}
	cfgAll, runs := cfgCmd.Val(), runsCmd.Val()
	last := make(map[string]time.Time, len(runs))
	for _, z := range runs {
		if name, ok := z.Member.(string); ok {
			last[name] = time.Unix(int64(z.Score), 0)
		}
	}
	var out []ScheduleInfo
	inCfg := map[string]bool{}
	for name, v := range cfgAll {
		s, err := decodeSchedule(name, v, SourceConfig)
		if err != nil || now.Sub(s.Since) >= configSeenFor {
			continue
		}
		inCfg[name] = true
		out = append(out, ScheduleInfo{StoredSchedule: s})
	}
	for _, s := range stored {
		out = append(out, ScheduleInfo{StoredSchedule: s, Shadowed: inCfg[s.Name]})
	}
	out = append(out, bad...)
	for i := range out {
		si := &out[i]
		if t, ok := last[si.Name]; ok {
			si.LastRun, si.LastJob = t, TickID(si.Name, t)
		}
		if si.Problem != "" || si.Paused || si.Shadowed {
			continue
		}
		if k, err := si.Ticks(); err == nil {
			si.Next = k.Next(now)
		}
	}
	slices.SortFunc(out, func(a, b ScheduleInfo) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Source, b.Source))
	})
	return out, nil
}

// Get answers one schedule as List does: the stored one when Redis
// stores it, else a config one; ErrScheduleNotFound when neither.
func (b *Schedules) Get(ctx context.Context, name string) (ScheduleInfo, error) {
	if err := validName("schedule name", name); err != nil {
		return ScheduleInfo{}, err
	}
	all, err := b.List(ctx)
	if err != nil {
		return ScheduleInfo{}, err
	}
	var found *ScheduleInfo
	for i := range all {
		if all[i].Name == name && (found == nil || all[i].Source == SourceRedis) {
			found = &all[i]
		}
	}
	if found == nil {
		return ScheduleInfo{}, &ScheduleError{Name: name, Err: ErrScheduleNotFound,
			msg: fmt.Sprintf("fenceq: no schedule named %q, stored or in a running pool's configuration", name)}
	}
	return *found, nil
}
