package brokertest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// groupKeys builds a queue's group structures by hand, as the contract
// (broker/keys.go) names them.
type groupKeys struct {
	s    *bundle
	base string
}

func (s *bundle) groupKeys() groupKeys {
	return groupKeys{s: s, base: s.b.Prefix() + ":{" + s.q + "}:"}
}

func (g groupKeys) key(name string) string { return g.base + name }

// ready files n pending ids of group in gready:<group> (no job hashes:
// Groups reads the index, not the jobs).
func (g groupKeys) ready(t *testing.T, group string, n int) {
	t.Helper()
	var zs []redis.Z
	for i := range n {
		zs = append(zs, redis.Z{Score: float64(100*35184372088832 + i), Member: fmt.Sprintf("%s-%d", group, i)})
	}
	noErr(t, "ZADD gready", g.s.Client.ZAdd(g.s.ctx, g.key("gready:"+group), zs...).Err())
}

func (g groupKeys) zadd(t *testing.T, name string, score float64, member string) {
	t.Helper()
	noErr(t, "ZADD "+name, g.s.Client.ZAdd(g.s.ctx, g.key(name), redis.Z{Score: score, Member: member}).Err())
}

func (g groupKeys) hset(t *testing.T, name string, values ...any) {
	t.Helper()
	noErr(t, "HSET "+name, g.s.Client.HSet(g.s.ctx, g.key(name), values...).Err())
}

// line is its values as Println writes them, without the newline.
func line(vs ...any) string { return strings.TrimSuffix(fmt.Sprintln(vs...), "\n") }

