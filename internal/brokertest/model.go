package brokertest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/fenceq/fenceq/broker"
)

// mjob is the reference model's view of one job.
type mjob struct {
	state    broker.State
	gen      int64
	attempt  int
	max      int
	cancel   bool
	token    string   // the last claim's token, kept after it settled; "" once reaped, force-released or retried
	settled  string   // "<op> <outcome>" of that claim's settlement
	prev     []string // "<token> <op> <outcome>": the settlements of earlier claims, newest first (lib.lua's PREV_SETTLED)
	deadline int64    // lease_until in Redis milliseconds while running
	delayed  bool     // its run_at is an hour ahead
	// unhandledSince is when its wait for a handler began (GiveBack), as
	// the span of the step that began it; zero before any.
	unhandledSince span

	deps      []string        // the jobs it depends on, each once
	runAnyway bool            // RunIfDependencyFails
	waiting   map[string]bool // the dependencies it waits for while blocked
	met       bool            // its dependencies were all met once (or it has none)

	unique    string // its unique key, if any
	uniqueTTL bool   // held for its UniqueFor rather than until it ends

	errors   []int // the attempts of its error history, the last ErrorsKept
	renewals int   // renewals of the last claim
	// resent: a renew of the last claim lost its reply. Each re-send
	// counts again, and how many a client sends (a Cluster client's
	// hooks and retries) is its own business: renewals is then a floor.
	resent bool

	// finishedAt is its finished_at (Redis ms) once a check has read it
	// after it finished; 0 until then, and while it is unfinished.
	finishedAt int64

	waited     bool // a Wait registered on it while unfinished
	keptToWait bool // it had Wait callers when it finished: trim keeps it for them

	meta  map[string]string // its Job.Metadata; nil when it had none (or an empty map)
	group string            // its Job.Group; "" when it had none

	priority int // its Job.Priority: a claim takes the higher ones first
}

// wantMeta checks metadata a claim or Job answered for job id: what was
// enqueued, and nil, not an empty map, for a job enqueued without any.
func (j *mjob) wantMeta(t *rapid.T, what, id string, got map[string]string) {
	if !maps.Equal(got, j.meta) || (got == nil) != (j.meta == nil) {
		t.Fatalf("%s of %s: metadata %v, want %v", what, id, got, j.meta)
	}
}

// wantGroup checks the group a claim or Job answered for job id: what
// was enqueued, "" for a job enqueued without one.
func (j *mjob) wantGroup(t *rapid.T, what, id, got string) {
	if got != j.group {
		t.Fatalf("%s of %s: group %q, want %q", what, id, got, j.group)
	}
}

// failedAttempt records attempt's error in the job's history.
func (j *mjob) failedAttempt(attempt int) {
	j.errors = append(j.errors, attempt)
	if len(j.errors) > broker.ErrorsKept {
		j.errors = j.errors[1:]
	}
}

// holder is a unique key's holder in the model.
type holder struct {
	id string
	// until is when the key expires, in Redis milliseconds: the holder's
	// created_at plus its UniqueFor. 0: held until the job ends.
	until int64
}

// model drives every broker operation from several simulated workers,
// whose claims go stale as others release, reap and reclaim, and from
// operators (cancel, retry, force release, delete, purge, promote,
// retention, limits, events), with
// lost replies injected: a request runs, its reply is dropped, and it is
// sent again. It checks every answer against a small reference model, and
// after each step compares every job with Redis and runs Check.
type model struct {
	s          *bundle
	jobs       map[string]*mjob          // live jobs; a trimmed job leaves
	keptToWait map[string][]broker.State // ends of trimmed jobs that Wait still answers, oldest first (trim.lua's final records)
	ids        []string                  // every id ever used
	claims     []broker.Lease            // every claim ever made, most of them stale
	requests   []mrequest                // claims of an hour that took jobs: re-sent later by resendClaim
	maxGen     int64                     // the largest generation Redis has answered
	uniq       map[string]holder
	now        span  // when the current step's scripts ran
	checked    int64 // Redis time of the last check: jobs finished since, finished after it
	maxRunning int
	rate       int              // starts per period; 0: no rate limit
	per        int64            // the rate's period, ms
	starts     map[string]int64 // the starts ZSET: a claim's token → its Redis time
	startsTTL  int64            // when the starts key expires: its last claim's PEXPIRE
	events     int
	paused     bool
	// Settlements the throughput counters must show: jobs acked done, and
	// attempts failed (retried or killed by Fail, charged by the reaper).
	done, failed int64

	batcher     *broker.Batcher
	batcherOpts broker.BatcherOptions

	groups *mgroups // the groups' limits, holds and rates (model_groups.go)
}

func (m *model) newBatcher(t *rapid.T) {
	bt, err := broker.NewBatcher(m.s.b.Client(), m.batcherOpts)
	noErr(t, "NewBatcher", err)
	m.batcher = bt
}

func testModel(t *testing.T, nb NewBackend) {
	be := nb(t)
	be.Client.AddHook(resend{})
	be.Client.AddHook(dropReplies{})
	be.Client.AddHook(gate{})
	rapid.Check(t, func(rt *rapid.T) {
		s, cleanup := on(rt, be)
		defer cleanup()
		m := &model{s: s, jobs: map[string]*mjob{}, uniq: map[string]holder{}, starts: map[string]int64{}, keptToWait: map[string][]broker.State{}}
		m.batcherOpts = broker.BatcherOptions{MaxJobs: rapid.IntRange(1, 3).Draw(rt, "batcher max jobs")}
		m.newBatcher(rt)
		defer func() { _ = m.batcher.Close() }()
		if rapid.Bool().Draw(rt, "limits from the start") {
			m.setLimits(rt) // so that runs under a rate limit claim often enough to meet its edges
		}
		if rapid.Bool().Draw(rt, "group limits from the start") {
			m.groupLimits(rt)
		}
		rt.Repeat(map[string]func(*rapid.T){
			"enqueue":        m.enqueue,
			"enqueueBatched": m.enqueueBatched,
			"claim":          m.claim,
			"renew":          m.renew,
			"progress":       m.progress,
			"ack":            m.ack,
			"fusedAck":       m.fusedAck,
			"fusedAckMany":   m.fusedAckMany,
			"resendClaim":    m.resendClaim,
			"fail":           m.fail,
			"snooze":         m.snooze,
			"giveBack":       m.giveBack,
			"release":        m.release,
			"releaseUnowned": m.releaseUnowned,
			"reap":           m.reap,
			"cancel":         m.cancelJob,
			"retry":          m.retry,
			"retryDead":      m.retryDead,
			"delete":         m.deleteJob,
			"purge":          m.purge,
			"promote":        m.promote,
			"pause":          m.pause,
			"trim":           m.trim,
			"wait":           m.wait,
			"limits":         m.setLimits,
			"groupLimits":    m.groupLimits,
			"events":         m.setEvents,
			"overview":       m.overview,
			"advance":        func(*rapid.T) { s.Advance(15 * time.Millisecond) },
			"pastHorizon":    m.pastHorizon,
			"":               m.check,
		})
	})
}

// resend is a go-redis hook that turns a request sent with a context from
// lostReply into a lost reply: the command (or pipeline) runs, its reply is
// dropped, and it is sent again, as a client that timed out would.
type resend struct{}

type resendKey struct{}

func (resend) DialHook(next redis.DialHook) redis.DialHook { return next }

func (resend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(resendKey{}) != nil {
			_ = next(ctx, cmd)
		}
		return next(ctx, cmd)
	}
}

func (resend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(resendKey{}) != nil {
			_ = next(ctx, cmds)
		}
		return next(ctx, cmds)
	}
}

// lostReply draws whether this step's request loses its first reply.
func (m *model) lostReply(t *rapid.T) context.Context {
	if rapid.Bool().Draw(t, "lost reply") {
		return context.WithValue(m.s.ctx, resendKey{}, true)
	}
	return m.s.ctx
}

// lostOrDropped is lostReply for an operation the broker sends again
// itself: its request may also lose its first reply to the broker (a
// timeout, dropReplies), which sends it again and answers as once.
func (m *model) lostOrDropped(t *rapid.T) context.Context {
	switch rapid.IntRange(0, 2).Draw(t, "lost reply") {
	case 1:
		return context.WithValue(m.s.ctx, resendKey{}, true)
	case 2:
		return dropping(m.s.ctx, 1)
	}
	return m.s.ctx
}

// lostClaimReply is lostReply for a call that also claims. A re-send is
// safe within the claim's lease (invariant 9): a call whose reply is lost
// claims for an hour, since a 10 ms lease may end before the re-send on a
// slow server (a Cluster in CI), and the guarantee with it.
func (m *model) lostClaimReply(t *rapid.T, lease *time.Duration) context.Context {
	ctx := m.lostOrDropped(t)
	if ctx != m.s.ctx {
		*lease = time.Hour
	}
	return ctx
}

// enqueue enqueues one job with Enqueue, or a few with EnqueueMany (each
// judged in order, as Redis runs them).
func (m *model) enqueue(t *rapid.T) {
	jobs := make([]broker.Job, rapid.IntRange(1, 3).Draw(t, "jobs"))
	for i := range jobs {
		jobs[i] = m.drawJob(t, i)
	}
	ctx := m.lostOrDropped(t)
	var res []broker.Enqueued
	m.begin(t)
	if len(jobs) == 1 {
		id, err := m.s.b.Client().Enqueue(ctx, jobs[0])
		res = []broker.Enqueued{{ID: id, Err: err}}
	} else {
		res = m.s.b.Client().EnqueueMany(ctx, jobs)
	}
	m.end(t)
	// A lost reply means Redis ran the whole batch once before the answer
	// that came back: a job created then answers as created (it is
	// recognised), one refused then is judged again, after the batch's
	// later jobs, as Redis judged it. A key whose TTL ends within the
	// step may have been free in either run: the job's answer says whether
	// one of them created it.
	created := make([]bool, len(jobs))
	if ctx != m.s.ctx {
		for i, j := range jobs {
			why := m.verdict(j)
			if why == "" || strings.HasPrefix(why, "perhaps ") && res[i].Err == nil {
				m.create(t, j, res[i].ID)
				created[i] = true
			}
		}
	}
	for i, j := range jobs {
		if created[i] {
			noErr(t, "Enqueue sent again", res[i].Err)
			continue
		}
		m.enqueued(t, j, res[i].ID, res[i].Err)
	}
}

