package brokertest

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// limitsState is what glimits.lua may write: the settings hash, the
// overrides, the groups' rotation and timer, the sequence and the wake-up
// list.
type limitsState struct {
	settings, overrides map[string]string
	rotation, wait      []redis.Z
	seq                 string
	wake                []string
}

func (s *bundle) limitsState(t failer) limitsState {
	t.Helper()
	var g limitsState
	var err error
	if g.settings, err = s.Client.HGetAll(s.ctx, s.queueKey("limits")).Result(); err != nil {
		t.Fatalf("HGETALL limits: %v", err)
	}
	if g.overrides, err = s.Client.HGetAll(s.ctx, s.queueKey("glimits")).Result(); err != nil {
		t.Fatalf("HGETALL glimits: %v", err)
	}
	if g.rotation, err = s.Client.ZRangeWithScores(s.ctx, s.queueKey("grotation"), 0, -1).Result(); err != nil {
		t.Fatalf("ZRANGE grotation: %v", err)
	}
	if g.wait, err = s.Client.ZRangeWithScores(s.ctx, s.queueKey("gwait"), 0, -1).Result(); err != nil {
		t.Fatalf("ZRANGE gwait: %v", err)
	}
	g.seq, _ = s.Client.Get(s.ctx, s.queueKey("seq")).Result()
	if g.wake, err = s.Client.LRange(s.ctx, s.queueKey("wake"), 0, -1).Result(); err != nil {
		t.Fatalf("LRANGE wake: %v", err)
	}
	return g
}

// groupLimits is ChangeGroupLimits that must succeed.
func (s *bundle) groupLimits(t failer, group string, c broker.GroupLimitsChange) broker.GroupLimits {
	t.Helper()
	l, err := s.b.Inspector().ChangeGroupLimits(s.ctx, s.q, group, c)
	if err != nil {
		t.Fatalf("ChangeGroupLimits(%q, %+v): %v", group, c, err)
	}
	return l
}

func (s *bundle) readGroupLimits(t failer, group string) broker.GroupLimitsInfo {
	t.Helper()
	info, err := s.b.Inspector().GroupLimits(s.ctx, s.q, group)
	if err != nil {
		t.Fatalf("GroupLimits(%q): %v", group, err)
	}
	return info
}

