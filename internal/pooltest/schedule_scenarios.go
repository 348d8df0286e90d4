package pooltest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// ranTicks records the ticks of a schedule that ran: the tick's Unix
// second → the kind of its job, and how many times each ran.
type ranTicks struct {
	mu    sync.Mutex
	kinds map[int64]string
	runs  map[int64]int
}

func (r *ranTicks) handler(name string) handlers.Handler {
	return handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		sec, ok := strings.CutPrefix(j.ID, "periodic:"+name+":")
		if !ok {
			return nil
		}
		n, err := strconv.ParseInt(sec, 10, 64)
		if err != nil {
			return nil
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.kinds[n] = j.Kind
		r.runs[n]++
		return nil
	})
}

// since answers the ticks at or after from, in order, failing on a tick
// that ran twice.
func (r *ranTicks) since(t *testing.T, from int64) []int64 {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for n, c := range r.runs {
		if c != 1 {
			t.Fatalf("tick %d ran %d times", n, c)
		}
		if n >= from {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

func (r *ranTicks) kind(n int64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.kinds[n]
}

// A schedule stored in Redis while two pools run: each picks it up
// without a restart, each tick runs once, a change is taken up, a pause
// stops the ticks and a resume starts them again.
func testStoredSchedules(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	ran := &ranTicks{kinds: map[int64]string{}, runs: map[int64]int{}}
	h := ran.handler("rt")
	poll := func(c *worker.Config) { c.SchedulePoll = 200 * time.Millisecond }
	s.pool(t, h, poll)
	s.pool(t, h, poll)
	sc := s.b.Schedules()
	def := broker.Schedule{Name: "rt", Every: time.Second, Job: broker.Job{Queue: s.q, Kind: "a"}}
	added := time.Now()
	if err := sc.Add(s.ctx, def); err != nil {
		t.Fatal(err)
	}
	// Consecutive ticks, none twice.
	consecutive := func(what string, ticks []int64) {
		t.Helper()
		for i := 1; i < len(ticks); i++ {
			if ticks[i] != ticks[i-1]+1 {
				t.Fatalf("%s: ticks %v skip one\nlogs:\n%s", what, ticks, s.logs)
			}
		}
	}
	waitTicks := func(what string, from int64, n int) []int64 {
		t.Helper()
		deadline := time.Now().Add(time.Duration(n)*time.Second + 5*time.Second)
		for {
			got := ran.since(t, from)
			if len(got) >= n {
				consecutive(what, got)
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: ran ticks %v, want %d\nlogs:\n%s", what, got, n, s.logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := waitTicks("after the add", added.Unix(), 3)
	for _, n := range first {
		want(t, fmt.Sprintf("kind of tick %d", n), ran.kind(n), "a")
	}

	// A change of its job, taken up within a poll.
	def.Job.Kind = "b"
	changed := time.Now()
	if err := sc.Set(s.ctx, def); err != nil {
		t.Fatal(err)
	}
	after := waitTicks("after the change", changed.Unix()+1, 2)
	for _, n := range after {
		want(t, fmt.Sprintf("kind of tick %d after the change", n), ran.kind(n), "b")
	}

	// A pause: nothing after it.
	if err := sc.Pause(s.ctx, "rt"); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	time.Sleep(2500 * time.Millisecond)
	if late := ran.since(t, paused.Unix()+1); len(late) > 0 {
		t.Fatalf("ticks %v ran after the pause at %v\nlogs:\n%s", late, paused, s.logs)
	}

	// A resume: the ticks after it run, none of those missed.
	if err := sc.Resume(s.ctx, "rt"); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	if missed := ran.since(t, paused.Unix()+1); len(missed) > 0 {
		t.Fatalf("ticks %v of the pause ran", missed)
	}
	waitTicks("after the resume", resumed.Unix()+1, 2)
	info, err := sc.Get(s.ctx, "rt")
	if err != nil {
		t.Fatal(err)
	}
	if info.LastRun.Before(resumed.Truncate(time.Second)) || info.LastJob != broker.TickID("rt", info.LastRun) {
		t.Fatalf("last run %v (%s), resumed at %v", info.LastRun, info.LastJob, resumed)
	}

	// Removed: no tick after it.
	if err := sc.Remove(s.ctx, "rt"); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	time.Sleep(1500 * time.Millisecond)
	if late := ran.since(t, removed.Unix()+1); len(late) > 0 {
		t.Fatalf("ticks %v ran after the remove", late)
	}
	s.consistent(t)
}

// A pool's config schedules are listed as such, and their names cannot be
// stored.
func testConfigSchedulesListed(t *testing.T, nc NewClient) {
	s := setup(t, nc)
	own := worker.Periodic{Name: "cfg", Cron: "@hourly", Job: broker.Job{Queue: s.q, Kind: "report"}}
	s.pool(t, handlers.HandlerFunc(func(context.Context, *handlers.Job) error { return nil }),
		func(c *worker.Config) { c.Periodic = []worker.Periodic{own} })
	sc := s.b.Schedules()
	var info broker.ScheduleInfo
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if info, err = sc.Get(s.ctx, "cfg"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool's config schedule is not listed: %v", err)
		}
	}
	want(t, "source", info.Source, broker.SourceConfig)
	want(t, "spec", info.Spec(), "@hourly")
	if info.Next.IsZero() {
		t.Fatal("no next run")
	}
	if err := sc.Add(s.ctx, broker.Schedule{Name: "cfg", Every: time.Minute, Job: own.Job}); err == nil {
		t.Fatal("a config schedule's name was stored")
	}
}
