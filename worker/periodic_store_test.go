package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// fakeStore is the stored schedules, in memory, and fakeEnqueuer the jobs
// the scheduler enqueues: the scheduler's decisions, on a clock the test
// sets.
type fakeStore struct {
	mu      sync.Mutex
	version int64
	defs    map[string]broker.StoredSchedule
	runs    map[string]time.Time
	reads   int // Stored calls
	fail    int // Version calls still to fail, as an outage would
}

func (f *fakeStore) Version(context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail > 0 {
		f.fail--
		return 0, io.EOF
	}
	return f.version, nil
}

func (f *fakeStore) Stored(context.Context) (int64, []broker.StoredSchedule, []broker.ScheduleInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	var out []broker.StoredSchedule
	for _, d := range f.defs {
		out = append(out, d)
	}
	return f.version, out, nil, nil
}

func (f *fakeStore) RecordRun(_ context.Context, name string, tick time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if tick.After(f.runs[name]) {
		f.runs[name] = tick
	}
	return nil
}

func (f *fakeStore) PublishConfig(context.Context, []broker.Schedule) error { return nil }

// put adds or changes a stored schedule at time since, as Schedules.Add
// and Set do: a new revision, the version bumped.
func (f *fakeStore) put(name string, every time.Duration, since time.Time, mod ...func(*broker.StoredSchedule)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version++
	d := broker.StoredSchedule{Schedule: broker.Schedule{Name: name, Every: every, Job: broker.Job{Queue: "q", Kind: "k"}},
		Source: broker.SourceRedis, Rev: f.version, Since: since}
	for _, m := range mod {
		m(&d)
	}
	f.defs[name] = d
}

func (f *fakeStore) remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.version++
	delete(f.defs, name)
}

type fakeEnqueuer struct {
	mu  sync.Mutex
	ids []string
}

func (f *fakeEnqueuer) ValidateJob(broker.Job) error { return nil }

func (f *fakeEnqueuer) Enqueue(_ context.Context, j broker.Job) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Contains(f.ids, j.ID) {
		return j.ID, &broker.DuplicateError{Queue: j.Queue, ID: j.ID}
	}
	f.ids = append(f.ids, j.ID)
	return j.ID, nil
}

func (f *fakeEnqueuer) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := f.ids
	f.ids = nil
	return ids
}

type schedTest struct {
	s     *scheduler
	store *fakeStore
	jobs  *fakeEnqueuer
}

