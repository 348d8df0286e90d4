package brokertest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/fenceq/fenceq/broker"
)

// The model test's view of the groups: after every step, invariant 11
// (grunning counts each group's running jobs, and holds no field for a
// group with none), every pending grouped job in its group's gready, and
// G2 (a group with pending jobs is in grotation or gwait; so is the
// ungrouped jobs' turn, "", while the queue uses groups).

// gkey is one of the queue's keys, for the groups' reads.
func (m *model) gkey(name string) string { return m.s.b.Prefix() + ":{" + m.s.q + "}:" + name }

// checkGroups compares the groups' structures with the model.
func (m *model) checkGroups(t *rapid.T) {
	running := map[string]int{}
	pending := map[string][]string{}
	ungrouped := false
	for id, j := range m.jobs {
		switch {
		case j.state == broker.StateRunning && j.group != "":
			running[j.group]++
		case j.state == broker.StatePending && j.group != "":
			pending[j.group] = append(pending[j.group], id)
		case j.state == broker.StatePending:
			ungrouped = true
		}
	}
	ctx := m.s.ctx
	p := m.s.Client.Pipeline()
	slots := p.HGetAll(ctx, m.gkey("grunning"))
	holds := p.HGetAll(ctx, m.gkey("ghold"))
	flag := p.HGet(ctx, m.gkey("limits"), "groups")
	filed := map[string]*redis.FloatCmd{}
	turns := map[string][2]*redis.FloatCmd{}
	for g, ids := range pending {
		for _, id := range ids {
			filed[id] = p.ZScore(ctx, m.gkey("gready:"+g), id)
		}
		turns[g] = [2]*redis.FloatCmd{p.ZScore(ctx, m.gkey("grotation"), g), p.ZScore(ctx, m.gkey("gwait"), g)}
	}
	turns[""] = [2]*redis.FloatCmd{p.ZScore(ctx, m.gkey("grotation"), ""), p.ZScore(ctx, m.gkey("gwait"), "")}
	_, _ = p.Exec(ctx) // each command's error is read below

	// Invariant 11.
	got, err := slots.Result()
	noErr(t, "HGETALL grunning", err)
	counts := map[string]int{}
	for g, v := range got {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("grunning holds %q for group %q: want a count above 0, or no field", v, g)
		}
		counts[g] = n
	}
	if !maps.Equal(counts, running) {
		t.Fatalf("invariant 11: grunning holds %v; the model runs %v", counts, running)
	}
	// The holds: an ordered group's job sent back to run again first.
	h, err := holds.Result()
	noErr(t, "HGETALL ghold", err)
	for g := range m.gs().holds {
		if _, in := h[g]; !in && m.heldState(g) == "" {
			// A claim that popped the group let go of a hold whose job no
			// longer waits in it, and started nothing.
			delete(m.gs().holds, g)
		}
	}
	if !maps.Equal(h, m.gs().holds) {
		t.Fatalf("ghold holds %v; the model holds %v", h, m.gs().holds)
	}
	// Invariant 6 for the groups (Check accepts a grouped job in the
	// ready index, as the plumbing step filed it; this version never does).
	for id, c := range filed {
		if err := c.Err(); err != nil {
			t.Fatalf("pending job %s of group %q is not in its gready (%v)", id, m.jobs[id].group, err)
		}
	}
	// G2.
	on, err := flag.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("HGET groups: %v", err)
	}
	for g := range pending {
		if on != "1" {
			t.Fatalf("G2: group %q has pending jobs %v, but the groups flag is %q", g, pending[g], on)
		}
		if turns[g][0].Err() != nil && turns[g][1].Err() != nil {
			t.Fatalf("G2: group %q has pending jobs %v, but is in neither grotation nor gwait", g, pending[g])
		}
	}
	if on == "1" && ungrouped && turns[""][0].Err() != nil && turns[""][1].Err() != nil {
		t.Fatalf(`G2: ungrouped jobs are pending while the queue uses groups, but "" is in neither grotation nor gwait`)
	}
}

// glimit is a group's limits in the model: max running (0: none), a rate
// of rate starts per per ms (0: none), ordered.
type glimit struct {
	max, rate int
	per       int64
	ordered   bool
}

// gstart is a rate-limited group's last start: its Redis ms, and the
// spacing its rate asked then (its grate key's PX).
type gstart struct{ at, spacing int64 }

// goverride is one group's override: the limits it sets, each in place of
// the default.
type goverride struct {
	setMax, setRate, setOrdered bool
	lim                         glimit
}

