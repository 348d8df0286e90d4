package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/jobrow"
)

// JobInfo is a job as stored, for inspection. Its [jobrow.Row] is the job
// as it stands: Attempt and Generation are 0 until its first claim, and
// MaxAttempts has its default applied. Metadata is nil when the job has
// none, or when the stored field does not decode (a hand edit: the job's
// next claim marks it dead with that reason).
type JobInfo struct {
	jobrow.Row
	State    State // the state whose index holds it
	Priority int   // PriorityMin to PriorityMax; higher is claimed first
	// ClaimID names the valid claim while running (its Lease.ClaimID), else
	// empty. It is a fingerprint: it tells claims apart but cannot renew or
	// settle the job.
	ClaimID          string
	LeaseUntil       time.Time // Redis clock; zero unless running
	RunAt            time.Time // Redis clock; when it is (or was) due
	CreatedAt        time.Time // Redis clock; when it was enqueued
	ClaimedAt        time.Time // last claim; zero if never claimed
	FinishedAt       time.Time // zero until done, dead or cancelled
	LastError        string    // the error of its latest failed attempt; empty if none failed
	Result, Progress []byte    // what its handler stored with SetResult and Progress; nil if none
	CancelRequested  bool      // a cancel reached it while running; its next renew stops it
	// Errors are the errors of the job's last ErrorsKept failed attempts,
	// oldest first: each Fail (a Snooze is none), and each expired lease
	// the reaper charged an attempt for. A retry keeps them.
	// Nil when there are none, or when the stored history does not decode
	// (a hand edit): LastError still holds the last one.
	Errors []AttemptError
	// Renewals counts the renewals of the last claim (a new claim starts
	// again from 0). A renew re-sent after a lost reply counts again. A
	// stored value that is not a number (a hand edit) reads as 0.
	Renewals int
}

// ErrorsKept is how many attempts' errors a job keeps (JobInfo.Errors),
// and ErrorBytesKept how much of each: a longer error is cut there, at a
// UTF-8 character boundary. LastError keeps up to 32 KiB of the last one.
const (
	ErrorsKept     = 10
	ErrorBytesKept = 2 << 10
)

// AttemptError is one failed attempt of a job.
type AttemptError struct {
	Attempt int       // 1 for the first run
	At      time.Time // when it was recorded, on Redis's clock
	Error   string    // at most ErrorBytesKept bytes
}

// Job reads one job. It answers an error wrapping ErrJobNotFound when there
// is none, and a *CorruptJobError when its hash cannot be read as a job.
func (b *Inspector) Job(ctx context.Context, queue, id string) (JobInfo, error) {
	if err := validID(queue, id); err != nil {
		return JobInfo{}, err
	}
	h, err := b.rdb.HGetAll(ctx, b.queueKeys(queue).job+id).Result()
	if err != nil {
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			return JobInfo{}, &CorruptJobError{Queue: queue, ID: id, Reason: "job key is not a hash"}
		}
		return JobInfo{}, fmt.Errorf("fenceq: read job %q in queue %q: %w", id, queue, err)
	}
	if len(h) == 0 {
		return JobInfo{}, notFound(queue, id)
	}
	return parseJob(queue, id, h)
}

