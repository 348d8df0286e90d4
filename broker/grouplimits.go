package broker

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// GroupLimits are the limits of each group of a queue's jobs (Job.Group),
// enforced inside the claim script and so shared by every pool of every
// process. A queue has defaults, which every group takes, and a group may
// have an override (GroupOverride) of some of them. Zero fields mean no
// limit. Jobs without a group have none of these limits.
type GroupLimits struct {
	// MaxRunning: at most this many jobs of the group run at once.
	MaxRunning int
	// Rate and Per: at most Rate jobs of the group start in any window of
	// Per, their starts at least Per/Rate apart (rounded up to a whole
	// millisecond; so no burst). Per/Rate must be at least 1ms.
	Rate int
	Per  time.Duration // the window of Rate; 0 with Rate 0: no rate limit
	// Ordered: the group's jobs run one at a time, in the order of its
	// pending jobs (priority, then the order in which they became
	// pending), and a job sent back to retry runs before the next one.
	// It implies MaxRunning 1.
	Ordered bool
}

// String describes the limits as an operator reads them: "at most 2
// running, at most 10 starts per 1s", "ordered (one at a time)", or "no
// limits".
func (l GroupLimits) String() string {
	var parts []string
	switch {
	case l.Ordered:
		parts = append(parts, "ordered (one at a time)")
	case l.MaxRunning > 0:
		parts = append(parts, fmt.Sprintf("at most %d running", l.MaxRunning))
	}
	if l.Rate > 0 {
		parts = append(parts, fmt.Sprintf("at most %d starts per %v", l.Rate, l.Per))
	}
	if len(parts) == 0 {
		return "no limits"
	}
	return strings.Join(parts, ", ")
}

// GroupOverride is one group's own limits: the ones it sets, in place of
// the queue's defaults; for the others the group takes the default.
type GroupOverride struct {
	Limits GroupLimits // the values of the limits it sets; 0 (false) is none, whatever the default
	// MaxRunning, Rate and Ordered: which limits it sets (Rate: Limits.Rate
	// and Limits.Per).
	MaxRunning, Rate, Ordered bool
}

// String describes the override: "at most 5 running, no rate; the rest
// from the defaults".
func (o GroupOverride) String() string {
	var parts []string
	if o.MaxRunning {
		if o.Limits.MaxRunning > 0 {
			parts = append(parts, fmt.Sprintf("at most %d running", o.Limits.MaxRunning))
		} else {
			parts = append(parts, "no max running")
		}
	}
	if o.Rate {
		if o.Limits.Rate > 0 {
			parts = append(parts, fmt.Sprintf("at most %d starts per %v", o.Limits.Rate, o.Limits.Per))
		} else {
			parts = append(parts, "no rate")
		}
	}
	if o.Ordered {
		if o.Limits.Ordered {
			parts = append(parts, "ordered")
		} else {
			parts = append(parts, "not ordered")
		}
	}
	s := strings.Join(parts, ", ")
	if !o.MaxRunning || !o.Rate || !o.Ordered {
		s += "; the rest from the defaults"
	}
	return s
}

// GroupLimitsInfo is what GroupLimits reads: the queue's defaults, one
// group's override, and the limits the claim applies to that group.
type GroupLimitsInfo struct {
	Defaults GroupLimits    // the limits of every group without an override of its own
	Override *GroupOverride // the group's override; nil when it has none (or for the defaults)
	// Effective: the override's limits where it sets them, else the
	// defaults, as the claim applies them: MaxRunning is 1 when Ordered.
	Effective GroupLimits
	Overrides int // how many groups of the queue have an override (at most MaxGroupOverrides)
}

// MaxGroupOverrides bounds the groups of one queue that have an override:
// ChangeGroupLimits refuses a new one past it. Limits that many groups
// share belong in the defaults.
const MaxGroupOverrides = 100_000

