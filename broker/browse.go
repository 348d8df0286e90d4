package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

const (
	// PageLimitDefault and PageLimitMax bound JobQuery.Limit.
	PageLimitDefault, PageLimitMax = 50, 500
	// ExamineDefault is how many index entries one JobPage examines at most
	// when it filters (JobQuery.Examine): a filter that matches nothing in
	// a queue of a million jobs costs a few milliseconds, not a scan.
	ExamineDefault = 5000
	// browseChunk is how many index entries one round trip of a filtered
	// JobPage reads.
	browseChunk = 1000
	// ListedErrorBytes is how much of a job's last error a page of
	// JobPage holds: the start of it, cut at a character boundary.
	ListedErrorBytes = 512
)

// JobQuery selects one page of a queue's jobs in one state, read from that
// state's index (never a scan of the queue).
type JobQuery struct {
	State State // required: the state whose index is read
	// Newest lists the index from its end: for finished jobs the latest
	// finished first, for pending jobs the last to be claimed first.
	Newest bool
	// Kind and IDPrefix, when set, keep only the jobs of that kind and
	// whose id starts so.
	Kind, IDPrefix string
	// Group, when set, keeps only the jobs of that group. For pending
	// jobs it reads the group's own pending index (gready:<group>), so it
	// is no filter: a page costs what an unfiltered one does. For the
	// other states it filters as Kind does (Examine bounds it). It must
	// pass ValidateGroup.
	Group string
	// After is a Page.Next cursor: the page starts after it. Empty starts
	// at the head of the index.
	After string
	// Limit is how many jobs a page holds. Default PageLimitDefault, at
	// most PageLimitMax.
	Limit int
	// Examine bounds the index entries a filtered page looks at. Default
	// ExamineDefault. A page that stopped there says so (Page.Truncated)
	// and its Next goes on from the last entry examined.
	Examine int
}

// Page is one page of JobPage.
type Page struct {
	// Jobs are in index order (from its end with JobQuery.Newest). Each
	// holds what a listing shows: its id, kind, group, state, attempts,
	// generation, priority, times, whether a cancel was requested, and the
	// first ListedErrorBytes of its last error. Its payload, result,
	// progress, error history, metadata and claim are not read (they are
	// empty here): Job reads them.
	Jobs []JobInfo
	// Total is how many jobs the state's index holds: for pending jobs
	// the ungrouped ones and the grouped ones (the settings' g_pending),
	// and with JobQuery.Group that group's pending jobs.
	Total int64
	// Examined is how many index entries this page looked at.
	Examined int
	// Next is the cursor of the following page, "" when the index ends
	// here.
	Next string
	// Truncated: the page examined JobQuery.Examine entries and found fewer
	// than Limit matches; more may follow Next.
	Truncated bool
}

