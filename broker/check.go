package broker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Inconsistency is one violation of invariant 6 or 11, or one stuck group,
// found by Check.
type Inconsistency struct {
	ID string // the job's id, as found in an index or a hash; "" for a problem of a whole group
	// Group is the group a problem of the groups' structures concerns
	// (invariant 11, a stuck group); "" for the others. The Problem names
	// it too.
	Group   string
	Problem string // what is wrong, e.g. the index it is in and the state it has
	// Unconfirmed: the scan saw the problem, but Check had already read
	// CheckRecheckMax suspects again and did not read this one again. It
	// may be a job that only moved while Check read; run Check again.
	Unconfirmed bool
}

func (i Inconsistency) String() string {
	s := i.Problem
	if i.ID != "" {
		s = i.ID + ": " + s
	}
	if i.Unconfirmed {
		return s + " (seen by the scan, not re-read: over CheckRecheckMax)"
	}
	return s
}

// CheckRecheckMax is how many suspects one Check reads again, each in one
// read-only script: beyond it, a suspect is reported Unconfirmed. At about
// 2,000 jobs/s (workerd bench --soak) a scan found 4,000 to 10,000 jobs
// that had only moved on while it read; ten times that are real problems,
// or a queue too busy to check.
const CheckRecheckMax = 100_000

// recheckBatch is how many suspects go in one round trip, each its own
// script: a pipeline Redis serves in about a millisecond.
const recheckBatch = 100

// Check verifies invariant 6 on a live Redis: every job hash of queue is in
// exactly the index that matches its state, every index entry has a job hash
// in that state, and each running job's lease score equals its lease_until.
// A pending job with a group is in its group's gready (or, enqueued before
// groups had their indexes, in the queue's ready index), and no gready
// lists any other job. For the groups it verifies invariant 11 (grunning
// counts each group's running jobs), that no group is stuck (a group with
// pending jobs is in grotation or gwait, with the queue's groups flag on;
// the ungrouped jobs' turn, "", is in grotation while they wait beside
// groups; checkgroups.go).
// It reads the whole queue (indexes in memory, job keys by SCAN), so it costs
// O(jobs); it writes nothing. The scan reads indexes and hashes in separate
// steps, so a busy queue's jobs move on between them: each job the scan
// finds out of place is a suspect, read again at one instant (its hash and
// every index, in one script), and reported only if it is still wrong then.
// At most CheckRecheckMax suspects are read again (and as many groups);
// the rest are reported Unconfirmed, after the confirmed ones. A group's
// problems, which name no job, come first.
func (b *Inspector) Check(ctx context.Context, queue string) ([]Inconsistency, error) {
	if err := validName("queue", queue); err != nil {
		return nil, err
	}
	out, err := b.check(ctx, queue, CheckRecheckMax)
	if c, ok := b.rdb.(*redis.ClusterClient); ok && redis.HasErrorPrefix(err, "MOVED") {
		// A failover moved the slot since go-redis last looked: refresh
		// its slot map and read the right node.
		c.ReloadState(ctx)
		out, err = b.check(ctx, queue, CheckRecheckMax)
	}
	return out, err
}

// reading is what Check knows of one job: from the scan, or from one
// check_one script.
type reading struct {
	exists     bool     // the job key exists
	unreadable string   // why the key cannot be read as a job hash; "" when it can
	state      string   // the hash's state field
	until      string   // the hash's lease_until field
	where      []State  // the indexes that list the id, in the order of States
	group      string   // the hash's group field
	gready     []string // the groups whose gready lists the id, sorted
	leaseScore int64    // its score in the leases index, when listed there
	// unsure: check_one could not tell whether ready0 lists the job (it
	// looks among the newest entries only).
	unsure bool
}

// places names the indexes that list the job: its states' indexes, then
// each group's gready.
func (r reading) places() []string {
	var out []string
	for _, s := range r.where {
		out = append(out, string(s))
	}
	for _, g := range r.gready {
		out = append(out, greadyName(g))
	}
	return out
}

