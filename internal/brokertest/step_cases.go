package brokertest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// afterFirst is a go-redis hook that runs fn once, right after the first
// command named name that succeeded: a seam between the first and the
// second step of an operation that steps itself (Leases, Jobs), where
// other clients go on working. A NOSCRIPT answer (go-redis falls back to
// EVAL) is not a success.
type afterFirst struct {
	names []string
	once  sync.Once
	fn    func()
	ran   bool
}

func (h *afterFirst) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *afterFirst) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *afterFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && slices.Contains(h.names, strings.ToLower(cmd.Name())) {
			h.once.Do(func() { h.fn(); h.ran = true })
		}
		return err
	}
}

// Leases lists every lease that was held for the whole listing, however
// many ended or moved while it read. It reads in steps of 100 by rank, so
// each lease that ended ahead of the next step's rank shifts the rest
// down past it: 100 leases acked between the first and the second step
// hide the other 100, held throughout. ExpiredLeases misses the same way
// when a reaper takes the oldest expired ones between its steps.
func testLeasesListEveryLeaseHeldThroughout(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	for range 200 {
		s.enqueue(t, broker.Job{})
	}
	soon := s.claim(t, 100, time.Minute)
	later := s.claim(t, 100, long)
	want(t, "leases taken", len(soon)+len(later), 200)

	hook := &afterFirst{names: []string{"evalsha", "eval", "fcall"}, fn: func() {
		acks := make([]broker.Ack, len(soon))
		for i, l := range soon {
			acks[i] = broker.Ack{Lease: l}
		}
		_, err := s.b.Leases().AckMany(s.ctx, acks)
		noErr(t, "AckMany of the 100 soonest leases", err)
	}}
	lb := s.hookedBroker(t, hook)
	ls, err := lb.Inspector().Leases(s.ctx, s.q, 1000)
	noErr(t, "Leases", err)
	if !hook.ran {
		t.Fatal("Leases sent no script: the test's seam missed it")
	}
	listed := map[string]bool{}
	for _, l := range ls {
		listed[l.ID] = true
	}
	var missed []string
	for _, l := range later {
		if !listed[l.ID] {
			missed = append(missed, l.ID)
		}
	}
	if len(missed) > 0 {
		t.Errorf("Leases(1000) listed %d leases and missed %d of the 100 held throughout the listing (e.g. %s)",
			len(ls), len(missed), missed[0])
	}

	// ExpiredLeases, while a reaper takes the oldest expired leases.
	s2 := setup(t, nb)
	for range 200 {
		s2.enqueue(t, broker.Job{MaxAttempts: 5})
	}
	first := s2.claim(t, 100, short)
	s2.Advance(2 * time.Millisecond)
	second := s2.claim(t, 100, short)
	want(t, "leases taken", len(first)+len(second), 200)
	s2.Advance(past)
	hook2 := &afterFirst{names: []string{"evalsha", "eval", "fcall"}, fn: func() {
		r, err := s2.b.Leases().Reap(s2.ctx, s2.q, 100)
		noErr(t, "Reap of the 100 oldest expired leases", err)
		want(t, "leases reaped between the steps", len(r.Reaped), 100)
	}}
	lb2 := s2.hookedBroker(t, hook2)
	expired, err := lb2.Inspector().ExpiredLeases(s2.ctx, s2.q, 1000)
	noErr(t, "ExpiredLeases", err)
	if !hook2.ran {
		t.Fatal("ExpiredLeases sent no script: the test's seam missed it")
	}
	listed = map[string]bool{}
	for _, l := range expired {
		listed[l.ID] = true
	}
	missed = missed[:0]
	for _, l := range second {
		if !listed[l.ID] {
			missed = append(missed, l.ID)
		}
	}
	if len(missed) > 0 {
		t.Errorf("ExpiredLeases(1000) listed %d leases and missed %d of the 100 that stayed expired and unreaped throughout (e.g. %s)",
			len(expired), len(missed), missed[0])
	}
}

// Jobs lists every job that stayed in the state's index while it read. It
// reads in chunks of 1000 by rank, so 500 pending jobs claimed from the
// head between its first and second chunk shift the next 500 down past
// the second chunk's start: they are never listed, though pending
// throughout.
func testJobsListsEveryJobThatStayed(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	var ids []string
	for c := range 3 {
		jobs := make([]broker.Job, 500)
		for i := range jobs {
			jobs[i] = broker.Job{Queue: s.q, Kind: "k", ID: fmt.Sprintf("j%04d", c*500+i)}
		}
		for _, e := range s.b.Client().EnqueueMany(s.ctx, jobs) {
			noErr(t, "EnqueueMany", e.Err)
			ids = append(ids, e.ID)
		}
	}
	hook := &afterFirst{names: []string{"zrange", "evalsha", "eval", "fcall"}, fn: func() { // pending: range.lua
		want(t, "jobs claimed between the chunks", len(s.claim(t, 500, long)), 500)
	}}
	lb := s.hookedBroker(t, hook)
	js, err := lb.Inspector().Jobs(s.ctx, s.q, broker.StatePending, 2000)
	noErr(t, "Jobs", err)
	if !hook.ran {
		t.Fatal("Jobs sent no ZRANGE or script: the test's seam missed it")
	}
	listed := map[string]bool{}
	for _, j := range js {
		listed[j.ID] = true
	}
	var missed []string
	for _, id := range ids[1000:] { // pending from before the call to after it
		if !listed[id] {
			missed = append(missed, id)
		}
	}
	if len(missed) > 0 {
		t.Errorf("Jobs(pending, 2000) listed %d jobs and missed %d of the 500 pending throughout (e.g. %s)",
			len(js), len(missed), missed[0])
	}
}