// enqueueBatched enqueues a few jobs through the Batcher, each from its own
// goroutine, behind a round trip held in flight so that they share the
// next ones. The jobs are drawn independent of each other (no shared id or
// unique key, no dependency on one another), so each is judged as if
// alone, in whatever order the goroutines reach the Batcher. The first
// job's caller may give up while its round trip is in flight: it gets its
// id and ErrOutcomeUnknown, and the job is stored as the verdict says.
// Another's may give up while it waits: nothing of it is written. Then
// the Batcher may be closed (always after a caller gave up in flight, so
// that its round trip has ended): a job sent to it after is refused.
func (m *model) enqueueBatched(t *rapid.T) {
	jobs := m.drawIndependent(t, rapid.IntRange(1, 4).Draw(t, "jobs"))
	giveUp := make([]bool, len(jobs))
	for i := range jobs {
		giveUp[i] = rapid.IntRange(0, 3).Draw(t, "give up") == 0
	}
	lost := m.lostReply(t)
	m.begin(t)
	holding, h := hold(lost)
	res := make([]answer, len(jobs))
	done := make([]chan struct{}, len(jobs))
	send := func(ctx context.Context, i int) {
		done[i] = make(chan struct{})
		go func() {
			defer close(done[i])
			id, err := m.batcher.Enqueue(ctx, jobs[i])
			res[i] = answer{id, err}
		}()
	}
	first, cancel := context.WithCancel(holding)
	defer cancel()
	send(first, 0)
	<-h.entered
	if giveUp[0] {
		cancel()
		<-done[0]
		wantErr(t, "a caller given up in flight", res[0].err, broker.ErrOutcomeUnknown)
	}
	waiting := 0
	for i := 1; i < len(jobs); i++ {
		ctx, cancel := context.WithCancel(lost)
		defer cancel()
		send(ctx, i)
		waiting++
		for m.batcher.Stats().Waiting < waiting {
			runtime.Gosched() // on its way: no timing involved
		}
		if giveUp[i] {
			cancel()
			<-done[i]
			waiting--
			wantErr(t, "a caller given up while waiting", res[i].err, context.Canceled)
			if errors.Is(res[i].err, broker.ErrOutcomeUnknown) {
				t.Fatalf("a job never sent answered %v", res[i].err)
			}
		}
	}
	close(h.release)
	for i := range jobs {
		<-done[i]
	}
	m.end(t)
	verdicts := make([]string, len(jobs))
	for i, j := range jobs {
		verdicts[i] = m.verdict(j) // independent: each as if alone
	}
	if rapid.Bool().Draw(t, "close") || giveUp[0] {
		noErr(t, "Close", m.batcher.Close())
		late := broker.Job{Queue: m.s.q, Kind: "k", ID: fmt.Sprintf("late-%d", len(m.ids))}
		_, err := m.batcher.Enqueue(m.s.ctx, late)
		wantErr(t, "Enqueue after Close", err, broker.ErrBatcherClosed)
		_, err = m.s.b.Inspector().Job(m.s.ctx, m.s.q, late.ID)
		wantErr(t, "a job refused after Close", err, broker.ErrJobNotFound)
		m.newBatcher(t)
	}
	for i, j := range jobs {
		switch {
		case giveUp[i] && i == 0:
			if j.ID != "" {
				want(t, "id of a job given up in flight", res[i].id, j.ID)
			}
			if verdicts[i] == "" {
				m.create(t, j, res[i].id)
			}
			if strings.HasPrefix(verdicts[i], "perhaps ") {
				// Its key's TTL ended within the step: Redis says which.
				if _, err := m.s.b.Inspector().Job(m.s.ctx, m.s.q, res[i].id); err == nil {
					m.create(t, j, res[i].id)
				}
			}
		case giveUp[i]:
			if j.ID != "" && verdicts[i] != "exists" {
				_, err := m.s.b.Inspector().Job(m.s.ctx, m.s.q, j.ID)
				wantErr(t, "a job given up before it was sent", err, broker.ErrJobNotFound)
			}
		default:
			m.enqueued(t, j, res[i].id, res[i].err)
		}
	}
	c, err := m.s.b.Inspector().Counts(m.s.ctx, m.s.q)
	noErr(t, "Counts", err)
	want(t, "jobs in Redis", c.Blocked+c.Scheduled+c.Pending+c.Running+c.Done+c.Dead+c.Cancelled, int64(len(m.jobs)))
}

// drawIndependent draws n jobs whose verdicts do not depend on each other:
// no id, caller-chosen or depended on, and no unique key appears in two.
func (m *model) drawIndependent(t *rapid.T, n int) []broker.Job {
	jobs := make([]broker.Job, n)
	ids, keys := map[string]bool{}, map[string]bool{}
	for i := range jobs {
		j := m.drawJob(t, i)
		if ids[j.ID] {
			j.ID = ""
		}
		if keys[j.UniqueKey] {
			j.UniqueKey, j.UniqueFor = "", 0
		}
		// A refusal under a held key names its holder's state, so a job
		// whose key an id of the batch holds (one reused after trim) is
		// not independent of the job that takes that id.
		if h := m.holder(j.UniqueKey); h != "" && ids[h] {
			j.UniqueKey, j.UniqueFor = "", 0
		}
		if slices.ContainsFunc(j.DependsOn, func(d string) bool { return ids[d] || d == j.ID }) {
			j.DependsOn, j.RunIfDependencyFails = nil, false
		}
		jobs[i] = j
		for _, d := range j.DependsOn {
			ids[d] = true
		}
		if j.ID != "" {
			ids[j.ID] = true
		}
		if j.UniqueKey != "" {
			keys[j.UniqueKey] = true
		}
		if h := m.holder(j.UniqueKey); h != "" {
			ids[h] = true
		}
	}
	return jobs
}

// holder is the id the model holds key under, or "" when nothing holds it.
func (m *model) holder(key string) string {
	if h, ok := m.uniq[key]; ok && key != "" {
		return h.id
	}
	return ""
}

// drawJob draws the i-th job of an enqueue.
func (m *model) drawJob(t *rapid.T, i int) broker.Job {
	j := broker.Job{Queue: m.s.q, Kind: "k", MaxAttempts: rapid.IntRange(1, 3).Draw(t, "max_attempts")}
	if rapid.IntRange(0, 9).Draw(t, "delayed") == 0 {
		j.Delay = time.Hour
	}
	// An id of the caller's: a fresh one, or any used before (a live job's
	// is a duplicate; a trimmed job's is free again).
	switch rapid.IntRange(0, 3).Draw(t, "id") {
	case 1:
		j.ID = fmt.Sprintf("job-%d-%d", len(m.ids), i)
	case 2:
		if len(m.ids) > 0 {
			j.ID = rapid.SampledFrom(m.ids).Draw(t, "reused id")
		}
	}
	// Dependencies on any job ever seen, duplicates included.
	if len(m.ids) > 0 && rapid.IntRange(0, 2).Draw(t, "has dependencies") == 0 {
		for range rapid.IntRange(1, 3).Draw(t, "dependencies") {
			j.DependsOn = append(j.DependsOn, rapid.SampledFrom(m.ids).Draw(t, "dependency"))
		}
		j.RunIfDependencyFails = rapid.Bool().Draw(t, "run if a dependency fails")
	}
	j.Metadata = drawMetadata(t)
	// Mostly no group; a few short ones, shared by several jobs, acme the
	// most (so that its limits meet contention); one of exactly
	// MaxGroupBytes.
	j.Group = rapid.SampledFrom([]string{"", "", "", "acme", "acme", "acme", "globex", "ünï", strings.Repeat("g", broker.MaxGroupBytes)}).Draw(t, "group")
	// Mostly priority 0 (the ready index's list), some above and below it
	// (its sorted sets).
	j.Priority = rapid.SampledFrom([]int{0, 0, 0, 5, -5}).Draw(t, "priority")
	// A unique key held until the job ends, for an hour, or for about as
	// long as an advance of the clock (at 15 ms, exactly one on miniredis:
	// the key's last moment).
	if u := rapid.IntRange(0, 4).Draw(t, "unique"); u > 0 {
		j.UniqueKey = fmt.Sprintf("u%d", u%2)
		switch rapid.IntRange(0, 2).Draw(t, "unique for") {
		case 1:
			j.UniqueFor = time.Hour
		case 2:
			j.UniqueFor = rapid.SampledFrom([]time.Duration{10, 15, 30, 40}).Draw(t, "unique for ms") * time.Millisecond
		}
	}
	return j
}

// drawMetadata draws a job's metadata: mostly none, sometimes an empty
// map (which stores nothing), a few small entries, or entries adding up to
// exactly MaxMetadataBytes or just under it.
func drawMetadata(t *rapid.T) map[string]string {
	switch rapid.IntRange(0, 5).Draw(t, "metadata") {
	case 2:
		return map[string]string{}
	case 3:
		m := map[string]string{}
		for i := range rapid.IntRange(1, 3).Draw(t, "metadata entries") {
			m[fmt.Sprintf("k%d", i)] = rapid.StringN(0, 8, -1).Draw(t, "metadata value")
		}
		return m
	case 4:
		size := broker.MaxMetadataBytes - rapid.IntRange(0, 2).Draw(t, "metadata under the limit")
		return map[string]string{"traceparent": "00-1", "big": strings.Repeat("é", (size-len("traceparent")-len("00-1")-len("big"))/2)}
	}
	return nil
}