// greadyName is how a problem names group g's pending index.
func greadyName(g string) string { return fmt.Sprintf("gready:%q", g) }

// problem judges a reading by invariant 6: what is wrong, or "".
func (r reading) problem(k *queueKeys) string {
	state := State(r.state)
	places := r.places()
	switch {
	case !r.exists && len(places) == 0:
		return "" // trimmed, or never there
	case !r.exists:
		return fmt.Sprintf("listed in %v but the job hash does not exist", places)
	case r.unreadable != "":
		return "job hash unreadable: " + r.unreadable
	case !state.valid():
		return fmt.Sprintf("job hash has state %q, which is not a state", r.state)
	case len(places) == 0:
		want := k.index(state)
		switch {
		case state == StatePending && r.group != "":
			want = k.derived(kindGReady, r.group) + ", its group's"
		case state == StatePending:
			want = strings.Join([]string{k.readyHi(), k.ready0(), k.readyLo()}, " or ")
		}
		return fmt.Sprintf("job is %s but in no index (want %s)", state, want)
	case len(places) > 1:
		return fmt.Sprintf("job is %s but listed in %d indexes: %v", state, len(places), places)
	case len(r.gready) == 1:
		switch g := r.gready[0]; {
		case state != StatePending:
			return fmt.Sprintf("job is %s but listed in the %s index", state, greadyName(g))
		case r.group == "":
			return fmt.Sprintf("job has no group but is listed in %s", greadyName(g))
		case r.group != g:
			return fmt.Sprintf("job of group %q is listed in %s, another group's", r.group, greadyName(g))
		}
		return ""
	case r.where[0] != state:
		return fmt.Sprintf("job is %s but listed in the %s index", state, r.where[0])
	case state == StateRunning && r.until != fmt.Sprint(r.leaseScore):
		return fmt.Sprintf("lease_until is %q but the leases index says %d", r.until, r.leaseScore)
	}
	return ""
}

// claimedSince reports whether a job in state s may have been pending in
// ready0 a moment ago and claimed since: running, or settled after it ran.
func claimedSince(s State) bool {
	switch s {
	case StateRunning, StateDone, StateDead, StateScheduled:
		return true
	}
	return false
}