// The queue's group defaults: each limit named changes and the others are
// kept; 0 removes one; a rate and its period are a pair, as the queue's
// limits are; the settings fields are the contract's, and nothing else of
// the settings changes.
func testGroupLimitsDefaults(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	in := s.b.Inspector()
	noErr(t, "SetLimits", in.SetLimits(s.ctx, s.q, broker.Limits{MaxRunning: 7}))
	fields := func() []any {
		t.Helper()
		v, err := s.Client.HMGet(s.ctx, s.queueKey("limits"), "g_max_running", "g_rate", "g_period_ms", "g_ordered", "max_running").Result()
		noErr(t, "HMGET", err)
		return v
	}
	wantFields := func(what string, want ...any) {
		t.Helper()
		if got := fields(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: settings g_max_running, g_rate, g_period_ms, g_ordered, max_running = %v, want %v", what, got, want)
		}
	}
	want(t, "no defaults", s.readGroupLimits(t, "").Defaults, broker.GroupLimits{})

	got := s.groupLimits(t, "", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 2}, MaxRunning: true})
	want(t, "answer after max running 2", got, broker.GroupLimits{MaxRunning: 2})
	wantFields("max running 2", "2", nil, nil, nil, "7")

	got = s.groupLimits(t, "", broker.GroupLimitsChange{To: broker.GroupLimits{Rate: 10, Per: time.Second}, Rate: true, Per: true})
	want(t, "answer after a rate", got, broker.GroupLimits{MaxRunning: 2, Rate: 10, Per: time.Second})
	wantFields("a rate of 10 per 1s", "2", "10", "1000", nil, "7")

	// A rate alone keeps the period; a period alone keeps the rate.
	got = s.groupLimits(t, "", broker.GroupLimitsChange{To: broker.GroupLimits{Rate: 20}, Rate: true})
	want(t, "a rate alone", got, broker.GroupLimits{MaxRunning: 2, Rate: 20, Per: time.Second})
	got = s.groupLimits(t, "", broker.GroupLimitsChange{To: broker.GroupLimits{Per: time.Minute}, Per: true})
	want(t, "a period alone", got, broker.GroupLimits{MaxRunning: 2, Rate: 20, Per: time.Minute})

	got = s.groupLimits(t, "", broker.GroupLimitsChange{To: broker.GroupLimits{Ordered: true}, Ordered: true})
	want(t, "ordered", got, broker.GroupLimits{MaxRunning: 2, Rate: 20, Per: time.Minute, Ordered: true})
	wantFields("ordered", "2", "20", "60000", "1", "7")
	info := s.readGroupLimits(t, "")
	want(t, "read defaults", info.Defaults, broker.GroupLimits{MaxRunning: 2, Rate: 20, Per: time.Minute, Ordered: true})
	want(t, "the defaults' effective limits: ordered runs one", info.Effective, broker.GroupLimits{MaxRunning: 1, Rate: 20, Per: time.Minute, Ordered: true})
	if info.Override != nil {
		t.Fatalf("the defaults have an override: %+v", info.Override)
	}
	// A group without an override takes the defaults.
	want(t, "a group's effective limits", s.readGroupLimits(t, "acme").Effective, info.Effective)

	// 0 removes each; the queue's own limits stay.
	got = s.groupLimits(t, "", broker.GroupLimitsChange{MaxRunning: true, Rate: true, Ordered: true})
	want(t, "all removed", got, broker.GroupLimits{})
	wantFields("all removed", nil, nil, nil, nil, "7")
	l, err := in.Limits(s.ctx, s.q)
	noErr(t, "Limits", err)
	want(t, "the queue's limits", l, broker.Limits{MaxRunning: 7})

	// A change of the defaults wakes a blocked pool and moves no group.
	noErr(t, "ZADD gwait", s.Client.ZAdd(s.ctx, s.queueKey("gwait"), redis.Z{Score: 5, Member: "acme"}).Err())
	noErr(t, "DEL wake", s.Client.Del(s.ctx, s.queueKey("wake")).Err())
	s.groupLimits(t, "", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 3}, MaxRunning: true})
	st := s.limitsState(t)
	want(t, "wake-up tokens after a change of the defaults", len(st.wake), 1)
	want(t, "groups waiting after a change of the defaults", fmt.Sprint(st.wait), fmt.Sprint([]redis.Z{{Score: 5, Member: "acme"}}))
	want(t, "groups in the rotation after a change of the defaults", len(st.rotation), 0)
}

