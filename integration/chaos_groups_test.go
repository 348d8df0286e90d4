package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// TestChaosGroups is the chaos suite's grouped run: the same workers,
// faults and Redis (AOF, appendfsync always) as TestChaos, over 200
// groups with limits, plus ungrouped jobs, with the queue's events on.
// Each job is an HTTP handler served by the test: it sleeps 100–300 ms
// and answers done, a retry (503) or a snooze (503 with Retry-After). The
// test follows the events stream on Redis's clock: started opens the
// job's lease, and done, dead, cancelled, retried, snoozed, unhandled,
// released, force_released or reaped closes it (one valid lease per job,
// invariant 1). It prints one line:
//
//	chaos groups: jobs=N groups=200 ... over_limit=0 stuck_groups=0 lost=0 stale_accepted=0 check_dirty=0 ...
//
// Its counts:
//   - over_limit counts the starts that took a group's open leases past its
//     effective max, the starts of a rate-limited group closer than
//     ceil(period/rate) to its previous one (an XADD's time trails its
//     script's clock, so a pair the events put closer is judged on the two
//     claims' claimed_at, read from their hashes; rate_unjudged counts the
//     pairs whose hashes had moved on), and the starts of an ordered
//     group's job while an earlier job of the group was not final (a job
//     sent back to retry must run again before the later ones);
//   - stuck_groups counts the groups that had a pending job they could
//     start (a free slot, the rate's spacing past, an ordered group's next
//     job pending) and saw no start for longer than lease + reap interval +
//     2 × poll while other jobs started (sampled each second in one
//     read-only script), plus, after the drain, each group with a job not
//     done;
//   - lost and stale_accepted are as in TestChaos;
//   - check_dirty counts the Checks, one after every fault, that were not
//     clean.
//
// FENCEQ_CHAOS_DURATION sets the fault window (default 30s: the CI
// variant). FENCEQ_CHAOS_GROUPS_BREAK=unfile checks the checks: half-way
// it gives one group a backlog and takes it out of the rotation and the
// timer by hand (a G2 violation), and the run must fail with
// stuck_groups above 0.
func TestChaosGroups(t *testing.T) {
	client(t) // skips (or fails under CI) without Redis
	window := chaosWindow(t, 30*time.Second)
	ctx := context.Background()
	c := newChaosServer(t, "gchaos")
	h := startGroupHandler(t)
	c.writeConfig(gchaosSlots, fmt.Sprintf("  work:\n    http:\n      url: %s/job\n      timeout: 10s\n", h.srv.URL))
	m := newGroupMonitor(c)
	m.setLimits(ctx)
	// Far past the run's events (a few per job), so that none is trimmed.
	if err := c.b.Inspector().SetEvents(ctx, c.queue, 5_000_000); err != nil {
		t.Fatal(err)
	}
	sampling := m.sampleEvery(time.Second)
	c.startWorkers(gchaosWorkers)

	pctx, stopProducing := context.WithCancel(ctx)
	var producing sync.WaitGroup
	producing.Add(1)
	go func() { defer producing.Done(); m.produce(pctx, 40) }()

	end := time.Now().Add(window)
	toBreak := os.Getenv("FENCEQ_CHAOS_GROUPS_BREAK") == "unfile"
	for time.Now().Before(end) {
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
		if toBreak && time.Until(end) < window/2 {
			toBreak = false
			m.unfile(ctx, m.groups[150]) // a group of the default class
		}
		c.fault()
		m.check("after a fault")
	}
	stopProducing()
	producing.Wait()
	c.heal()
	c.waitAllDone(90*time.Second, m.enqueued())
	sampling()
	if err := m.catchUp(ctx, "+"); err != nil {
		t.Fatalf("read the events: %v", err)
	}
	m.check("after the drain")
	m.verify(h)
}

