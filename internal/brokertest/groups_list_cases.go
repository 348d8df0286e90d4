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