// JobPage reads one page of a queue's jobs in one state, in the order of
// the state's index (see Jobs) or its reverse. Without a filter it costs
// two round trips whatever the queue's size; with one, a round trip per
// thousand entries examined, at most JobQuery.Examine of them. A cursor
// stays valid while jobs come and go: a page goes on after the job it
// names, or, when that job left the index, after its place; so does each
// thousand entries of a filtered page after the one before.
//
// Pending jobs are listed in claim order among the ungrouped ones, then
// the grouped ones group by group (each group in its own claim order),
// the groups in their turn order, then those waiting in the timer by when
// they are due (with Newest, all of it reversed: the groups first). A
// group that takes its turn while a listing pages through may be listed
// again; one that leaves the timer for its turn meanwhile may be missed;
// JobQuery.Group lists one group exactly.
func (b *Inspector) JobPage(ctx context.Context, queue string, q JobQuery) (Page, error) {
	if err := validName("queue", queue); err != nil {
		return Page{}, err
	}
	if !q.State.valid() {
		return Page{}, &ValidationError{Field: "state", Value: string(q.State), Reason: fmt.Sprintf("must be one of %v", States)}
	}
	if q.Limit < 0 || q.Limit > PageLimitMax {
		return Page{}, &ValidationError{Field: "limit", Value: fmt.Sprint(q.Limit), Reason: fmt.Sprintf("must be between 1 and %d (0 means %d)", PageLimitMax, PageLimitDefault)}
	}
	if q.Examine < 0 {
		return Page{}, &ValidationError{Field: "examine", Value: fmt.Sprint(q.Examine), Reason: fmt.Sprintf("must be positive (0 means %d)", ExamineDefault)}
	}
	if err := ValidateGroup(q.Group); err != nil {
		return Page{}, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = PageLimitDefault
	}
	budget := q.Examine
	if budget == 0 {
		budget = ExamineDefault
	}
	k := b.queueKeys(queue)
	last, err := parseCursor(q.After) // the last entry examined; nil: the head
	if err != nil {
		return Page{}, err
	}
	page := Page{}
	byGroup := q.Group != "" && q.State != StatePending // a filter; for pending, an index of its own
	filtered := q.Kind != "" || q.IDPrefix != "" || byGroup
	var opt pendingOpt
	var count func() pendingCount
	if q.State == StatePending {
		opt.group = q.Group
		// One moment: see countPending. Read first, so the listing knows
		// whether grouped jobs may be pending (at no extra command).
		if _, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			count = readPending(ctx, p, k, q.Group)
			return nil
		}); err != nil {
			return Page{}, fmt.Errorf("fenceq: count pending jobs of queue %q: %w", queue, err)
		}
		opt.groups = "0"
		if count().groups {
			opt.groups = "1"
		}
	}
	var ids []string
	seen := map[string]bool{}
	var start int64 // the rank after the last entry examined
	var resume *listEntry
	for len(ids) < limit {
		n := limit - len(ids)
		if filtered {
			n = min(browseChunk, budget-page.Examined)
			if n <= 0 {
				page.Truncated = start < page.Total // else the budget ran out with the index
				break
			}
		}
		var total, rank int64
		var entries []listEntry
		total, rank, entries, resume, err = b.pageChunk(ctx, k, q, last, n, opt)
		if err != nil {
			return Page{}, fmt.Errorf("fenceq: list %s jobs of queue %q: %w", q.State, queue, err)
		}
		page.Total, start = total, rank
		field := ""
		switch {
		case q.Kind != "":
			field = fieldKind
		case byGroup:
			field = fieldGroup
		}
		vals := make([]*redis.SliceCmd, len(entries))
		if field != "" {
			_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, e := range entries {
					if id := e.Member.(string); strings.HasPrefix(id, q.IDPrefix) {
						vals[i] = p.HMGet(ctx, k.job+id, fieldKind, fieldGroup)
					}
				}
				return nil
			})
		}
		match := func(i int) bool {
			if field == "" {
				return true
			}
			if vals[i] == nil || len(vals[i].Val()) != 2 {
				return false
			}
			kind, _ := vals[i].Val()[0].(string)
			group, _ := vals[i].Val()[1].(string)
			return (q.Kind == "" || kind == q.Kind) && (!byGroup || group == q.Group)
		}
		for i, e := range entries {
			id := e.Member.(string)
			page.Examined++
			start++
			last = &entries[i]
			if !seen[id] && strings.HasPrefix(id, q.IDPrefix) && match(i) {
				seen[id] = true
				ids = append(ids, id)
				if len(ids) == limit {
					break
				}
			}
		}
		if resume != nil {
			break // the step stopped at spare group members: the page ends here, short
		}
		if len(entries) < n {
			break // the index ends here
		}
	}
	switch {
	case resume != nil && len(ids) < limit:
		page.Next = cursor(*resume)
	case page.Examined > 0 && (len(ids) == limit || page.Truncated) && start < page.Total:
		page.Next = cursor(*last)
	}
	page.Jobs, err = b.readJobs(ctx, k, queue, ids)
	if err != nil {
		return Page{}, err
	}
	if q.State == StatePending {
		// ready0 holds tombstones and older entries of ids filed again:
		// the index's entries are not its jobs.
		page.Jobs = slices.DeleteFunc(page.Jobs, func(j JobInfo) bool { return j.State != StatePending })
		c := count()
		page.Total = c.ungrouped + c.grouped
	}
	return page, nil
}

// pendingCount is what readPending reads: the ungrouped pending jobs
// (countPending), the grouped ones (the settings' g_pending, or with a
// group that group's), and whether grouped jobs may be pending (the
// settings' groups flag, and g_pending not 0).
type pendingCount struct {
	ungrouped, grouped int64
	groups             bool
}

