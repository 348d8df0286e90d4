package brokertest

import (
	"errors"

	"pgregory.net/rapid"

	"github.com/fenceq/fenceq/broker"
)

// The model test's operator steps that remove or hurry jobs: Delete,
// Purge and Promote.

// deleteJob deletes any id ever used, naming the state it saw or none.
// A running job, or one not in the state named, is refused unchanged.
func (m *model) deleteJob(t *rapid.T) {
	id, j := m.pickID(t)
	var seen broker.State
	if rapid.Bool().Draw(t, "name the state seen") {
		seen = rapid.SampledFrom(broker.States).Draw(t, "state seen")
	}
	st, err := m.s.b.Inspector().Delete(m.lostOrDropped(t), m.s.q, id, seen)
	if j == nil {
		wantErr(t, "Delete of a job not there", err, broker.ErrJobNotFound)
		return
	}
	want(t, "state Delete answered", st, j.state)
	if j.state == broker.StateRunning || seen != "" && seen != j.state {
		wantErr(t, "Delete of a "+string(j.state)+" job seen "+string(seen), err, broker.ErrWrongState)
		return
	}
	noErr(t, "Delete", err)
	m.deleted(id)
}

// deleted is a delete's effect on the model: a job that had not finished
// frees its unique key and its ordered group's hold, and its dependents
// are settled as a cancel's would be (cancelled, or released when they run
// anyway); then it is gone.
func (m *model) deleted(id string) {
	j := m.jobs[id]
	if !j.state.Final() {
		m.groupCancelled(id)
		if h, ok := m.uniq[j.unique]; ok && h.until == 0 && h.id == id {
			delete(m.uniq, j.unique)
		}
		for cid, c := range m.jobs {
			if c.state != broker.StateBlocked || !c.waiting[id] {
				continue
			}
			if c.runAnyway {
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
	delete(m.jobs, id)
}

// purge purges one finished state: every job of the model in it goes,
// but one finished within broker.ResendHorizon (purge.lua spares it, as
// retention does). On a real server, a job whose horizon ends within the
// step may have gone either way: it is looked up.
// Its requests may lose their first replies (each is sent again).
func (m *model) purge(t *rapid.T) {
	st := rapid.SampledFrom([]broker.State{broker.StateDone, broker.StateDead, broker.StateCancelled}).Draw(t, "state")
	steps := 0
	m.begin(t)
	p, err := m.s.b.Inspector().Purge(m.lostReply(t), m.s.q, st, func(broker.PurgeProgress) { steps++ })
	m.end(t)
	noErr(t, "Purge", err)
	horizon := broker.ResendHorizon.Milliseconds()
	var ids []string
	for id, j := range m.jobs {
		if j.state != st || j.finishedAt >= m.now.hi-horizon {
			continue // kept: finished within the horizon all through the step
		}
		if j.finishedAt >= m.now.lo-horizon {
			if _, err := m.s.b.Inspector().Job(m.s.ctx, m.s.q, id); !errors.Is(err, broker.ErrJobNotFound) {
				continue // its horizon ended within the step, after its step looked
			}
		}
		ids = append(ids, id)
	}
	want(t, "jobs purged", p.Deleted, len(ids))
	want(t, "entries skipped", p.Skipped, 0)
	want(t, "progress reported", steps, max(1, p.Steps))
	for _, id := range ids {
		m.deleted(id)
	}
}

// promote runs a scheduled job now; a job in any other state is refused.
func (m *model) promote(t *rapid.T) {
	id, j := m.pickID(t)
	err := m.s.b.Inspector().Promote(m.lostOrDropped(t), m.s.q, id)
	switch {
	case j == nil:
		wantErr(t, "Promote of a job not there", err, broker.ErrJobNotFound)
	case j.state != broker.StateScheduled:
		wantErr(t, "Promote of a "+string(j.state)+" job", err, broker.ErrWrongState)
	default:
		noErr(t, "Promote", err)
		j.state = broker.StatePending
		j.delayed = false // its run_at is now
	}
}