// enqueued checks the answer to enqueuing j and moves the model on.
func (m *model) enqueued(t *rapid.T, j broker.Job, id string, err error) {
	switch why := m.verdict(j); {
	case why == "exists":
		wantErr(t, "enqueue of a live id", err, broker.ErrJobExists)
	case strings.HasPrefix(why, "missing "):
		wantErr(t, "enqueue of "+j.ID+" depending on a "+why, err, broker.ErrInvalid)
	case strings.HasPrefix(why, "held by "):
		m.wantHeld(t, j, strings.TrimPrefix(why, "held by "), id, err)
	case strings.HasPrefix(why, "perhaps held by ") && err != nil:
		m.wantHeld(t, j, strings.TrimPrefix(why, "perhaps held by "), id, err)
	default:
		noErr(t, "Enqueue", err)
		if j.ID != "" {
			want(t, "id", id, j.ID)
		}
		m.create(t, j, id)
	}
}

// wantHeld checks the answer to enqueuing j under a unique key that holder
// holds: a *UniqueHeldError naming the holder and its state ("" once
// trimmed), and the holder's id.
func (m *model) wantHeld(t *rapid.T, j broker.Job, holder, id string, err error) {
	var he *broker.UniqueHeldError
	if !errors.As(err, &he) {
		t.Fatalf("enqueue of %s under unique key %s held by %s: error %v, want a *UniqueHeldError", j.ID, j.UniqueKey, holder, err)
	}
	want(t, "holder named for a held key", he.HolderID, holder)
	want(t, "id answered for a held key", id, holder)
	var st broker.State
	if h := m.jobs[holder]; h != nil {
		st = h.state
	}
	want(t, "state of the holder of a held key", he.HolderState, st)
}

// verdict says why enqueuing j now creates nothing ("exists", "missing
// <dependency>", "held by <holder>"), or "" when it creates the job, or
// "perhaps held by <holder>" when the holder's TTL ends within the step.
func (m *model) verdict(j broker.Job) string {
	if j.ID != "" && m.jobs[j.ID] != nil {
		return "exists"
	}
	for _, d := range j.DependsOn {
		if m.jobs[d] == nil {
			return "missing " + d
		}
	}
	switch h, held := m.held(j.UniqueKey); held {
	case yes:
		return "held by " + h
	case perhaps:
		return "perhaps held by " + h
	}
	return ""
}

// create is enqueue's effect on the model: job j under id.
func (m *model) create(t *rapid.T, j broker.Job, id string) {
	var deps []string
	for _, d := range j.DependsOn {
		if !slices.Contains(deps, d) {
			deps = append(deps, d)
		}
	}
	mj := &mjob{max: j.MaxAttempts, delayed: j.Delay > 0, deps: deps, runAnyway: j.RunIfDependencyFails,
		unique: j.UniqueKey, uniqueTTL: j.UniqueFor > 0, priority: j.Priority}
	if len(j.Metadata) > 0 {
		mj.meta = maps.Clone(j.Metadata)
	}
	mj.group = j.Group
	m.jobs[id] = mj
	if !slices.Contains(m.ids, id) {
		m.ids = append(m.ids, id)
	}
	if j.UniqueKey != "" {
		h := holder{id: id}
		if j.UniqueFor > 0 {
			// Its key's TTL runs from the enqueue's time, which the job
			// records as created_at.
			created := m.s.job(t, id).CreatedAt.UnixMilli()
			m.within(t, "created_at of "+id, m.now, created)
			h.until = created + j.UniqueFor.Milliseconds()
		}
		m.uniq[j.UniqueKey] = h
	}
	open, failed := m.dependencies(mj)
	switch {
	case failed:
		m.finish(id, broker.StateCancelled)
	case len(open) > 0:
		mj.state, mj.waiting = broker.StateBlocked, open
	default:
		mj.met = true
		mj.ready()
	}
}

// held answers the holder of a unique key and whether it holds the key
// now, as lib.lua's unique_holder: the holder's own terms decide. A key
// with a TTL is held until it expires, whatever became of its job (done,
// or trimmed); perhaps when it expires within the step. A key without
// one is held while its job is unfinished.
func (m *model) held(key string) (string, tri) {
	h, ok := m.uniq[key]
	if key == "" || !ok {
		return "", no
	}
	if h.until > 0 {
		return h.id, m.now.reached(h.until).not()
	}
	if j := m.jobs[h.id]; j != nil && !j.state.Final() {
		return h.id, yes
	}
	return h.id, no
}

// dependencies is the model of lib.lua's: the open dependencies, and
// whether one that failed cancels the job.
func (m *model) dependencies(j *mjob) (open map[string]bool, failed bool) {
	open = map[string]bool{}
	for _, d := range j.deps {
		switch st := m.jobs[d].state; {
		case st == broker.StateDead || st == broker.StateCancelled:
			failed = failed || !j.runAnyway
		case st != broker.StateDone:
			open[d] = true
		}
	}
	return open, failed
}

// ready files a job whose dependencies are met.
func (j *mjob) ready() {
	j.state = broker.StatePending
	if j.delayed {
		j.state = broker.StateScheduled
	}
}

// finish ends a job, frees its unique key when it held it until its end,
// and settles its dependents down the chain (the cascade, complete here:
// the model's fan-outs are far below the scripts' inline budget).
func (m *model) finish(id string, st broker.State) {
	j := m.jobs[id]
	j.state, j.deadline, j.finishedAt = st, 0, 0
	j.keptToWait, j.waited = j.waited, false
	if h, ok := m.uniq[j.unique]; ok && h.until == 0 && h.id == id {
		delete(m.uniq, j.unique)
	}
	for cid, c := range m.jobs {
		if c.state != broker.StateBlocked || !c.waiting[id] {
			continue
		}
		if st == broker.StateDone || c.runAnyway {
			delete(c.waiting, id)
			if len(c.waiting) == 0 {
				c.met = true
				c.ready()
			}
		} else {
			m.finish(cid, broker.StateCancelled)
		}
	}
}

func (m *model) claim(t *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(t, "n")
	lease := rapid.SampledFrom([]time.Duration{10 * time.Millisecond, time.Hour}).Draw(t, "lease")
	req := broker.NewRequestID()
	lost := rapid.Bool().Draw(t, "claim reply lost")
	dropped := !lost && rapid.Bool().Draw(t, "claim reply lost to the broker")
	if lost || dropped {
		lease = time.Hour // the re-send must come within the lease (see lostClaimReply)
	}
	m.snapGroups(t) // the rotation and the timer as the claim will find them
	m.begin(t)
	var res broker.ClaimResult
	var err error
	if dropped {
		// Claim under a request id of its own, which the broker sends again.
		res, err = m.s.b.Leases().Claim(dropping(m.s.ctx, 1), m.s.q, n, lease)
		noErr(t, "Claim whose first reply was lost", err)
	} else {
		res, err = m.s.b.Leases().ClaimRequest(m.s.ctx, req, m.s.q, n, lease)
		noErr(t, "ClaimRequest", err)
	}
	if lost {
		again, err := m.s.b.Leases().ClaimRequest(m.s.ctx, req, m.s.q, n, lease)
		noErr(t, "ClaimRequest sent again", err)
		if len(again.Leases) != len(res.Leases) {
			t.Fatalf("a re-sent claim took %d leases, the first %d", len(again.Leases), len(res.Leases))
		}
		for i, l := range again.Leases {
			f := res.Leases[i]
			if l.ID != f.ID || l.Generation != f.Generation || l.ClaimID() != f.ClaimID() || l.Attempt != f.Attempt || !l.Deadline.Equal(f.Deadline) ||
				!maps.Equal(l.Metadata, f.Metadata) {
				t.Fatalf("a re-sent claim answered %+v, the first %+v", l, f)
			}
		}
		res = again
	}
	m.end(t)
	m.took(t, "claim", res, n, lease)
	if !dropped {
		m.remember(req, n, lease, res)
	}
}

// fusedAck acks a claim (or none) and claims in the same call, the way a
// pool that finished a job takes its next one.
func (m *model) fusedAck(t *rapid.T) {
	var acks []broker.Ack
	var l broker.Lease
	var j *mjob
	var valid bool
	if len(m.claims) > 0 && rapid.Bool().Draw(t, "with an ack") {
		l, j, valid = m.pickClaim(t)
		acks = append(acks, broker.Ack{Lease: l})
	}
	n := rapid.IntRange(1, 3).Draw(t, "n")
	lease := rapid.SampledFrom([]time.Duration{10 * time.Millisecond, time.Hour}).Draw(t, "lease")
	ctx := m.lostClaimReply(t, &lease)
	spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: m.s.q, N: n, Lease: lease}
	m.snapGroups(t) // the rotation and the timer as the claim will find them
	m.begin(t)
	fa, err := m.s.b.Leases().FusedAck(ctx, acks, spec)
	os, res := fa.Outcomes, fa.Claim
	m.end(t)
	noErr(t, "FusedAck", err)
	if len(acks) > 0 {
		_, resent := again(j, l, "ack")
		m.wantOutcome(t, "FusedAck's ack", os[0], nil, valid || resent)
		if valid {
			m.acked(l.ID)
		}
	}
	m.took(t, "FusedAck", res, n, lease) // the acks come first
	m.remember(spec.RequestID, n, lease, res)
}

