package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// groupLimitFlags are limit's flags for the group limits: the queue's
// defaults, or with --group one group's override of them.
type groupLimitFlags struct {
	group      string
	maxRunning string
	rate       string
	ordered    orderedFlag
	reset      bool
	given      map[string]bool // the flags given, shared with limitFlags

	change broker.GroupLimitsChange // what the flags ask, once checked
}

// orderedFlag is --group-ordered: a flag that reads as true alone, and
// takes =false or =default too.
type orderedFlag struct{ v string }

func (f *orderedFlag) String() string     { return f.v }
func (f *orderedFlag) Set(s string) error { f.v = s; return nil }
func (f *orderedFlag) IsBoolFlag() bool   { return true }

func (g *groupLimitFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&g.group, "group", "", "change or show this group's own limits (its override) instead of the queue's defaults for every group")
	fs.StringVar(&g.maxRunning, "group-max-running", "", "at most N jobs of each group run at once (with --group: of that group); none: no limit; default: the queue's default (with --group)")
	fs.StringVar(&g.rate, "group-rate", "", "at most N jobs of each group start per PERIOD, spaced PERIOD/N apart, written N/PERIOD (10/1s, 100/1m); none: no rate; default: the queue's default (with --group)")
	fs.Var(&g.ordered, "group-ordered", "each group's jobs run one at a time, in order (=false: not; =default: the queue's default, with --group)")
	fs.BoolVar(&g.reset, "reset", false, "with --group: remove the group's own limits first, so that it takes the defaults (with other --group-* flags, only those stay its own)")
}

// changes reports whether a group limit is to change.
func (g *groupLimitFlags) changes() bool {
	return g.given["group-max-running"] || g.given["group-rate"] || g.given["group-ordered"] || g.reset
}

// check reads the group flags into change, or answers a usage error that
// names the flag and what to give instead.
func (g *groupLimitFlags) check() error {
	c := &g.change
	named := g.given["group"]
	if named {
		if err := broker.ValidateGroup(g.group); err != nil || g.group == "" {
			if g.group == "" {
				return usagef("--group needs a group's name; without --group the --group-* flags set the queue's defaults")
			}
			return usagef("--group %q: %v", g.group, err)
		}
	}
	needGroup := func(f, v string) error {
		return usagef("--%s %s takes the queue's default, so it needs --group G (without --group, the flag sets the default itself)", f, v)
	}
	if g.given["group-max-running"] {
		switch v := strings.TrimSpace(g.maxRunning); v {
		case "none":
			c.MaxRunning = true
		case "default":
			if !named {
				return needGroup("group-max-running", v)
			}
			c.DefaultMaxRunning = true
		default:
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return usagef("--group-max-running %q: give a whole number of at least 1, none for no limit, or default (with --group) for the queue's default", g.maxRunning)
			}
			c.MaxRunning, c.To.MaxRunning = true, n
		}
	}
	if g.given["group-rate"] {
		switch v := strings.TrimSpace(g.rate); v {
		case "none":
			c.Rate = true // rate 0: no rate, and its period goes with it
		case "default":
			if !named {
				return needGroup("group-rate", v)
			}
			c.DefaultRate = true
		default:
			n, per, err := parseRate(v)
			if err != nil {
				return usagef("--group-rate %q: %v", g.rate, err)
			}
			c.Rate, c.Per, c.To.Rate, c.To.Per = true, true, n, per
		}
	}
	if g.given["group-ordered"] {
		switch v := strings.ToLower(strings.TrimSpace(g.ordered.v)); v {
		case "default":
			if !named {
				return needGroup("group-ordered", "default")
			}
			c.DefaultOrdered = true
		default:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return usagef("--group-ordered=%q: give --group-ordered (or =true), --group-ordered=false, or --group-ordered=default (with --group)", g.ordered.v)
			}
			c.Ordered, c.To.Ordered = true, b
		}
	}
	if g.reset {
		if !named {
			return usagef("--reset removes one group's own limits and needs --group G; to remove the queue's group defaults, give --group-max-running none --group-rate none --group-ordered=false")
		}
		c.Reset = true
	}
	return nil
}

// parseRate reads a rate written N/PERIOD: 10/1s, 100/1m, or 5/s (a
// period without a number is one of its unit).
func parseRate(v string) (int, time.Duration, error) {
	const how = "write it as N/PERIOD, like 10/1s or 100/1m (none removes the rate)"
	ns, ps, ok := strings.Cut(v, "/")
	if !ok {
		return 0, 0, errors.New(how)
	}
	n, err := strconv.Atoi(strings.TrimSpace(ns))
	if err != nil || n < 1 {
		return 0, 0, fmt.Errorf("the number of starts %q is not a whole number of at least 1: %s", ns, how)
	}
	ps = strings.TrimSpace(ps)
	if ps != "" && !strings.ContainsAny(ps[:1], "0123456789.") {
		ps = "1" + ps
	}
	per, err := time.ParseDuration(ps)
	if err != nil || per < time.Millisecond {
		return 0, 0, fmt.Errorf("the period %q is not a duration of at least 1ms: %s", ps, how)
	}
	return n, per, nil
}

// applyGroups sends the group change, in one step inside Redis
// (broker.Inspector.ChangeGroupLimits).
func (g *groupLimitFlags) apply(ctx context.Context, e *env, in *broker.Inspector, q string) error {
	_, err := in.ChangeGroupLimits(ctx, q, g.group, g.change)
	var ve *broker.ValidationError
	switch {
	case errors.As(err, &ve) && ve.Field == "rate" && g.given["group-rate"]:
		return usagef("--group-rate %s: %s", g.rate, ve.Reason)
	case errors.As(err, &ve) && ve.Field == "group":
		return usagef("--group %q: %s", g.group, ve.Reason)
	case err != nil:
		return notFoundIsFailure(e, err)
	}
	return nil
}

// show prints the queue's group defaults (when it has any, or when asked)
// and, with --group, the group's limits.
func (g *groupLimitFlags) show(ctx context.Context, w io.Writer, in *broker.Inspector, q string, asked bool) error {
	info, err := in.GroupLimits(ctx, q, g.group)
	if err != nil {
		return err
	}
	if asked || info.Defaults != (broker.GroupLimits{}) || info.Overrides > 0 {
		line := fmt.Sprintf("%s, each group: %s", q, info.Defaults)
		switch {
		case info.Overrides == 1:
			line += "; 1 group has limits of its own"
		case info.Overrides > 1:
			line += fmt.Sprintf("; %d groups have limits of their own", info.Overrides)
		}
		if info.Overrides > 0 && !g.given["group"] {
			line += " (--group G shows one)"
		}
		fmt.Fprintln(w, line)
	}
	if g.given["group"] {
		own := "no limits of its own: the defaults"
		if info.Override != nil {
			own = "its own: " + info.Override.String()
		}
		fmt.Fprintf(w, "%s, group %s: %s (%s)\n", q, g.group, info.Effective, own)
	}
	return nil
}