// readPending queues on p, a transaction, what the pending listing counts:
// countPending's reads, with the groups' fields read by the same HMGET of
// the settings. With a group, the group's gready set alone.
func readPending(ctx context.Context, p redis.Pipeliner, k *queueKeys, group string) func() pendingCount {
	if group != "" {
		card := p.ZCard(ctx, k.derived(kindGReady, group))
		return func() pendingCount { return pendingCount{grouped: card.Val()} }
	}
	list := p.LLen(ctx, k.ready0())
	flags := p.HMGet(ctx, k.limits(), "tombs", "groups", "g_pending") // HMGET: an absent field is no error
	sets := []*redis.IntCmd{p.ZCard(ctx, k.readyHi()), p.ZCard(ctx, k.readyLo()), p.ZCard(ctx, k.legacy())}
	return func() pendingCount {
		var c pendingCount
		v := flags.Val()
		str := func(i int) string {
			if len(v) != 3 {
				return ""
			}
			s, _ := v[i].(string)
			return s
		}
		t, _ := strconv.ParseInt(str(0), 10, 64) // absent: none
		c.ungrouped = max(0, list.Val()-max(0, t))
		for _, n := range sets {
			c.ungrouped += n.Val()
		}
		g, err := strconv.ParseInt(str(2), 10, 64)
		c.grouped = max(0, g)
		c.groups = str(1) == "1" && (err != nil || g > 0) // an unreadable count: look
		return c
	}
}

// cursor names an index entry: its score and member; a grouped pending
// entry, its place too ("g<length of place>:<place><score>:<member>"), and
// a resume place (range.lua) no entry ("g<length>:<place>0:").
func cursor(e listEntry) string {
	s := strconv.FormatFloat(e.Score, 'f', -1, 64) + ":" + e.Member.(string)
	if e.place == "" {
		return s
	}
	return "g" + strconv.Itoa(len(e.place)) + ":" + e.place + s
}

// parseCursor reads a Page.Next cursor: nil for "", the head.
func parseCursor(after string) (*listEntry, error) {
	if after == "" {
		return nil, nil
	}
	bad := &ValidationError{Field: "cursor", Value: short(after), Reason: "is not a cursor this dashboard made; start from the first page"}
	var e listEntry
	rest := after
	if strings.HasPrefix(after, "g") {
		size, tail, ok := strings.Cut(after[1:], ":")
		n, err := strconv.Atoi(size)
		if !ok || err != nil || n < 5 || n > len(tail) {
			return nil, bad
		}
		e.place, rest = tail[:n], tail[n:]
		// "<phase> <group score> <group>": a group a job could have.
		phase, p, _ := strings.Cut(e.place, " ")
		gs, group, _ := strings.Cut(p, " ")
		f, err := strconv.ParseFloat(gs, 64)
		if phase != "r" && phase != "w" || err != nil || math.IsNaN(f) || math.IsInf(f, 0) || group == "" || ValidateGroup(group) != nil {
			return nil, bad
		}
	}
	s, id, ok := strings.Cut(rest, ":")
	score, err := strconv.ParseFloat(s, 64)
	if !ok || err != nil || math.IsNaN(score) {
		return nil, bad
	}
	e.Z = redis.Z{Score: score, Member: id}
	return &e, nil
}

// pageChunk reads up to n entries of a page's index, in the page's
// direction, after last (from the head, or the end, when last is nil), in
// one round trip: the index's size, the rank of the first entry read and
// the entries (and where a step of the pending listing stopped at spare
// group members, runRange). After a job that left the index (or moved in
// it) it goes on after its place (range.lua, lib.lua's rank_after: the
// rule of every listing that steps), so a cursor stays valid while jobs
// come and go, and the chunks of a filtered page miss none that stayed.
func (b *core) pageChunk(ctx context.Context, k *queueKeys, q JobQuery, last *listEntry, n int, opt pendingOpt) (int64, int64, []listEntry, *listEntry, error) {
	if last != nil || q.State == StatePending && opt.group == "" {
		return b.runRange(ctx, k, q.State, q.Newest, last, "", n, opt) // pending: three parts and the groups, range.lua
	}
	index := k.index(q.State)
	if q.State == StatePending {
		index = k.derived(kindGReady, opt.group)
	}
	var card *redis.IntCmd
	var entries *redis.ZSliceCmd
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		card = p.ZCard(ctx, index)
		if q.Newest {
			entries = p.ZRevRangeWithScores(ctx, index, 0, int64(n)-1)
		} else {
			entries = p.ZRangeWithScores(ctx, index, 0, int64(n)-1)
		}
		return nil
	})
	if err != nil {
		return 0, 0, nil, nil, err
	}
	out := make([]listEntry, len(entries.Val()))
	for i, z := range entries.Val() {
		out[i] = listEntry{Z: z}
	}
	return card.Val(), 0, out, nil, nil
}