// A group's override is one glimits field in the contract's format, "-"
// for each limit it leaves to the default; g_overrides is "1" exactly while
// glimits has a field; the effective limits merge the two; Reset and the
// Default* flags give limits back to the defaults.
func testGroupLimitsOverride(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	field := func(group string) string {
		t.Helper()
		v, err := s.Client.HGet(s.ctx, s.queueKey("glimits"), group).Result()
		if err == redis.Nil {
			return "(none)"
		}
		noErr(t, "HGET glimits", err)
		return v
	}
	flag := func() string {
		t.Helper()
		v, err := s.Client.HGet(s.ctx, s.queueKey("limits"), "g_overrides").Result()
		if err == redis.Nil {
			return "(absent)"
		}
		noErr(t, "HGET g_overrides", err)
		return v
	}
	s.groupLimits(t, "", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 2, Rate: 10, Per: time.Second}, MaxRunning: true, Rate: true, Per: true})
	want(t, "g_overrides before any override", flag(), "(absent)")

	got := s.groupLimits(t, "acme", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 5}, MaxRunning: true})
	want(t, "acme's effective limits", got, broker.GroupLimits{MaxRunning: 5, Rate: 10, Per: time.Second})
	want(t, "acme's glimits field", field("acme"), "5 - - -")
	want(t, "g_overrides with one override", flag(), "1")
	info := s.readGroupLimits(t, "acme")
	want(t, "acme's override", fmt.Sprintf("%+v", *info.Override), fmt.Sprintf("%+v", broker.GroupOverride{Limits: broker.GroupLimits{MaxRunning: 5}, MaxRunning: true}))
	want(t, "acme's read effective limits", info.Effective, got)
	want(t, "overrides", info.Overrides, 1)
	want(t, "another group's limits", s.readGroupLimits(t, "globex").Effective, broker.GroupLimits{MaxRunning: 2, Rate: 10, Per: time.Second})

	// A rate alone keeps the period in force: the default's.
	got = s.groupLimits(t, "acme", broker.GroupLimitsChange{To: broker.GroupLimits{Rate: 3}, Rate: true})
	want(t, "acme with a rate of its own", got, broker.GroupLimits{MaxRunning: 5, Rate: 3, Per: time.Second})
	want(t, "acme's field with a rate", field("acme"), "5 3 1000 -")
	// 0 is none for this group, whatever the default.
	got = s.groupLimits(t, "acme", broker.GroupLimitsChange{MaxRunning: true, Rate: true, To: broker.GroupLimits{}})
	want(t, "acme without max running and rate", got, broker.GroupLimits{})
	want(t, "acme's field with none", field("acme"), "0 0 0 -")
	got = s.groupLimits(t, "acme", broker.GroupLimitsChange{To: broker.GroupLimits{Ordered: true}, Ordered: true})
	want(t, "acme ordered", got, broker.GroupLimits{MaxRunning: 1, Ordered: true})
	want(t, "acme's field ordered", field("acme"), "0 0 0 1")

	// Back to the default, limit by limit.
	got = s.groupLimits(t, "acme", broker.GroupLimitsChange{DefaultRate: true})
	want(t, "acme with the default rate", got, broker.GroupLimits{MaxRunning: 1, Rate: 10, Per: time.Second, Ordered: true})
	want(t, "acme's field with the default rate", field("acme"), "0 - - 1")
	s.groupLimits(t, "acme", broker.GroupLimitsChange{DefaultMaxRunning: true, DefaultOrdered: true})
	want(t, "acme's field when it overrides nothing", field("acme"), "(none)")
	want(t, "g_overrides when none is left", flag(), "(absent)")
	if s.readGroupLimits(t, "acme").Override != nil {
		t.Fatal("acme still has an override after every limit went back to the default")
	}

	// Reset drops the override first: with a value, only that value stays.
	s.groupLimits(t, "acme", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 4, Ordered: true}, MaxRunning: true, Ordered: true})
	s.groupLimits(t, "globex", broker.GroupLimitsChange{To: broker.GroupLimits{Rate: 1, Per: time.Minute}, Rate: true, Per: true})
	want(t, "globex's field", field("globex"), "- 1 60000 -")
	got = s.groupLimits(t, "acme", broker.GroupLimitsChange{Reset: true, To: broker.GroupLimits{Rate: 1, Per: time.Minute}, Rate: true, Per: true})
	want(t, "acme reset with a rate", got, broker.GroupLimits{MaxRunning: 2, Rate: 1, Per: time.Minute})
	want(t, "acme's field reset with a rate", field("acme"), "- 1 60000 -")
	s.groupLimits(t, "acme", broker.GroupLimitsChange{Reset: true})
	want(t, "acme's field after a reset", field("acme"), "(none)")
	want(t, "g_overrides while globex has one", flag(), "1")
	s.groupLimits(t, "globex", broker.GroupLimitsChange{Reset: true})
	want(t, "g_overrides after the last reset", flag(), "(absent)")
	// A reset of a group without an override changes nothing but wakes.
	s.groupLimits(t, "initech", broker.GroupLimitsChange{Reset: true})
	want(t, "g_overrides after a reset of no override", flag(), "(absent)")
	want(t, "overrides", s.readGroupLimits(t, "").Overrides, 0)
}