// mrequest is a claim request, kept to be sent again: one that took
// nothing takes nothing when sent again (its original, late, after its
// re-ask found nothing ready).
// The record of one that took nothing lasts broker.ResendHorizon from at
// (m.now.lo of its claim), not its lease: later, the request claims anew.
type mrequest struct {
	id     string
	n      int
	lease  time.Duration
	leases []broker.Lease
	at     int64
}

func (m *model) remember(id string, n int, lease time.Duration, res broker.ClaimResult) {
	if lease == time.Hour && n > 0 {
		m.requests = append(m.requests, mrequest{id: id, n: n, lease: lease, leases: res.Leases, at: m.now.lo})
	}
}

// pastHorizon moves the clock past broker.ResendHorizon, where the
// server's clock is the test's: retention may then delete every job
// finished before, and the empty records of claims that took nothing
// expire. (On a real server it would wait that long.)
func (m *model) pastHorizon(t *rapid.T) {
	if !m.s.Frozen {
		t.Skip("a real server's clock: no waiting out the horizon")
	}
	m.s.Advance(broker.ResendHorizon)
}

// resendClaim sends an earlier claim request again, any time later, as a
// pool that lost its reply does (claim alone, ClaimRequest, as the acker's
// re-ask; or a whole FusedAck with other acks): it answers the leases that
// request took that are still its job's one valid claim, in order, and
// claims nothing more.
func (m *model) resendClaim(t *rapid.T) {
	// A request that took nothing is sent again only while its empty
	// record surely lasts (a second of slack for a real server's clock).
	now := m.s.redisTime(t)
	live := m.requests[:0]
	for _, r := range m.requests {
		if len(r.leases) > 0 || now+1000 < r.at+broker.ResendHorizon.Milliseconds() {
			live = append(live, r)
		}
	}
	m.requests = live
	if len(m.requests) == 0 {
		t.Skip("no requests to send again")
	}
	r := rapid.SampledFrom(m.requests).Draw(t, "request")
	var res broker.ClaimResult
	var err error
	if rapid.Bool().Draw(t, "alone") {
		res, err = m.s.b.Leases().ClaimRequest(m.lostOrDropped(t), r.id, m.s.q, r.n, r.lease)
		noErr(t, "ClaimRequest sent again", err)
	} else {
		var acks []broker.Ack
		var l broker.Lease
		var j *mjob
		var valid bool
		if len(m.claims) > 0 {
			l, j, valid = m.pickClaim(t)
			acks = append(acks, broker.Ack{Lease: l})
		}
		var os []broker.Outcome
		var fa broker.FusedAcks
		fa, err = m.s.b.Leases().FusedAck(m.lostOrDropped(t), acks, broker.ClaimSpec{RequestID: r.id, Queue: m.s.q, N: r.n, Lease: r.lease})
		os, res = fa.Outcomes, fa.Claim
		noErr(t, "FusedAck sent again with other acks", err)
		if len(acks) > 0 {
			_, resent := again(j, l, "ack")
			m.wantOutcome(t, "re-sent FusedAck's ack", os[0], nil, valid || resent)
			if valid {
				m.acked(l.ID)
			}
		}
	}
	var want []broker.Lease
	for _, l := range r.leases {
		if j := m.jobs[l.ID]; j != nil && j.state == broker.StateRunning && j.token == l.ClaimID() {
			want = append(want, l)
		}
	}
	if len(res.Leases) != len(want) {
		t.Fatalf("request %s sent again answered %d leases %v; want %d %v", r.id, len(res.Leases), res.Leases, len(want), want)
	}
	for i, l := range res.Leases {
		w := want[i]
		if l.ID != w.ID || l.ClaimID() != w.ClaimID() || l.Generation != w.Generation || l.Attempt != w.Attempt || l.Group != w.Group {
			t.Fatalf("request sent again answered %+v, want %+v", l, w)
		}
		if l.Deadline.UnixMilli() != m.jobs[l.ID].deadline {
			t.Fatalf("request sent again answered deadline %d, the job's is %d", l.Deadline.UnixMilli(), m.jobs[l.ID].deadline)
		}
	}
}

// fusedAckMany acks several claims at once, the same one twice perhaps,
// and claims 0 to 3 jobs in the same call.
func (m *model) fusedAckMany(t *rapid.T) {
	if len(m.claims) == 0 {
		t.Skip("no claims yet")
	}
	k := rapid.IntRange(1, 4).Draw(t, "acks")
	var acks []broker.Ack
	var ls []broker.Lease
	for range k {
		l := rapid.SampledFrom(m.claims).Draw(t, "claim")
		ls = append(ls, l)
		acks = append(acks, broker.Ack{Lease: l})
	}
	// What each ack should answer, judged in order as the script runs them.
	wantOK := make([]bool, k)
	for i, l := range ls {
		j := m.jobs[l.ID]
		valid := j != nil && j.state == broker.StateRunning && j.token == l.ClaimID()
		_, resent := again(j, l, "ack")
		wantOK[i] = valid || resent
		if valid {
			m.acked(l.ID)
		}
	}
	n := rapid.IntRange(0, 3).Draw(t, "n")
	lease := rapid.SampledFrom([]time.Duration{10 * time.Millisecond, time.Hour}).Draw(t, "lease")
	ctx := m.lostClaimReply(t, &lease)
	spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: m.s.q, N: n, Lease: lease}
	m.snapGroups(t) // the rotation and the timer as the claim will find them
	m.begin(t)
	fa, err := m.s.b.Leases().FusedAck(ctx, acks, spec)
	os, res := fa.Outcomes, fa.Claim
	m.end(t)
	noErr(t, "FusedAck of several", err)
	for i := range acks {
		m.wantOutcome(t, fmt.Sprintf("FusedAck's ack %d of %d", i, k), os[i], nil, wantOK[i])
	}
	m.took(t, "FusedAck of several", res, n, lease)
	m.remember(spec.RequestID, n, lease, res)
}

// claimable is how many jobs a claim of n took, as take.lua counts them:
// the pending ones, none while paused, no more than max running lets
// start, and no more than the rate limit's starts left in the window. It
// answers a range, lo..hi, which is one number but where counted says
// that a real server's clock left it open.
func (m *model) claimable(t *rapid.T, op string, n int, res broker.ClaimResult, lease time.Duration) (lo, hi int) {
	pending, running := 0, 0
	for _, j := range m.jobs {
		switch j.state {
		case broker.StatePending:
			pending++
		case broker.StateRunning:
			running++
		}
	}
	if m.maxRunning > 0 {
		n = min(n, max(0, m.maxRunning-running))
	}
	// The groups' limits and turns (model_groups.go): with none in use,
	// every pending job.
	supplyLo, supplyHi := m.groupSupply(op != "claim")
	if supplyHi > pending {
		t.Fatalf("%s: the groups' supply %d is above the %d pending jobs", op, supplyHi, pending)
	}
	if m.paused {
		supplyLo, supplyHi = 0, 0
	}
	lo, hi = min(n, supplyLo), min(n, supplyHi)
	if m.rate > 0 && n > 0 {
		least, most := m.counted(t, op, res, lease)
		lo, hi = min(lo, max(0, m.rate-most)), min(hi, max(0, m.rate-least))
	}
	return lo, hi
}

// counted is the number of earlier starts a claim under the rate limit
// counted: the model's, less those a period or more before the claim,
// which it dropped, and all of them once the starts key expired (a period
// after the last claim that recorded one, by that claim's period). It
// reads the starts back from Redis, which must hold exactly those and the
// claim's own, at its time; on a real server, a start whose end falls
// within the step may have gone either way, and Redis says which. Unless
// the key expired between the claim and the read (on a real server, a
// period after the claim): then counted answers what the model has, as a
// range, least..most, and Redis holds none of them any more.
func (m *model) counted(t *rapid.T, op string, res broker.ClaimResult, lease time.Duration) (least, most int) {
	at := m.now
	var c int64
	if len(res.Leases) > 0 {
		// The claim's time, exactly: its leases run from it.
		c = res.Leases[0].Deadline.UnixMilli() - lease.Milliseconds()
		m.within(t, op+"'s claim time", m.now, c)
		at = m.widen(span{c, c})
	}
	read := span{lo: m.s.redisTime(t)}
	zs, err := m.s.Client.ZRangeWithScores(m.s.ctx, m.s.b.Prefix()+":{"+m.s.q+"}:starts", 0, -1).Result()
	noErr(t, "ZRANGE starts", err)
	read.hi = m.s.redisTime(t)
	read = m.widen(read)
	got := map[string]int64{} // by claim id: the starts hold raw tokens
	for _, z := range zs {
		got[claimIDOf(z.Member.(string))] = int64(z.Score)
	}
	expired := at.reached(m.startsTTL)
	ttl := m.startsTTL
	if len(res.Leases) > 0 {
		ttl = c + m.per
	}
	if len(got) == 0 && read.reached(ttl) != no {
		for _, start := range m.starts {
			switch max(expired, at.reached(start+m.per)) {
			case no:
				least++
				most++
			case perhaps:
				most++
			}
		}
		clear(m.starts)
		return least, most
	}
	counted := 0
	for tok, start := range m.starts {
		gone := max(expired, at.reached(start+m.per))
		g, in := got[tok]
		switch {
		case in && g != start:
			t.Fatalf("%s: start %s at %d, the model has %d", op, tok, g, start)
		case in && gone == yes:
			t.Fatalf("%s at %d..%d kept start %s of %d (period %d ms, key until %d)", op, at.lo, at.hi, tok, start, m.per, m.startsTTL)
		case !in && gone == no:
			t.Fatalf("%s at %d..%d dropped start %s of %d (period %d ms, key until %d)", op, at.lo, at.hi, tok, start, m.per, m.startsTTL)
		}
		if in {
			counted++
		} else {
			delete(m.starts, tok)
		}
	}
	for _, l := range res.Leases {
		if g, in := got[l.ClaimID()]; !in || g != c {
			t.Fatalf("%s: start of %s recorded %v at %d, want at %d", op, l.ClaimID(), in, g, c)
		}
		m.starts[l.ClaimID()] = c
		m.startsTTL = c + m.per
	}
	if len(got) != len(m.starts) {
		t.Fatalf("%s: starts in Redis %v, the model has %v", op, got, m.starts)
	}
	return counted, counted
}