func parseJob(queue, id string, h map[string]string) (JobInfo, error) {
	j := JobInfo{
		Row:   jobrow.Row{Queue: queue, ID: id, Kind: h[fieldKind], Payload: []byte(h[fieldPayload])},
		State: State(h[fieldState]), LastError: h[fieldLastError],
		Result: []byte(h[fieldResult]), Progress: []byte(h[fieldProgress]),
		CancelRequested: h[fieldCancel] == "1",
	}
	bad := func(reason string) (JobInfo, error) {
		return j, &CorruptJobError{Queue: queue, ID: id, Reason: reason}
	}
	if j.State == StateRunning {
		// The hash keeps a settled claim's token (to answer its re-send);
		// only a running job has a valid one.
		j.ClaimID = claimID(h[fieldToken])
	}
	if !j.State.valid() {
		return bad(fmt.Sprintf("field state is %q, not one of %v", h[fieldState], States))
	}
	if j.Kind == "" {
		return bad("field kind is missing")
	}
	ints := []struct {
		name     string
		required bool
	}{
		{fieldAttempt, true}, {fieldMaxAttempts, true}, {fieldGen, true}, {fieldPriority, false},
		{fieldLeaseUntil, false}, {fieldRunAt, false}, {fieldCreatedAt, false},
		{fieldClaimedAt, false}, {fieldFinishedAt, false},
	}
	vals := make(map[string]int64, len(ints))
	for _, f := range ints {
		s, ok := h[f.name]
		if !ok {
			if f.required {
				return bad("field " + f.name + " is missing")
			}
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return bad(fmt.Sprintf("field %s is %q, not an integer", f.name, short(s)))
		}
		vals[f.name] = n
	}
	j.Attempt, j.MaxAttempts, j.Priority = int(vals[fieldAttempt]), int(vals[fieldMaxAttempts]), int(vals[fieldPriority])
	j.Generation = vals[fieldGen]
	j.RunAt, j.CreatedAt = msTime(vals[fieldRunAt]), msTime(vals[fieldCreatedAt])
	if j.State == StateRunning {
		// A finished job keeps its last lease's end (lib.lua's finish
		// does not spend a call deleting it): it is no lease.
		j.LeaseUntil = msTime(vals[fieldLeaseUntil])
	}
	j.ClaimedAt, j.FinishedAt = msTime(vals[fieldClaimedAt]), msTime(vals[fieldFinishedAt])
	j.Errors = parseErrors(h[fieldErrors])
	j.Metadata, _ = decodeMetadata(h[fieldMeta])
	j.Group = h[fieldGroup]
	// A display counter: garbage reads as 0 rather than failing the read.
	if n, err := strconv.Atoi(h[fieldRenewals]); err == nil && n > 0 {
		j.Renewals = n
	}
	return j, nil
}

// parseErrors reads a job's error history (lib.lua's record_error): a
// JSON array of {attempt, at, error}. A history that does not decode, or
// holds entries of another shape, answers nil: the job itself is fine.
func parseErrors(s string) []AttemptError {
	if s == "" {
		return nil
	}
	var raw []struct {
		// Numbers as Lua's cjson writes them, which may be in exponent form.
		Attempt *float64 `json:"attempt"`
		At      *float64 `json:"at"`
		Error   *string  `json:"error"`
	}
	if err := json.Unmarshal([]byte(s), &raw); err != nil || len(raw) == 0 {
		return nil
	}
	out := make([]AttemptError, 0, len(raw))
	for _, e := range raw {
		if e.Attempt == nil || e.At == nil || e.Error == nil {
			return nil
		}
		out = append(out, AttemptError{Attempt: int(*e.Attempt), At: msTime(int64(*e.At)), Error: *e.Error})
	}
	return out
}

// Counts is how many jobs a queue holds in each state, read from the indexes.
type Counts struct {
	Blocked, Scheduled, Pending, Running, Done, Dead, Cancelled int64 // jobs in each state's index
}

// Counts reads the size of each index of queue in one round trip.
func (b *Inspector) Counts(ctx context.Context, queue string) (Counts, error) {
	if err := validName("queue", queue); err != nil {
		return Counts{}, err
	}
	k := b.queueKeys(queue)
	cmds := make([]*redis.IntCmd, len(States))
	var pending func() int64
	// One transaction: ready0's length and its tombstones are read at one
	// moment (countPending), so that a claim between them cannot make
	// tombstones count as pending jobs.
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range States {
			if s == StatePending {
				pending = countPending(ctx, p, k)
			} else {
				cmds[i] = p.ZCard(ctx, k.index(s))
			}
		}
		return nil
	})
	if err != nil {
		return Counts{}, fmt.Errorf("fenceq: count jobs in queue %q: %w", queue, err)
	}
	n := map[State]int64{}
	for i, s := range States {
		if s == StatePending {
			n[s] = pending()
		} else {
			n[s] = cmds[i].Val()
		}
	}
	return Counts{
		Blocked: n[StateBlocked], Scheduled: n[StateScheduled], Pending: n[StatePending], Running: n[StateRunning],
		Done: n[StateDone], Dead: n[StateDead], Cancelled: n[StateCancelled],
	}, nil
}

