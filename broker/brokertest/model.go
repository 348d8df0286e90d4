package brokertest

import (
	"fmt"
	"slices"
	"testing"
	"time"

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
	token    string // the one valid claim's token while running
	deadline int64  // lease_until in Redis milliseconds while running
}

// model drives random operations from several simulated workers, whose
// claims go stale as others release, reap and reclaim, and checks every
// answer against a small reference model; after each step it checks
// invariants 1, 3 and 6 against what Redis holds.
type model struct {
	s      *bundle
	jobs   map[string]*mjob
	ids    []string
	claims []broker.Lease // every claim ever made, most of them stale
}

func testModel(t *testing.T, nb NewBackend) {
	be := nb(t)
	rapid.Check(t, func(rt *rapid.T) {
		s, cleanup := on(rt, be)
		defer cleanup()
		m := &model{s: s, jobs: map[string]*mjob{}}
		rt.Repeat(map[string]func(*rapid.T){
			"enqueue":        m.enqueue,
			"claim":          m.claim,
			"renew":          m.renew,
			"progress":       m.progress,
			"ack":            m.ack,
			"fail":           m.fail,
			"snooze":         m.snooze,
			"release":        m.release,
			"releaseUnowned": m.releaseUnowned,
			"reap":           m.reap,
			"cancel":         m.cancel,
			"recreate":       m.recreate,
			"advance":        func(*rapid.T) { s.Advance(15 * time.Millisecond) },
			"":               m.check,
		})
	})
}

func (m *model) enqueue(t *rapid.T) {
	j := broker.Job{MaxAttempts: rapid.IntRange(1, 3).Draw(t, "max_attempts")}
	state := broker.StatePending
	if rapid.IntRange(0, 9).Draw(t, "delayed") == 0 {
		j.Delay, state = time.Hour, broker.StateScheduled
	}
	id := m.s.enqueue(t, j)
	m.jobs[id] = &mjob{state: state, max: j.MaxAttempts}
	m.ids = append(m.ids, id)
}

func (m *model) claim(t *rapid.T) {
	n := rapid.IntRange(1, 3).Draw(t, "n")
	lease := rapid.SampledFrom([]time.Duration{10 * time.Millisecond, time.Hour}).Draw(t, "lease")
	pending := 0
	for _, j := range m.jobs {
		if j.state == broker.StatePending {
			pending++
		}
	}
	ls := m.s.claim(t, n, lease)
	if len(ls) != min(n, pending) {
		t.Fatalf("claimed %d jobs with %d pending, want %d", len(ls), pending, min(n, pending))
	}
	for _, l := range ls {
		j := m.jobs[l.ID]
		if j == nil || j.state != broker.StatePending {
			t.Fatalf("claimed job %s, which the model has as %+v", l.ID, j)
		}
		if l.Generation != j.gen+1 || l.Attempt != j.attempt+1 {
			t.Fatalf("claim of %s: gen %d attempt %d, want gen %d attempt %d", l.ID, l.Generation, l.Attempt, j.gen+1, j.attempt+1)
		}
		j.state, j.gen, j.attempt, j.token, j.deadline = broker.StateRunning, l.Generation, l.Attempt, l.Token, l.Deadline.UnixMilli()
		m.claims = append(m.claims, l)
	}
}

// pickClaim draws any claim ever made; valid says whether the model holds it
// to be the job's one valid claim.
func (m *model) pickClaim(t *rapid.T) (l broker.Lease, j *mjob, valid bool) {
	if len(m.claims) == 0 {
		t.Skip("no claims yet")
	}
	l = rapid.SampledFrom(m.claims).Draw(t, "claim")
	j = m.jobs[l.ID]
	return l, j, j.state == broker.StateRunning && j.token == l.Token
}

func (m *model) pickJob(t *rapid.T) (string, *mjob) {
	if len(m.ids) == 0 {
		t.Skip("no jobs yet")
	}
	id := rapid.SampledFrom(m.ids).Draw(t, "job")
	return id, m.jobs[id]
}

func (m *model) wantOutcome(t *rapid.T, op string, got broker.Outcome, err error, valid bool) {
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	w := broker.Stale
	if valid {
		w = broker.OK
	}
	if got != w {
		t.Fatalf("%s answered %v, want %v", op, got, w)
	}
}