// took checks what a claim of n took (claimable), and makes those jobs
// running.
func (m *model) took(t *rapid.T, op string, res broker.ClaimResult, n int, lease time.Duration) {
	if len(res.Problems) > 0 {
		t.Fatalf("%s reported problems: %v", op, res.Problems)
	}
	if lo, hi := m.claimable(t, op, n, res, lease); len(res.Leases) < lo || len(res.Leases) > hi {
		t.Fatalf("%s took %d jobs; want %d (to %d, a start's end falling within the step)", op, len(res.Leases), lo, hi)
	}
	for _, l := range res.Leases {
		j := m.jobs[l.ID]
		if j == nil || j.state != broker.StatePending {
			t.Fatalf("%s took job %s, which the model has as %+v", op, l.ID, j)
		}
		m.newGen(t, op, l.Generation)
		if l.Attempt != j.attempt+1 {
			t.Fatalf("%s of %s: attempt %d, want %d", op, l.ID, l.Attempt, j.attempt+1)
		}
		j.wantMeta(t, op, l.ID, l.Metadata)
		j.wantGroup(t, op, l.ID, l.Group)
		j.keepSettled()
		j.state, j.gen, j.attempt, j.token, j.settled, j.deadline = broker.StateRunning, l.Generation, l.Attempt, l.ClaimID(), "", l.Deadline.UnixMilli()
		j.renewals, j.resent = 0, false
		m.claims = append(m.claims, l)
	}
	// Higher priorities first: no job left pending outranks one taken of
	// its group (the ungrouped jobs are one); the groups take turns.
	for _, l := range res.Leases {
		if m.heldNext(l.ID) {
			continue // an ordered group's job sent back runs again first, whatever waits
		}
		for id, j := range m.jobs {
			if j.state == broker.StatePending && j.group == m.jobs[l.ID].group && j.priority > m.jobs[l.ID].priority {
				t.Fatalf("%s took %s of priority %d and left %s of priority %d pending", op, l.ID, m.jobs[l.ID].priority, id, j.priority)
			}
		}
	}
	m.tookGroups(t, op, res, lease)
}

// newGen checks a generation Redis just issued: above every one issued
// before in the queue, for any job or id (invariants 3 and 10).
func (m *model) newGen(t *rapid.T, op string, gen int64) {
	if gen <= m.maxGen {
		t.Fatalf("%s issued generation %d, not above %d issued before", op, gen, m.maxGen)
	}
	m.maxGen = gen
}

// readGen reads back the generation an operation that does not answer it
// gave job id.
func (m *model) readGen(t *rapid.T, op, id string) {
	g := m.s.job(t, id).Generation
	m.newGen(t, op, g)
	m.jobs[id].gen = g
}

// pickClaim draws any claim ever made; valid says whether the model holds it
// to be the job's one valid claim. j is nil when the job was trimmed.
func (m *model) pickClaim(t *rapid.T) (l broker.Lease, j *mjob, valid bool) {
	if len(m.claims) == 0 {
		t.Skip("no claims yet")
	}
	l = rapid.SampledFrom(m.claims).Draw(t, "claim")
	j = m.jobs[l.ID]
	return l, j, j != nil && j.state == broker.StateRunning && j.token == l.ClaimID()
}

// again answers what a settlement by op under claim l recorded, when the
// request is a re-send of it: the job still carries the claim's token, or
// one of the settledKept claims after it kept the record.
func again(j *mjob, l broker.Lease, op string) (broker.State, bool) {
	if j == nil || l.ClaimID() == "" {
		return "", false
	}
	record := ""
	if j.state != broker.StateRunning && j.token == l.ClaimID() {
		record = j.settled
	} else {
		for _, p := range j.prev {
			if r, ok := strings.CutPrefix(p, l.ClaimID()+" "); ok {
				record = r
				break
			}
		}
	}
	var done, outcome string
	if _, err := fmt.Sscanf(record, "%s %s", &done, &outcome); err != nil || done != op {
		return "", false
	}
	return broker.State(outcome), true
}

func (m *model) wantOutcome(t *rapid.T, op string, got broker.Outcome, err error, ok bool) {
	t.Helper()
	noErr(t, op, err)
	w := broker.Stale
	if ok {
		w = broker.OK
	}
	if got != w {
		t.Fatalf("%s answered %v, want %v", op, got, w)
	}
}

func (m *model) renew(t *rapid.T) {
	l, j, valid := m.pickClaim(t)
	ctx := m.lostReply(t)
	rs, err := m.s.b.Leases().Renew(ctx, []broker.Lease{l}, time.Hour)
	noErr(t, "Renew", err)
	w := broker.Stale
	if valid {
		w = broker.OK
		j.renewals++
		if ctx != m.s.ctx {
			j.renewals++ // the re-send renews again, and counts
			j.resent = true
		}
		if j.cancel {
			w = broker.CancelRequested
		}
		j.deadline = rs[0].Deadline.UnixMilli()
	}
	if rs[0].Outcome != w {
		t.Fatalf("renew answered %v, want %v", rs[0].Outcome, w)
	}
}

func (m *model) progress(t *rapid.T) {
	l, _, valid := m.pickClaim(t)
	o, err := m.s.b.Leases().Progress(m.lostReply(t), l, []byte("p"))
	m.wantOutcome(t, "progress", o, err, valid)
}

func (m *model) ack(t *rapid.T) {
	l, j, valid := m.pickClaim(t)
	o, err := m.s.b.Leases().Ack(m.lostOrDropped(t), l, nil)
	_, resent := again(j, l, "ack")
	m.wantOutcome(t, "ack", o, err, valid || resent)
	if valid {
		m.acked(l.ID)
	}
}

// acked is a valid ack's effect on the model.
func (m *model) acked(id string) {
	m.jobs[id].settled = "ack done"
	m.finish(id, broker.StateDone)
	m.done++
}

func (m *model) fail(t *rapid.T) {
	l, j, valid := m.pickClaim(t)
	f := broker.Failure{Error: "e", Dead: rapid.Bool().Draw(t, "dead")}
	if rapid.Bool().Draw(t, "backoff") {
		f.Backoff = time.Hour
	}
	mode := "retry"
	if f.Dead {
		mode = "dead"
	}
	claim := m.drawClaim(t)
	var o broker.Outcome
	var st broker.State
	var res broker.ClaimResult
	var got broker.Settled
	var fused broker.Fused
	var err error
	ctx := m.lostClaimReply(t, &claim.Lease)
	m.snapGroups(t) // the rotation and the timer as the claim will find them
	m.begin(t)
	if claim.N > 0 {
		fused, err = m.s.b.Leases().FusedFail(ctx, l, f, claim)
		o, st, res = fused.Outcome, fused.State, fused.Claim
	} else {
		got, err = m.s.b.Leases().Fail(ctx, l, f)
		o, st = got.Outcome, got.State
	}
	m.end(t)
	var w broker.State
	switch {
	case !valid:
	case j.cancel:
		w = broker.StateCancelled
	case f.Dead || j.attempt >= j.max:
		w = broker.StateDead
	case f.Backoff > 0:
		w = broker.StateScheduled
	default:
		w = broker.StatePending
	}
	if valid {
		j.failedAttempt(j.attempt)
		if w != broker.StateCancelled {
			m.failed++
		}
	}
	m.settle(t, "fail", mode, l, j, valid, w, o, st, err)
	if claim.N > 0 {
		m.took(t, "FusedFail", res, claim.N, claim.Lease) // the failure comes first
	}
}

// drawClaim draws whether a settlement claims after it (N > 0), and how.
func (m *model) drawClaim(t *rapid.T) broker.ClaimSpec {
	if !rapid.Bool().Draw(t, "claim after") {
		return broker.ClaimSpec{}
	}
	return broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: m.s.q, N: rapid.IntRange(1, 3).Draw(t, "n"),
		Lease: rapid.SampledFrom([]time.Duration{10 * time.Millisecond, time.Hour}).Draw(t, "lease")}
}

func (m *model) snooze(t *rapid.T) {
	l, j, valid := m.pickClaim(t)
	d := rapid.SampledFrom([]time.Duration{0, time.Hour}).Draw(t, "snooze")
	claim := m.drawClaim(t)
	var o broker.Outcome
	var st broker.State
	var res broker.ClaimResult
	var got broker.Settled
	var fused broker.Fused
	var err error
	ctx := m.lostClaimReply(t, &claim.Lease)
	m.snapGroups(t) // the rotation and the timer as the claim will find them
	m.begin(t)
	if claim.N > 0 {
		fused, err = m.s.b.Leases().FusedSnooze(ctx, l, d, claim)
		o, st, res = fused.Outcome, fused.State, fused.Claim
	} else {
		got, err = m.s.b.Leases().Snooze(ctx, l, d)
		o, st = got.Outcome, got.State
	}
	m.end(t)
	var w broker.State
	switch {
	case !valid:
	case j.cancel:
		w = broker.StateCancelled
	case d > 0:
		w = broker.StateScheduled
	default:
		w = broker.StatePending
	}
	if valid && !j.cancel {
		j.attempt--
	}
	m.settle(t, "snooze", "snooze", l, j, valid, w, o, st, err)
	if claim.N > 0 {
		m.took(t, "FusedSnooze", res, claim.N, claim.Lease)
	}
}