// RetryDead ends, whatever the dead index holds. A key that is not a job
// hash is listed in dead "for an operator" by the script that meets it
// (misfiled in lib.lua); retry.lua answers it corrupt with no previous
// state, which RetryDead counts neither as sent nor as passed over. Once
// the step it is in asks for exactly as many jobs as it finds, RetryDead
// reads the same entry again, forever: here RetryDead(10) sends 9 and then
// spins until its context ends.
func testRetryDeadEndsPastCorruptEntry(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	wrong := s.enqueue(t, broker.Job{ID: "wrong-type"})
	for range 20 {
		s.enqueue(t, broker.Job{MaxAttempts: 1})
	}
	noErr(t, "corrupt", s.Client.Del(s.ctx, s.jobKey(wrong)).Err())
	noErr(t, "corrupt", s.Client.Set(s.ctx, s.jobKey(wrong), "not a hash", 0).Err())
	res, err := s.b.Leases().Claim(s.ctx, s.q, 100, long)
	noErr(t, "Claim", err)
	want(t, "jobs claimed", len(res.Leases), 20)
	s.Advance(2 * time.Millisecond) // the sound jobs die after wrong-type was listed dead
	for _, l := range res.Leases {
		_, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "boom", Dead: true})
		noErr(t, "Fail", err)
	}
	dead, err := s.Client.ZRange(s.ctx, s.b.Prefix()+":{"+s.q+"}:dead", 0, 0).Result()
	noErr(t, "read dead", err)
	if len(dead) != 1 || dead[0] != wrong {
		t.Fatalf("head of dead is %v; want the non-hash key %s, which Claim listed there", dead, wrong)
	}

	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Second)
	defer cancel()
	n, err := s.b.Inspector().RetryDead(ctx, s.q, 10)
	if err != nil || n != 10 {
		t.Fatalf("RetryDead(10) behind a non-hash entry: sent %d, error %v; want 10 sent and no error", n, err)
	}
}

// Trim goes on in steps while there is work left. It stops after a step
// that deleted fewer than it looked at, and an index entry whose job hash
// is gone (dropped from the index, not deleted) is such a step: one ghost
// at the head of done makes Trim(1000) delete 99 of 150 expired jobs.
func testTrimGoesOnPastAGhost(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	for range 150 {
		s.enqueue(t, broker.Job{})
	}
	ls := s.claim(t, 150, long)
	acks := make([]broker.Ack, len(ls))
	for i, l := range ls {
		acks[i] = broker.Ack{Lease: l}
	}
	_, err := s.b.Leases().AckMany(s.ctx, acks)
	noErr(t, "AckMany", err)
	noErr(t, "ghost", s.Client.ZAdd(s.ctx, s.b.Prefix()+":{"+s.q+"}:done", redisZ(0, "ghost")).Err())
	s.pastHorizon()
	n, err := s.b.Leases().Trim(s.ctx, s.q, broker.Retention{Done: time.Millisecond}, 1000)
	noErr(t, "Trim", err)
	want(t, "jobs Trim(1000) deleted behind one ghost entry", n, 150)
}

// Reap goes on in steps while there is work left, as Trim does; a leases
// entry whose job hash is gone costs a step's budget without a reap, so
// Reap(1000) reaps 99 of 150 expired leases behind one.
func testReapGoesOnPastAGhost(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	for range 150 {
		s.enqueue(t, broker.Job{MaxAttempts: 5})
	}
	want(t, "leases taken", len(s.claim(t, 150, short)), 150)
	noErr(t, "ghost", s.Client.ZAdd(s.ctx, s.b.Prefix()+":{"+s.q+"}:leases", redisZ(0, "ghost")).Err())
	s.Advance(past)
	r, err := s.b.Leases().Reap(s.ctx, s.q, 1000)
	noErr(t, "Reap", err)
	want(t, "leases Reap(1000) reaped behind one ghost entry", len(r.Reaped), 150)
}

