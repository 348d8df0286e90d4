package brokertest

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// groupState is what the groups' structures say of group g: its running
// count, its pending jobs, and whether it is in the rotation, the timer and
// held.
type groupState struct {
	running, ready    int64
	rotation, waiting bool
	held              string
	pendingCount      int64 // the settings' g_pending, for the whole queue
}

func (s *bundle) group(t failer, g string) groupState {
	t.Helper()
	var st groupState
	r, _ := s.Client.HGet(s.ctx, s.queueKey("grunning"), g).Result()
	st.running, _ = strconv.ParseInt(r, 10, 64)
	st.ready = s.Client.ZCard(s.ctx, s.queueKey("gready:"+g)).Val()
	st.rotation = s.Client.ZScore(s.ctx, s.queueKey("grotation"), g).Err() == nil
	st.waiting = s.Client.ZScore(s.ctx, s.queueKey("gwait"), g).Err() == nil
	st.held, _ = s.Client.HGet(s.ctx, s.queueKey("ghold"), g).Result()
	p, _ := s.Client.HGet(s.ctx, s.queueKey("limits"), "g_pending").Result()
	st.pendingCount, _ = strconv.ParseInt(p, 10, 64)
	return st
}

// groupDefaults sets the queue's group limits by their settings fields
// (the format of broker/keys.go), as Inspector.ChangeGroupLimits writes them.
func (s *bundle) groupDefaults(t failer, fields ...any) {
	t.Helper()
	noErr(t, "HSET group defaults", s.Client.HSet(s.ctx, s.queueKey("limits"), fields...).Err())
}

// byGroup counts leases per group, printed (by sorted group).
func byGroup(ls []broker.Lease) string {
	n := map[string]int{}
	for _, l := range ls {
		n[l.Group]++
	}
	return fmt.Sprint(n)
}

// runningByGroup counts the running job hashes of each group, as
// invariant 11 compares them with grunning.
func (s *bundle) wantSlots(t failer, what string, groups ...string) {
	t.Helper()
	for _, g := range groups {
		page, err := s.b.Inspector().JobPage(s.ctx, s.q, broker.JobQuery{State: broker.StateRunning, Limit: 500})
		noErr(t, "JobPage", err)
		n := int64(0)
		for _, j := range page.Jobs {
			if j.Group == g {
				n++
			}
		}
		want(t, what+": running count of "+g, s.group(t, g).running, n)
	}
}