// giveBack gives a claim back as a pool without a handler for its kind
// does, and takes back its start under a rate limit: scheduled uncharged, or dead once the job has waited For since the
// first of an unbroken run of give-backs (the claim before this one's
// record says it was one, and no reap, force release or retry came
// between).
func (m *model) giveBack(t *rapid.T) {
	l, j, valid := m.pickClaim(t)
	u := broker.Unhandled{Error: "no handler", Delay: time.Hour, MaxDelay: time.Hour,
		For: rapid.SampledFrom([]time.Duration{-1, 0, 20 * time.Millisecond}).Draw(t, "for")}
	ctx := m.lostReply(t)
	m.begin(t)
	got, err := m.s.b.Leases().GiveBack(ctx, l, u)
	o, st := got.Outcome, got.State
	m.end(t)
	var w broker.State
	if valid {
		delete(m.starts, l.ClaimID()) // its start no longer counts
		m.refunded(l.ID)              // nor its group's, when it was the last
	}
	if valid && j.cancel {
		w = broker.StateCancelled
	} else if valid {
		since, fresh := j.unhandledSince, true
		if since != (span{}) && len(j.prev) > 0 && strings.HasSuffix(j.prev[0], " unhandled scheduled") {
			fresh = false
		} else {
			j.unhandledSince = m.now
		}
		dead := no
		f := u.For.Milliseconds()
		switch {
		case u.For < 0:
		case fresh:
			if f == 0 {
				dead = yes
			}
		case m.now.lo >= since.hi+f:
			dead = yes
		case m.now.hi >= since.lo+f:
			dead = perhaps
		}
		w = broker.StateScheduled
		if dead == yes || dead == perhaps && st == broker.StateDead {
			w = broker.StateDead
			j.failedAttempt(j.attempt)
			m.failed++
		} else {
			j.attempt--
		}
	}
	m.settle(t, "giveBack", "unhandled", l, j, valid, w, o, st, err)
}

// settle checks a fail or snooze answer and moves the model on.
func (m *model) settle(t *rapid.T, what, mode string, l broker.Lease, j *mjob, valid bool, w broker.State,
	o broker.Outcome, st broker.State, err error) {
	resent := false
	if !valid {
		w, resent = again(j, l, mode)
	}
	m.wantOutcome(t, what, o, err, valid || resent)
	if !valid && !resent {
		return
	}
	if st != w {
		t.Fatalf("%s answered state %s, want %s", what, st, w)
	}
	if resent {
		return // nothing changed
	}
	j.settled = mode + " " + string(w)
	if w.Final() {
		m.finish(l.ID, w)
		return
	}
	j.state, j.deadline = w, 0
	m.sentBack(l.ID)
}

func (m *model) release(t *rapid.T) {
	l, j, valid := m.pickClaim(t)
	got, err := m.s.b.Leases().Release(m.lostOrDropped(t), l)
	o, st := got.Outcome, got.State
	w, resent := again(j, l, "release")
	m.wantOutcome(t, "release", o, err, valid || resent)
	switch {
	case valid:
		w = m.takeBack(t, "release", l.ID)
		j.settled = "release " + string(w)
	case !resent:
		return
	}
	if st != w {
		t.Fatalf("release answered state %s, want %s", st, w)
	}
}

// takeBack is release and release_unowned of a running job: a new
// generation, and pending with the attempt refunded unless cancel was asked.
func (m *model) takeBack(t *rapid.T, op, id string) broker.State {
	j := m.jobs[id]
	m.readGen(t, op, id)
	if j.cancel {
		m.finish(id, broker.StateCancelled)
	} else {
		j.state, j.deadline = broker.StatePending, 0
		j.attempt--
		j.unhandledSince = span{} // requeue: a wait for a handler starts again
		m.sentBack(id)
	}
	return j.state
}

// pickID draws any id ever used; the job may have been trimmed (nil).
func (m *model) pickID(t *rapid.T) (string, *mjob) {
	if len(m.ids) == 0 {
		t.Skip("no jobs yet")
	}
	id := rapid.SampledFrom(m.ids).Draw(t, "job")
	return id, m.jobs[id]
}

func (m *model) releaseUnowned(t *rapid.T) {
	id, j := m.pickID(t)
	r, err := m.s.b.Inspector().ReleaseUnowned(m.s.ctx, m.s.q, id)
	if j == nil {
		wantErr(t, "ReleaseUnowned of a trimmed job", err, broker.ErrJobNotFound)
		return
	}
	if j.state.Final() {
		// Refused, and the job left as it is: its gen too.
		wantErr(t, "ReleaseUnowned of a "+string(j.state)+" job", err, broker.ErrWrongState)
		want(t, "state ReleaseUnowned answered", r.Previous, j.state)
		return
	}
	noErr(t, "ReleaseUnowned", err)
	if r.Previous != j.state {
		t.Fatalf("release_unowned saw state %s, model has %s", r.Previous, j.state)
	}
	if j.state == broker.StateRunning {
		j.token, j.settled = "", ""
		m.takeBack(t, "release_unowned", id)
	} else {
		m.newGen(t, "release_unowned", r.Generation)
	}
	j.gen = r.Generation
	j.wantState(t, "release_unowned", r.State)
}

func (m *model) reap(t *rapid.T) {
	limit := rapid.IntRange(1, 4).Draw(t, "limit")
	r := m.s.reap(t, limit)
	now := r.Now.UnixMilli()
	var expired []string
	for id, j := range m.jobs {
		if j.state == broker.StateRunning && j.deadline <= now {
			expired = append(expired, id)
		}
	}
	if len(r.Reaped) != min(limit, len(expired)) {
		t.Fatalf("reaped %d of %d expired leases with limit %d", len(r.Reaped), len(expired), limit)
	}
	for _, rp := range r.Reaped {
		j := m.jobs[rp.ID]
		if !slices.Contains(expired, rp.ID) {
			t.Fatalf("reaped %s, which the model has as %+v (now %d)", rp.ID, j, now)
		}
		m.newGen(t, "reap", rp.Generation)
		j.gen, j.token, j.settled = rp.Generation, "", ""
		if !j.cancel {
			j.failedAttempt(j.attempt) // the reaper charged it
			m.failed++
		}
		switch {
		case j.cancel:
			m.finish(rp.ID, broker.StateCancelled)
		case j.attempt >= j.max:
			m.finish(rp.ID, broker.StateDead)
		default:
			j.state, j.deadline = broker.StatePending, 0
			j.unhandledSince = span{} // requeue: a wait for a handler starts again
			m.sentBack(rp.ID)
		}
		j.wantState(t, "reap", rp.State)
	}
	if len(r.Problems) > 0 || r.CascadeLeft {
		t.Fatalf("reap found problems %v, cascade left %v", r.Problems, r.CascadeLeft)
	}
}

func (m *model) cancelJob(t *rapid.T) {
	id, j := m.pickID(t)
	st, err := m.s.b.Inspector().Cancel(m.lostOrDropped(t), m.s.q, id)
	if j == nil {
		wantErr(t, "Cancel of a trimmed job", err, broker.ErrJobNotFound)
		return
	}
	noErr(t, "Cancel", err)
	switch j.state {
	case broker.StatePending, broker.StateScheduled, broker.StateBlocked:
		m.groupCancelled(id)
		m.finish(id, broker.StateCancelled)
	case broker.StateRunning:
		j.cancel = true
	}
	j.wantState(t, "cancel", st)
}

func (m *model) retry(t *rapid.T) {
	id, j := m.pickID(t)
	ctx := m.lostOrDropped(t)
	m.begin(t)
	prev, err := m.s.b.Inspector().Retry(ctx, m.s.q, id)
	m.end(t)
	if j == nil {
		wantErr(t, "Retry of a trimmed job", err, broker.ErrJobNotFound)
		return
	}
	if j.state != broker.StateDead && j.state != broker.StateCancelled {
		if err == nil {
			t.Fatalf("Retry of a %s job succeeded", j.state)
		}
		want(t, "Retry's previous state", prev, j.state)
		return
	}
	open, refused := m.retryVerdict(id)
	if strings.HasPrefix(refused, "perhaps ") && err == nil {
		refused = "" // the holder's TTL ended within the step, before the retry
	}
	if refused != "" {
		if err == nil {
			t.Fatalf("Retry of %s succeeded; want it refused: %s", id, refused)
		}
		want(t, "state of a refused retry", m.s.job(t, id).State, j.state)
		return
	}
	noErr(t, "Retry", err)
	want(t, "Retry's previous state", prev, j.state)
	m.retried(t, id, open)
}

// retryDead sends the oldest dead jobs back; which ones Redis took is read
// back, and each must have been one the model lets go back.
func (m *model) retryDead(t *rapid.T) {
	limit := rapid.IntRange(1, 3).Draw(t, "limit")
	var dead []string
	for id, j := range m.jobs {
		if j.state == broker.StateDead {
			dead = append(dead, id)
		}
	}
	ctx := m.lostReply(t)
	m.begin(t)
	n, err := m.s.b.Inspector().RetryDead(ctx, m.s.q, limit)
	m.end(t)
	noErr(t, "RetryDead", err)
	// One script retried them in turn: take them in the order of the
	// generations it gave them.
	var back []broker.JobInfo
	for _, id := range dead {
		if j := m.s.job(t, id); j.State != broker.StateDead {
			back = append(back, j)
		}
	}
	slices.SortFunc(back, func(a, b broker.JobInfo) int { return int(a.Generation - b.Generation) })
	moved := 0
	for _, j := range back {
		id := j.ID
		open, refused := m.retryVerdict(id)
		if refused != "" && !strings.HasPrefix(refused, "perhaps ") {
			t.Fatalf("RetryDead sent %s back; the model refuses it: %s", id, refused)
		}
		m.retried(t, id, open)
		moved++
	}
	want(t, "jobs RetryDead sent back", n, moved)
	if moved > limit {
		t.Fatalf("RetryDead sent %d jobs back with limit %d", moved, limit)
	}
}