// Bounds of a group limit's values, far above any use, so that every value
// stays exact in the scripts' numbers.
const (
	maxGroupCount  = 1_000_000_000
	maxGroupPeriod = 366 * 24 * time.Hour
)

// GroupLimitsChange names the group limits ChangeGroupLimits changes, and
// their new values; the limits it does not name are kept.
type GroupLimitsChange struct {
	// To: the new values of the limits named. 0 (false) is none; for a
	// named group, none even where the queue's default has one.
	To GroupLimits
	// MaxRunning, Rate, Per and Ordered: which limits change, to To's
	// values. Rate and Per are a pair: one alone keeps the other as it is
	// in force (for a group: its override's, else the default's).
	MaxRunning, Rate, Per, Ordered bool
	// DefaultMaxRunning, DefaultRate and DefaultOrdered: for a named
	// group, that limit goes back to the queue's default (DefaultRate: the
	// rate and its period). A limit both named above and here is refused.
	DefaultMaxRunning, DefaultRate, DefaultOrdered bool
	// Reset: for a named group, its override is removed first, so that
	// every limit not named takes the default; with none named, the group
	// has no override any more.
	Reset bool
}

// ChangeGroupLimits changes the group limits c names and keeps the others,
// in one step inside Redis. Group "" changes the queue's defaults, which
// every group without an override takes; a group's name changes its
// override. It answers the limits after it: the defaults, or the group's
// effective limits (GroupLimitsInfo.Effective). It is safe to send again.
//
// A refused change changes nothing, with a *ValidationError: a negative
// value, a period under 1ms, starts less than 1ms apart (Per/Rate), a
// period without a rate in force or a rate without a period, a new
// override past MaxGroupOverrides, or a default or a reset asked of the
// defaults.
//
// The change holds from the next claim on, for every pool. A lowered limit
// lets running jobs finish. A named group waiting for its limits (full, or
// cooling down for its rate) is looked at again by the next claim; a group
// waiting for the defaults' old limits is looked at again when one of its
// jobs ends, or at the latest when its wait ends (the lease of the claim
// that filled it). A change that names nothing changes nothing, but a
// named group waiting is looked at again all the same.
func (b *Inspector) ChangeGroupLimits(ctx context.Context, queue, group string, c GroupLimitsChange) (GroupLimits, error) {
	if err := validName("queue", queue); err != nil {
		return GroupLimits{}, err
	}
	if err := ValidateGroup(group); err != nil {
		return GroupLimits{}, err
	}
	if err := c.validate(group); err != nil {
		return GroupLimits{}, err
	}
	l := c.To
	arg := func(given, def bool, v int64) string {
		switch {
		case def:
			return "-"
		case !given:
			return ""
		}
		return strconv.FormatInt(v, 10)
	}
	ord := ""
	switch {
	case c.DefaultOrdered:
		ord = "-"
	case c.Ordered && l.Ordered:
		ord = "1"
	case c.Ordered:
		ord = "0"
	}
	reset := ""
	if c.Reset {
		reset = "1"
	}
	per := arg(c.Per, false, l.Per.Milliseconds())
	if c.DefaultRate {
		per = ""
	}
	v, err := b.run(ctx, b.scripts.glimits, b.queueKeys(queue), group,
		arg(c.MaxRunning, c.DefaultMaxRunning, int64(l.MaxRunning)), arg(c.Rate, c.DefaultRate, int64(l.Rate)), per, ord, reset).Slice()
	what := "defaults"
	if group != "" {
		what = fmt.Sprintf("override of group %q", group)
	}
	if err != nil {
		return GroupLimits{}, fmt.Errorf("fenceq: change the group limits (%s) of queue %q: %w", what, queue, err)
	}
	str := func(i int) string {
		if i < len(v) {
			s, _ := v[i].(string)
			return s
		}
		return ""
	}
	in := "the group"
	if group == "" {
		in = "the queue's group defaults"
	}
	switch str(0) {
	case "ok":
	case "no_rate":
		return GroupLimits{}, &ValidationError{Field: "period", Value: l.Per.String(),
			Reason: "a period needs a rate, and " + in + " has none: give both, like 10 per 1s"}
	case "no_period":
		return GroupLimits{}, &ValidationError{Field: "rate", Value: strconv.Itoa(l.Rate),
			Reason: "a rate needs its period, and " + in + " has none: give both, like 10 per 1s"}
	case "too_fast":
		return GroupLimits{}, tooFast(atoi(str(1)), time.Duration(atoi(str(2)))*time.Millisecond)
	case "too_many":
		return GroupLimits{}, &ValidationError{Field: "group", Value: group,
			Reason: fmt.Sprintf("queue %q has %s group overrides, the most it keeps (MaxGroupOverrides): reset the ones no longer needed, or set the limit many groups share as the queue's default", queue, str(1))}
	default:
		return GroupLimits{}, fmt.Errorf("fenceq: change the group limits (%s) of queue %q: unexpected reply %v", what, queue, v)
	}
	if len(v) != 10 {
		return GroupLimits{}, fmt.Errorf("fenceq: change the group limits (%s) of queue %q: unexpected reply %v", what, queue, v)
	}
	def := GroupLimits{MaxRunning: atoi(str(1)), Rate: atoi(str(2)), Per: time.Duration(atoi(str(3))) * time.Millisecond, Ordered: str(4) == "1"}
	if group == "" {
		return def, nil
	}
	var ov *GroupOverride
	if str(5) == "1" {
		o := parseOverride(str(6) + " " + str(7) + " " + str(8) + " " + str(9))
		ov = &o
	}
	return effective(def, ov), nil
}