func testGroupCore(t *testing.T, nb NewBackend) {
	t.Run("CancelPending", func(t *testing.T) {
		s := setup(t, nb)
		a := s.enqueue(t, broker.Job{Group: "acme"})
		s.enqueue(t, broker.Job{})
		want(t, "after enqueue", s.group(t, "acme"), groupState{ready: 1, rotation: true, pendingCount: 1})
		_, err := s.b.Inspector().Cancel(s.ctx, s.q, a)
		noErr(t, "Cancel", err)
		want(t, "after cancel", s.group(t, "acme"), groupState{})
		c, err := s.b.Inspector().Counts(s.ctx, s.q)
		noErr(t, "Counts", err)
		want(t, "pending", c.Pending, int64(1))
	})

	t.Run("TurnsOverGroups", func(t *testing.T) {
		s := setup(t, nb)
		for range 20 {
			s.enqueue(t, broker.Job{Group: "big"})
		}
		for _, g := range []string{"a", "b"} {
			for range 2 {
				s.enqueue(t, broker.Job{Group: g})
			}
		}
		s.enqueue(t, broker.Job{}) // the ungrouped jobs take a turn too
		s.enqueue(t, broker.Job{})
		want(t, "first claim", byGroup(s.claim(t, 8, long)), fmt.Sprint(map[string]int{"big": 2, "a": 2, "b": 2, "": 2}))
		want(t, "second claim", byGroup(s.claim(t, 8, long)), fmt.Sprint(map[string]int{"big": 8}))
		s.wantSlots(t, "after claims", "big", "a", "b")
		c, err := s.b.Inspector().Counts(s.ctx, s.q)
		noErr(t, "Counts", err)
		want(t, "pending", c.Pending, int64(10))
	})

	t.Run("MaxRunning", func(t *testing.T) {
		s := setup(t, nb)
		s.groupDefaults(t, "g_max_running", 2)
		for range 5 {
			s.enqueue(t, broker.Job{Group: "acme"})
		}
		s.enqueue(t, broker.Job{Group: "other"})
		ls := s.claim(t, 10, long)
		want(t, "first claim", byGroup(ls), fmt.Sprint(map[string]int{"acme": 2, "other": 1}))
		want(t, "full group waits", s.group(t, "acme"), groupState{running: 2, ready: 3, waiting: true, pendingCount: 3})
		want(t, "a full group is not claimed", len(s.claim(t, 10, long)), 0)
		var acme []broker.Lease
		for _, l := range ls {
			if l.Group == "acme" {
				acme = append(acme, l)
			}
		}
		_, err := s.b.Leases().Ack(s.ctx, acme[0], nil)
		noErr(t, "Ack", err)
		// A re-send frees nothing twice.
		_, err = s.b.Leases().Ack(s.ctx, acme[0], nil)
		noErr(t, "Ack again", err)
		want(t, "a freed slot brings it back", s.group(t, "acme"), groupState{running: 1, ready: 3, rotation: true, pendingCount: 3})
		want(t, "after the ack", byGroup(s.claim(t, 10, long)), fmt.Sprint(map[string]int{"acme": 1}))
		s.wantSlots(t, "after the ack", "acme", "other")
	})

	t.Run("Rate", func(t *testing.T) {
		s := setup(t, nb)
		s.groupDefaults(t, "g_rate", 1, "g_period_ms", 200)
		for range 3 {
			s.enqueue(t, broker.Job{Group: "api"})
		}
		want(t, "first claim", len(s.claim(t, 10, long)), 1)
		want(t, "within the spacing", len(s.claim(t, 10, long)), 0)
		s.Advance(200 * time.Millisecond)
		want(t, "after the spacing", len(s.claim(t, 10, long)), 1)
	})

	t.Run("OrderedHoldsForARetry", func(t *testing.T) {
		s := setup(t, nb)
		s.groupDefaults(t, "g_ordered", "1")
		a1 := s.enqueue(t, broker.Job{Group: "acct", MaxAttempts: 3})
		a2 := s.enqueue(t, broker.Job{Group: "acct"})
		l := s.claimOne(t, long)
		want(t, "first", l.ID, a1)
		want(t, "one at a time", len(s.claim(t, 10, long)), 0)
		_, err := s.b.Leases().Fail(s.ctx, l, broker.Failure{Error: "boom", Backoff: 100 * time.Millisecond})
		noErr(t, "Fail", err)
		want(t, "held for the retry", s.group(t, "acct").held, a1)
		want(t, "the next waits for the retry", len(s.claim(t, 10, long)), 0)
		s.Advance(150 * time.Millisecond)
		l = s.claimOne(t, long)
		want(t, "the retry runs first", l.ID, a1)
		want(t, "hold let go", s.group(t, "acct").held, "")
		_, err = s.b.Leases().Ack(s.ctx, l, nil)
		noErr(t, "Ack", err)
		l = s.claimOne(t, long)
		want(t, "then the next", l.ID, a2)
		// A release sends it back and holds the group for it too.
		_, err = s.b.Leases().Release(s.ctx, l)
		noErr(t, "Release", err)
		want(t, "held for the release", s.group(t, "acct").held, a2)
		s.enqueue(t, broker.Job{Group: "acct", Priority: 9})
		want(t, "the released job before a higher priority", s.claimOne(t, long).ID, a2)
	})

	t.Run("EveryLeaseEndFreesItsSlot", func(t *testing.T) {
		s := setup(t, nb)
		for range 6 {
			s.enqueue(t, broker.Job{Group: "g", MaxAttempts: 5})
		}
		ls := s.claim(t, 6, short)
		want(t, "claimed", len(ls), 6)
		want(t, "counted", s.group(t, "g").running, int64(6))
		_, err := s.b.Leases().Fail(s.ctx, ls[0], broker.Failure{Error: "x"})
		noErr(t, "Fail", err)
		_, err = s.b.Leases().Snooze(s.ctx, ls[1], time.Second)
		noErr(t, "Snooze", err)
		_, err = s.b.Leases().Release(s.ctx, ls[2])
		noErr(t, "Release", err)
		_, err = s.b.Leases().Release(s.ctx, ls[2]) // a re-send
		noErr(t, "Release again", err)
		_, err = s.b.Inspector().ReleaseUnowned(s.ctx, s.q, ls[3].ID)
		noErr(t, "ReleaseUnowned", err)
		_, err = s.b.Inspector().ReleaseUnowned(s.ctx, s.q, ls[3].ID)
		noErr(t, "ReleaseUnowned again", err)
		_, err = s.b.Leases().Fail(s.ctx, ls[4], broker.Failure{Error: "x", Dead: true})
		noErr(t, "Fail dead", err)
		want(t, "one left", s.group(t, "g").running, int64(1))
		s.Advance(past)
		s.reap(t, 10)
		want(t, "reaped", s.group(t, "g").running, int64(0))
		s.wantSlots(t, "after every end", "g")
		s.consistent(t)
	})
}
