package brokertest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// The schedules stored in Redis (broker.Schedules): what an operator adds,
// changes, pauses and removes, and what every pool reads.

func (s *bundle) schedKey(name string) string { return s.b.Prefix() + ":{schedules}:" + name }

func (s *bundle) schedule(name string) broker.Schedule {
	return broker.Schedule{Name: name, Every: time.Minute, Job: broker.Job{Queue: s.q, Kind: "report", Payload: []byte(`{"a":1}`)}}
}

func (s *bundle) version(t failer) int64 {
	v, err := s.b.Schedules().Version(s.ctx)
	noErr(t, "Version", err)
	return v
}

func (s *bundle) stored(t failer) map[string]broker.StoredSchedule {
	_, defs, bad, err := s.b.Schedules().Stored(s.ctx)
	noErr(t, "Stored", err)
	if len(bad) > 0 {
		t.Fatalf("stored schedules that cannot be read: %+v", bad)
	}
	m := map[string]broker.StoredSchedule{}
	for _, d := range defs {
		m[d.Name] = d
	}
	return m
}

// Add, Set, Pause, Resume and Remove each change what Stored reads and
// bump the version once; a refused change writes nothing.
func testSchedulesStore(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	sc := s.b.Schedules()
	want(t, "version of no schedules", s.version(t), int64(0))

	noErr(t, "Add", sc.Add(s.ctx, s.schedule("a")))
	want(t, "version after an add", s.version(t), int64(1))
	a := s.stored(t)["a"]
	want(t, "source", a.Source, broker.SourceRedis)
	want(t, "rev", a.Rev, int64(1))
	want(t, "every", a.Every, time.Minute)
	want(t, "payload", string(a.Job.Payload), `{"a":1}`)
	if a.Since.IsZero() || a.Paused {
		t.Fatalf("a new schedule: since %v, paused %v", a.Since, a.Paused)
	}

	other := s.schedule("a")
	other.Every = time.Hour
	wantErr(t, "Add of a stored name", sc.Add(s.ctx, other), broker.ErrScheduleExists)
	wantErr(t, "Set of a name not stored", sc.Set(s.ctx, s.schedule("b")), broker.ErrScheduleNotFound)
	wantErr(t, "Pause of a name not stored", sc.Pause(s.ctx, "b"), broker.ErrScheduleNotFound)
	wantErr(t, "Remove of a name not stored", sc.Remove(s.ctx, "b"), broker.ErrScheduleNotFound)
	want(t, "version after refused changes", s.version(t), int64(1))

	noErr(t, "Pause", sc.Pause(s.ctx, "a"))
	p := s.stored(t)["a"]
	want(t, "paused", p.Paused, true)
	want(t, "rev after pause", p.Rev, int64(2))

	// A change keeps the pause.
	ch := s.schedule("a")
	ch.Every, ch.Cron = 0, "0 * * * *"
	noErr(t, "Set", sc.Set(s.ctx, ch))
	c := s.stored(t)["a"]
	want(t, "cron after set", c.Cron, "0 * * * *")
	want(t, "still paused after set", c.Paused, true)
	want(t, "rev after set", c.Rev, int64(3))

	s.Advance(20 * time.Millisecond)
	noErr(t, "Resume", sc.Resume(s.ctx, "a"))
	r := s.stored(t)["a"]
	want(t, "paused after resume", r.Paused, false)
	if !r.Since.After(c.Since) {
		t.Fatalf("resume kept since %v (was %v): the ticks missed while paused would fire", r.Since, c.Since)
	}
	// Resuming what runs changes nothing a pool keeps.
	noErr(t, "Resume again", sc.Resume(s.ctx, "a"))
	want(t, "rev after a second resume", s.stored(t)["a"].Rev, r.Rev)

	noErr(t, "RecordRun", sc.RecordRun(s.ctx, "a", time.Unix(1800000000, 0)))
	noErr(t, "Remove", sc.Remove(s.ctx, "a"))
	if _, ok := s.stored(t)["a"]; ok {
		t.Fatal("a removed schedule is still stored")
	}
	list, err := sc.List(s.ctx)
	noErr(t, "List", err)
	want(t, "schedules listed after the remove", len(list), 0)
	// Added again, it starts without the last run of the one removed.
	noErr(t, "Add again", sc.Add(s.ctx, s.schedule("a")))
	got, err := sc.Get(s.ctx, "a")
	noErr(t, "Get", err)
	if !got.LastRun.IsZero() {
		t.Fatalf("a schedule added again shows the last run %v of the one removed", got.LastRun)
	}
}