// Every refusal changes nothing: not the settings, the overrides, the
// rotation, the timer, the sequence or the wake-up list.
func testGroupLimitsRefusedChangesNothing(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	s.groupLimits(t, "", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 2}, MaxRunning: true})
	s.groupLimits(t, "acme", broker.GroupLimitsChange{To: broker.GroupLimits{Rate: 5, Per: time.Second}, Rate: true, Per: true})
	noErr(t, "ZADD gwait", s.Client.ZAdd(s.ctx, s.queueKey("gwait"), redis.Z{Score: 5, Member: "acme"}, redis.Z{Score: 6, Member: "globex"}).Err())
	noErr(t, "DEL wake", s.Client.Del(s.ctx, s.queueKey("wake")).Err())
	before := s.limitsState(t)
	for _, tc := range []struct {
		name, group string
		c           broker.GroupLimitsChange
	}{
		{"a period, and the defaults have no rate", "", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 9, Per: time.Second}, MaxRunning: true, Per: true}},
		{"a rate, and the defaults have no period", "", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 9, Rate: 5}, MaxRunning: true, Rate: true}},
		{"a period, and globex has no rate in force", "globex", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 9, Per: time.Second}, MaxRunning: true, Per: true}},
		{"a rate, and globex has no period in force", "globex", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 9, Rate: 5}, MaxRunning: true, Rate: true}},
		{"starts under 1ms apart, the period kept", "acme", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 9, Rate: 1001}, MaxRunning: true, Rate: true}},
		{"starts under 1ms apart, the rate kept", "acme", broker.GroupLimitsChange{To: broker.GroupLimits{Per: 4 * time.Millisecond}, Per: true}},
		{"starts under 1ms apart, both given", "", broker.GroupLimitsChange{To: broker.GroupLimits{Rate: 2000, Per: time.Second}, Rate: true, Per: true}},
		{"a period under 1ms", "", broker.GroupLimitsChange{To: broker.GroupLimits{Rate: 1, Per: time.Microsecond}, Rate: true, Per: true}},
		{"a negative max running", "acme", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: -1}, MaxRunning: true}},
		{"a negative rate", "acme", broker.GroupLimitsChange{To: broker.GroupLimits{Rate: -1, Per: time.Second}, Rate: true, Per: true}},
		{"a huge max running", "acme", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 2_000_000_000}, MaxRunning: true}},
		{"a default of the defaults", "", broker.GroupLimitsChange{DefaultMaxRunning: true}},
		{"a reset of the defaults", "", broker.GroupLimitsChange{Reset: true}},
		{"set and back to the default", "acme", broker.GroupLimitsChange{MaxRunning: true, DefaultMaxRunning: true}},
		{"a rate and the default rate", "acme", broker.GroupLimitsChange{Per: true, To: broker.GroupLimits{Per: time.Second}, DefaultRate: true}},
		{"a bad group name", " acme", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 1}, MaxRunning: true}},
		{"a group name too long", strings.Repeat("g", broker.MaxGroupBytes+1), broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 1}, MaxRunning: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.b.Inspector().ChangeGroupLimits(s.ctx, s.q, tc.group, tc.c)
			wantErr(t, tc.name, err, broker.ErrInvalid)
			if after := s.limitsState(t); !reflect.DeepEqual(after, before) {
				t.Fatalf("a refused change (%v) changed the state:\n got %+v\nwant %+v", err, after, before)
			}
		})
	}
}

