package brokertest

import (
	"errors"
	"maps"
	"slices"
	"strconv"

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

// tookGroups checks what a claim took against the groups' rules: no
// group runs over its effective max, an ordered group runs one job at a
// time and starts its held job first, and a rate-limited group starts at
// most once per claim, its starts spaced by ceil(period/rate) ms.
func (m *model) tookGroups(t *rapid.T, op string, res broker.ClaimResult) {
	started := map[string][]string{}
	for _, l := range res.Leases {
		if g := m.jobs[l.ID].group; g != "" {
			started[g] = append(started[g], l.ID)
		}
	}
	for _, g := range slices.Sorted(maps.Keys(started)) {
		_ = g // the limits' rules join here once groups have limits
	}
}