// mgroups is the model's part for the groups.
type mgroups struct {
	def   glimit               // the queue's defaults
	over  map[string]goverride // overrides, by group
	holds map[string]string    // ordered groups: the job that must start next
	last  map[string]gstart    // rate-limited groups' last starts
	// startAt is the claim time of each job's last start in a
	// rate-limited group, for a give-back's refund of it.
	startAt map[string]int64
	// loose: groups that waited in gwait when the defaults changed. Such a
	// group may start more now, but looks again only when a slot of it
	// frees or at its time in gwait (the design's safety net), so a claim
	// may pass it by until then.
	loose map[string]bool
	// snap is the rotation and the timer read just before a claim:
	// members of grotation, and of gwait with their scores.
	rotation []string
	wait     map[string]int64
}

func (m *model) gs() *mgroups {
	if m.groups == nil {
		m.groups = &mgroups{over: map[string]goverride{}, holds: map[string]string{}, last: map[string]gstart{},
			startAt: map[string]int64{}, loose: map[string]bool{}}
	}
	return m.groups
}

// limitsOf is group g's effective limits: its override where it has one,
// else the defaults; ordered makes the max 1.
func (m *model) limitsOf(g string) glimit {
	l := m.gs().def
	if o, ok := m.gs().over[g]; ok {
		if o.setMax {
			l.max = o.lim.max
		}
		if o.setRate {
			l.rate, l.per = o.lim.rate, o.lim.per
		}
		if o.setOrdered {
			l.ordered = o.lim.ordered
		}
	}
	if l.ordered {
		l.max = 1
	}
	return l
}

// spacing is how far apart a rate lets starts be: ceil(per / rate) ms.
func (l glimit) spacing() int64 {
	if l.rate <= 0 || l.per <= 0 {
		return 0
	}
	return max(1, (l.per+int64(l.rate)-1)/int64(l.rate))
}

// snapGroups reads grotation and gwait before a claim.
func (m *model) snapGroups(t *rapid.T) {
	g := m.gs()
	p := m.s.Client.Pipeline()
	rc := p.ZRange(m.s.ctx, m.gkey("grotation"), 0, -1)
	wc := p.ZRangeWithScores(m.s.ctx, m.gkey("gwait"), 0, -1)
	_, _ = p.Exec(m.s.ctx) // each command's error is read below
	rot, err := rc.Result()
	noErr(t, "ZRANGE grotation", err)
	zs, err := wc.Result()
	noErr(t, "ZRANGE gwait", err)
	g.rotation, g.wait = rot, map[string]int64{}
	for _, z := range zs {
		g.wait[z.Member.(string)] = int64(z.Score)
	}
	for w := range g.loose {
		if _, in := g.wait[w]; !in {
			delete(g.loose, w) // it left the timer: it is judged by its limits again
		}
	}
}

// allow is how many jobs of group g a claim at m.now may start, as a
// range: lo surely, hi at most (a time boundary within a real server's
// step may go either way). pending and running are the model's counts.
func (m *model) allow(g string, pending, running int) (lo, hi int) {
	if g == "" {
		return pending, pending
	}
	l := m.limitsOf(g)
	hi = pending
	if l.ordered && m.heldState(g) == broker.StateScheduled {
		return 0, 0 // it waits for its held job's retry
	}
	if l.max > 0 {
		hi = min(hi, max(0, l.max-running))
	}
	lo = hi
	if sp := l.spacing(); sp > 0 && hi > 0 {
		hi, lo = 1, 1
		if last, ok := m.gs().last[g]; ok {
			// Its grate key lives for the spacing it set; a claim starts
			// again when the key is gone or the current spacing has passed.
			need := last.at + min(sp, last.spacing)
			switch m.now.reached(need) {
			case no:
				hi, lo = 0, 0
			case perhaps:
				lo = 0
			}
		}
	}
	return lo, hi
}