// A change sent twice (a lost reply) answers the same limits and leaves
// the same state, the wake-up token and the rotation's ticket aside.
func testGroupLimitsResend(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	for _, tc := range []struct {
		group string
		c     broker.GroupLimitsChange
	}{
		{"", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 3, Rate: 2, Per: time.Second, Ordered: true}, MaxRunning: true, Rate: true, Per: true, Ordered: true}},
		{"acme", broker.GroupLimitsChange{To: broker.GroupLimits{Rate: 4}, Rate: true}},
		{"acme", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 1}, MaxRunning: true, DefaultRate: true}},
		{"globex", broker.GroupLimitsChange{Reset: true, To: broker.GroupLimits{Ordered: false}, Ordered: true}},
		{"globex", broker.GroupLimitsChange{Reset: true}},
	} {
		first := s.groupLimits(t, tc.group, tc.c)
		st := s.limitsState(t)
		again := s.groupLimits(t, tc.group, tc.c)
		want(t, fmt.Sprintf("the re-sent answer of %q %+v", tc.group, tc.c), again, first)
		st2 := s.limitsState(t)
		if !reflect.DeepEqual(st.settings, st2.settings) || !reflect.DeepEqual(st.overrides, st2.overrides) {
			t.Fatalf("the re-send of %q %+v changed the limits:\n%v %v\n%v %v", tc.group, tc.c, st.settings, st.overrides, st2.settings, st2.overrides)
		}
	}
}

// The overrides stop at broker.MaxGroupOverrides: a new one past it is
// refused and changes nothing; an existing one still changes; once one is
// reset there is room again.
func testGroupLimitsCap(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	key := s.queueKey("glimits")
	const chunk = 5000
	for start := 0; start < broker.MaxGroupOverrides-1; start += chunk {
		args := make([]any, 0, 2*chunk)
		for i := start; i < min(start+chunk, broker.MaxGroupOverrides-1); i++ {
			args = append(args, "g"+strconv.Itoa(i), "1 - - -")
		}
		noErr(t, "HSET glimits", s.Client.HSet(s.ctx, key, args...).Err())
	}
	// The last one that fits goes through the script, which sets the flag.
	s.groupLimits(t, "last", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 2}, MaxRunning: true})
	n, err := s.Client.HLen(s.ctx, key).Result()
	noErr(t, "HLEN", err)
	want(t, "overrides", n, int64(broker.MaxGroupOverrides))
	before := s.limitsState(t)
	_, err = s.b.Inspector().ChangeGroupLimits(s.ctx, s.q, "one-too-many", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 1}, MaxRunning: true})
	wantErr(t, "the 100,001st override", err, broker.ErrInvalid)
	if !strings.Contains(err.Error(), "100000 group overrides") || !strings.Contains(err.Error(), "reset") {
		t.Errorf("the refusal does not say how many there are and what to do: %v", err)
	}
	if after := s.limitsState(t); !reflect.DeepEqual(after.overrides, before.overrides) || !reflect.DeepEqual(after.settings, before.settings) {
		t.Fatal("the refused override changed the overrides or the settings")
	}
	// An existing override changes; a reset makes room.
	s.groupLimits(t, "g7", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 3}, MaxRunning: true})
	s.groupLimits(t, "g8", broker.GroupLimitsChange{Reset: true})
	got := s.groupLimits(t, "one-too-many", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 1}, MaxRunning: true})
	want(t, "the override once there is room", got.MaxRunning, 1)
	want(t, "overrides read", s.readGroupLimits(t, "").Overrides, broker.MaxGroupOverrides)
}

// A named group's change moves it from the timer (gwait) to the rotation
// with a new ticket from seq, so a raised limit holds from the next claim;
// a group not waiting is not added, and other waiting groups stay.
func testGroupLimitsMoveFromWait(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	noErr(t, "ZADD gwait", s.Client.ZAdd(s.ctx, s.queueKey("gwait"), redis.Z{Score: 5e12, Member: "acme"}, redis.Z{Score: 6e12, Member: "globex"}).Err())
	noErr(t, "ZADD grotation", s.Client.ZAdd(s.ctx, s.queueKey("grotation"), redis.Z{Score: 3, Member: ""}).Err())
	noErr(t, "SET seq", s.Client.Set(s.ctx, s.queueKey("seq"), 40, 0).Err())
	noErr(t, "DEL wake", s.Client.Del(s.ctx, s.queueKey("wake")).Err())

	s.groupLimits(t, "acme", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 5}, MaxRunning: true})
	st := s.limitsState(t)
	want(t, "seq after the move", st.seq, "41")
	want(t, "the rotation", fmt.Sprint(st.rotation), fmt.Sprint([]redis.Z{{Score: 3, Member: ""}, {Score: 41, Member: "acme"}}))
	want(t, "the timer", fmt.Sprint(st.wait), fmt.Sprint([]redis.Z{{Score: 6e12, Member: "globex"}}))
	want(t, "wake-up tokens", len(st.wake), 1)

	// Not waiting: no ticket drawn, nothing added; a reset of a waiting
	// group moves it too.
	s.groupLimits(t, "initech", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 5}, MaxRunning: true})
	s.groupLimits(t, "acme", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 6}, MaxRunning: true})
	st = s.limitsState(t)
	want(t, "seq when no group moved", st.seq, "41")
	want(t, "the rotation when no group moved", len(st.rotation), 2)
	want(t, "wake-up tokens after three changes", len(st.wake), 1)
	s.groupLimits(t, "globex", broker.GroupLimitsChange{Reset: true})
	st = s.limitsState(t)
	want(t, "the timer after globex's reset", len(st.wait), 0)
	want(t, "the rotation after globex's reset", fmt.Sprint(st.rotation),
		fmt.Sprint([]redis.Z{{Score: 3, Member: ""}, {Score: 41, Member: "acme"}, {Score: 42, Member: "globex"}}))
}

