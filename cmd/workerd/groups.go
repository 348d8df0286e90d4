package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/fenceq/fenceq/broker"
)

const groupsSynopsis = "QUEUE [--group G] [--limit N] [--json]"

// groupJSON is one group of `workerd groups --json`. The names are stable:
// scripts (and the chaos harness) read them.
type groupJSON struct {
	Name       string `json:"name"`
	Running    int64  `json:"running"`
	Ready      int64  `json:"ready"`
	MaxRunning int    `json:"max_running"` // 0: no maximum
	Rate       int    `json:"rate"`        // 0: no rate; else at most rate starts per per_ms
	PerMS      int64  `json:"per_ms"`
	Ordered    bool   `json:"ordered"`
	Override   bool   `json:"override"` // the group has limits of its own
	InTurn     bool   `json:"in_turn"`  // in the rotation: a claim may start one of its jobs
	Waiting    bool   `json:"waiting"`  // parked in the timer until wait_until
	WaitUntil  string `json:"wait_until,omitempty"`
	Held       string `json:"held,omitempty"` // an ordered group's next job
}

// groupsJSON is the one object `workerd groups --json` prints.
type groupsJSON struct {
	Queue     string      `json:"queue"`
	Groups    []groupJSON `json:"groups"`
	Scanned   int         `json:"scanned"`
	Truncated bool        `json:"truncated"`
	Ungrouped int64       `json:"ungrouped_pending"`
	Defaults  groupJSON   `json:"defaults"`
}

func toGroupJSON(g broker.GroupInfo) groupJSON {
	out := groupJSON{Name: g.Name, Running: g.Running, Ready: g.Ready, MaxRunning: g.MaxRunning, Rate: g.Rate,
		PerMS: g.Per.Milliseconds(), Ordered: g.Ordered, Override: g.Override, InTurn: g.InTurn, Waiting: g.Waiting, Held: g.Held}
	if g.Waiting {
		out.WaitUntil = g.WaitUntil.UTC().Format(time.RFC3339Nano)
	}
	return out
}

// runGroups lists a queue's job groups, the largest ready backlogs first.
func runGroups(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "groups", groupsSynopsis)
	var rf redisFlags
	rf.register(fs)
	group := fs.String("group", "", "show only this group (read directly, whatever the queue holds)")
	limit := fs.Int("limit", broker.GroupsLimitDefault, fmt.Sprintf("most groups to list, largest backlogs first (at most %d)", broker.GroupsLimitMax))
	asJSON := fs.Bool("json", false, "print one JSON object: the groups and the listing's figures")
	pos, err := parse(fs, groupsSynopsis, args, 1, 1)
	if err != nil {
		return err
	}
	if *limit < 1 || *limit > broker.GroupsLimitMax {
		return usagef("--limit %d: must be between 1 and %d", *limit, broker.GroupsLimitMax)
	}
	if err := broker.ValidateGroup(*group); err != nil {
		return usagef("--group: %v", err)
	}
	_, b, err := rf.connect(ctx, e)
	if err != nil {
		return err
	}
	q := pos[0]
	in := b.Inspector()
	if err := requireQueue(ctx, in, q, ""); err != nil {
		return err
	}
	p, err := in.Groups(ctx, q, broker.GroupsQuery{Name: *group, Limit: *limit})
	if errors.Is(err, broker.ErrInvalid) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		out := groupsJSON{Queue: q, Groups: []groupJSON{}, Scanned: p.Scanned, Truncated: p.Truncated, Ungrouped: p.Ungrouped,
			Defaults: toGroupJSON(p.Defaults)}
		for _, g := range p.Groups {
			out.Groups = append(out.Groups, toGroupJSON(g))
		}
		enc := json.NewEncoder(e.stdout)
		return enc.Encode(out)
	}
	// The groups go to standard output; what the listing covered, to
	// standard error, for whoever watches.
	switch {
	case *group != "" && len(p.Groups) == 0:
		fmt.Fprintf(e.stderr, "group %q of queue %s has no jobs pending or running, and no limits of its own\n", *group, q)
		return nil
	case len(p.Groups) == 0:
		fmt.Fprintf(e.stderr, "no groups in queue %s (ungrouped pending: %d)\n", q, p.Ungrouped)
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tRUNNING\tREADY\tMAX\tRATE\tORDERED\tSTATE\tHELD")
	for _, g := range p.Groups {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", g.Name, g.Running, g.Ready, maxText(g.MaxRunning), rateText(g.Rate, g.Per),
			yesNo(g.Ordered), groupState(g), dash(g.Held))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if *group == "" {
		fmt.Fprintf(e.stderr, "%d of %d groups, largest backlogs first; ungrouped pending: %d\n", len(p.Groups), p.Scanned, p.Ungrouped)
		if p.Truncated {
			fmt.Fprintf(e.stderr, "the listing stopped after %d group entries (broker.GroupsScanCap): larger backlogs may be among the rest; --group G reads any group\n", broker.GroupsScanCap)
		}
	}
	return nil
}

func maxText(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func rateText(rate int, per time.Duration) string {
	if rate == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%s", rate, per)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// groupState says where a group waits: its turn, the timer (until when,
// on Redis's clock, which the local one is never compared with), or
// neither (drained, or running only).
func groupState(g broker.GroupInfo) string {
	switch {
	case g.Waiting:
		return "waiting until " + g.WaitUntil.UTC().Format(time.RFC3339)
	case g.InTurn:
		return "in turn"
	}
	return "-"
}