// retryVerdict says whether a dead or cancelled job may go back: the
// dependencies it waits for again, or why it may not ("perhaps ..." when
// the key's holder's TTL ends within the step).
func (m *model) retryVerdict(id string) (open map[string]bool, refused string) {
	j := m.jobs[id]
	open = map[string]bool{}
	if !j.met && len(j.deps) > 0 {
		for _, d := range j.deps {
			if m.jobs[d] == nil {
				return nil, "dependency " + d + " does not exist"
			}
		}
		var failed bool
		if open, failed = m.dependencies(j); failed {
			return nil, "a dependency failed"
		}
	}
	if h, held := m.held(j.unique); !j.uniqueTTL && held != no && h != id {
		if held == perhaps {
			return open, "perhaps: unique key held by " + h
		}
		return nil, "unique key held by " + h
	}
	return open, ""
}

// retried moves the model on after a retry of job id.
func (m *model) retried(t *rapid.T, id string, open map[string]bool) {
	j := m.jobs[id]
	m.readGen(t, "retry", id)
	m.within(t, "run_at of a retried job", m.now, m.s.job(t, id).RunAt.UnixMilli())
	j.keepSettled()
	j.attempt, j.cancel, j.token, j.settled = 0, false, "", ""
	j.unhandledSince = span{} // a new wait for a handler
	j.delayed = false         // retry.lua writes run_at = now: blocked again, it is due once its parents end
	if j.unique != "" && !j.uniqueTTL {
		m.uniq[j.unique] = holder{id: id}
	}
	if len(open) > 0 {
		j.state, j.waiting = broker.StateBlocked, open
		return
	}
	j.met = true
	j.state = broker.StatePending // a retry runs now, whatever run_at said
}

// pause pauses or resumes the queue: a paused queue gives no jobs out.
func (m *model) pause(t *rapid.T) {
	m.paused = rapid.Bool().Draw(t, "paused")
	if m.paused {
		noErr(t, "Pause", m.s.b.Inspector().Pause(m.s.ctx, m.s.q))
	} else {
		noErr(t, "Resume", m.s.b.Inspector().Resume(m.s.ctx, m.s.q))
	}
}

// trim runs retention with small ages and counts (0: none of that kind),
// ages in the range an advance moves the clock, and checks that it deleted
// exactly the jobs trim.lua picks: per state, done, cancelled and
// dead in turn, those finished more than the age ago, then the oldest
// beyond the count, at most limit in all, none finished within
// broker.ResendHorizon. On a real server, a job whose
// age ends within the step may have gone either way: the jobs deleted must
// be the pick of some instant of the step.
func (m *model) trim(t *rapid.T) {
	age := func(what string) time.Duration {
		return rapid.SampledFrom([]time.Duration{0, 15, 20, 30, 45}).Draw(t, what) * time.Millisecond
	}
	r := broker.Retention{
		Done: age("done age"), Cancelled: age("cancelled age"), Dead: age("dead age"),
		MaxDone:      rapid.IntRange(0, 3).Draw(t, "max done"),
		MaxCancelled: rapid.IntRange(0, 3).Draw(t, "max cancelled"),
		MaxDead:      rapid.IntRange(0, 3).Draw(t, "max dead"),
	}
	limit := rapid.IntRange(1, 5).Draw(t, "limit")
	m.begin(t)
	n, err := m.s.b.Leases().Trim(m.s.ctx, m.s.q, r, limit)
	m.end(t)
	noErr(t, "Trim", err)
	gone := map[string]bool{}
	for id, j := range m.jobs {
		_, err := m.s.b.Inspector().Job(m.s.ctx, m.s.q, id)
		if !errors.Is(err, broker.ErrJobNotFound) {
			continue
		}
		if !j.state.Final() {
			t.Fatalf("Trim deleted job %s, which was %s", id, j.state)
		}
		gone[id] = true
	}
	want(t, "jobs trimmed", len(gone), n)
	// The instants at which the pick can change: the step's first, and
	// each job's age ending within the step.
	instants := []int64{m.now.lo}
	for _, j := range m.jobs {
		for _, a := range []time.Duration{r.Done, r.Cancelled, r.Dead, broker.ResendHorizon} {
			if at := j.finishedAt + max(a, broker.ResendHorizon).Milliseconds() + 1; a > 0 && at > m.now.lo && at <= m.now.hi {
				instants = append(instants, at)
			}
		}
	}
	var picked map[string]bool
	for _, now := range instants {
		if picked = m.trimmed(r, limit, now); maps.Equal(picked, gone) {
			break
		}
	}
	if !maps.Equal(picked, gone) {
		t.Fatalf("Trim(%+v, limit %d) at %d..%d deleted %v; want %v", r, limit, m.now.lo, m.now.hi, slices.Sorted(maps.Keys(gone)), slices.Sorted(maps.Keys(m.trimmed(r, limit, m.now.lo))))
	}
	for id := range gone {
		if j := m.jobs[id]; j.keptToWait {
			// One record per job under the id, the oldest giving way.
			kept := append(m.keptToWait[id], j.state)
			m.keptToWait[id] = kept[max(0, len(kept)-waitKeepRecords):]
		}
		delete(m.jobs, id)
	}
}

// trimmed is the model of trim.lua run at now: the finished jobs it
// deletes. Each index is read as Redis orders it, by finished_at and then
// by id.
func (m *model) trimmed(r broker.Retention, limit int, now int64) map[string]bool {
	out := map[string]bool{}
	budget := limit
	for _, k := range []struct {
		st    broker.State
		age   time.Duration
		count int
	}{{broker.StateDone, r.Done, r.MaxDone}, {broker.StateCancelled, r.Cancelled, r.MaxCancelled}, {broker.StateDead, r.Dead, r.MaxDead}} {
		var ids []string
		for id, j := range m.jobs {
			if j.state == k.st {
				ids = append(ids, id)
			}
		}
		slices.SortFunc(ids, func(a, b string) int {
			return cmp.Or(cmp.Compare(m.jobs[a].finishedAt, m.jobs[b].finishedAt), strings.Compare(a, b))
		})
		// None finished within the re-send horizon goes: finished_at <
		// now - horizon, a prefix.
		horizon := broker.ResendHorizon.Milliseconds()
		aged := 0
		for aged < len(ids) && m.jobs[ids[aged]].finishedAt < now-horizon {
			aged++
		}
		if budget > 0 && k.age > 0 {
			// Older than the age too: finished_at < now - age, a prefix.
			old := 0
			for old < aged && m.jobs[ids[old]].finishedAt < now-k.age.Milliseconds() {
				old++
			}
			taken := min(old, budget)
			for _, id := range ids[:taken] {
				out[id] = true
			}
			budget -= taken
			ids = ids[taken:] // what is left of the index
			aged -= taken
		}
		if budget > 0 && k.count > 0 && len(ids) > k.count {
			excess := min(len(ids)-k.count, budget, aged)
			for _, id := range ids[:excess] {
				out[id] = true
			}
			budget -= excess
		}
	}
	return out
}

// wait calls Wait with a short deadline, or cancels it as soon: a finished
// job answers at once, any other never does (a wake-up left from an earlier
// end included).
func (m *model) wait(t *rapid.T) {
	id, j := m.pickID(t)
	d := 5 * time.Millisecond
	if j == nil || j.state.Final() {
		d = 10 * time.Second // it answers at once, but give a loaded machine time
	}
	ctx, cancel := context.WithTimeout(m.s.ctx, d)
	defer cancel()
	ended := context.DeadlineExceeded
	if rapid.Bool().Draw(t, "cancelled") {
		ctx, cancel = context.WithCancel(m.s.ctx)
		defer cancel()
		defer time.AfterFunc(d, cancel).Stop()
		ended = context.Canceled
	}
	got, err := m.s.b.Client().Wait(ctx, m.s.q, id)
	kept := m.keptToWait[id]
	switch {
	case j == nil && len(kept) > 0:
		// Kept for a minute of Redis time; a run advances it far less. A
		// caller that registered on none of the jobs gets the newest.
		noErr(t, "Wait of a job trimmed after it finished with callers waiting", err)
		want(t, "Wait's state of a trimmed job", got.State, kept[len(kept)-1])
	case j == nil:
		wantErr(t, "Wait of a trimmed job", err, broker.ErrJobNotFound)
	case j.state.Final():
		noErr(t, "Wait of a finished job", err)
		want(t, "Wait's state", got.State, j.state)
	default:
		if err == nil {
			t.Fatalf("Wait returned job %s as %s; the model has it %s", id, got.State, j.state)
		}
		wantErr(t, "Wait of an unfinished job", err, ended)
		j.waited = true
	}
}