// A glimits field edited by hand reads the same in Go (GroupLimits) as in
// the script (which rewrites it on the next change), and as the claim
// reads it (lib.lua's group_limits): four tokens or no override, "-" the
// default, a token that is no count none, and a rate without its period
// none.
func testGroupLimitsHandEdits(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	s.groupLimits(t, "", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 2, Rate: 10, Per: time.Second}, MaxRunning: true, Rate: true, Per: true})
	for raw, stored := range map[string]string{
		"5 - - -":       "5 - - -",
		"x 3 1000 1":    "0 3 1000 1",
		"-1 3 - 0":      "0 0 0 0",
		"+4 0 5 2":      "0 0 0 0",
		"4 7 0 1":       "4 0 0 1",
		"- 2 1000 -":    "- 2 1000 -",
		"4":             "(none)",
		"07 1 1000 0 9": "(none)",
		"5  - - -":      "(none)",
		" 5 - - -":      "(none)",
		"":              "(none)",
		"- - - -":       "(none)",
	} {
		noErr(t, "HSET glimits", s.Client.HSet(s.ctx, s.queueKey("glimits"), "acme", raw).Err())
		read := s.readGroupLimits(t, "acme")
		got := s.groupLimits(t, "acme", broker.GroupLimitsChange{}) // nothing named: the script rewrites what it read
		want(t, fmt.Sprintf("the effective limits of %q in Go and in Lua", raw), read.Effective, got)
		v, err := s.Client.HGet(s.ctx, s.queueKey("glimits"), "acme").Result()
		if err == redis.Nil {
			v = "(none)"
		} else {
			noErr(t, "HGET", err)
		}
		want(t, fmt.Sprintf("%q as the script rewrote it", raw), v, stored)
		want(t, fmt.Sprintf("whether %q is an override", raw), read.Override != nil, stored != "(none)")
		if again := s.readGroupLimits(t, "acme"); again.Effective != read.Effective {
			t.Fatalf("%q rewritten as %q reads %+v, was %+v", raw, v, again.Effective, read.Effective)
		}
	}
}