// countPending queues on p the reads of the pending count (lib.lua's
// ready_count): the lengths of the parts of the ready index, less ready0's
// tombstones, plus an earlier version's index still to be moved, plus the
// pending jobs of the groups (the settings' g_pending counts them). The
// function answers it once p ran. p must be a transaction (TxPipelined):
// a claim between the LLEN and the read of the tombstones, which pops
// some, would make them count as pending jobs.
func countPending(ctx context.Context, p redis.Pipeliner, k *queueKeys) func() int64 {
	list := p.LLen(ctx, k.ready0())
	flags := p.HMGet(ctx, k.limits(), "tombs", "g_pending") // HMGET: an absent field is no error
	sets := []*redis.IntCmd{p.ZCard(ctx, k.readyHi()), p.ZCard(ctx, k.readyLo()), p.ZCard(ctx, k.legacy())}
	return func() int64 {
		var t, g int64
		if v := flags.Val(); len(v) == 2 {
			s, _ := v[0].(string)
			t, _ = strconv.ParseInt(s, 10, 64) // absent: none
			s, _ = v[1].(string)
			g, _ = strconv.ParseInt(s, 10, 64)
		}
		n := max(0, list.Val()-max(0, t)) + max(0, g)
		for _, c := range sets {
			n += c.Val()
		}
		return n
	}
}

// Queues lists, sorted, every queue that a broker with this prefix has
// enqueued to.
func (b *Inspector) Queues(ctx context.Context) ([]string, error) {
	qs, err := b.rdb.SMembers(ctx, b.queuesKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("fenceq: list queues: %w", err)
	}
	slices.Sort(qs)
	return qs, nil
}

// LeaseInfo is one running job's lease, for inspection.
type LeaseInfo struct {
	ID, Kind   string        // the running job's id and kind
	Attempt    int           // 1 on the first run
	Generation int64         // the lease's generation: its claim's fencing token with ID
	Deadline   time.Time     // Redis clock
	Left       time.Duration // until Deadline on Redis's clock; negative once expired
}

// Expired reports whether the lease is past its deadline (and, being still
// listed, not yet reaped).
func (l LeaseInfo) Expired() bool { return l.Left <= 0 }

// ExpiredLeases lists up to limit leases of queue that expired and are not
// yet reaped, oldest first: after a deploy, a long list that does not shrink
// means no live worker is reaping this queue. Like Leases, it reads in steps.
func (b *Inspector) ExpiredLeases(ctx context.Context, queue string, limit int) ([]LeaseInfo, error) {
	return b.leases(ctx, queue, "expired", limit)
}

// Leases lists up to limit running jobs' leases of queue, soonest expiry
// first. It reads in steps of at most scriptStep (100) leases, one script
// call each, so a long listing never blocks Redis; it is then not one
// snapshot: a lease renewed meanwhile is listed once, where it was first
// seen, and one that ended meanwhile may still be listed. Each step goes on
// just after the lease the one before read last, so every lease held
// throughout the listing is listed (up to limit).
func (b *Inspector) Leases(ctx context.Context, queue string, limit int) ([]LeaseInfo, error) {
	return b.leases(ctx, queue, "all", limit)
}

func (b *core) leases(ctx context.Context, queue, which string, limit int) ([]LeaseInfo, error) {
	if err := validName("queue", queue); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, &ValidationError{Field: "limit", Value: fmt.Sprint(limit), Reason: "must be at least 1"}
	}
	var out []LeaseInfo
	seen := map[string]bool{}
	var lastID, lastUntil string // the last lease read; a step goes on just after it
	for len(out) < limit {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := min(limit-len(out), scriptStep)
		v, err := b.run(ctx, b.scripts.leases, b.queueKeys(queue), which, lastUntil, lastID, n).Result()
		r := newReply("leases "+queue, v, err)
		now := r.int()
		got := 0
		for r.more() && r.err == nil {
			l := LeaseInfo{ID: r.str()}
			at := r.str() // as the index holds it: the next step goes on after it
			f, err := strconv.ParseFloat(at, 64)
			if err != nil && r.err == nil {
				r.err = fmt.Errorf("fenceq: leases %s: lease_until %q of %q is not a number", queue, at, l.ID)
			}
			until := int64(f)
			l.Kind, l.Attempt, l.Generation = r.str(), int(r.int()), r.int()
			l.Deadline, l.Left = msTime(until), time.Duration(until-now)*time.Millisecond
			got++
			lastID, lastUntil = l.ID, at
			if !seen[l.ID] {
				seen[l.ID] = true
				out = append(out, l)
			}
		}
		if r.err != nil {
			return nil, r.err
		}
		if got < n {
			break
		}
	}
	return out, nil
}