// check is Check, reading at most recheckMax suspects again.
func (b *core) check(ctx context.Context, queue string, recheckMax int) ([]Inconsistency, error) {
	k := b.queueKeys(queue)
	node, err := b.nodeFor(ctx, k.ready0())
	if err != nil {
		return nil, err
	}

	// Where each id is listed, and with what score. ready0 holds
	// tombstones and older entries of ids filed again: an id in it counts
	// as listed only for a job pending there (inList, judged with the
	// hash below).
	listed := map[string][]State{}
	leaseScore := map[string]int64{}
	for _, s := range States {
		keys := []string{k.index(s)}
		if s == StatePending {
			keys = []string{k.readyHi(), k.readyLo(), k.legacy()}
		}
		for _, key := range keys {
			zs, err := node.ZRangeWithScores(ctx, key, 0, -1).Result()
			if err != nil {
				return nil, fmt.Errorf("fenceq: check queue %q: read %s index: %w", queue, s, err)
			}
			for _, z := range zs {
				id := z.Member.(string)
				listed[id] = append(listed[id], s)
				if s == StateRunning {
					leaseScore[id] = int64(z.Score)
				}
			}
		}
	}
	// The tombstones counted before ready0 is read: a claim between the two
	// takes entries and their count together, so the count read can only
	// be high, never hide an entry nobody counted.
	tombs, err := node.HGet(ctx, k.limits(), "tombs").Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("fenceq: check queue %q: read the tombstone count: %w", queue, err)
	}
	entries, err := node.LRange(ctx, k.ready0(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("fenceq: check queue %q: read pending index: %w", queue, err)
	}
	// And after: a cancel between the two adds an entry and its count.
	if after, err := node.HGet(ctx, k.limits(), "tombs").Int(); err == nil {
		tombs = max(tombs, after)
	}
	inList := make(map[string]bool, len(entries))
	for _, id := range entries {
		inList[id] = true
	}
	gs, err := b.scanGReady(ctx, node, k)
	if err != nil {
		return nil, fmt.Errorf("fenceq: check queue %q: %w", queue, err)
	}

	suspects := map[string]string{}  // id: the problem the scan saw
	livePending := map[string]bool{} // ids ready0 lists for a job pending there
	// ids ready0 listed for a job that has run since: a claim took the
	// entry after ready0 was read (a tombstone's job is cancelled or gone,
	// unless it was retried and ran since, which only makes this count
	// err low: Check then reports less, never a job that is not lost).
	ranSince := map[string]bool{}
	seen := map[string]bool{}
	var blocked []string
	var cursor uint64
	pattern := globEscape(k.job) + "*"
	for {
		keys, next, err := node.Scan(ctx, cursor, pattern, 500).Result()
		if err != nil {
			return nil, fmt.Errorf("fenceq: check queue %q: scan job keys: %w", queue, err)
		}
		cmds := make([]*redis.SliceCmd, len(keys))
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, key := range keys {
				cmds[i] = p.HMGet(ctx, key, fieldState, fieldLeaseUntil, fieldPriority, fieldGroup)
			}
			return nil
		})
		for i, key := range keys {
			id := strings.TrimPrefix(key, k.job)
			if seen[id] {
				continue // SCAN may return a key twice
			}
			seen[id] = true
			r := reading{exists: true, where: listed[id], leaseScore: leaseScore[id], gready: gs.listing[id]}
			if vals, err := cmds[i].Result(); err != nil {
				r.unreadable = err.Error()
			} else {
				r.state, _ = vals[0].(string)
				r.until, _ = vals[1].(string)
				r.group, _ = vals[3].(string)
				// A pending job of a group that its group's set lists is
				// not in ready0 (lib.lua's ready_live): an entry there is
				// an earlier job's under the same id.
				if p, _ := vals[2].(string); inList[id] && r.state == string(StatePending) && inReady0(p) &&
					!(r.group != "" && slices.Contains(r.gready, r.group)) {
					r.where = addState(r.where, StatePending)
					livePending[id] = true
				}
				if inList[id] && claimedSince(State(r.state)) {
					ranSince[id] = true
				}
				gs.count(id, r)
			}
			if p := r.problem(k); p != "" {
				suspects[id] = p
			} else if r.state == string(StateBlocked) {
				blocked = append(blocked, id)
			}
		}
		cursor = next
		if cursor == 0 {
			break
		}
	}
	for id, where := range listed {
		if !seen[id] {
			suspects[id] = reading{where: where, gready: gs.listing[id]}.problem(k)
		}
	}
	for id, groups := range gs.listing {
		if !seen[id] && listed[id] == nil {
			suspects[id] = reading{gready: groups}.problem(k)
		}
	}
	// ready0's entries that are not a job pending there (nor one a claim
	// took after ready0 was read) are tombstones, and the settings count
	// them (lib.lua's ready_remove). More of them than
	// that count: entries nobody cancelled, for a job hash deleted behind
	// fenceq's back, among those whose hash is missing.
	dead, orphans := len(entries), []string{}
	counted := make(map[string]bool, len(entries))
	for _, id := range entries {
		switch {
		case !seen[id]:
			if !counted[id] {
				orphans = append(orphans, id)
			}
		case (livePending[id] || ranSince[id]) && !counted[id]:
			dead--
		}
		counted[id] = true
	}
	// check_one cannot tell such an entry from a tombstone (it reads one
	// id), so the count is the evidence: they are reported as the scan saw
	// them.
	var extra []Inconsistency
	if dead > tombs {
		for _, id := range orphans {
			if _, ok := suspects[id]; !ok {
				extra = append(extra, Inconsistency{ID: id, Problem: fmt.Sprintf(
					"listed in ready0 but the job hash does not exist (%d entries of ready0 are no pending job, %d counted as tombstones)", dead, tombs)})
			}
		}
	}
	out, err := b.recheck(ctx, node, k, suspects, gs.listing, recheckMax)
	if err != nil {
		return nil, fmt.Errorf("fenceq: check queue %q: %w", queue, err)
	}
	out = append(out, extra...)
	out = append(out, gs.problems...)
	bad, err := b.checkGroups(ctx, node, k, gs, recheckMax)
	if err != nil {
		return nil, fmt.Errorf("fenceq: check queue %q: %w", queue, err)
	}
	out = append(out, bad...)
	for _, id := range blocked {
		stuck, err := b.stuck(ctx, node, k, id)
		if err != nil {
			return nil, fmt.Errorf("fenceq: check queue %q: %w", queue, err)
		}
		if stuck != "" {
			out = append(out, Inconsistency{ID: id, Problem: stuck})
		}
	}
	slices.SortFunc(out, func(a, b Inconsistency) int {
		switch {
		case a.Unconfirmed && !b.Unconfirmed:
			return 1
		case !a.Unconfirmed && b.Unconfirmed:
			return -1
		}
		return cmp.Or(strings.Compare(a.ID, b.ID), strings.Compare(a.Problem, b.Problem))
	})
	return out, nil
}