// The limits ChangeGroupLimits sets are the ones the claim enforces: the
// defaults and a group's own, max running, the rate's spacing on Redis's
// clock, ordered; and a raised limit holds from the next claim, though the
// group was waiting for its old one.
func testGroupLimitsEnforced(t *testing.T, nb NewBackend) {
	t.Run("RaisedLimitHoldsAtOnce", func(t *testing.T) {
		s := setup(t, nb)
		s.groupLimits(t, "", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 1}, MaxRunning: true})
		for range 5 {
			s.enqueue(t, broker.Job{Group: "acme"})
		}
		s.enqueue(t, broker.Job{Group: "vip"})
		want(t, "first claim", byGroup(s.claim(t, 10, long)), fmt.Sprint(map[string]int{"acme": 1, "vip": 1}))
		want(t, "acme at its max", len(s.claim(t, 10, long)), 0)
		want(t, "acme waits in the timer", s.group(t, "acme").waiting, true)
		// No slot frees: only the change brings acme back before its
		// safety-net time.
		s.groupLimits(t, "acme", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 3}, MaxRunning: true})
		want(t, "after acme's raise", byGroup(s.claim(t, 10, long)), fmt.Sprint(map[string]int{"acme": 2}))
		want(t, "acme at its new max", len(s.claim(t, 10, long)), 0)
		// Lowered: the three running finish; none starts meanwhile.
		s.groupLimits(t, "acme", broker.GroupLimitsChange{DefaultMaxRunning: true})
		want(t, "acme over its lowered max", len(s.claim(t, 10, long)), 0)
		s.wantSlots(t, "after the changes", "acme", "vip")
		s.consistent(t)
	})

	t.Run("OwnLimitsOverTheDefaults", func(t *testing.T) {
		s := setup(t, nb)
		s.groupLimits(t, "", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 1}, MaxRunning: true})
		s.groupLimits(t, "vip", broker.GroupLimitsChange{MaxRunning: true}) // none for vip
		for range 4 {
			s.enqueue(t, broker.Job{Group: "vip"})
			s.enqueue(t, broker.Job{Group: "acme"})
		}
		s.enqueue(t, broker.Job{})
		s.enqueue(t, broker.Job{})
		got := map[string]int{}
		for _, l := range append(s.claim(t, 10, long), s.claim(t, 10, long)...) {
			got[l.Group]++
		}
		want(t, "claimed by group", fmt.Sprint(got), fmt.Sprint(map[string]int{"vip": 4, "acme": 1, "": 2}))
	})

	t.Run("RateSpacing", func(t *testing.T) {
		s := setup(t, nb)
		// 2 per second: starts at least 500ms apart.
		s.groupLimits(t, "api-key-1", broker.GroupLimitsChange{To: broker.GroupLimits{Rate: 2, Per: time.Second}, Rate: true, Per: true})
		for range 4 {
			s.enqueue(t, broker.Job{Group: "api-key-1"})
			s.enqueue(t, broker.Job{Group: "api-key-2"})
		}
		want(t, "first claim", byGroup(s.claim(t, 10, long)), fmt.Sprint(map[string]int{"api-key-1": 1, "api-key-2": 4}))
		want(t, "within the spacing", len(s.claim(t, 10, long)), 0)
		if s.Frozen {
			s.Advance(499 * time.Millisecond)
			want(t, "1ms before the spacing ends", len(s.claim(t, 10, long)), 0)
			s.Advance(time.Millisecond)
		} else {
			s.Advance(500 * time.Millisecond)
		}
		want(t, "after the spacing", len(s.claim(t, 10, long)), 1)
		want(t, "within the next spacing", len(s.claim(t, 10, long)), 0)
		// Its own rate removed (the default has none): it starts at once.
		s.groupLimits(t, "api-key-1", broker.GroupLimitsChange{DefaultRate: true})
		want(t, "without a rate", len(s.claim(t, 10, long)), 2)
	})

	t.Run("Ordered", func(t *testing.T) {
		s := setup(t, nb)
		s.groupLimits(t, "", broker.GroupLimitsChange{To: broker.GroupLimits{Ordered: true}, Ordered: true})
		first := s.enqueue(t, broker.Job{Group: "acct-1"})
		second := s.enqueue(t, broker.Job{Group: "acct-1"})
		third := s.enqueue(t, broker.Job{Group: "acct-1"})
		want(t, "first", s.claimOne(t, long).ID, first)
		want(t, "one at a time", len(s.claim(t, 10, long)), 0)
		// Not ordered for this account: the others start, in order.
		s.groupLimits(t, "acct-1", broker.GroupLimitsChange{Ordered: true})
		ls := s.claim(t, 10, long)
		want(t, "after ordering was lifted", len(ls), 2)
		want(t, "in order", ls[0].ID+" "+ls[1].ID, second+" "+third)
	})
}