const (
	gchaosWorkers = 3
	gchaosSlots   = 8 // per worker
	gchaosGroups  = 200
	// gchaosStuckAfter is lease + reap interval (max(lease/3, poll)) + 2 ×
	// poll, for the workers' lease of 1 s and poll of 100 ms.
	gchaosStuckAfter = 1000 + 333 + 2*100 // ms
	// gchaosDefaultMax is the queue's default max running per group.
	gchaosDefaultMax = 3
)

// gjob is one job of the grouped run, as the events tell it.
type gjob struct {
	id    string
	group *ggroup
	idx   int  // its place among its group's jobs, in enqueue order
	open  bool // its lease: opened by started, closed by the events that end it
	final bool // done, dead or cancelled
}

// ggroup is one group (or, named "", the ungrouped jobs) and its
// effective limits: max 0 is none, spacing the rate's in ms (0: none).
type ggroup struct {
	name, class string
	override    string // its glimits value, "" for none
	max         int
	spacing     int64
	ordered     bool

	jobs      []*gjob
	next      int // ordered: the first of jobs not final
	open      int
	peak      int
	lastStart int64 // Redis ms of its last start, -1 before the first
	lastID    string
	lastGen   int64
	starts    int
	minGap    int64 // the least time between two of its starts, -1 before the second

	// what the samples saw
	waiting  bool
	waited   int64 // ms of live time it could start and did not
	flagged  bool
	sampledN int // starts when last sampled
}

// groupMonitor produces the grouped run's jobs and follows its events.
type groupMonitor struct {
	c      *chaos
	base   string // the queue's key base, as broker/keys.go builds it
	mu     sync.Mutex
	jobs   map[string]*gjob
	ids    []string
	groups []*ggroup // the 200 groups; ungrouped is apart
	none   *ggroup   // the ungrouped jobs

	cursor    string           // the last stream id applied
	ahead     []redis.XMessage // read past a sample's last id, applied next time
	open      int              // open leases of every job
	starts    int
	closes    map[string]int // closing events by name
	overLimit int
	suspects  []rateSuspect // starts of a rated group that the events put too close
	unjudged  int           // suspects whose claims' times were gone (the job claimed again)
	stuck     int
	problems  []string // what the events said that cannot be

	samples, sampleErrs int
	checks, checkDirty  int
	startsAtSample      int
	prevSample          int64 // Redis ms of the last sample read, 0 after a failed one
	sampleScript        *redis.Script
}

// The run's 200 groups, by class: overrides in glimits ("<max_running>
// <rate> <period_ms> <ordered>", "-" the default, "0" none) over a default
// of max running 3. The last group's name has a space and glob characters,
// for the key building and Check's SCAN patterns.
func newGroupMonitor(c *chaos) *groupMonitor {
	m := &groupMonitor{c: c, base: c.prefix + ":{" + c.queue + "}:", jobs: map[string]*gjob{},
		cursor: "0-0", closes: map[string]int{}, none: &ggroup{lastStart: -1, minGap: -1}}
	for i := range gchaosGroups {
		g := &ggroup{name: fmt.Sprintf("g%03d", i), lastStart: -1, minGap: -1}
		switch {
		case i < 50:
			g.class, g.override, g.max = "max2", "2 - - -", 2
		case i < 100:
			g.class, g.override, g.max, g.spacing = "rate", "- 20 1000 -", gchaosDefaultMax, 50 // ceil(1000/20)
		case i < 140:
			g.class, g.override, g.max, g.ordered = "ordered", "- - - 1", 1, true
		case i < 180:
			g.class, g.max = "default", gchaosDefaultMax
		default:
			g.class, g.override = "unlimited", "0 - - -"
		}
		if i == gchaosGroups-1 {
			g.name = "odd *?[name]:1"
		}
		m.groups = append(m.groups, g)
	}
	m.sampleScript = redis.NewScript(groupSampleLua)
	return m
}

