package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// groupScan is what Check's scan learns of the groups: the gready keys and
// the running jobs per group, read beside the job hashes.
type groupScan struct {
	listing  map[string][]string // job id → the groups whose gready lists it, sorted
	ready    map[string]bool     // the groups whose gready holds entries
	running  map[string]int      // group → jobs whose hash says running in it
	unlisted map[string][]string // group → running jobs of it outside the leases index
	// ungrouped: a pending job is listed in the queue's ready indexes
	// (one without a group, or one filed there before groups had their
	// own), so the ungrouped turn "" must come round.
	ungrouped bool
	problems  []Inconsistency // gready keys that are not sorted sets
}

// scanGReady reads every gready key of the queue (SCAN, the base
// glob-escaped) and what each lists.
func (b *core) scanGReady(ctx context.Context, node redis.Cmdable, k *queueKeys) (*groupScan, error) {
	gs := &groupScan{listing: map[string][]string{}, ready: map[string]bool{}, running: map[string]int{}, unlisted: map[string][]string{}}
	prefix := k.derived(kindGReady, "")
	seen := map[string]bool{}
	var cursor uint64
	for {
		keys, next, err := node.Scan(ctx, cursor, globEscape(prefix)+"*", 500).Result()
		if err != nil {
			return nil, fmt.Errorf("scan gready keys: %w", err)
		}
		keys = slices.DeleteFunc(keys, func(key string) bool { return seen[key] }) // SCAN may return a key twice
		cmds := make([]*redis.StringSliceCmd, len(keys))
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, key := range keys {
				seen[key] = true
				cmds[i] = p.ZRange(ctx, key, 0, -1)
			}
			return nil
		})
		for i, key := range keys {
			g := strings.TrimPrefix(key, prefix)
			ids, err := cmds[i].Result()
			switch {
			case redis.HasErrorPrefix(err, "WRONGTYPE"):
				gs.problems = append(gs.problems, Inconsistency{Group: g, Problem: fmt.Sprintf(
					"group %q: its pending index %s is not a sorted set", g, key)})
				continue
			case err != nil:
				return nil, fmt.Errorf("read %s: %w", key, err)
			}
			if len(ids) > 0 {
				gs.ready[g] = true
			}
			for _, id := range ids {
				gs.listing[id] = append(gs.listing[id], g)
			}
		}
		cursor = next
		if cursor == 0 {
			break
		}
	}
	for _, groups := range gs.listing {
		slices.Sort(groups)
	}
	return gs, nil
}

// count adds what the scan read of job id to the groups' tallies.
func (gs *groupScan) count(id string, r reading) {
	switch State(r.state) {
	case StatePending:
		gs.ungrouped = gs.ungrouped || slices.Contains(r.where, StatePending)
	case StateRunning:
		if r.group == "" {
			return
		}
		gs.running[r.group]++
		if !slices.Contains(r.where, StateRunning) {
			gs.unlisted[r.group] = append(gs.unlisted[r.group], id)
		}
	}
}

// groupReading is what Check knows of one group: from the scan, or from
// one check_groups script.
type groupReading struct {
	group       string
	flag        string // the queue's groups flag
	slots       string // grunning's field; "" when absent
	running     int    // the group's jobs whose hash says running
	countUnsure bool   // running is a floor: more leases than check_groups reads
	pending     bool   // it has pending jobs (for "", the ungrouped indexes do)
	inRotation  bool
	inWait      bool
}

// problems judges a reading by invariant 11 and G2. The holds (ghold) are
// not judged: an entry whose job is no longer a job of the group waiting
// to run (it ran while the group was not ordered, and ended) is let go by
// the group's next claim, as a spare turn is.
func (g groupReading) problems() []Inconsistency {
	var out []Inconsistency
	add := func(id, p string, unsure bool) {
		out = append(out, Inconsistency{ID: id, Group: g.group, Problem: p, Unconfirmed: unsure})
	}
	name := fmt.Sprintf("group %q", g.group)
	slots, err := int64(0), error(nil)
	if g.slots != "" {
		slots, err = strconv.ParseInt(g.slots, 10, 64)
	}
	running := int64(g.running)
	switch {
	case err != nil || slots < 0:
		add("", fmt.Sprintf("%s: grunning holds %q, not a count of running jobs", name, g.slots), false)
	case slots == running:
	case running == 0:
		add("", fmt.Sprintf("%s: grunning counts %d running, but no job of the group is running (%s)",
			name, slots, phantoms(slots)), g.countUnsure)
	case slots > running:
		add("", fmt.Sprintf("%s: grunning counts %d running, but %s (%s)",
			name, slots, jobsRunning(running), phantoms(slots-running)), g.countUnsure)
	case !g.countUnsure:
		add("", fmt.Sprintf("%s: grunning counts %d running, but %s (starts not counted: the group may run over its limit)",
			name, slots, jobsRunning(running)), false)
	}
	switch {
	case !g.pending:
	case g.group == "":
		if g.flag == "1" && !g.inRotation && !g.inWait {
			add("", `the ungrouped pending jobs: the queue uses groups, but their turn ("" in grotation) is in neither grotation nor gwait: no claim will take them (stuck)`, false)
		}
	case g.flag != "1":
		add("", fmt.Sprintf("%s: it has pending jobs, but the queue's groups flag is off: no claim looks at the groups (a stuck group)", name), false)
	case !g.inRotation && !g.inWait:
		add("", fmt.Sprintf("%s: it has pending jobs, but it is in neither grotation nor gwait: no claim will start them (a stuck group)", name), false)
	}
	return out
}