// inReady0 says whether a pending job of that priority (the hash's field)
// belongs in ready0, as lib.lua's ready_index reads it.
func inReady0(priority string) bool {
	p, err := strconv.ParseFloat(priority, 64)
	return err != nil || p == 0
}

// addState adds s to where, in the order of States.
func addState(where []State, s State) []State {
	if slices.Contains(where, s) {
		return where
	}
	where = append(slices.Clone(where), s)
	slices.SortFunc(where, func(a, b State) int { return slices.Index(States, a) - slices.Index(States, b) })
	return where
}

// recheck reads up to recheckMax suspects again, each at one instant
// (check_one.lua), in pipelines of recheckBatch, and answers those still
// wrong; the suspects past the cap come back Unconfirmed, with the
// problem the scan saw.
func (b *core) recheck(ctx context.Context, node redis.Cmdable, k *queueKeys, suspects map[string]string, gready map[string][]string, recheckMax int) ([]Inconsistency, error) {
	if len(suspects) == 0 {
		return nil, nil
	}
	ids := slices.Sorted(maps.Keys(suspects))
	var out []Inconsistency
	if len(ids) > recheckMax {
		for _, id := range ids[recheckMax:] {
			out = append(out, Inconsistency{ID: id, Problem: suspects[id], Unconfirmed: true})
		}
		ids = ids[:recheckMax]
	}
	states := make([]any, 0, len(States))
	for _, s := range States {
		states = append(states, string(s))
	}
	s := b.scripts.checkOne
	for batch := range slices.Chunk(ids, recheckBatch) {
		// A pipeline cannot load what a call lacks command by command: a
		// batch that meets a node without the library or the script
		// (FUNCTION FLUSH, SCRIPT FLUSH), or without FUNCTION (the first
		// call finds out), loads what it needs and is sent again, twice at
		// most.
		var cmds []*redis.Cmd
		for try := 0; ; try++ {
			cmds = make([]*redis.Cmd, len(batch))
			_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, id := range batch {
					// The groups whose gready the scan saw list it; the
					// script looks in its own group's too.
					args := []any{id, len(gready[id])}
					for _, g := range gready[id] {
						args = append(args, g)
					}
					args = append(args, states...)
					cmds[i] = b.queueScript(ctx, p, s, k.list[:1], withJobPrefix(k, args))
				}
				return nil
			})
			i := slices.IndexFunc(cmds, func(c *redis.Cmd) bool { return notRun(c.Err()) })
			if i < 0 || try == 2 {
				break
			}
			if err := b.loadFor(ctx, node, s, cmds[i].Err()); err != nil {
				return nil, fmt.Errorf("load check_one: %w", err)
			}
		}
		for i, id := range batch {
			r, err := readCheckOne(cmds[i])
			if err != nil {
				return nil, fmt.Errorf("read job %q again: %w", id, err)
			}
			if p := r.problem(k); p != "" {
				out = append(out, Inconsistency{ID: id, Problem: p, Unconfirmed: r.unsure})
			}
		}
	}
	return out, nil
}