// setLimits sets the default and the overrides. Until Inspector has an
// API for group limits, by the settings fields and glimits values of the
// groups contract.
func (m *groupMonitor) setLimits(ctx context.Context) {
	t := m.c.t
	overrides := map[string]any{}
	for _, g := range m.groups {
		if g.override != "" {
			overrides[g.name] = g.override
		}
	}
	if err := m.c.admin.HSet(ctx, m.base+"glimits", overrides).Err(); err != nil {
		t.Fatal(err)
	}
	if err := m.c.admin.HSet(ctx, m.base+"limits", "g_max_running", gchaosDefaultMax, "g_overrides", "1").Err(); err != nil {
		t.Fatal(err)
	}
}

// produce enqueues about perSecond jobs a second until ctx ends: 15 %
// ungrouped, the rest to a group at random, now and then a burst of six
// into one group (so that limits bind). Each job is registered, with its
// group and place, before its enqueue is sent; an enqueue is retried
// under the same id until Redis has it.
func (m *groupMonitor) produce(ctx context.Context, perSecond int) {
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		g := m.none
		if rand.IntN(100) >= 15 {
			g = m.groups[rand.IntN(len(m.groups))]
		}
		burst := 1
		if g != m.none && rand.IntN(100) < 5 {
			burst = 6
		}
		for range burst {
			id := fmt.Sprintf("j%05d", n)
			n++
			m.mu.Lock()
			j := &gjob{id: id, group: g, idx: len(g.jobs)}
			g.jobs = append(g.jobs, j)
			m.jobs[id] = j
			m.ids = append(m.ids, id)
			m.mu.Unlock()
			for {
				_, err := m.c.b.Client().Enqueue(context.Background(), broker.Job{Queue: m.c.queue, Kind: "work", ID: id, MaxAttempts: 1000, Group: g.name})
				if err == nil || errors.Is(err, broker.ErrJobExists) {
					break
				}
				time.Sleep(50 * time.Millisecond) // Redis restarting or paused: the same id again
			}
		}
	}
}

// unfile breaks G2 on purpose: it enqueues a backlog of ten jobs to g,
// then for 3 s keeps g out of grotation and gwait.
func (m *groupMonitor) unfile(ctx context.Context, g *ggroup) {
	m.c.t.Logf("FENCEQ_CHAOS_GROUPS_BREAK=unfile: taking group %q out of the rotation and the timer", g.name)
	for range 10 {
		m.mu.Lock()
		id := fmt.Sprintf("break-%03d", len(g.jobs))
		j := &gjob{id: id, group: g, idx: len(g.jobs)}
		g.jobs = append(g.jobs, j)
		m.jobs[id] = j
		m.ids = append(m.ids, id)
		m.mu.Unlock()
		if _, err := m.c.b.Client().Enqueue(ctx, broker.Job{Queue: m.c.queue, Kind: "work", ID: id, MaxAttempts: 1000, Group: g.name}); err != nil {
			m.c.t.Logf("unfile: enqueue %s: %v", id, err)
		}
	}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		m.c.admin.ZRem(ctx, m.base+"grotation", g.name)
		m.c.admin.ZRem(ctx, m.base+"gwait", g.name)
	}
}

// enqueued is how many jobs the run enqueued.
func (m *groupMonitor) enqueued() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ids)
}