// setLimits sets the running limit, the rate limit (a period in the range
// an advance moves the clock) or both: SetLimits both, SetMaxRunning and
// SetRate one, keeping the other, ChangeLimits those it names.
func (m *model) setLimits(t *rapid.T) {
	l := broker.Limits{MaxRunning: rapid.IntRange(0, 2).Draw(t, "max running")}
	if rapid.Bool().Draw(t, "rate limit") {
		l.Rate = rapid.IntRange(1, 3).Draw(t, "rate")
		l.Per = rapid.SampledFrom([]time.Duration{15, 20, 30, 45}).Draw(t, "per ms") * time.Millisecond
	}
	switch rapid.IntRange(0, 3).Draw(t, "limits set") {
	case 0:
		noErr(t, "SetLimits", m.s.b.Inspector().SetLimits(m.s.ctx, m.s.q, l))
		m.maxRunning, m.rate, m.per = l.MaxRunning, l.Rate, l.Per.Milliseconds()
	case 1:
		noErr(t, "SetMaxRunning", m.s.b.Inspector().SetMaxRunning(m.s.ctx, m.s.q, l.MaxRunning))
		m.maxRunning = l.MaxRunning
	case 2:
		noErr(t, "SetRate", m.s.b.Inspector().SetRate(m.s.ctx, m.s.q, l.Rate, l.Per))
		m.rate, m.per = l.Rate, l.Per.Milliseconds()
	default:
		m.changeLimits(t, l)
	}
}

// changeLimits changes some of the limits with ChangeLimits, which keeps
// the others and refuses a period or rate left without its pair.
func (m *model) changeLimits(t *rapid.T, l broker.Limits) {
	c := broker.LimitsChange{To: l, MaxRunning: rapid.Bool().Draw(t, "change max running"),
		Rate: rapid.Bool().Draw(t, "change rate"), Per: l.Per > 0 && rapid.Bool().Draw(t, "change per")}
	maxRunning, rate, per := m.maxRunning, m.rate, m.per
	if c.MaxRunning {
		maxRunning = l.MaxRunning
	}
	if c.Rate {
		rate = l.Rate
	}
	if c.Per {
		per = l.Per.Milliseconds()
	}
	refused := (c.Rate || c.Per) && (rate == 0 && !c.Rate || rate > 0 && per == 0)
	if rate == 0 {
		per = 0
	}
	got, err := m.s.b.Inspector().ChangeLimits(m.s.ctx, m.s.q, c)
	if refused {
		want(t, fmt.Sprintf("ChangeLimits(%+v) with the limits %d, %d per %dms refused", c, m.maxRunning, m.rate, m.per), errors.Is(err, broker.ErrInvalid), true)
		return
	}
	noErr(t, "ChangeLimits", err)
	m.maxRunning, m.rate, m.per = maxRunning, rate, per
	want(t, "limits ChangeLimits answers", got, broker.Limits{MaxRunning: maxRunning, Rate: rate, Per: time.Duration(per) * time.Millisecond})
}

func (m *model) setEvents(t *rapid.T) {
	m.events = rapid.SampledFrom([]int{0, 50}).Draw(t, "events")
	noErr(t, "SetEvents", m.s.b.Inspector().SetEvents(m.s.ctx, m.s.q, m.events))
}

// check compares every job with Redis after each step.
func (m *model) check(t *rapid.T) {
	// A job that finished in the step finished between the last check and
	// this one.
	since := m.widen(span{m.checked, m.s.redisTime(t)})
	if m.checked == 0 {
		since.lo = 0
	}
	m.checked = since.hi
	for id, j := range m.jobs {
		got := m.s.job(t, id)
		if j.state.Final() {
			f := got.FinishedAt.UnixMilli()
			if j.finishedAt == 0 {
				m.within(t, "finished_at of "+id, since, f)
				j.finishedAt = f
			}
			want(t, "finished_at of "+id, f, j.finishedAt)
		}
		token := ""
		if j.state == broker.StateRunning {
			token = j.token
		}
		w := fmt.Sprintf("state=%s gen=%d attempt=%d token=%q cancel=%v", j.state, j.gen, j.attempt, token, j.cancel)
		g := fmt.Sprintf("state=%s gen=%d attempt=%d token=%q cancel=%v", got.State, got.Generation, got.Attempt, got.ClaimID, got.CancelRequested)
		if g != w {
			// Invariant 1 (the one valid claim is the model's) or 3 (gen) broken.
			t.Fatalf("job %s in Redis: %s\nmodel: %s", id, g, w)
		}
		if j.state == broker.StateRunning && got.LeaseUntil.UnixMilli() != j.deadline {
			t.Fatalf("job %s: lease_until %d, model %d", id, got.LeaseUntil.UnixMilli(), j.deadline)
		}
		if j.state != broker.StateRunning && !got.LeaseUntil.IsZero() {
			// A finished job's hash keeps its last lease's end; it is no lease.
			t.Fatalf("job %s: %s with a lease until %v", id, j.state, got.LeaseUntil)
		}
		j.wantMeta(t, "Job", id, got.Metadata)
		j.wantGroup(t, "Job", id, got.Group)
		var attempts []int
		for _, e := range got.Errors {
			attempts = append(attempts, e.Attempt)
		}
		if !slices.Equal(attempts, j.errors) {
			t.Fatalf("job %s: errors of attempts %v, model %v", id, attempts, j.errors)
		}
		if got.Renewals != j.renewals && !(j.resent && got.Renewals > j.renewals) {
			t.Fatalf("renewals of job %s = %d, want %d (re-sent: %v)", id, got.Renewals, j.renewals, j.resent)
		}
	}
	m.checkKeptToWait(t)
	// A model run lasts far less than the window: no minute falls out.
	m.s.wantTotals(t, "settlements counted", m.done, m.failed)
	for _, id := range m.ids {
		if m.jobs[id] != nil {
			continue
		}
		if _, err := m.s.b.Inspector().Job(m.s.ctx, m.s.q, id); !errors.Is(err, broker.ErrJobNotFound) {
			t.Fatalf("job %s, trimmed in the model, is in Redis (%v)", id, err)
		}
	}
	kept, err := m.s.b.Inspector().EventsKept(m.s.ctx, m.s.q)
	noErr(t, "EventsKept", err)
	want(t, "events kept", kept, m.events)
	paused, err := m.s.b.Inspector().Paused(m.s.ctx, m.s.q)
	noErr(t, "Paused", err)
	want(t, "paused", paused, m.paused)
	l, err := m.s.b.Inspector().Limits(m.s.ctx, m.s.q)
	noErr(t, "Limits", err)
	want(t, "limits", l, broker.Limits{MaxRunning: m.maxRunning, Rate: m.rate, Per: time.Duration(m.per) * time.Millisecond})
	m.checkUnique(t)
	// Exact counts, whatever tombstones the ready index's list holds.
	pending := int64(0)
	for _, j := range m.jobs {
		if j.state == broker.StatePending {
			pending++
		}
	}
	c, err := m.s.b.Inspector().Counts(m.s.ctx, m.s.q)
	noErr(t, "Counts", err)
	want(t, "pending jobs counted", c.Pending, pending)
	m.checkGroups(t)  // invariant 11 and G2
	m.s.consistent(t) // invariants 6 and 11, G2, the holds
}

// checkUnique compares the unique keys with Redis: a held key names its
// holder, a free one is gone (expired, or deleted when its job ended).
// waitKeepRecords is lib.lua's WAIT_KEEP_RECORDS: how many trimmed jobs
// under one id trim.lua keeps for their Wait callers.
const waitKeepRecords = 4

// checkKeptToWait compares the final records of each id (in no order)
// with the trimmed jobs the model keeps for Wait.
func (m *model) checkKeptToWait(t *rapid.T) {
	p := m.s.Client.Pipeline()
	states := map[string][]*redis.StringCmd{}
	for _, id := range m.ids {
		for n := 1; n <= waitKeepRecords; n++ {
			states[id] = append(states[id], p.HGet(m.s.ctx, fmt.Sprintf("%s:{%s}:final:%d:%s", m.s.b.Prefix(), m.s.q, n, id), "state"))
		}
	}
	_, _ = p.Exec(m.s.ctx) // each command's error is read below
	for id, cmds := range states {
		var got []string
		for _, c := range cmds {
			st, err := c.Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			noErr(t, "HGET state of a final record", err)
			got = append(got, st)
		}
		var w []string
		for _, st := range m.keptToWait[id] {
			w = append(w, string(st))
		}
		slices.Sort(got)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Fatalf("final records of %s hold %v; the model keeps %v for Wait", id, got, w)
		}
	}
}

func (m *model) checkUnique(t *rapid.T) {
	for _, key := range []string{"u0", "u1"} {
		m.begin(t)
		got, err := m.s.Client.Get(m.s.ctx, m.s.b.Prefix()+":{"+m.s.q+"}:unique:"+key).Result()
		m.end(t)
		if errors.Is(err, redis.Nil) {
			got, err = "", nil
		}
		noErr(t, "GET unique key "+key, err)
		h, held := m.held(key)
		if held == perhaps && (got == "" || got == h) {
			continue // its TTL ends about now
		}
		w := ""
		if held == yes {
			w = h
		}
		if got != w {
			t.Fatalf("unique key %s holds %q; the model has %q (holder %+v, Redis time %d..%d)", key, got, w, m.uniq[key], m.now.lo, m.now.hi)
		}
	}
}

// keepSettled moves the last settlement's record aside, as a claim or a
// retry does before it clears it; with none, the one before stays.
func (j *mjob) keepSettled() {
	if j.token != "" && j.settled != "" {
		j.prev = append([]string{j.token + " " + j.settled}, j.prev...)[:min(len(j.prev)+1, settledKept)]
	}
}

// settledKept is how many earlier claims' settlement records a job keeps
// (lib.lua's PREV_SETTLED).
const settledKept = 3

func (j *mjob) wantState(t *rapid.T, op string, got broker.State) {
	if got != j.state {
		t.Fatalf("%s left state %s, model has %s", op, got, j.state)
	}
}

// claimIDOf is a token's fingerprint as broker.Lease.ClaimID computes it, for
// reading the rate limit's starts, which Redis keeps by raw token.
func claimIDOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:8])
}