// jobsRunning says how many jobs of a group are running.
func jobsRunning(n int64) string {
	if n == 1 {
		return "1 job of the group is running"
	}
	return fmt.Sprintf("%d jobs of the group are running", n)
}

// phantoms says how many slots grunning counts for no running job.
func phantoms(n int64) string {
	if n == 1 {
		return "a phantom slot"
	}
	return fmt.Sprintf("%d phantom slots", n)
}

// checkGroupsUnlisted bounds the ids of running jobs outside the leases
// index that one check_groups call counts; past it, the counts are a floor.
const checkGroupsUnlisted = 1000

// checkGroups reads the groups' structures after the scan, judges each
// group the scan leaves in doubt, and reads up to recheckMax of those
// again, recheckBatch per check_groups call, each batch at one instant.
// What is still wrong then is reported; the groups past the cap come back
// Unconfirmed, as the scan saw them.
func (b *core) checkGroups(ctx context.Context, node redis.Cmdable, k *queueKeys, gs *groupScan, recheckMax int) ([]Inconsistency, error) {
	// One round trip for the flag and the turns (bounded by the groups
	// with pending jobs, and a few spare).
	var flagCmd *redis.StringCmd
	var rotCmd, waitCmd *redis.StringSliceCmd
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		flagCmd = p.HGet(ctx, k.limits(), "groups")
		rotCmd = p.ZRange(ctx, k.grotation(), 0, -1)
		waitCmd = p.ZRange(ctx, k.gwait(), 0, -1)
		return nil
	})
	flag, err := flagCmd.Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the groups flag: %w", err)
	}
	rotation, err := members(rotCmd, k.grotation())
	if err != nil {
		return nil, err
	}
	wait, err := members(waitCmd, k.gwait())
	if err != nil {
		return nil, err
	}
	slots, err := hashAll(ctx, node, k.grunning())
	if err != nil {
		return nil, err
	}

	groups := map[string]bool{}
	for g := range gs.running {
		groups[g] = true
	}
	for g := range slots {
		groups[g] = true
	}
	for g := range gs.ready {
		groups[g] = true
	}
	if gs.ungrouped {
		groups[""] = true
	}
	suspects := map[string][]Inconsistency{}
	for g := range groups {
		r := groupReading{group: g, flag: flag, slots: slots[g], running: gs.running[g],
			pending: gs.ready[g] || g == "" && gs.ungrouped, inRotation: rotation[g], inWait: wait[g]}
		if p := r.problems(); len(p) > 0 {
			suspects[g] = p
		}
	}
	if len(suspects) == 0 {
		return nil, nil
	}
	names := slices.Sorted(maps.Keys(suspects))
	var out []Inconsistency
	if len(names) > recheckMax {
		for _, g := range names[recheckMax:] {
			for _, p := range suspects[g] {
				p.Unconfirmed = true
				out = append(out, p)
			}
		}
		names = names[:recheckMax]
	}
	for batch := range slices.Chunk(names, recheckBatch) {
		args := []any{len(batch)}
		for _, g := range batch {
			args = append(args, g)
		}
		extra, over := 0, false
		for _, g := range batch {
			for _, id := range gs.unlisted[g] {
				if extra == checkGroupsUnlisted {
					over = true
					break
				}
				args = append(args, id)
				extra++
			}
		}
		v, err := b.run(ctx, b.scripts.checkGroups, k, args...).Result()
		rp := newReply("check_groups", v, err)
		unsure, flag := rp.str() == "1" || over, rp.str()
		for _, g := range batch {
			r := groupReading{group: g, flag: flag, slots: rp.str(), countUnsure: unsure}
			r.running = int(rp.int())
			r.pending = rp.str() == "1"
			r.inRotation, r.inWait = rp.str() != "", rp.str() != ""
			if rp.err != nil {
				return nil, fmt.Errorf("read groups again: %w", rp.err)
			}
			out = append(out, r.problems()...)
		}
	}
	return out, nil
}

// members answers the members a ZRANGE of key read.
func members(c *redis.StringSliceCmd, key string) (map[string]bool, error) {
	ms, err := c.Result()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	out := make(map[string]bool, len(ms))
	for _, m := range ms {
		out[m] = true
	}
	return out, nil
}

// hashAll reads a whole hash by HSCAN, a bounded step at a time.
func hashAll(ctx context.Context, node redis.Cmdable, key string) (map[string]string, error) {
	out := map[string]string{}
	var cursor uint64
	for {
		kv, next, err := node.HScan(ctx, key, cursor, "", 500).Result()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", key, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		cursor = next
		if cursor == 0 {
			return out, nil
		}
	}
}