// apply follows one event. Events come in the order the scripts ran, so
// a group's open leases here are its valid leases at that point.
func (m *groupMonitor) apply(id string, gen, at int64, event string) {
	j := m.jobs[id]
	if j == nil {
		if event != "enqueued" {
			m.problem("%s of %s, a job the run did not enqueue", event, id)
		}
		return
	}
	g := j.group
	switch event {
	case "started":
		if j.open {
			m.problem("%s started while its previous lease was open (invariant 1)", id)
			break
		}
		if j.final {
			m.problem("%s started after it was final", id)
		}
		j.open = true
		g.open++
		g.peak = max(g.peak, g.open)
		g.starts++
		m.open++
		m.starts++
		if g == m.none {
			break
		}
		if g.max > 0 && g.open > g.max {
			m.over("group %q (%s) has %d open leases at %d, over its max of %d", g.name, g.class, g.open, at, g.max)
		}
		if g.lastStart >= 0 {
			gap := at - g.lastStart
			if g.minGap < 0 || gap < g.minGap {
				g.minGap = gap
			}
			if g.spacing > 0 && gap < g.spacing {
				// The events' times are their XADDs', which trail the
				// claim's own clock (its TIME, the job's claimed_at) by
				// what the script did before: judged on claimed_at.
				m.suspects = append(m.suspects, rateSuspect{g: g, prev: g.lastID, prevGen: g.lastGen, id: id, gen: gen, gap: gap})
			}
		}
		g.lastStart, g.lastID, g.lastGen = at, id, gen
		if g.ordered && j.idx != g.next {
			m.over("ordered group %q started %s (its job %d) while its job %d, %s, was not final", g.name, id, j.idx, g.next, g.jobs[g.next].id)
		}
	case "done", "dead", "cancelled", "retried", "snoozed", "unhandled", "released", "force_released", "reaped":
		m.closes[event]++
		if j.open {
			j.open = false
			g.open--
			m.open--
		} else if event == "done" || event == "retried" || event == "snoozed" || event == "released" {
			m.problem("%s of %s, which had no open lease", event, id)
		}
		if event == "done" || event == "dead" || event == "cancelled" {
			j.final = true
			for g.next < len(g.jobs) && g.jobs[g.next].final {
				g.next++
			}
		}
	}
}

func (m *groupMonitor) over(format string, args ...any) {
	m.overLimit++
	if m.overLimit <= 20 {
		m.c.t.Errorf("over_limit: "+format, args...)
	}
}

func (m *groupMonitor) problem(format string, args ...any) {
	p := fmt.Sprintf(format, args...)
	m.problems = append(m.problems, p)
	if len(m.problems) <= 20 {
		m.c.t.Errorf("events: %s", p)
	}
}

// rateSuspect is two starts of a rate-limited group whose events are
// closer than its spacing: prev (its claim gen prevGen), then id.
type rateSuspect struct {
	g        *ggroup
	prev, id string
	prevGen  int64
	gen      int64
	gap      int64 // ms between their events
}