// listedFields are the fields browse.lua answers, in its order.
var listedFields = []string{fieldKind, fieldState, fieldAttempt, fieldMaxAttempts, fieldGen, fieldPriority,
	fieldRunAt, fieldLeaseUntil, fieldCreatedAt, fieldClaimedAt, fieldFinishedAt, fieldCancel, fieldRenewals, fieldGroup, fieldLastError}

// readJobs reads what a listing shows of the jobs (browse.lua) in one
// script call, leaving out those gone meanwhile or unreadable (Check
// reports those).
func (b *core) readJobs(ctx context.Context, k *queueKeys, queue string, ids []string) ([]JobInfo, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	v, err := b.browse(ctx, k, queue, ids)
	if err != nil {
		return nil, err
	}
	out := make([]JobInfo, 0, len(ids))
	for i, id := range ids {
		if j, err := listedJob(queue, id, v[i]); err == nil {
			out = append(out, j)
		}
	}
	return out, nil
}

// JobListed reads what a listing shows of one job (Page.Jobs): its
// state, attempts, generation, times, lease deadline, renewals, group,
// whether a cancel was requested and the first ListedErrorBytes of its
// last error,
// but not its payload, result, progress, error history, metadata or
// claim, which Job reads. It is for what polls a job often, to show its
// figures: a job with a 1 MiB payload costs a few hundred bytes a read.
func (b *Inspector) JobListed(ctx context.Context, queue, id string) (JobInfo, error) {
	if err := validID(queue, id); err != nil {
		return JobInfo{}, err
	}
	v, err := b.browse(ctx, b.queueKeys(queue), queue, []string{id})
	if err != nil {
		return JobInfo{}, err
	}
	return listedJob(queue, id, v[0])
}

// browse runs browse.lua on ids, answering one reply per id.
func (b *core) browse(ctx context.Context, k *queueKeys, queue string, ids []string) ([]any, error) {
	args := make([]any, 0, len(ids)+1)
	args = append(args, ListedErrorBytes)
	for _, id := range ids {
		args = append(args, id)
	}
	v, err := b.run(ctx, b.scripts.browse, k, args...).Slice()
	if err == nil && len(v) != len(ids) {
		err = fmt.Errorf("%d answers for %d jobs", len(v), len(ids))
	}
	if err != nil {
		return nil, fmt.Errorf("fenceq: read jobs of queue %q: %w", queue, err)
	}
	return v, nil
}

// listedJob is the job of one browse.lua reply.
func listedJob(queue, id string, reply any) (JobInfo, error) {
	vals, _ := reply.([]any)
	switch len(vals) {
	case 0:
		return JobInfo{}, notFound(queue, id)
	case len(listedFields):
	default:
		return JobInfo{}, &CorruptJobError{Queue: queue, ID: id, Reason: "job key is not a hash"}
	}
	h := make(map[string]string, len(vals))
	for f, x := range vals {
		if s, ok := x.(string); ok {
			h[listedFields[f]] = s
		}
	}
	h[fieldLastError] = validPrefix(h[fieldLastError])
	return parseJob(queue, id, h)
}

// validPrefix drops a character that a byte count cut in two at the end
// of s.
func validPrefix(s string) string {
	for i := 0; i < utf8.UTFMax && len(s) > 0 && !utf8.ValidString(s); i++ {
		s = s[:len(s)-1]
	}
	return s
}

// Related is one job named by another: a dependency or a dependent.
type Related struct {
	ID    string // the other job's id
	State State  // "" when no such job exists (any more)
}

// JobLinks is what ties a job to others: the jobs it depends on, the jobs
// waiting for it, and its unique key.
type JobLinks struct {
	// DependsOn lists the jobs the job was enqueued to wait for, in their
	// order, up to the limit JobLinks was given; DependsOnTotal counts them all.
	DependsOn      []Related
	DependsOnTotal int // all the jobs it depends on, listed or not
	// RunIfDependencyFails is the job's policy when a dependency ends dead
	// or cancelled: run anyway (true) or be cancelled.
	RunIfDependencyFails bool
	// Waiting lists jobs blocked on this one, up to the limit, sorted by
	// id. They are known only while this job is unfinished: once it
	// finishes they are released (or cancelled) and the list empties.
	Waiting []Related
	// WaitingMore: more jobs wait than Waiting lists.
	WaitingMore bool
	// UniqueKey is the unique key the job holds until it finishes, ""
	// when it has none of that sort. (A key held for a fixed time,
	// UniqueFor, is not recorded on the job.)
	UniqueKey string
}