// Groups lists the groups that have state (in the rotation, the timer or
// running), never the ungrouped turn "", the largest backlogs first with
// ties by name, each with its effective limits: the override's tokens
// where not "-", else the queue's defaults; ordered forces max 1.
func testGroupsListing(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	g := s.groupKeys()
	in := s.b.Inspector()

	// An ungrouped job: counted apart, never a group.
	s.enqueue(t, broker.Job{ID: "plain"})
	g.hset(t, "limits", "groups", "1", "g_max_running", "3", "g_rate", "10", "g_period_ms", "1000", "g_overrides", "1")
	g.zadd(t, "grotation", 1, "")
	g.ready(t, "big", 5)
	g.zadd(t, "grotation", 2, "big")
	g.ready(t, "mid", 2)
	g.zadd(t, "grotation", 3, "mid")
	g.ready(t, "alpha", 2) // ties with mid: by name
	g.zadd(t, "gwait", 1_800_000_000_000, "alpha")
	g.zadd(t, "grotation", 4, "alpha")             // in both: listed once
	g.hset(t, "grunning", "big", "2", "busy", "3") // busy: running, nothing ready
	g.hset(t, "glimits", "alpha", "- 0 0 1", "mid", "7 - - -", "busy", "- 5 60000 -")
	g.hset(t, "ghold", "alpha", "alpha-0")

	p, err := in.Groups(s.ctx, s.q, broker.GroupsQuery{})
	noErr(t, "Groups", err)
	want(t, "Scanned", p.Scanned, 4)
	want(t, "Truncated", p.Truncated, false)
	want(t, "Ungrouped", p.Ungrouped, int64(1))
	want(t, "default max", p.Defaults.MaxRunning, 3)
	want(t, "default rate", fmt.Sprint(p.Defaults.Rate, p.Defaults.Per), "10 1s")
	var order []string
	for _, x := range p.Groups {
		order = append(order, x.Name)
	}
	want(t, "order", fmt.Sprint(order), "[big alpha mid busy]")
	byName := map[string]broker.GroupInfo{}
	for _, x := range p.Groups {
		byName[x.Name] = x
	}
	big := byName["big"]
	want(t, "big", line(big.Running, big.Ready, big.MaxRunning, big.Rate, big.Per, big.Ordered, big.Override, big.InTurn, big.Waiting, big.Held),
		"2 5 3 10 1s false false true false ")
	alpha := byName["alpha"]
	want(t, "alpha (ordered, no rate of its own)", line(alpha.Ready, alpha.MaxRunning, alpha.Rate, alpha.Ordered, alpha.Override, alpha.Held),
		"2 1 0 true true alpha-0")
	want(t, "alpha waits", alpha.Waiting, true)
	want(t, "alpha waits until", alpha.WaitUntil.UnixMilli(), int64(1_800_000_000_000))
	mid := byName["mid"]
	want(t, "mid (max of its own, default rate)", fmt.Sprint(mid.MaxRunning, mid.Rate, mid.Per, mid.Ordered), "7 10 1s false")
	busy := byName["busy"]
	want(t, "busy (running only, rate of its own)", fmt.Sprint(busy.Running, busy.Ready, busy.MaxRunning, busy.Rate, busy.Per, busy.InTurn),
		"3 0 3 5 1m0s false")

	t.Run("Limit", func(t *testing.T) {
		p, err := in.Groups(s.ctx, s.q, broker.GroupsQuery{Limit: 2})
		noErr(t, "Groups", err)
		want(t, "groups", len(p.Groups), 2)
		want(t, "second", p.Groups[1].Name, "alpha")
		want(t, "Scanned", p.Scanned, 4)
		for _, bad := range []int{-1, broker.GroupsLimitMax + 1} {
			_, err := in.Groups(s.ctx, s.q, broker.GroupsQuery{Limit: bad})
			var ve *broker.ValidationError
			if !errors.As(err, &ve) || ve.Field != "limit" {
				t.Fatalf("Limit %d: error %v, want a ValidationError of limit", bad, err)
			}
		}
	})

	t.Run("Name", func(t *testing.T) {
		p, err := in.Groups(s.ctx, s.q, broker.GroupsQuery{Name: "mid"})
		noErr(t, "Groups", err)
		want(t, "groups", len(p.Groups), 1)
		want(t, "mid", line(p.Groups[0].Name, p.Groups[0].Ready, p.Groups[0].MaxRunning), "mid 2 7")
		p, err = in.Groups(s.ctx, s.q, broker.GroupsQuery{Name: "nobody"})
		noErr(t, "Groups of a group with no state", err)
		want(t, "groups", len(p.Groups), 0)
		_, err = in.Groups(s.ctx, s.q, broker.GroupsQuery{Name: " padded"})
		var ve *broker.ValidationError
		if !errors.As(err, &ve) || ve.Field != "group" {
			t.Fatalf("a bad name: error %v, want a ValidationError of group", err)
		}
	})

	t.Run("RealClaims", func(t *testing.T) {
		// The core's own structures: a claim counts its group's lease, a
		// group at its max waits in the timer with its backlog, and the
		// ack that frees its slot puts it back in its turn.
		s := setup(t, nb)
		in := s.b.Inspector()
		g := s.groupKeys()
		g.hset(t, "limits", "g_max_running", "1")
		for i := range 3 {
			s.enqueue(t, broker.Job{ID: fmt.Sprint("one-", i), Group: "one"})
		}
		s.enqueue(t, broker.Job{ID: "two-0", Group: "two"})
		s.enqueue(t, broker.Job{ID: "free"})
		ls := s.claim(t, 3, long)
		want(t, "claimed", len(ls), 3)
		p, err := in.Groups(s.ctx, s.q, broker.GroupsQuery{})
		noErr(t, "Groups", err)
		want(t, "Ungrouped", p.Ungrouped, int64(0))
		want(t, "groups", len(p.Groups), 2)
		one, two := p.Groups[0], p.Groups[1]
		want(t, "one", line(one.Name, one.Running, one.Ready, one.MaxRunning, one.Waiting, one.InTurn), "one 1 2 1 true false")
		// (two may wait in the timer as a spare entry, P2: not asserted.)
		want(t, "two (running only)", line(two.Name, two.Running, two.Ready), "two 1 0")
		pending, total := pages(t, s, broker.JobQuery{State: broker.StatePending, Limit: 1})
		want(t, "pending", fmt.Sprint(pending, total), "[one-1 one-2] 2")
		for _, l := range ls {
			if l.Group == "one" {
				_, err := s.b.Leases().Ack(s.ctx, l, nil)
				noErr(t, "Ack", err)
			}
		}
		p, err = in.Groups(s.ctx, s.q, broker.GroupsQuery{Name: "one"})
		noErr(t, "Groups", err)
		one = p.Groups[0]
		want(t, "one after its ack", line(one.Running, one.Ready, one.Waiting, one.InTurn), "0 2 false true")
	})

	t.Run("NoGroups", func(t *testing.T) {
		s := setup(t, nb)
		s.enqueue(t, broker.Job{ID: "a"})
		p, err := s.b.Inspector().Groups(s.ctx, s.q, broker.GroupsQuery{})
		noErr(t, "Groups", err)
		want(t, "groups", len(p.Groups), 0)
		want(t, "Ungrouped", p.Ungrouped, int64(1))
		want(t, "default max", p.Defaults.MaxRunning, 0)
	})
}