// judgeSuspects reads the claim time (claimed_at) of each suspect's two
// starts, still in their hashes unless the job was claimed again since: a
// pair closer than the spacing on that clock is over the limit. A pair
// whose time is gone stays to be judged on the next read; at the end it
// counts as unjudged.
func (m *groupMonitor) judgeSuspects(ctx context.Context, final bool) error {
	if len(m.suspects) == 0 {
		return nil
	}
	pipe := m.c.admin.Pipeline()
	cmds := make([][2]*redis.SliceCmd, len(m.suspects))
	for i, s := range m.suspects {
		cmds[i][0] = pipe.HMGet(ctx, m.base+"job:"+s.prev, "gen", "claimed_at")
		cmds[i][1] = pipe.HMGet(ctx, m.base+"job:"+s.id, "gen", "claimed_at")
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	claimedAt := func(c *redis.SliceCmd, gen int64) (int64, bool) {
		v := c.Val()
		if len(v) != 2 || fmt.Sprint(v[0]) != strconv.FormatInt(gen, 10) {
			return 0, false
		}
		at, err := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
		return at, err == nil
	}
	var left []rateSuspect
	for i, s := range m.suspects {
		a, ok1 := claimedAt(cmds[i][0], s.prevGen)
		b, ok2 := claimedAt(cmds[i][1], s.gen)
		switch {
		case ok1 && ok2:
			if b-a < s.g.spacing {
				m.over("group %q (%s) started %s %d ms after %s (claimed_at; events %d ms apart), under its spacing of %d ms",
					s.g.name, s.g.class, s.id, b-a, s.prev, s.gap, s.g.spacing)
			}
		case final:
			m.unjudged++
			m.c.t.Logf("rate: group %q started %s %d ms (events) after %s; their claim times are gone", s.g.name, s.id, s.gap, s.prev)
		default:
			left = append(left, s)
		}
	}
	m.suspects = left
	return nil
}

// catchUp applies the events up to the stream id last ("+": all there
// are), reading past it at most one batch, which it keeps for next time,
// and judges the rate suspects found.
func (m *groupMonitor) catchUp(ctx context.Context, last string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.applyUpTo(ctx, last); err != nil {
		return err
	}
	return m.judgeSuspects(ctx, last == "+")
}

func (m *groupMonitor) applyUpTo(ctx context.Context, last string) error {
	for {
		for len(m.ahead) > 0 {
			e := m.ahead[0]
			if last != "+" && streamIDLess(last, e.ID) {
				return nil
			}
			m.ahead = m.ahead[1:]
			m.cursor = e.ID
			ms, _ := strconv.ParseInt(strings.SplitN(e.ID, "-", 2)[0], 10, 64)
			id, _ := e.Values["id"].(string)
			ev, _ := e.Values["event"].(string)
			gen, _ := strconv.ParseInt(fmt.Sprint(e.Values["gen"]), 10, 64)
			m.apply(id, gen, ms, ev)
		}
		if last != "+" && !streamIDLess(m.cursor, last) {
			return nil
		}
		msgs, err := m.c.admin.XRangeN(ctx, m.base+"events", "("+m.cursor, "+", 2000).Result()
		if err != nil {
			return err
		}
		if len(msgs) == 0 {
			return nil
		}
		m.ahead = msgs
	}
}

// streamIDLess answers whether stream id a comes before b.
func streamIDLess(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	ami, _ := strconv.ParseUint(am, 10, 64)
	bmi, _ := strconv.ParseUint(bm, 10, 64)
	if ami != bmi {
		return ami < bmi
	}
	asi, _ := strconv.ParseUint(as, 10, 64)
	bsi, _ := strconv.ParseUint(bs, 10, 64)
	return asi < bsi
}

// groupSampleLua reads, at one instant: Redis's time (ms), the events
// stream's last id, and for each group (ARGV[2..]) its pending jobs
// (ZCARD of its gready) and the state of the job its ordered hold names
// ("" without a hold). ARGV[1] is the queue's key base. Read-only.
const groupSampleLua = `
local base = ARGV[1]
local t = redis.call('TIME')
local out = {tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), '0-0'}
local last = redis.call('XREVRANGE', base .. 'events', '+', '-', 'COUNT', 1)
if #last > 0 then out[2] = last[1][1] end
for i = 2, #ARGV do
  local g = ARGV[i]
  out[#out + 1] = redis.call('ZCARD', base .. 'gready:' .. g)
  local held = redis.call('HGET', base .. 'ghold', g)
  local state = ''
  if held then state = redis.call('HGET', base .. 'job:' .. held, 'state') or 'gone' end
  out[#out + 1] = state
end
return out
`

// sampleEvery samples the groups every period until the function it
// answers is called (which waits for the sampler to stop).
func (m *groupMonitor) sampleEvery(period time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if err := m.sample(ctx); err != nil && ctx.Err() == nil {
				m.mu.Lock()
				m.sampleErrs++
				m.prevSample = 0 // the next sample starts a new interval
				m.mu.Unlock()
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// sample reads the groups at one instant, applies the events up to that
// instant, and judges each group: one that could start a job and did not,
// while others did, for longer than gchaosStuckAfter of such time, is
// stuck. Only intervals between two samples at most 1.5 s apart count
// (a Redis restart or pause in between is no one's turn), and only while
// the pool has a free slot.
func (m *groupMonitor) sample(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	args := []any{m.base}
	for _, g := range m.groups {
		args = append(args, g.name)
	}
	res, err := m.sampleScript.Run(sctx, m.c.admin, nil, args...).Slice()
	if err != nil {
		return err
	}
	now, _ := res[0].(int64)
	last, _ := res[1].(string)
	if err := m.catchUp(sctx, last); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.samples++
	interval := now - m.prevSample
	counted := m.prevSample > 0 && interval > 0 && interval <= 1500 && m.starts > m.startsAtSample
	m.prevSample, m.startsAtSample = now, m.starts
	full := m.open >= gchaosWorkers*gchaosSlots
	for i, g := range m.groups {
		pending, _ := res[2+2*i].(int64)
		held, _ := res[3+2*i].(string)
		can := pending > 0 && (g.max == 0 || g.open < g.max) && (g.spacing == 0 || g.lastStart < 0 || now-g.lastStart >= g.spacing)
		if g.ordered {
			can = g.open == 0 && (held == "pending" || held == "" && pending > 0)
		}
		if g.starts != g.sampledN { // it started since the last sample
			g.waited, g.flagged = 0, false
		}
		g.sampledN = g.starts
		if !can || full {
			g.waiting, g.waited, g.flagged = false, 0, false
			continue
		}
		if g.waiting && counted {
			g.waited += interval
		}
		g.waiting = true
		if g.waited > gchaosStuckAfter && !g.flagged {
			g.flagged = true
			m.stuck++
			if m.stuck <= 20 {
				m.c.t.Errorf("stuck: group %q (%s) could start a job (pending %d, open %d, hold %q) and saw no start for %d ms while others started",
					g.name, g.class, pending, g.open, held, g.waited)
			}
		}
	}
	return nil
}

// check runs Check on the queue, retrying while Redis is not back; a
// report that is not clean counts in check_dirty.
func (m *groupMonitor) check(when string) {
	ctx := context.Background()
	var problems []broker.Inconsistency
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		problems, err = m.c.b.Inspector().Check(cctx, m.c.queue)
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.checks++
	if err != nil {
		m.checkDirty++
		m.c.t.Errorf("Check %s: %v", when, err)
		return
	}
	if len(problems) > 0 {
		m.checkDirty++
		if m.checkDirty <= 5 {
			shown := problems[:min(len(problems), 10)]
			m.c.t.Errorf("Check %s: %d problems, the first %v", when, len(problems), shown)
		}
	}
}

// verify judges the run once every job is finished and prints its line.
func (m *groupMonitor) verify(h *groupHandler) {
	t := m.c.t
	ctx := context.Background()
	m.mu.Lock()
	defer m.mu.Unlock()
	lost, staleAccepted, reexecuted := 0, 0, 0
	undrained := map[*ggroup]bool{}
	for _, id := range m.ids {
		j := m.jobs[id]
		row, err := m.c.b.Inspector().Job(ctx, m.c.queue, id)
		if err != nil || row.State != broker.StateDone {
			lost++
			undrained[j.group] = true
			t.Errorf("job %s (group %q): %v, state %s, last error %q", id, j.group.name, err, row.State, row.LastError)
			continue
		}
		if !j.final {
			m.problem("%s is done, but no done event was read", id)
		}
		if row.Group != j.group.name {
			t.Errorf("job %s: group %q, enqueued with %q", id, row.Group, j.group.name)
		}
		var res struct {
			Generation int64 `json:"generation"`
			Run        int   `json:"pid"`
		}
		if err := json.Unmarshal(row.Result, &res); err != nil {
			staleAccepted++
			t.Errorf("job %s: result %q is not a run's output", id, row.Result)
			continue
		}
		runs := h.runsOf(id)
		valid := false
		for _, r := range runs {
			if r.gen == res.Generation && r.pid == res.Run && r.ended && r.gen == row.Generation {
				valid = true
			}
		}
		if !valid {
			staleAccepted++
			t.Errorf("job %s: stored result %s is not from its valid claim (generation %d)", id, row.Result, row.Generation)
		}
		if len(runs) > 1 {
			reexecuted++
		}
	}
	for g := range undrained {
		if g != m.none {
			m.stuck++
			t.Errorf("stuck: group %q (%s) has jobs not done after the drain", g.name, g.class)
		}
	}
	m.c.workerdCheck()

	peak := map[string]int{}
	gap := map[string]int64{}
	for _, g := range m.groups {
		peak[g.class] = max(peak[g.class], g.peak)
		if least, ok := gap[g.class]; g.minGap >= 0 && (!ok || g.minGap < least) {
			gap[g.class] = g.minGap
		}
	}
	rateGap, ok := gap["rate"]
	if !ok {
		rateGap = -1
	}
	c := m.c
	line := fmt.Sprintf("chaos groups: jobs=%d groups=%d kills=%d pauses=%d redis_restarts=%d proxy_faults=%d starts=%d retried=%d snoozed=%d reaped=%d "+
		"over_limit=%d stuck_groups=%d lost=%d stale_accepted=%d reexecuted=%d checks=%d check_dirty=%d event_problems=%d samples=%d sample_errors=%d rate_unjudged=%d "+
		"peak_open max2=%d rate=%d ordered=%d default=%d unlimited=%d rate_min_event_gap_ms=%d",
		len(m.ids), len(m.groups), c.counts.kills.Load(), c.counts.pauses.Load(), c.counts.restarts.Load(), c.counts.proxyFaults.Load(),
		m.starts, m.closes["retried"], m.closes["snoozed"], m.closes["reaped"],
		m.overLimit, m.stuck, lost, staleAccepted, reexecuted, m.checks, m.checkDirty, len(m.problems), m.samples, m.sampleErrs, m.unjudged,
		peak["max2"], peak["rate"], peak["ordered"], peak["default"], peak["unlimited"], rateGap)
	t.Log(line)
	fmt.Println(line)
	if m.overLimit > 0 || m.stuck > 0 || lost > 0 || staleAccepted > 0 || m.checkDirty > 0 || len(m.problems) > 0 {
		t.Fatal(line)
	}
}

// groupHandler is the run's HTTP handler: each request is one run of a
// job, numbered, recorded with the generation it ran under. It sleeps
// 100–300 ms (less if the worker goes away), then answers: 8 % a 503 (a
// retry), 3 % a 503 with Retry-After: 1 (a snooze of 1 s), the rest a
// 200 whose body, the job's result, names the run and its generation.
type groupHandler struct {
	srv  *httptest.Server
	n    atomic.Int64
	mu   sync.Mutex
	runs map[string][]*run
}

func startGroupHandler(t *testing.T) *groupHandler {
	h := &groupHandler{runs: map[string][]*run{}}
	h.srv = httptest.NewServer(h)
	t.Cleanup(h.srv.Close)
	return h
}

func (h *groupHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("Fenceq-Job-Id")
	gen, _ := strconv.ParseInt(r.Header.Get("Fenceq-Fencing-Token"), 10, 64)
	rn := &run{gen: gen, pid: int(h.n.Add(1))}
	h.mu.Lock()
	h.runs[id] = append(h.runs[id], rn)
	h.mu.Unlock()
	select {
	case <-time.After(time.Duration(100+rand.IntN(200)) * time.Millisecond):
	case <-r.Context().Done():
		return
	}
	switch x := rand.IntN(100); {
	case x < 8:
		http.Error(w, "try again", http.StatusServiceUnavailable)
	case x < 11:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "come back in a second", http.StatusServiceUnavailable)
	default:
		h.mu.Lock()
		rn.ended = true
		h.mu.Unlock()
		fmt.Fprintf(w, `{"generation":%d,"pid":%d}`, gen, rn.pid)
	}
}

func (h *groupHandler) runsOf(id string) []run {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]run, 0, len(h.runs[id]))
	for _, r := range h.runs[id] {
		out = append(out, *r)
	}
	return out
}