// Overview is a queue at a glance.
type Overview struct {
	Counts
	// HeadAge is how long the job at the head of the ready index (the next
	// to be claimed) has been due; 0 when nothing is pending.
	HeadAge time.Duration
	// DoneLastMinute is how many jobs finished done in the last 60 s, from
	// the per-minute counters Throughput reads (retention trims the done
	// index, never these): the current minute's count, plus the share of
	// the previous minute's that falls within the 60 s. It is exact when
	// jobs finish at a steady rate, or all within the current minute.
	DoneLastMinute int64
	// Paused: no pool claims from the queue until it is resumed.
	Paused bool
	// Due is how many scheduled jobs are due on Redis's clock: the next
	// claim promotes them. Read with the counts, it tells whether a queue
	// has work now without racing a claim.
	Due int64
	// Cascading is how many finished jobs still have dependents to release
	// or cancel: the next claims and reaps settle them, in bounded steps.
	Cascading int64
	// Claimable is how many pending jobs a claim could take now: none
	// while the queue is paused, and no more than its limits let start.
	Claimable int64
	// Limits are the queue's limits (SetLimits), read with the counts.
	Limits Limits
	// Started is how many jobs started within the last Limits.Per, as the
	// rate limit counts them (0 without a rate limit).
	Started int64
	// NextStart, when Started has used up the rate, is how long until
	// enough of those starts leave the window for another job to start
	// (the oldest, or more when the rate was lowered under what had
	// started); 0 when the rate does not hold starts back.
	NextStart time.Duration
}

// Throttled says what holds the queue's pending jobs back now, as an
// operator reads it: "paused", "max running reached (5 of 5)", "at most
// 50 starts per 10s; next start in 4s"; "" when nothing does. A queue
// with pending jobs, none running and this empty is one no worker serves.
func (o Overview) Throttled() string {
	var why []string
	if o.Paused {
		why = append(why, "paused")
	}
	if o.Limits.MaxRunning > 0 && o.Running >= int64(o.Limits.MaxRunning) {
		why = append(why, fmt.Sprintf("max running reached (%d of %d)", o.Running, o.Limits.MaxRunning))
	}
	if o.NextStart > 0 {
		why = append(why, fmt.Sprintf("at most %d starts per %v; next start in %v", o.Limits.Rate, o.Limits.Per, roundUp(o.NextStart)))
	}
	return strings.Join(why, "; ")
}

// roundUp rounds a wait up to what a person reads: whole seconds from 10s
// on, else tenths of a second; never 0.
func roundUp(d time.Duration) time.Duration {
	unit := 100 * time.Millisecond
	if d >= 10*time.Second {
		unit = time.Second
	}
	return (d + unit - 1).Truncate(unit)
}

// Overview reads a queue's counts, the age of its next job and its recent
// throughput, in one round trip and on Redis's clock.
func (b *Inspector) Overview(ctx context.Context, queue string) (Overview, error) {
	if err := validName("queue", queue); err != nil {
		return Overview{}, err
	}
	v, err := b.run(ctx, b.scripts.overview, b.queueKeys(queue)).Result()
	r := newReply("overview "+queue, v, err)
	now := r.int()
	var o Overview
	o.Scheduled, o.Pending, o.Running, o.Done, o.Dead, o.Cancelled = r.int(), r.int(), r.int(), r.int(), r.int(), r.int()
	if head := r.int(); head > 0 && o.Pending > 0 {
		o.HeadAge = max(time.Duration(now-head)*time.Millisecond, 0)
	}
	o.DoneLastMinute = lastMinute(now, counter(r.str()), counter(r.str()))
	o.Paused = r.int() == 1
	o.Blocked = r.int()
	o.Due = r.int()
	o.Cascading = r.int()
	o.Claimable = r.int()
	o.Limits = Limits{MaxRunning: int(r.int()), Rate: int(r.int()), Per: time.Duration(r.int()) * time.Millisecond}
	o.Started = r.int()
	o.NextStart = time.Duration(r.int()) * time.Millisecond
	return o, r.err
}