// RetryDead sends each dead job back once per call, as it did in one
// script: a job that dies again while the call goes on is not sent back a
// second time. In steps of 100, each step reads the head of dead again,
// where a pool re-kills the jobs the steps before sent: 150 dead jobs, the
// first 100 killed again after the first step, come back 250 times from
// RetryDead(1000). With poison jobs and a fast pool each call retries them
// until limit is spent, and 'workerd retry --dead', which calls again
// while a call sends a full 1000, never ends.
func testRetryDeadSendsEachJobOnce(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	for range 150 {
		s.enqueue(t, broker.Job{MaxAttempts: 1})
	}
	kill := func(n int) {
		t.Helper()
		ls := s.claim(t, 1000, long)
		want(t, "jobs claimed to kill", len(ls), n)
		for _, l := range ls {
			_, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "poison", Dead: true})
			noErr(t, "Fail", err)
		}
	}
	kill(150)
	s.Advance(2 * time.Millisecond)
	hook := &afterFirst{names: []string{"evalsha", "eval", "fcall"}, fn: func() { kill(100) }}
	lb := s.hookedBroker(t, hook)
	n, err := lb.Inspector().RetryDead(s.ctx, s.q, 1000)
	noErr(t, "RetryDead", err)
	if !hook.ran {
		t.Fatal("RetryDead sent no script: the test's seam missed it")
	}
	want(t, "jobs RetryDead(1000) sent back, of 150 dead when it was called", n, 150)
}

// RetryDead drops an entry of the dead index whose job hash is gone, as
// every script that meets one in an index does (lib.lua's misfiled: it
// holds nothing to lose), and sends the jobs behind it.
func testRetryDeadDropsAGhost(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	for range 5 {
		s.enqueue(t, broker.Job{MaxAttempts: 1})
	}
	for _, l := range s.claim(t, 5, long) {
		_, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "boom", Dead: true})
		noErr(t, "Fail", err)
	}
	dead := s.b.Prefix() + ":{" + s.q + "}:dead"
	noErr(t, "ghost", s.Client.ZAdd(s.ctx, dead, redisZ(0, "ghost")).Err())
	n, err := s.b.Inspector().RetryDead(s.ctx, s.q, 10)
	noErr(t, "RetryDead", err)
	want(t, "jobs RetryDead(10) sent behind a ghost entry", n, 5)
	left, err := s.Client.ZRange(s.ctx, dead, 0, -1).Result()
	noErr(t, "read dead", err)
	if len(left) != 0 {
		t.Errorf("dead after RetryDead lists %v; want the entry without a job hash dropped", left)
	}
}

// afterFirstRead is afterFirst for a command sent alone or in a pipeline.
type afterFirstRead struct {
	afterFirst
}

func (h *afterFirstRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Err() == nil && slices.Contains(h.names, strings.ToLower(c.Name())) {
				h.once.Do(func() { h.fn(); h.ran = true })
			}
		}
		return err
	}
}

// A filtered JobPage reads the index in chunks of 1000 and finds every
// match that stayed in the state: 500 pending jobs claimed from the head
// after its first chunk shifted the next chunk's rank past the 100 it
// looks for, and the page came back empty.
func testJobPageFilteredMissesNone(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	for c := range 3 {
		jobs := make([]broker.Job, 1000)
		for i := range jobs {
			jobs[i] = broker.Job{Queue: s.q, Kind: "k", ID: fmt.Sprintf("j%04d", c*1000+i)}
		}
		for _, e := range s.b.Client().EnqueueMany(s.ctx, jobs) {
			noErr(t, "EnqueueMany", e.Err)
		}
	}
	hook := &afterFirstRead{afterFirst{names: []string{"zrange", "evalsha", "eval", "fcall"}, fn: func() { // pending: range.lua
		want(t, "jobs claimed between the chunks", len(s.claim(t, 500, long)), 500)
	}}}
	lb := s.hookedBroker(t, hook)
	p, err := lb.Inspector().JobPage(s.ctx, s.q, broker.JobQuery{State: broker.StatePending, IDPrefix: "j10", Limit: 100})
	noErr(t, "JobPage", err)
	if !hook.ran {
		t.Fatal("JobPage sent no ZRANGE or script: the test's seam missed it")
	}
	want(t, "jobs j1000..j1099 (pending throughout) on the page filtered by id j10", len(p.Jobs), 100)
}

// Leases goes on past a lease whose index score is not a whole number of
// milliseconds (a hand edit): the step after it starts after its exact
// score, not the whole milliseconds the listing shows, so it neither reads
// that lease again forever nor stops short.
func testLeasesGoOnPastAFractionalScore(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	for range 101 {
		s.enqueue(t, broker.Job{})
	}
	ls := s.claim(t, 101, long)
	want(t, "leases taken", len(ls), 101)
	leases := s.b.Prefix() + ":{" + s.q + "}:leases"
	// The 100th lease, the last of the first step, half a millisecond
	// later than the 99 before it, and the 101st later still.
	tail, err := s.Client.ZRangeWithScores(s.ctx, leases, 99, 100).Result()
	noErr(t, "read leases", err)
	noErr(t, "fractional score", s.Client.ZAdd(s.ctx, leases,
		redisZ(tail[0].Score+0.5, tail[0].Member.(string)), redisZ(tail[1].Score+1, tail[1].Member.(string))).Err())
	ctx, cancel := context.WithTimeout(s.ctx, 3*time.Second)
	defer cancel()
	got, err := s.b.Inspector().Leases(ctx, s.q, 101)
	noErr(t, "Leases", err)
	want(t, "leases Leases(101) listed past a fractional score", len(got), 101)
}