// Every refusal names what was wrong and writes nothing.
func testSchedulesRefused(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	sc := s.b.Schedules()
	mod := func(f func(*broker.Schedule)) broker.Schedule {
		x := s.schedule("x")
		f(&x)
		return x
	}
	for _, tc := range []struct {
		name, field string
		s           broker.Schedule
	}{
		{"no name", "schedule name", mod(func(x *broker.Schedule) { x.Name = "" })},
		{"long name", "schedule name", mod(func(x *broker.Schedule) { x.Name = strings.Repeat("n", 201) })},
		{"control character", "schedule name", mod(func(x *broker.Schedule) { x.Name = "a\nb" })},
		{"neither cron nor every", "schedule", mod(func(x *broker.Schedule) { x.Every = 0 })},
		{"both", "schedule", mod(func(x *broker.Schedule) { x.Cron = "* * * * *" })},
		{"bad cron", "cron", mod(func(x *broker.Schedule) { x.Every, x.Cron = 0, "61 * * * *" })},
		{"every under a second", "every", mod(func(x *broker.Schedule) { x.Every = time.Millisecond })},
		{"an id", "id", mod(func(x *broker.Schedule) { x.Job.ID = "mine" })},
		{"a run time", "run_at", mod(func(x *broker.Schedule) { x.Job.RunAt = time.Now() })},
		{"no queue", "queue", mod(func(x *broker.Schedule) { x.Job.Queue = "" })},
		{"no kind", "kind", mod(func(x *broker.Schedule) { x.Job.Kind = "" })},
		{"payload not JSON", "payload", mod(func(x *broker.Schedule) { x.Job.Payload = []byte("not json") })},
		{"large job", "job", mod(func(x *broker.Schedule) {
			x.Job.Payload = []byte(`"` + strings.Repeat("p", broker.ScheduleJobMaxBytes) + `"`)
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := sc.Add(s.ctx, tc.s)
			var ve *broker.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Add answered %v, want a *ValidationError", err)
			}
			want(t, "field", ve.Field, tc.field)
			if ve.Reason == "" {
				t.Fatal("the refusal says nothing")
			}
		})
	}
	want(t, "version after refusals", s.version(t), int64(0))

	// The bound on their number: Redis holds SchedulesMax (written here
	// directly, which is quicker); one more is refused, a change is not.
	fields := make([]any, 0, 2*broker.SchedulesMax)
	noErr(t, "Add", sc.Add(s.ctx, s.schedule("first")))
	v, err := s.Client.HGet(s.ctx, s.schedKey("defs"), "first").Result()
	noErr(t, "HGET", err)
	for i := range broker.SchedulesMax - 1 {
		fields = append(fields, fmt.Sprintf("s%04d", i), v)
	}
	noErr(t, "HSET", s.Client.HSet(s.ctx, s.schedKey("defs"), fields...).Err())
	var ve *broker.ValidationError
	if err := sc.Add(s.ctx, s.schedule("one-too-many")); !errors.As(err, &ve) || ve.Field != "schedules" {
		t.Fatalf("Add past SchedulesMax answered %v", err)
	}
	noErr(t, "Set at SchedulesMax", sc.Set(s.ctx, s.schedule("first")))
	noErr(t, "Remove at SchedulesMax", sc.Remove(s.ctx, "s0000"))
	noErr(t, "Add once there is room", sc.Add(s.ctx, s.schedule("one-more")))
}