// lastMinute estimates what was counted in the 60 s up to now (ms of Redis
// time) from two per-minute counts: the current minute's, and the part of
// the previous minute's that the 60 s still cover, as if it came at a
// steady rate.
func lastMinute(now, current, previous int64) int64 {
	minute := time.Minute.Milliseconds()
	left := minute - now%minute // of the previous minute, within the 60 s
	return current + int64(math.Round(float64(previous)*float64(left)/float64(minute)))
}

// LoadScripts loads fenceq's FUNCTION library on every master, or, where
// the server has no FUNCTION (or the user may not use it), every script
// into the server's script cache: a check at startup that the server runs
// them (and that an ACL user may), and what ScriptsLoaded reports on later.
func (b *Broker) LoadScripts(ctx context.Context) error {
	if !b.fnOff.Load() {
		if err := b.loadLibrary(ctx); err != nil {
			return fmt.Errorf("fenceq: load scripts: %w", err)
		}
		if !b.fnOff.Load() {
			return nil
		}
	}
	for _, s := range b.scripts.all() {
		if err := s.eval.Load(ctx, b.rdb).Err(); err != nil {
			return fmt.Errorf("fenceq: load scripts: %w", err)
		}
	}
	return nil
}

// ScriptsLoaded reports whether every master holds fenceq's FUNCTION
// library (FUNCTION FLUSH, or a restart without persistence, empties it),
// or, without FUNCTION, whether the server's script cache holds every
// script (a SCRIPT FLUSH empties it). The broker loads either on demand.
func (b *Broker) ScriptsLoaded(ctx context.Context) (bool, error) {
	if !b.fnOff.Load() {
		var missing atomic.Bool // eachMaster runs f on the masters at once
		err := b.eachMaster(ctx, func(ctx context.Context, c redis.Cmdable) error {
			libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: b.scripts.libName}).Result()
			if functionsUnsupported(err) {
				b.fnOff.Store(true)
				return nil
			}
			if err == nil && !slices.ContainsFunc(libs, func(l redis.Library) bool { return l.Name == b.scripts.libName }) {
				missing.Store(true)
			}
			return err
		})
		if err != nil {
			return false, fmt.Errorf("fenceq: check scripts: %w", err)
		}
		if !b.fnOff.Load() {
			return !missing.Load(), nil
		}
	}
	hashes := make([]string, 0, 16)
	for _, s := range b.scripts.all() {
		hashes = append(hashes, s.eval.Hash())
	}
	ok, err := b.rdb.ScriptExists(ctx, hashes...).Result()
	if err != nil {
		return false, fmt.Errorf("fenceq: check scripts: %w", err)
	}
	for _, v := range ok {
		if !v {
			return false, nil
		}
	}
	return true, nil
}

// Jobs lists up to limit jobs of queue in state, in the order of their
// index (pending: the order they will be claimed; scheduled: by run_at;
// running: by lease expiry; finished: by when they finished). It reads in
// steps of browseChunk (1000) index entries, a round trip each, so that no
// one command's work grows with limit. Each step goes on just after the
// entry the one before read last (see rangeAfter), so every job that stays
// in the state throughout is listed (up to limit).
func (b *Inspector) Jobs(ctx context.Context, queue string, state State, limit int) ([]JobInfo, error) {
	if err := validName("queue", queue); err != nil {
		return nil, err
	}
	if !state.valid() {
		return nil, &ValidationError{Field: "state", Value: string(state), Reason: fmt.Sprintf("must be one of %v", States)}
	}
	if limit < 1 {
		return nil, &ValidationError{Field: "limit", Value: fmt.Sprint(limit), Reason: "must be at least 1"}
	}
	k := b.queueKeys(queue)
	var out []JobInfo
	var last *listEntry
	seen := map[string]bool{}
	for read := 0; read < limit; {
		n := min(browseChunk, limit-read)
		var entries []listEntry
		var resume *listEntry
		var err error
		if state == StatePending {
			_, _, entries, resume, err = b.runRange(ctx, k, state, false, last, "", n, pendingOpt{})
		} else {
			var zs []redis.Z
			var after *redis.Z
			if last != nil {
				after = &last.Z
			}
			zs, err = b.rangeAfter(ctx, queue, state, after, "", n)
			for _, z := range zs {
				entries = append(entries, listEntry{Z: z})
			}
		}
		if err != nil {
			return nil, fmt.Errorf("fenceq: list %s jobs of queue %q: %w", state, queue, err)
		}
		var ids []string
		for _, e := range entries {
			if id := e.Member.(string); !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		read += len(ids)
		cmds := make([]*redis.MapStringStringCmd, len(ids))
		_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range ids {
				cmds[i] = p.HGetAll(ctx, k.job+id)
			}
			return nil
		})
		for i, id := range ids {
			h, err := cmds[i].Result()
			if err != nil || len(h) == 0 {
				continue // gone meanwhile, or not a hash: Check reports those
			}
			if j, err := parseJob(queue, id, h); err == nil && (state != StatePending || j.State == StatePending) {
				out = append(out, j) // a pending listing holds tombstones of ready0
			}
		}
		switch {
		case resume != nil:
			last = resume // a step that stopped at spare group members goes on after them
		case len(entries) < n:
			return out, nil
		default:
			last = &entries[len(entries)-1]
		}
	}
	return out, nil
}