// Groups reads in steps of GroupsScanStep and stops at GroupsScanCap
// entries, saying so: more groups than that cost no more.
func testGroupsListingCapped(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	g := s.groupKeys()
	const extra = 50
	total := broker.GroupsScanCap + extra
	start := time.Now()
	for i := 0; i < total; i += 10000 {
		var zs []redis.Z
		for j := i; j < min(total, i+10000); j++ {
			zs = append(zs, redis.Z{Score: float64(j), Member: fmt.Sprintf("g%06d", j)})
		}
		noErr(t, "ZADD", s.Client.ZAdd(s.ctx, g.key("grotation"), zs...).Err())
	}
	// The last group has the largest backlog, past the cap: not listed.
	g.ready(t, fmt.Sprintf("g%06d", total-1), 3)
	g.ready(t, "g000007", 2)
	p, err := s.b.Inspector().Groups(s.ctx, s.q, broker.GroupsQuery{Limit: 1})
	noErr(t, "Groups", err)
	want(t, "Truncated", p.Truncated, true)
	want(t, "Scanned", p.Scanned, broker.GroupsScanCap)
	want(t, "first", p.Groups[0].Name, "g000007")
	// Named, it is read whatever the queue holds.
	p, err = s.b.Inspector().Groups(s.ctx, s.q, broker.GroupsQuery{Name: fmt.Sprintf("g%06d", total-1)})
	noErr(t, "Groups", err)
	want(t, "named past the cap", p.Groups[0].Ready, int64(3))
	t.Logf("%d groups listed in %v", total, time.Since(start))
}

// file enqueues a job of group: the core files it in gready:<group>, in
// enqueue order, and places the group; a test then sets the group's place
// by hand (place).
func (g groupKeys) file(t *testing.T, id, group string) {
	t.Helper()
	g.s.enqueue(t, broker.Job{ID: id, Group: group})
}

// place puts group in the rotation at ticket, or in the timer at due (one
// of them 0), and out of the other.
func (g groupKeys) place(t *testing.T, group string, ticket, due float64) {
	t.Helper()
	noErr(t, "ZREM", g.s.Client.ZRem(g.s.ctx, g.key("grotation"), group).Err())
	noErr(t, "ZREM", g.s.Client.ZRem(g.s.ctx, g.key("gwait"), group).Err())
	if due > 0 {
		g.zadd(t, "gwait", due, group)
		return
	}
	g.zadd(t, "grotation", ticket, group)
}

// pages walks a listing page by page, answering the ids in order.
func pages(t *testing.T, s *bundle, q broker.JobQuery) ([]string, int64) {
	t.Helper()
	var ids []string
	var total int64
	for range 1000 {
		p, err := s.b.Inspector().JobPage(s.ctx, s.q, q)
		noErr(t, "JobPage", err)
		total = p.Total
		for _, j := range p.Jobs {
			ids = append(ids, j.ID)
		}
		if p.Next == "" {
			return ids, total
		}
		q.After = p.Next
	}
	t.Fatal("the listing does not end")
	return nil, 0
}