// readCheckOne reads check_one.lua's reply.
func readCheckOne(c *redis.Cmd) (reading, error) {
	v, err := c.Result()
	rp := newReply("check_one", v, err)
	var r reading
	switch t := rp.str(); t {
	case "none":
	case "hash":
		r.exists = true
	default:
		r.exists, r.unreadable = true, "job key holds a "+t+", not a hash"
	}
	r.state, r.until, r.group = rp.str(), rp.str(), rp.str()
	for _, s := range States {
		score := rp.str()
		if score == "?" {
			r.unsure = true
		}
		if score == "" || score == "?" {
			continue
		}
		r.where = append(r.where, s)
		if s == StateRunning {
			f, err := strconv.ParseFloat(score, 64)
			if err != nil && rp.err == nil {
				rp.err = fmt.Errorf("fenceq: check_one: lease score %q is not a number", score)
			}
			r.leaseScore = int64(f)
		}
	}
	for rp.more() {
		if g, score := rp.str(), rp.str(); score != "" {
			r.gready = append(r.gready, g)
		}
	}
	slices.Sort(r.gready)
	return r, rp.err
}

// nodeFor answers the client that serves key: on a Cluster, its master, so
// SCAN walks the right node; otherwise the client itself.
func (b *core) nodeFor(ctx context.Context, key string) (redis.Cmdable, error) {
	if c, ok := b.rdb.(*redis.ClusterClient); ok {
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("fenceq: find the cluster node of %q: %w", key, err)
		}
		return n, nil
	}
	return b.rdb, nil
}

// globEscape quotes the characters SCAN MATCH treats as a pattern.
func globEscape(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// stuck reads, in one transaction, a blocked job, the jobs it depends on
// and the queue's cascade: a job that waits although none of its
// dependencies is still open, and no cascade is left to settle it, would
// wait forever. It answers why, or "" for a job that is fine.
func (b *core) stuck(ctx context.Context, node redis.Cmdable, k *queueKeys, id string) (string, error) {
	f, err := node.HMGet(ctx, k.job+id, fieldState, fieldDependsOn).Result()
	if err != nil {
		return "", err
	}
	var deps []string
	if s, _ := f[1].(string); f[0] != string(StateBlocked) || json.Unmarshal([]byte(s), &deps) != nil {
		return "", nil // moved on since the scan, or a job of an older version
	}
	var self *redis.StringCmd
	var states []*redis.StringCmd
	var cascading *redis.IntCmd
	_, err = node.TxPipelined(ctx, func(p redis.Pipeliner) error {
		self = p.HGet(ctx, k.job+id, fieldState)
		for _, d := range deps {
			states = append(states, p.HGet(ctx, k.job+d, fieldState))
		}
		cascading = p.LLen(ctx, k.cascade())
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", err
	}
	if self.Val() != string(StateBlocked) || cascading.Val() > 0 {
		return "", nil
	}
	for _, s := range states {
		if st := State(s.Val()); st.valid() && !st.Final() {
			return "", nil // waits for a job that is still open
		}
	}
	return fmt.Sprintf("job is blocked, but none of the jobs it depends on (%v) is still open, and no dependents are left to settle", deps), nil
}