// groupSupply is how many jobs a claim may start, over the groups and the
// ungrouped jobs, by the groups' limits: lo..hi. lo is 0 when the claim
// may meet a turn that starts nothing (a spare entry of the rotation, a
// group that may not start now), which a claim's bounded rounds
// (take.lua's GROUP_ROUNDS) may spend its turns on; fused: the call
// settled a lease first, whose freed slot brings its group back from gwait.
func (m *model) groupSupply(fused bool) (lo, hi int) {
	pending, running := map[string]int{}, map[string]int{}
	for _, j := range m.jobs {
		switch j.state {
		case broker.StatePending:
			pending[j.group]++
		case broker.StateRunning:
			running[j.group]++
		}
	}
	g := m.gs()
	allowHi := map[string]int{}
	for w, p := range pending {
		l, h := m.allow(w, p, running[w])
		if at, in := g.wait[w]; in && g.loose[w] && m.now.reached(at) != yes {
			l = 0
		}
		lo, hi = lo+l, hi+h
		allowHi[w] = h
	}
	turns := slices.Clone(g.rotation)
	for w, at := range g.wait {
		if fused || m.now.reached(at) != no {
			turns = append(turns, w)
		}
	}
	for _, w := range turns {
		if allowHi[w] == 0 {
			return 0, hi
		}
	}
	return lo, hi
}

// tookGroups checks what a claim took against the groups' rules: no
// group runs over its effective max, an ordered group runs one job at a
// time and starts its held job first, and a rate-limited group starts at
// most once per claim, its starts spaced by ceil(period/rate) ms.
func (m *model) tookGroups(t *rapid.T, op string, res broker.ClaimResult, lease time.Duration) {
	started := map[string][]string{}
	for _, l := range res.Leases {
		if g := m.jobs[l.ID].group; g != "" {
			started[g] = append(started[g], l.ID)
		}
	}
	running := map[string]int{}
	for _, j := range m.jobs {
		if j.state == broker.StateRunning && j.group != "" {
			running[j.group]++
		}
	}
	gs := m.gs()
	var at int64 // the claim's Redis time: its leases run from it
	for _, g := range slices.Sorted(maps.Keys(started)) {
		l, ids := m.limitsOf(g), started[g]
		if l.max > 0 && running[g] > l.max {
			t.Fatalf("%s started %v of group %q: %d running, over its max of %d", op, ids, g, running[g], l.max)
		}
		switch held := m.heldState(g); {
		case l.ordered && held == broker.StatePending && (len(ids) != 1 || ids[0] != gs.holds[g]):
			t.Fatalf("%s started %v of ordered group %q, which holds for %s (sent back to run again first)", op, ids, g, gs.holds[g])
		case l.ordered && held == broker.StateScheduled:
			t.Fatalf("%s started %v of ordered group %q, which holds for %s, scheduled to run again first", op, ids, g, gs.holds[g])
		}
		if sp := l.spacing(); sp > 0 {
			if len(ids) > 1 {
				t.Fatalf("%s started %v of group %q, limited to %d per %d ms: more than one start at once", op, ids, g, l.rate, l.per)
			}
			if at == 0 {
				for _, le := range res.Leases {
					if le.ID == ids[0] {
						at = le.Deadline.UnixMilli() - lease.Milliseconds()
					}
				}
			}
			if last, ok := gs.last[g]; ok {
				slack := int64(0)
				if !m.s.Frozen {
					slack = clockSlack
				}
				if gap := at - last.at; gap+slack < min(sp, last.spacing) {
					t.Fatalf("%s started %s of group %q %d ms after its last start; its rate (%d per %d ms) spaces starts %d ms apart", op, ids[0], g, gap, l.rate, l.per, sp)
				}
			}
			gs.last[g] = gstart{at: at, spacing: sp}
			gs.startAt[ids[0]] = at
		}
		if l.ordered {
			// The claim took the held job, or let go of a hold whose job
			// no longer waits in the group. Not ordered, the claim does
			// not read the hold, which stays.
			delete(gs.holds, g)
		}
	}
}

// heldNext says whether job id is the one its ordered group holds for.
func (m *model) heldNext(id string) bool {
	g := m.jobs[id].group
	return g != "" && m.limitsOf(g).ordered && m.gs().holds[g] == id
}

// heldState is the state of the job ordered group g holds for, when it is
// a job of g waiting to run (pending or scheduled); "" when g holds for
// none, or for one that ran meanwhile (the group was not ordered then) and
// which a claim lets go.
func (m *model) heldState(g string) broker.State {
	id, held := m.gs().holds[g]
	if !held {
		return ""
	}
	j := m.jobs[id]
	if j == nil || j.group != g || j.state != broker.StatePending && j.state != broker.StateScheduled {
		return ""
	}
	return j.state
}

// sentBack is a lease end that sends job id back to wait in its group
// (fail to a retry, snooze, a give-back, release, release_unowned, reap):
// an ordered group then holds for it.
func (m *model) sentBack(id string) {
	if j := m.jobs[id]; j.group != "" && m.limitsOf(j.group).ordered {
		m.gs().holds[j.group] = id
	}
}