// A name a running pool's configuration holds cannot be stored, and is
// listed as a config schedule; a config entry no pool has published for
// a while is no longer listed and no longer blocks the name.
func testSchedulesConfig(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	sc := s.b.Schedules()
	cfg := s.schedule("nightly")
	cfg.Every, cfg.Cron = 0, "@daily"
	noErr(t, "Add before the config is published", sc.Add(s.ctx, s.schedule("both")))
	noErr(t, "PublishConfig", sc.PublishConfig(s.ctx, []broker.Schedule{cfg, s.schedule("both")}))
	wantErr(t, "Add of a config name", sc.Add(s.ctx, cfg), broker.ErrScheduleFromConfig)
	wantErr(t, "Set of a config name", sc.Set(s.ctx, s.schedule("both")), broker.ErrScheduleFromConfig)
	list, err := sc.List(s.ctx)
	noErr(t, "List", err)
	var got []string
	for _, si := range list {
		got = append(got, fmt.Sprintf("%s/%s/shadowed=%v/next=%v", si.Name, si.Source, si.Shadowed, !si.Next.IsZero()))
	}
	want(t, "listing", strings.Join(got, " "), "both/config/shadowed=false/next=true both/redis/shadowed=true/next=false nightly/config/shadowed=false/next=true")
	one, err := sc.Get(s.ctx, "nightly")
	noErr(t, "Get of a config schedule", err)
	want(t, "its spec", one.Spec(), "@daily")
	if !s.Frozen {
		return // the rest waits five minutes of Redis time
	}
	s.Advance(6 * time.Minute)
	list, err = sc.List(s.ctx)
	noErr(t, "List", err)
	want(t, "schedules listed once the pools are gone", len(list), 1)
	noErr(t, "Add once no pool holds the name", sc.Add(s.ctx, cfg))
}

// The last run is the newest tick recorded, whoever records it and in
// whatever order; the next run is computed on Redis's clock.
func testSchedulesRuns(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	sc := s.b.Schedules()
	noErr(t, "Add", sc.Add(s.ctx, s.schedule("r")))
	t1, t2 := time.Unix(1800000060, 0), time.Unix(1800000120, 0)
	noErr(t, "RecordRun", sc.RecordRun(s.ctx, "r", t2))
	noErr(t, "RecordRun older", sc.RecordRun(s.ctx, "r", t1))
	noErr(t, "RecordRun again", sc.RecordRun(s.ctx, "r", t2))
	got, err := sc.Get(s.ctx, "r")
	noErr(t, "Get", err)
	if !got.LastRun.Equal(t2) {
		t.Fatalf("last run %v, want %v", got.LastRun, t2)
	}
	want(t, "last job", got.LastJob, broker.TickID("r", t2))
	now, err := s.Client.Time(s.ctx).Result()
	noErr(t, "TIME", err)
	if want := now.Truncate(time.Minute).Add(time.Minute); got.Next.Before(want.Add(-time.Minute)) || got.Next.After(want.Add(time.Minute)) {
		t.Fatalf("next run %v, Redis time %v", got.Next, now)
	}
	noErr(t, "Pause", sc.Pause(s.ctx, "r"))
	got, err = sc.Get(s.ctx, "r")
	noErr(t, "Get", err)
	if !got.Next.IsZero() {
		t.Fatalf("a paused schedule shows a next run %v", got.Next)
	}
}

// Changes that interleave (two operators, two dashboards) each happen
// once: none is lost, and each bumps the version once.
func testSchedulesConcurrentChanges(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	sc := s.b.Schedules()
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() { errs <- sc.Add(s.ctx, s.schedule(fmt.Sprintf("c%02d", i))) })
		wg.Go(func() {
			one := s.schedule("same")
			one.Job.Kind = fmt.Sprintf("k%02d", i) // n definitions of one name: one is stored
			errs <- sc.Add(s.ctx, one)
		})
	}
	wg.Wait()
	close(errs)
	var exists int
	for err := range errs {
		if errors.Is(err, broker.ErrScheduleExists) {
			exists++
			continue
		}
		noErr(t, "Add", err)
	}
	want(t, "adds of one name refused", exists, n-1)
	want(t, "stored", len(s.stored(t)), n+1)
	want(t, "version", s.version(t), int64(n+1))
}