// JobLinks reads a job's dependencies, its waiting dependents (up to limit
// of each) and its unique key, in two round trips, whatever their numbers.
func (b *Inspector) JobLinks(ctx context.Context, queue, id string, limit int) (JobLinks, error) {
	if err := validID(queue, id); err != nil {
		return JobLinks{}, err
	}
	if limit < 1 {
		return JobLinks{}, &ValidationError{Field: "limit", Value: fmt.Sprint(limit), Reason: "must be at least 1"}
	}
	k := b.queueKeys(queue)
	var fields *redis.SliceCmd
	var children *redis.StringSliceCmd
	var nChildren *redis.IntCmd
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		fields = p.HMGet(ctx, k.job+id, fieldDependsOn, fieldOnParentFailure, fieldUniqueUntilDone)
		children = p.SRandMemberN(ctx, k.derived(kindChildren, id), int64(limit))
		nChildren = p.SCard(ctx, k.derived(kindChildren, id))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) && !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return JobLinks{}, fmt.Errorf("fenceq: read links of job %q in queue %q: %w", id, queue, err)
	}
	var out JobLinks
	str := func(i int) string {
		if fields.Err() != nil {
			return ""
		}
		s, _ := fields.Val()[i].(string)
		return s
	}
	var deps []string
	if s := str(0); s != "" {
		if err := json.Unmarshal([]byte(s), &deps); err != nil {
			return JobLinks{}, &CorruptJobError{Queue: queue, ID: id, Reason: "field depends_on is not a JSON list of job ids"}
		}
	}
	deps = uniq(deps)
	out.DependsOnTotal = len(deps)
	deps = deps[:min(len(deps), limit)]
	out.RunIfDependencyFails = str(1) == "run"
	if u := str(2); u != "" {
		out.UniqueKey = strings.TrimPrefix(u, k.derived(kindUnique, ""))
	}

	// A dependent is listed as "<incarnation>:<id>"; an entry whose job has
	// since been retried, cancelled or re-created is not its own any more.
	type child struct{ id, inc string }
	var kids []child
	for _, m := range children.Val() {
		if inc, cid, ok := strings.Cut(m, ":"); ok {
			kids = append(kids, child{cid, inc})
		}
	}
	depState := make([]*redis.StringCmd, len(deps))
	kidState := make([]*redis.SliceCmd, len(kids))
	_, err = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, d := range deps {
			depState[i] = p.HGet(ctx, k.job+d, fieldState)
		}
		for i, c := range kids {
			kidState[i] = p.HMGet(ctx, k.job+c.id, fieldState, fieldInc)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) && !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return JobLinks{}, fmt.Errorf("fenceq: read links of job %q in queue %q: %w", id, queue, err)
	}
	for i, d := range deps {
		out.DependsOn = append(out.DependsOn, Related{ID: d, State: State(depState[i].Val())})
	}
	for i, c := range kids {
		v := kidState[i].Val()
		if len(v) == 2 && v[0] == string(StateBlocked) && v[1] == c.inc {
			out.Waiting = append(out.Waiting, Related{ID: c.id, State: StateBlocked})
		}
	}
	slices.SortFunc(out.Waiting, func(a, b Related) int { return strings.Compare(a.ID, b.ID) })
	out.WaitingMore = nChildren.Val() > int64(len(children.Val()))
	return out, nil
}

func uniq(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// RedisTime is the clock of the server that holds queue: the clock of every
// lease deadline in that queue.
func (b *Inspector) RedisTime(ctx context.Context, queue string) (time.Time, error) {
	if err := validName("queue", queue); err != nil {
		return time.Time{}, err
	}
	node, err := b.nodeFor(ctx, b.queueKeys(queue).leases())
	if err != nil {
		return time.Time{}, err
	}
	t, err := node.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("fenceq: read the Redis clock of queue %q: %w", queue, err)
	}
	return t, nil
}