func (m *model) renew(t *rapid.T) {
	l, j, valid := m.pickClaim(t)
	rs, err := m.s.b.Renew(m.s.ctx, []broker.Lease{l}, time.Hour)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	w := broker.Stale
	if valid {
		w = broker.OK
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
	o, err := m.s.b.Progress(m.s.ctx, l, []byte("p"))
	m.wantOutcome(t, "progress", o, err, valid)
}

func (m *model) ack(t *rapid.T) {
	l, j, valid := m.pickClaim(t)
	o, err := m.s.b.Ack(m.s.ctx, l, nil)
	m.wantOutcome(t, "ack", o, err, valid)
	if valid {
		j.settle(broker.StateDone)
	}
}

func (m *model) fail(t *rapid.T) {
	l, j, valid := m.pickClaim(t)
	f := broker.Failure{Error: "e", Dead: rapid.Bool().Draw(t, "dead")}
	if rapid.Bool().Draw(t, "backoff") {
		f.Backoff = time.Hour
	}
	o, st, err := m.s.b.Fail(m.s.ctx, l, f)
	m.wantOutcome(t, "fail", o, err, valid)
	if !valid {
		return
	}
	switch {
	case j.cancel:
		j.settle(broker.StateCancelled)
	case f.Dead || j.attempt >= j.max:
		j.settle(broker.StateDead)
	case f.Backoff > 0:
		j.settle(broker.StateScheduled)
	default:
		j.settle(broker.StatePending)
	}
	j.wantState(t, "fail", st)
}

func (m *model) snooze(t *rapid.T) {
	l, j, valid := m.pickClaim(t)
	d := rapid.SampledFrom([]time.Duration{0, time.Hour}).Draw(t, "snooze")
	o, st, err := m.s.b.Snooze(m.s.ctx, l, d)
	m.wantOutcome(t, "snooze", o, err, valid)
	if !valid {
		return
	}
	switch {
	case j.cancel:
		j.settle(broker.StateCancelled)
	case d > 0:
		j.settle(broker.StateScheduled)
		j.attempt--
	default:
		j.settle(broker.StatePending)
		j.attempt--
	}
	j.wantState(t, "snooze", st)
}

func (m *model) release(t *rapid.T) {
	l, j, valid := m.pickClaim(t)
	o, st, err := m.s.b.Release(m.s.ctx, l)
	m.wantOutcome(t, "release", o, err, valid)
	if valid {
		j.takeBack()
		j.wantState(t, "release", st)
	}
}

func (m *model) releaseUnowned(t *rapid.T) {
	id, j := m.pickJob(t)
	r, err := m.s.b.ReleaseUnowned(m.s.ctx, m.s.q, id)
	if err != nil {
		t.Fatalf("ReleaseUnowned: %v", err)
	}
	if r.Previous != j.state {
		t.Fatalf("release_unowned saw state %s, model has %s", r.Previous, j.state)
	}
	if j.state == broker.StateRunning {
		j.takeBack()
	} else {
		j.gen++
	}
	j.wantState(t, "release_unowned", r.State)
	if r.Generation != j.gen {
		t.Fatalf("release_unowned: gen %d, want %d", r.Generation, j.gen)
	}
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
		j.gen++
		switch {
		case j.cancel:
			j.settle(broker.StateCancelled)
		case j.attempt >= j.max:
			j.settle(broker.StateDead)
		default:
			j.settle(broker.StatePending)
		}
		j.wantState(t, "reap", rp.State)
		if rp.Generation != j.gen {
			t.Fatalf("reap of %s: gen %d, want %d", rp.ID, rp.Generation, j.gen)
		}
	}
	if len(r.Problems) > 0 {
		t.Fatalf("reap found problems: %v", r.Problems)
	}
}

func (m *model) cancel(t *rapid.T) {
	id, j := m.pickJob(t)
	st, err := m.s.b.Cancel(m.s.ctx, m.s.q, id)
	if err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	switch j.state {
	case broker.StatePending, broker.StateScheduled:
		j.settle(broker.StateCancelled)
	case broker.StateRunning:
		j.cancel = true
	}
	j.wantState(t, "cancel", st)
}

// recreate deletes a job, as retention or an operator would, and enqueues
// it again under the same id: its generation starts over, and only the token
// keeps the old claims stale.
func (m *model) recreate(t *rapid.T) {
	id, j := m.pickJob(t)
	m.s.purge(t, id)
	m.s.enqueue(t, broker.Job{ID: id, MaxAttempts: j.max})
	m.jobs[id] = &mjob{state: broker.StatePending, max: j.max}
}

// check compares every job with Redis after each step.
func (m *model) check(t *rapid.T) {
	for id, j := range m.jobs {
		got := m.s.job(t, id)
		w := fmt.Sprintf("state=%s gen=%d attempt=%d token=%q cancel=%v", j.state, j.gen, j.attempt, j.token, j.cancel)
		g := fmt.Sprintf("state=%s gen=%d attempt=%d token=%q cancel=%v", got.State, got.Generation, got.Attempt, got.Token, got.CancelRequested)
		if g != w {
			// Invariant 1 (the one valid claim is the model's) or 3 (gen) broken.
			t.Fatalf("job %s in Redis: %s\nmodel: %s", id, g, w)
		}
		if j.state == broker.StateRunning && got.LeaseUntil.UnixMilli() != j.deadline {
			t.Fatalf("job %s: lease_until %d, model %d", id, got.LeaseUntil.UnixMilli(), j.deadline)
		}
	}
	m.s.consistent(t) // invariant 6
}

// settle ends the current claim and puts the job in state st.
func (j *mjob) settle(st broker.State) {
	j.state, j.token, j.deadline = st, "", 0
}

// takeBack is release and release_unowned of a running job: a new
// generation, and pending with the attempt refunded unless cancel was asked.
func (j *mjob) takeBack() {
	j.gen++
	if j.cancel {
		j.settle(broker.StateCancelled)
		return
	}
	j.settle(broker.StatePending)
	j.attempt--
}

func (j *mjob) wantState(t *rapid.T, op string, got broker.State) {
	if got != j.state {
		t.Fatalf("%s left state %s, model has %s", op, got, j.state)
	}
}