// The pending listing holds the grouped jobs too: the ungrouped ones in
// claim order, then group by group (each by priority, then FIFO), the
// groups in turn order and then the timer's; Newest reverses all of it.
// JobQuery.Group lists one group's pending jobs from its own index.
func testGroupsPendingListing(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	g := s.groupKeys()
	s.enqueue(t, broker.Job{ID: "u1"})
	s.enqueue(t, broker.Job{ID: "u2"})
	g.file(t, "b1", "beta")
	g.file(t, "a1", "alpha")
	g.file(t, "b2", "beta")
	g.file(t, "c1", "gamma")
	g.file(t, "a2", "alpha")
	g.file(t, "b3", "beta")
	g.file(t, "c2", "gamma")
	g.place(t, "beta", 1, 0)
	g.zadd(t, "grotation", 2, "")
	g.place(t, "alpha", 3, 0)
	g.place(t, "gamma", 0, 1_800_000_000_000)
	g.zadd(t, "grotation", 4, "spare") // a group with nothing pending (P2): skipped
	in := s.b.Inspector()
	all := "[u1 u2 b1 b2 b3 a1 a2 c1 c2]"
	for _, limit := range []int{1, 2, 3, 50} {
		ids, total := pages(t, s, broker.JobQuery{State: broker.StatePending, Limit: limit})
		want(t, fmt.Sprintf("pages of %d", limit), fmt.Sprint(ids), all)
		want(t, "Total", total, int64(9))
		ids, _ = pages(t, s, broker.JobQuery{State: broker.StatePending, Limit: limit, Newest: true})
		want(t, fmt.Sprintf("newest pages of %d", limit), fmt.Sprint(ids), "[c2 c1 a2 a1 b3 b2 b1 u2 u1]")
	}
	js, err := in.Jobs(s.ctx, s.q, broker.StatePending, 100)
	noErr(t, "Jobs", err)
	var ids []string
	for _, j := range js {
		ids = append(ids, j.ID)
	}
	want(t, "Jobs", fmt.Sprint(ids), all)

	t.Run("OneGroup", func(t *testing.T) {
		for _, limit := range []int{1, 2, 50} {
			ids, total := pages(t, s, broker.JobQuery{State: broker.StatePending, Group: "beta", Limit: limit})
			want(t, "beta's", fmt.Sprint(ids), "[b1 b2 b3]")
			want(t, "beta's Total", total, int64(3))
		}
		ids, _ := pages(t, s, broker.JobQuery{State: broker.StatePending, Group: "beta", Newest: true})
		want(t, "beta's newest first", fmt.Sprint(ids), "[b3 b2 b1]")
		ids, _ = pages(t, s, broker.JobQuery{State: broker.StatePending, Group: "nobody"})
		want(t, "a group with none", len(ids), 0)
		_, err := in.JobPage(s.ctx, s.q, broker.JobQuery{State: broker.StatePending, Group: "bad\n"})
		var ve *broker.ValidationError
		if !errors.As(err, &ve) || ve.Field != "group" {
			t.Fatalf("a bad group: error %v, want a ValidationError of group", err)
		}
		// In another state the group filters, as a kind does.
		s2 := setup(t, nb)
		s2.enqueue(t, broker.Job{ID: "x1", Group: "acme", RunAt: time.Now().Add(time.Hour)})
		s2.enqueue(t, broker.Job{ID: "x2", RunAt: time.Now().Add(time.Hour)})
		s2.enqueue(t, broker.Job{ID: "x3", Group: "acme", RunAt: time.Now().Add(2 * time.Hour)})
		ids, _ = pages(t, s2, broker.JobQuery{State: broker.StateScheduled, Group: "acme", Limit: 1})
		want(t, "scheduled of acme", fmt.Sprint(ids), "[x1 x3]")
	})

	t.Run("CursorGoesOnInItsGroup", func(t *testing.T) {
		p, err := in.JobPage(s.ctx, s.q, broker.JobQuery{State: broker.StatePending, Limit: 4})
		noErr(t, "JobPage", err)
		want(t, "page 1 ends", p.Jobs[3].ID, "b2")
		// beta takes its turn: b1 runs, beta gets a later ticket.
		score, err := s.Client.ZScore(s.ctx, g.key("gready:beta"), "b1").Result()
		noErr(t, "ZSCORE", err)
		noErr(t, "ZREM", s.Client.ZRem(s.ctx, g.key("gready:beta"), "b1").Err())
		g.zadd(t, "grotation", 10, "beta")
		p2, err := in.JobPage(s.ctx, s.q, broker.JobQuery{State: broker.StatePending, Limit: 50, After: p.Next})
		noErr(t, "JobPage", err)
		var ids []string
		for _, j := range p2.Jobs {
			ids = append(ids, j.ID)
		}
		// It goes on in beta after b2, then after beta's old place; beta
		// comes again at its new one (b2 again: repeating, never
		// skipping; b3 the page holds already).
		want(t, "page 2", fmt.Sprint(ids), "[b3 a1 a2 b2 c1 c2]")
		g.zadd(t, "gready:beta", score, "b1")
		g.place(t, "beta", 1, 0)
	})

	t.Run("Cursors", func(t *testing.T) {
		for _, bad := range []string{"g9:x 1 beta1:b1", "g99:r 1 beta1:b1", "gx:r 1 beta", "g8:r nan beta1:b1", "g7:r 1 \x01ta1:b1", "g3:r 1"} {
			_, err := in.JobPage(s.ctx, s.q, broker.JobQuery{State: broker.StatePending, After: bad})
			var ve *broker.ValidationError
			if !errors.As(err, &ve) || ve.Field != "cursor" {
				t.Errorf("cursor %q: error %v, want a ValidationError of cursor", bad, err)
			}
		}
	})

	t.Run("SpareMembersEndAPageShort", func(t *testing.T) {
		s := setup(t, nb)
		g := s.groupKeys()
		g.file(t, "first", "a")
		g.file(t, "last", "z")
		g.place(t, "a", 0, 0)
		var zs []redis.Z
		for i := range 250 {
			zs = append(zs, redis.Z{Score: float64(1 + i), Member: fmt.Sprintf("spare%03d", i)})
		}
		noErr(t, "ZADD", s.Client.ZAdd(s.ctx, g.key("grotation"), zs...).Err())
		g.place(t, "z", 1000, 0)
		p, err := s.b.Inspector().JobPage(s.ctx, s.q, broker.JobQuery{State: broker.StatePending, Limit: 2})
		noErr(t, "JobPage", err)
		want(t, "a short page", len(p.Jobs), 1)
		if p.Next == "" {
			t.Fatal("a page that stopped at spare members has no Next")
		}
		ids, _ := pages(t, s, broker.JobQuery{State: broker.StatePending, Limit: 2})
		want(t, "every page", fmt.Sprint(ids), "[first last]")
		js, err := s.b.Inspector().Jobs(s.ctx, s.q, broker.StatePending, 10)
		noErr(t, "Jobs", err)
		want(t, "Jobs past spare members", len(js), 2)
	})

	t.Run("FlagOff", func(t *testing.T) {
		// Without the settings' groups flag the listing reads no group:
		// what it lists and costs is as before groups.
		s := setup(t, nb)
		g := s.groupKeys()
		s.enqueue(t, broker.Job{ID: "u"})
		g.file(t, "hidden", "a")
		noErr(t, "HDEL", s.Client.HDel(s.ctx, g.key("limits"), "groups").Err())
		ids, _ := pages(t, s, broker.JobQuery{State: broker.StatePending})
		want(t, "listed", fmt.Sprint(ids), "[u]")
	})
}