func (c GroupLimitsChange) validate(group string) error {
	l := c.To
	bad := func(field, value, reason string) error {
		return &ValidationError{Field: field, Value: value, Reason: reason}
	}
	switch {
	case group == "" && (c.DefaultMaxRunning || c.DefaultRate || c.DefaultOrdered || c.Reset):
		return bad("group", "", "the queue's defaults have no default to go back to and no override to reset: name a group, or set a default to 0 to remove it")
	case c.MaxRunning && c.DefaultMaxRunning:
		return bad("max running", strconv.Itoa(l.MaxRunning), "is both set and sent back to the default: choose one")
	case (c.Rate || c.Per) && c.DefaultRate:
		return bad("rate", strconv.Itoa(l.Rate), "is both set and sent back to the default: choose one")
	case c.Ordered && c.DefaultOrdered:
		return bad("ordered", strconv.FormatBool(l.Ordered), "is both set and sent back to the default: choose one")
	case c.MaxRunning && (l.MaxRunning < 0 || l.MaxRunning > maxGroupCount):
		return bad("max running", strconv.Itoa(l.MaxRunning), fmt.Sprintf("must be from 0 (no limit) to %d", maxGroupCount))
	case c.Rate && (l.Rate < 0 || l.Rate > maxGroupCount):
		return bad("rate", strconv.Itoa(l.Rate), fmt.Sprintf("must be from 0 (no rate limit) to %d", maxGroupCount))
	case c.Per && (l.Per < time.Millisecond || l.Per > maxGroupPeriod):
		return bad("period", l.Per.String(), "must be from 1ms to 8784h (a year), like 1s or 1m")
	case c.Rate && c.Per && l.Rate > 0 && l.Per.Milliseconds() < int64(l.Rate):
		return tooFast(l.Rate, l.Per)
	}
	return nil
}

// tooFast is the refusal of a rate whose starts would come less than 1ms
// apart.
func tooFast(rate int, per time.Duration) error {
	return &ValidationError{Field: "rate", Value: fmt.Sprintf("%d per %v", rate, per),
		Reason: fmt.Sprintf("spaces a group's starts less than 1ms apart (the period divided by the rate): give at most %d per %v, or a longer period", max(per.Milliseconds(), 1), per)}
}