func newSchedTest(t *testing.T, config ...Periodic) *schedTest {
	store := &fakeStore{defs: map[string]broker.StoredSchedule{}, runs: map[string]time.Time{}}
	jobs := &fakeEnqueuer{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := newScheduler(context.Background(), schedulerParams{
		log: log, periodic: config, poll: time.Second, client: jobs, store: store,
		retries: retrier{log: log, halt: make(chan struct{})},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range s.config {
		s.active[sc.Name] = &entry{schedule: sc}
	}
	return &schedTest{s: s, store: store, jobs: jobs}
}

// at reads the store as the loop does at now (its poll, or the check
// before a stored tick), then fires what is due.
func (st *schedTest) at(now time.Time) {
	st.s.refreshAt(context.Background(), now)
	for _, e := range st.s.active {
		if !e.next.After(now) {
			st.s.enqueueTick(e.schedule, e.next)
			e.next = e.schedule.next(now)
		}
	}
}

func (st *schedTest) want(t *testing.T, when string, ids ...string) {
	t.Helper()
	got := st.jobs.take()
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Fatalf("%s: enqueued %q, want %q", when, got, ids)
	}
}

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func tick(name string, t time.Time) string { return broker.TickID(name, t) }

// A schedule added while the pool runs fires from its first tick after
// the add, the one that came due before the pool saw it included, and
// never one from before the add.
func TestStoredScheduleAdded(t *testing.T) {
	st := newSchedTest(t)
	st.at(t0) // the first read: nothing stored
	st.want(t, "nothing stored")
	st.store.put("m", time.Minute, t0.Add(30*time.Second))
	st.at(t0.Add(65 * time.Second)) // seen 5s after its first tick
	st.want(t, "seen late", tick("m", t0.Add(time.Minute)))
	st.at(t0.Add(66 * time.Second))
	st.want(t, "between ticks")
	st.at(t0.Add(2 * time.Minute))
	st.want(t, "its next tick", tick("m", t0.Add(2*time.Minute)))
	if got := st.store.runs["m"]; !got.Equal(t0.Add(2 * time.Minute)) {
		t.Fatalf("last run recorded %v", got)
	}
}

// A pause, seen at the check before the tick, stops the tick; a resume
// fires the ticks after it, not those missed while paused.
func TestStoredSchedulePaused(t *testing.T) {
	st := newSchedTest(t)
	st.store.put("p", time.Minute, t0.Add(-time.Hour))
	st.at(t0.Add(time.Second))
	st.want(t, "first read without catch-up")
	pausedAt := t0.Add(59 * time.Second)
	st.store.put("p", time.Minute, pausedAt, func(d *broker.StoredSchedule) { d.Paused = true })
	st.at(t0.Add(time.Minute)) // the tick's check sees the pause
	st.want(t, "paused before its tick")
	st.at(t0.Add(3 * time.Minute))
	st.want(t, "paused")
	st.store.put("p", time.Minute, t0.Add(3*time.Minute+30*time.Second))
	st.at(t0.Add(3*time.Minute + 31*time.Second))
	st.want(t, "just resumed")
	st.at(t0.Add(4 * time.Minute))
	st.want(t, "resumed", tick("p", t0.Add(4*time.Minute)))
}

// A removed schedule stops; a changed one keeps the ticks both share
// (same ids) and takes the new timing from its change on.
func TestStoredScheduleChangedAndRemoved(t *testing.T) {
	st := newSchedTest(t)
	st.store.put("c", time.Minute, t0)
	st.at(t0.Add(time.Second))
	st.at(t0.Add(time.Minute))
	st.want(t, "every minute", tick("c", t0.Add(time.Minute)))
	reads := st.store.reads
	st.at(t0.Add(90 * time.Second))
	if st.store.reads != reads {
		t.Fatal("the schedules were read again while their version stayed")
	}
	// To every 5 minutes, changed at 1:30: its next tick is 5:00, and the
	// 2:00 tick of the old timing never fires.
	st.store.put("c", 5*time.Minute, t0.Add(90*time.Second))
	st.at(t0.Add(2 * time.Minute))
	st.want(t, "the old timing's tick after the change")
	st.at(t0.Add(5 * time.Minute))
	st.want(t, "the new timing", tick("c", t0.Add(5*time.Minute)))
	st.store.remove("c")
	st.at(t0.Add(10 * time.Minute))
	st.want(t, "removed")
	if len(st.s.active) != 0 {
		t.Fatalf("still active: %v", st.s.active)
	}
}

// At a pool's start a stored schedule with catch-up fires its latest tick
// missed, unless that tick came before the schedule was added.
func TestStoredScheduleCatchUp(t *testing.T) {
	st := newSchedTest(t)
	catch := func(d *broker.StoredSchedule) { d.CatchUp = true }
	st.store.put("old", time.Hour, t0.Add(-5*time.Hour), catch)
	st.store.put("new", time.Hour, t0.Add(10*time.Minute), catch)
	st.at(t0.Add(20 * time.Minute))
	st.want(t, "catch-up at start", tick("old", t0))
	// A later change does not catch up: it fires only what came due
	// since the pool last looked.
	st.store.put("old", time.Hour, t0.Add(21*time.Minute), catch)
	st.at(t0.Add(22 * time.Minute))
	st.want(t, "a change while running")
}

// A stored schedule whose name is in the pool's config is ignored by that
// pool: it fires its own.
func TestStoredScheduleShadowedByConfig(t *testing.T) {
	st := newSchedTest(t, Periodic{Name: "n", Every: time.Hour, Job: broker.Job{Queue: "q", Kind: "k"}})
	st.s.active["n"].next = t0.Add(time.Hour)
	st.store.put("n", time.Minute, t0)
	st.at(t0.Add(time.Minute))
	st.want(t, "the stored one's minute")
	st.at(t0.Add(time.Hour))
	st.want(t, "the config one's hour", tick("n", t0.Add(time.Hour)))
	if e := st.s.active["n"]; e.source != broker.SourceConfig {
		t.Fatalf("the active n comes from %s", e.source)
	}
}

// Two pools that see a change at different times fire each tick once: the
// ids agree, whichever pool is first.
func TestStoredScheduleTwoPools(t *testing.T) {
	a, b := newSchedTest(t), newSchedTest(t)
	b.store, b.s.store = a.store, a.store // one Redis
	b.jobs, b.s.client = a.jobs, a.jobs
	a.at(t0)
	b.at(t0)
	a.store.put("two", 10*time.Second, t0.Add(time.Second))
	a.at(t0.Add(2 * time.Second))  // a sees it at once
	b.at(t0.Add(14 * time.Second)) // b 4s after its first tick
	a.at(t0.Add(14 * time.Second))
	for sec := 15; sec <= 40; sec++ {
		now := t0.Add(time.Duration(sec) * time.Second)
		b.at(now)
		a.at(now)
	}
	a.want(t, "two pools", tick("two", t0.Add(10*time.Second)), tick("two", t0.Add(20*time.Second)),
		tick("two", t0.Add(30*time.Second)), tick("two", t0.Add(40*time.Second)))
}

// Two config schedules of one name would share their ticks' ids: refused.
func TestPeriodicNamedTwice(t *testing.T) {
	job := broker.Job{Queue: "q", Kind: "k"}
	_, err := newScheduler(context.Background(), schedulerParams{client: &fakeEnqueuer{}, periodic: []Periodic{
		{Name: "x", Every: time.Minute, Job: job}, {Name: "x", Cron: "@hourly", Job: job},
	}})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "Periodic" || !strings.Contains(err.Error(), "listed twice") {
		t.Fatalf("newScheduler answered %v", err)
	}
}

// A pool whose clock is behind Redis's fires none of a new schedule's
// ticks from before it was added (Redis time).
func TestStoredScheduleClockBehind(t *testing.T) {
	st := newSchedTest(t)
	st.at(t0.Add(-time.Second))
	st.store.put("b", 10*time.Second, t0.Add(30*time.Second)) // Redis is 30s ahead
	for sec := 1; sec <= 39; sec++ {
		st.at(t0.Add(time.Duration(sec) * time.Second))
	}
	st.want(t, "before its add, on Redis's clock")
	st.at(t0.Add(40 * time.Second))
	st.want(t, "its first tick", tick("b", t0.Add(40*time.Second)))
}

// A pause that reached Redis is not missed for an outage at the tick: the
// check before a stored tick retries until it answers.
func TestStoredSchedulePauseSeenThroughAnOutage(t *testing.T) {
	st := newSchedTest(t)
	st.store.put("o", time.Minute, t0)
	st.at(t0.Add(time.Second))
	st.store.put("o", time.Minute, t0.Add(30*time.Second), func(d *broker.StoredSchedule) { d.Paused = true })
	st.store.fail = 3
	st.s.refresh(true) // the loop's check before the tick at 1:00
	for _, e := range st.s.active {
		st.s.enqueueTick(e.schedule, e.next)
	}
	st.want(t, "paused during an outage")
	if st.store.fail != 0 {
		t.Fatal("the check did not retry")
	}
}