// rangeAfter reads one step of a listing of a state's index that steps
// (not pending: see runRange): up to n entries, from the head when last is
// nil (a plain ZRANGE), else just after last, the entry the step before
// read last (range.lua, one script call: lib.lua's rank_after, as
// JobPage's cursor). With a bound, no entry scored above it is read.
func (b *core) rangeAfter(ctx context.Context, queue string, state State, last *redis.Z, bound string, n int) ([]redis.Z, error) {
	k := b.queueKeys(queue)
	if last == nil && bound == "" {
		return b.rdb.ZRangeWithScores(ctx, k.index(state), 0, int64(n)-1).Result()
	}
	if last == nil {
		return b.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: k.index(state), Start: "-inf", Stop: bound, ByScore: true, Count: int64(n),
		}).Result()
	}
	_, _, out, _, err := b.runRange(ctx, k, state, false, &listEntry{Z: *last}, bound, n, pendingOpt{})
	zs := make([]redis.Z, len(out))
	for i, e := range out {
		zs[i] = e.Z
	}
	return zs, err
}

// listEntry is one entry of a listing that steps: its member and score in
// the index, and for a grouped pending job the place range.lua listed it
// at ("<phase> <group score> <group>"), "" for every other.
type listEntry struct {
	redis.Z
	place string
}

// pendingOpt is what a step of the pending listing is told: groups, whether
// grouped jobs may be pending ("1", "0", or "" for the script to look), and
// group, a group whose pending jobs alone are listed ("": all).
type pendingOpt struct{ groups, group string }

// runRange runs range.lua: the index's size, the rank it goes on at after
// last (nil: from the head or end), and the n entries from there (none
// with n = 0). A step of the whole pending listing (no group) may stop at
// spare group members and answer resume: the place to go on after.
func (b *core) runRange(ctx context.Context, k *queueKeys, state State, newest bool, last *listEntry, bound string, n int, opt pendingOpt) (card, rank int64, out []listEntry, resume *listEntry, err error) {
	rev := "0"
	if newest {
		rev = "1"
	}
	var after float64
	var id, place string
	if last != nil {
		after, id, place = last.Score, last.Member.(string), last.place
	}
	args := []any{string(state), rev, score(after), id, bound, n}
	all := state == StatePending && opt.group == "" // the whole pending listing: entries with their places
	if state == StatePending {
		args = append(args, place, opt.groups, opt.group)
	}
	v, err := b.run(ctx, b.scripts.rangeAfter, k, args...).Result()
	r := newReply("range", v, err)
	card, rank = r.int(), r.int()
	if all {
		if at := r.str(); at != "" {
			resume = &listEntry{Z: redis.Z{Member: ""}, place: at}
		}
	}
	for r.more() {
		m := r.str()
		s := r.str()
		e := listEntry{Z: redis.Z{Member: m}}
		if all {
			e.place = r.str()
		}
		e.Score, err = strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, 0, nil, nil, fmt.Errorf("score %q of %q: %w", s, m, err)
		}
		out = append(out, e)
	}
	if r.err != nil {
		return 0, 0, nil, nil, r.err
	}
	return card, rank, out, resume, nil
}

// score is a sorted set score as Redis reads it back.
func score(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