// An entry edited by hand is reported, not fatal to the others; it can
// be removed.
func testSchedulesHandEdits(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	sc := s.b.Schedules()
	noErr(t, "Add", sc.Add(s.ctx, s.schedule("good")))
	noErr(t, "HSET", s.Client.HSet(s.ctx, s.schedKey("defs"), "junk", "{not json", "badcron", `{"cron":"nope","job":{"queue":"q","kind":"k"},"since_ms":1}`).Err())
	_, defs, bad, err := sc.Stored(s.ctx)
	noErr(t, "Stored", err)
	want(t, "readable", len(defs), 1)
	want(t, "unreadable", len(bad), 2)
	list, err := sc.List(s.ctx)
	noErr(t, "List", err)
	want(t, "listed", len(list), 3)
	for _, si := range list {
		if (si.Problem != "") == (si.Name == "good") {
			t.Fatalf("%s: problem %q", si.Name, si.Problem)
		}
	}
	noErr(t, "Remove of an unreadable entry", sc.Remove(s.ctx, "junk"))
	noErr(t, "Pause of an entry whose cron is bad", sc.Pause(s.ctx, "badcron"))
}

// A change sent again after its reply was lost answers as the first did
// and changes nothing more: the version, the revision and the time its
// ticks start from stay.
func testSchedulesResent(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	sc := s.b.Schedules()
	def := s.schedule("again")
	noErr(t, "Add", sc.Add(s.ctx, def))
	before := s.stored(t)["again"]
	s.Advance(20 * time.Millisecond)
	noErr(t, "Add sent again", sc.Add(s.ctx, def))
	noErr(t, "Set to what is stored", sc.Set(s.ctx, def))
	after := s.stored(t)["again"]
	want(t, "rev", after.Rev, before.Rev)
	want(t, "since", after.Since.UnixMilli(), before.Since.UnixMilli())
	want(t, "version", s.version(t), int64(1))
	// Another definition under the name is refused, not taken as a re-send.
	other := def
	other.Job.Kind = "other"
	wantErr(t, "Add of another definition", sc.Add(s.ctx, other), broker.ErrScheduleExists)
	noErr(t, "Pause", sc.Pause(s.ctx, "again"))
	noErr(t, "Pause sent again", sc.Pause(s.ctx, "again"))
	want(t, "version after two pauses", s.version(t), int64(2))
	noErr(t, "Remove", sc.Remove(s.ctx, "again"))
	wantErr(t, "Remove sent again", sc.Remove(s.ctx, "again"), broker.ErrScheduleNotFound)
	want(t, "version after the removes", s.version(t), int64(3))
}

// A version written by hand that is not a number does not wedge the
// changes: the next one goes on from a value no pool has seen.
func testSchedulesCorruptVersion(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	sc := s.b.Schedules()
	noErr(t, "SET", s.Client.Set(s.ctx, s.schedKey("version"), "junk", 0).Err())
	if _, err := sc.Version(s.ctx); err == nil {
		t.Fatal("Version read junk as a number")
	}
	noErr(t, "Add over a junk version", sc.Add(s.ctx, s.schedule("v")))
	v := s.version(t)
	if v <= 1 {
		t.Fatalf("version after the junk %d: a pool that saw 1 before would miss the change", v)
	}
	noErr(t, "Pause", sc.Pause(s.ctx, "v"))
	want(t, "version after the pause", s.version(t), v+1)
}

// 100,000 entries written under the stored schedules by hand: no pool
// reads them all; the error says what to do.
func testSchedulesHugeHash(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	sc := s.b.Schedules()
	fields := make([]any, 0, 200_000)
	for i := range 100_000 {
		fields = append(fields, fmt.Sprintf("h%06d", i), "{}")
	}
	noErr(t, "HSET", s.Client.HSet(s.ctx, s.schedKey("defs"), fields...).Err())
	_, _, _, err := sc.Stored(s.ctx)
	if err == nil || !strings.Contains(err.Error(), "100000 schedules") || !strings.Contains(err.Error(), "remove some") {
		t.Fatalf("Stored of 100,000 entries answered %v", err)
	}
	if _, err := sc.List(s.ctx); err == nil {
		t.Fatal("List read 100,000 entries")
	}
	var ve *broker.ValidationError
	if err := sc.Add(s.ctx, s.schedule("more")); !errors.As(err, &ve) {
		t.Fatalf("Add past 100,000 answered %v", err)
	}
}