// groupCancelled is a cancel of job id while it waits: its group no
// longer holds for it.
func (m *model) groupCancelled(id string) {
	if j := m.jobs[id]; j.group != "" && m.gs().holds[j.group] == id {
		delete(m.gs().holds, j.group)
	}
}

// refunded is a give-back of job id's claim, which ran nothing: its start
// no longer counts against its group's rate when it was the last.
func (m *model) refunded(id string) {
	g := m.gs()
	j := m.jobs[id]
	if at, ok := g.startAt[id]; ok && j.group != "" && g.last[j.group].at == at {
		delete(g.last, j.group)
	}
	delete(g.startAt, id)
}

// groupLimits changes the group limits with ChangeGroupLimits: the
// defaults, or one group's override (set, sent back to the default,
// reset), each limit kept or changed.
func (m *model) groupLimits(t *rapid.T) {
	g := rapid.SampledFrom([]string{"", "", "acme", "globex", "ünï"}).Draw(t, "limits of group")
	gs := m.gs()
	var c broker.GroupLimitsChange
	o := gs.over[g]
	if g != "" && rapid.IntRange(0, 3).Draw(t, "reset") == 0 {
		c.Reset, o = true, goverride{}
	}
	// 0: keep, 1: set, 2: back to the default (a group only).
	choice := func(what string) int {
		n := rapid.IntRange(0, 2).Draw(t, what)
		if n == 2 && g == "" {
			n = 0
		}
		return n
	}
	switch choice("max running") {
	case 1:
		c.MaxRunning, c.To.MaxRunning = true, rapid.IntRange(0, 2).Draw(t, "group max running")
		o.setMax, o.lim.max = true, c.To.MaxRunning
	case 2:
		c.DefaultMaxRunning, o.setMax, o.lim.max = true, false, 0
	}
	switch choice("rate") {
	case 1:
		c.Rate, c.To.Rate = true, rapid.IntRange(0, 2).Draw(t, "group rate")
		o.setRate, o.lim.rate, o.lim.per = true, c.To.Rate, 0
		if c.To.Rate > 0 {
			c.Per, c.To.Per = true, rapid.SampledFrom([]time.Duration{15, 30, 45}).Draw(t, "group per ms")*time.Millisecond
			o.lim.per = c.To.Per.Milliseconds()
		}
	case 2:
		c.DefaultRate, o.setRate, o.lim.rate, o.lim.per = true, false, 0, 0
	}
	switch choice("ordered") {
	case 1:
		c.Ordered, c.To.Ordered = true, rapid.Bool().Draw(t, "group ordered")
		o.setOrdered, o.lim.ordered = true, c.To.Ordered
	case 2:
		c.DefaultOrdered, o.setOrdered, o.lim.ordered = true, false, false
	}
	got, err := m.s.b.Inspector().ChangeGroupLimits(m.lostReply(t), m.s.q, g, c)
	noErr(t, fmt.Sprintf("ChangeGroupLimits(%q, %+v)", g, c), err)
	if g == "" {
		d := gs.def
		if c.MaxRunning {
			d.max = c.To.MaxRunning
		}
		if c.Rate {
			d.rate, d.per = o.lim.rate, o.lim.per
		}
		if c.Ordered {
			d.ordered = c.To.Ordered
		}
		gs.def = d
		want(t, "the group defaults ChangeGroupLimits answers", got, broker.GroupLimits{MaxRunning: d.max, Rate: d.rate,
			Per: time.Duration(d.per) * time.Millisecond, Ordered: d.ordered})
		// A group in the timer looks again when a slot of it frees, or at
		// its time there.
		ws, err := m.s.Client.ZRange(m.s.ctx, m.gkey("gwait"), 0, -1).Result()
		noErr(t, "ZRANGE gwait", err)
		for _, w := range ws {
			gs.loose[w] = true
		}
		return
	}
	if o.setMax || o.setRate || o.setOrdered {
		gs.over[g] = o
	} else {
		delete(gs.over, g)
	}
	e := m.limitsOf(g)
	want(t, fmt.Sprintf("the limits of group %q ChangeGroupLimits answers", g), got, broker.GroupLimits{MaxRunning: e.max, Rate: e.rate,
		Per: time.Duration(e.per) * time.Millisecond, Ordered: e.ordered})
	delete(gs.loose, g) // a named group goes back to the rotation
}