// GroupLimits reads the queue's group defaults and, for a named group, its
// override and its effective limits (group "": the defaults, which a group
// without an override takes), in one transaction.
func (b *Inspector) GroupLimits(ctx context.Context, queue, group string) (GroupLimitsInfo, error) {
	if err := validName("queue", queue); err != nil {
		return GroupLimitsInfo{}, err
	}
	if err := ValidateGroup(group); err != nil {
		return GroupLimitsInfo{}, err
	}
	k := b.queueKeys(queue)
	var def *redis.SliceCmd
	var ov *redis.StringCmd
	var n *redis.IntCmd
	_, err := b.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		def = p.HMGet(ctx, k.limits(), "g_max_running", "g_rate", "g_period_ms", "g_ordered")
		if group != "" {
			ov = p.HGet(ctx, k.glimits(), group)
		}
		n = p.HLen(ctx, k.glimits())
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return GroupLimitsInfo{}, fmt.Errorf("fenceq: read the group limits of queue %q: %w", queue, err)
	}
	s := func(x any) string { v, _ := x.(string); return v }
	d := def.Val()
	info := GroupLimitsInfo{Defaults: GroupLimits{MaxRunning: atoi(s(d[0])), Ordered: s(d[3]) == "1"}, Overrides: int(n.Val())}
	if rate, per := atoi(s(d[1])), atoi(s(d[2])); rate > 0 && per > 0 {
		info.Defaults.Rate, info.Defaults.Per = rate, time.Duration(per)*time.Millisecond
	}
	if ov != nil && ov.Err() == nil {
		// An override that sets nothing is none (glimits.lua drops it).
		if o := parseOverride(ov.Val()); o.MaxRunning || o.Rate || o.Ordered {
			info.Override = &o
		}
	}
	info.Effective = effective(info.Defaults, info.Override)
	return info, nil
}

// parseOverride reads a glimits value, "<max_running> <rate> <period_ms>
// <ordered>", as the claim (lib.lua's group_limits) and glimits.lua read
// it: four tokens, or no override; "-" takes the default; a count that is
// not a whole number is none, and so is a rate without its period.
func parseOverride(v string) GroupOverride {
	var o GroupOverride
	t := overrideRE.FindStringSubmatch(v)
	if t == nil {
		return o
	}
	count := func(s string) int {
		for _, c := range s {
			if c < '0' || c > '9' {
				return 0
			}
		}
		n, _ := strconv.Atoi(s)
		return n
	}
	if t[1] != "-" {
		o.MaxRunning, o.Limits.MaxRunning = true, count(t[1])
	}
	if t[2] != "-" {
		o.Rate = true
		if rate, per := count(t[2]), count(t[3]); rate > 0 && per > 0 {
			o.Limits.Rate, o.Limits.Per = rate, time.Duration(per)*time.Millisecond
		}
	}
	if t[4] != "-" {
		o.Ordered, o.Limits.Ordered = true, t[4] == "1"
	}
	return o
}

// overrideRE is a glimits value's shape, as lib.lua matches it.
var overrideRE = regexp.MustCompile(`^(\S+) (\S+) (\S+) (\S+)$`)

// effective is a group's limits: ov's where it sets them, else def's; an
// ordered group runs one job at a time.
func effective(def GroupLimits, ov *GroupOverride) GroupLimits {
	e := def
	if ov != nil {
		if ov.MaxRunning {
			e.MaxRunning = ov.Limits.MaxRunning
		}
		if ov.Rate {
			e.Rate, e.Per = ov.Limits.Rate, ov.Limits.Per
		}
		if ov.Ordered {
			e.Ordered = ov.Limits.Ordered
		}
	}
	if e.Ordered {
		e.MaxRunning = 1
	}
	return e
}

// atoi reads a count written by a script; anything else is 0.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
